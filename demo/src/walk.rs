//! The narrated walk against the in-process simulator: steps 1–7, churn, summary.

use anyhow::{Context, Result};
use base64::Engine;
use grag_client::policy::{POLICY, stream};
use grag_client::types::{
    ChatEvent, ChatRequest, CreateConversation, CreateKb, OrchestratorEvent, SearchRequest,
    SpendGrouping, UploadDocument,
};
use grag_client::{
    Config, ConversationId, Created, DocumentId, Grag, JobDone, JobUpdate, KbId, PipelineId,
    TenantId, TurnUpdate,
};
use grag_sim::{Fault, Rule, Sim, SimConfig};

use tokio::time::Instant;

use super::churn::deploy_churn;
use super::{QUESTION, SPEED, short, stamp, step};

const DOCUMENT: &str = "Prüfbericht Brücke Mühlenweg\n\n\
    Die Brücke am Mühlenweg wurde im März geprüft. Die Standsicherheit ist gegeben.\n\n\
    Brücken werden nach DIN 1076 alle sechs Jahre einer Hauptprüfung unterzogen, \
    dazwischen alle drei Jahre einer einfachen Prüfung.\n\n\
    An zwei Lagern wurden Schäden der Schadensklasse 2 festgestellt; \
    die Instandsetzung ist bis Jahresende vorgesehen.";

/// The whole flow against the in-process simulator.
pub(super) async fn simulated() -> Result<()> {
    let started = Instant::now();
    let sim = Sim::start(SimConfig::scaled(1.0 / SPEED))
        .await
        .context("starting the simulator")?;
    let tenant = TenantId::parse("knoll")?;
    let grag = Grag::new(Config::new(sim.url(), "demo-key", tenant))?;
    println!("GRAG demo: the generated client against the local simulator");
    println!(
        "   simulator at {}, tenant `knoll`, time running {SPEED}× faster than the platform",
        sim.url()
    );
    println!(
        "   (set GRAG_URL, GRAG_API_KEY and GRAG_TENANT to run the read-only part against a platform)"
    );

    step(
        1,
        "Is the platform up?",
        "GET /workspaces/health  (public: no headers)",
    );
    let health = grag.workspaces().health().await?;
    println!("   → {}", health.status);

    let kb = KbId::parse("kb-demo")?;
    let create = CreateKb::new(kb.clone(), "Prüfberichte").with_description("Demo knowledge base");
    step(
        2,
        "Create the knowledge base kb-demo",
        "POST /workspaces/api/v1/kbs",
    );
    match grag.workspaces().create_kb(&create).await? {
        Created::New(kb) => println!(
            "   → 201 created: {} „{}“",
            kb.kb_id,
            kb.name.unwrap_or_default()
        ),
        Created::Existing => println!("   → already there"),
    }
    println!("   Once more, as a replay after a lost answer would:");
    match grag.workspaces().create_kb(&create).await? {
        Created::Existing => println!(
            "   → 409 Conflict, returned as Created::Existing: already provisioned, which is a success (T7)"
        ),
        Created::New(_) => println!("   → created again (unexpected)"),
    }

    step(
        3,
        "Upload a document and follow its ingest",
        "POST /workspaces/api/v1/kbs/kb-demo/documents",
    );
    let doc = DocumentId::parse("doc-pruefbericht")?;
    let upload = UploadDocument::new(
        doc.clone(),
        "pruefbericht-muehlenweg.txt",
        "text/plain",
        base64::engine::general_purpose::STANDARD.encode(DOCUMENT),
    );
    let job = match grag.workspaces().upload_document(&kb, &upload).await? {
        Created::New(d) => {
            let job = d
                .job_id
                .context("the upload answered without the job_id of its ingest")?;
            println!(
                "   → 201 {} ({}), status {}, ingest job {job}",
                d.document_id,
                d.filename,
                d.status.unwrap_or_default()
            );
            job
        }
        Created::Existing => anyhow::bail!("{doc} was already there: no new ingest job to follow"),
    };
    println!(
        "   GET /next/api/orchestrator/events/{job}  (SSE, the relay told to go silent after 3 events)"
    );
    // The stall is the simulator's; the watchdog, polling cadence and resync
    // are the client's, from the spec, at the demo's speed.
    sim.faults().push(
        Rule::new(Fault::SseStall { after_events: 3 })
            .on("orchestrator_events")
            .once(),
    );
    let live = Grag::with_policy(
        Config::new(sim.url(), "demo-key", TenantId::parse("knoll")?),
        POLICY.scaled(SPEED as u32),
    )?;
    let ingest = Instant::now();
    let mut progress = live.bff().orchestrator_events(&job);
    while let Some(update) = progress.next().await {
        match update? {
            JobUpdate::Event(e) => match &e {
                OrchestratorEvent::NodeStart(n)
                | OrchestratorEvent::NodeComplete(n)
                | OrchestratorEvent::NodeFail(n) => {
                    println!("   {} {:<14} {}", stamp(ingest), e.name(), n.node)
                }
                _ => println!("   {} {}", stamp(ingest), e.name()),
            },
            JobUpdate::FellBack(e) => println!(
                "   {} stream given up ({}: {}): following the job by polling GET /next/api/pipeline/status/{job}",
                stamp(ingest),
                e.class_name(),
                e.detail().unwrap_or("")
            ),
            JobUpdate::Status(s) => println!(
                "   {} status poll: {}, {:.0} %",
                stamp(ingest),
                s.status,
                s.progress * 100.0
            ),
            JobUpdate::Completed(done) => {
                let results = match done {
                    JobDone::Event(OrchestratorEvent::Completed(c)) => c.results,
                    JobDone::Status(s) => s.results,
                    JobDone::Event(_) => None,
                };
                let chunks = results
                    .as_ref()
                    .map(|r| r["chunks"].clone())
                    .unwrap_or_default();
                println!("   {} completed: {chunks} chunks indexed", stamp(ingest));
            }
        }
    }
    if progress.keepalives() > 0 {
        println!(
            "   ({} keepalive comments on the way)",
            progress.keepalives()
        );
    }
    // The series of the stream that fell back, not the first one listed.
    if let Some(name) = POLICY.metrics.sse_fallback {
        let stream = POLICY.streams[stream::ORCHESTRATOR].name;
        let series = format!("{name}_total{{stream=\"{stream}\"}} ");
        let text = live.runtime().metrics_text();
        let line = text.lines().find(|l| l.starts_with(&series));
        println!(
            "   {}",
            line.unwrap_or("no fallback series for the job stream")
        );
    }

    step(
        4,
        "List the documents",
        "GET /workspaces/api/v1/kbs/kb-demo/documents",
    );
    for d in grag.workspaces().list_documents(&kb).await? {
        println!(
            "   → {}  {}  {}",
            d.document_id,
            d.filename,
            d.status.unwrap_or_default()
        );
    }

    step(
        5,
        "Search the knowledge base (stamped with pipeline id demo-run)",
        "POST /ai-gateway/api/v1/retrieval/collections/kb-demo/search/rerank",
    );
    println!("   „{QUESTION}“");
    let pipeline = PipelineId::parse("demo-run")?;
    let query = SearchRequest::new(QUESTION, 2);
    for hit in grag
        .ai_gateway(&pipeline)
        .search_rerank(&kb, &query)
        .await?
        .results
    {
        println!(
            "   → {:.2}  {}  „{}“",
            hit.score,
            hit.chunk_id,
            short(&hit.text, 70)
        );
    }

    step(
        6,
        "Ask a chat question",
        "POST /workspaces/api/v1/conversations, then POST /next/api/chat/stream (SSE)",
    );
    let conversation = grag
        .workspaces()
        .ensure_conversation(
            &CreateConversation::new(ConversationId::parse("conv-demo")?)
                .with_title("Prüffristen")
                .with_kb_ids(vec![kb.clone()]),
        )
        .await?;
    println!(
        "   conversation {} created (the chat stream does not create it; chat_stream takes only this proof)",
        conversation.id()
    );
    let chat = Instant::now();
    let mut turn = grag
        .bff()
        .chat_stream(
            &conversation,
            &ChatRequest::new(conversation.id().clone(), QUESTION),
        )
        .await?;
    let mut answer = String::new();
    let mut pieces = 0;
    let mut first_piece = None;
    while let Some(update) = turn.next().await {
        let event = match update? {
            TurnUpdate::Event(event) => event,
            TurnUpdate::Degraded(stage) => {
                println!(
                    "   {} degraded: stage {} failed open",
                    stamp(chat),
                    stage.stage
                );
                continue;
            }
        };
        match event {
            ChatEvent::Trace(t) => {
                let extra: Vec<String> = [
                    t.hits.map(|n| format!("hits {n}")),
                    t.kept.map(|n| format!("kept {n}")),
                    t.model.map(|m| format!("model {m}")),
                    t.score.map(|s| format!("score {s}")),
                    t.detail,
                ]
                .into_iter()
                .flatten()
                .collect();
                println!(
                    "   {} stage {:<13} {:<6} {}",
                    stamp(chat),
                    t.stage,
                    t.status,
                    extra.join(", ")
                );
            }
            ChatEvent::Delta(d) => {
                first_piece.get_or_insert_with(|| chat.elapsed().as_secs_f64());
                pieces += 1;
                answer.push_str(&d.text);
            }
            ChatEvent::Done(done) => {
                println!(
                    "   {} answer, streamed in {pieces} pieces from {:.2} s on:",
                    stamp(chat),
                    first_piece.unwrap_or_default(),
                );
                println!("            „{}“", short(&answer, 200));
                println!(
                    "   {} done; saved in the conversation: {}",
                    stamp(chat),
                    done.persisted.unwrap_or(false)
                );
            }
            other => println!("   {} {}", stamp(chat), other.name()),
        }
    }
    println!("   (the long pause before `generate` is normal: the completion is not streamed)");

    step(
        7,
        "Read the ledger",
        "GET /ledger/api/v1/ledger/spend?group_by=…  and  /ledger/totals?pipeline_id=demo-run",
    );
    ledger(&grag).await?;
    let totals = grag.ledger().totals(&pipeline).await?;
    println!(
        "   → pipeline demo-run: {} call(s), {:.4} {}",
        totals.calls.unwrap_or(0),
        totals.total_cost.unwrap_or(0.0),
        totals.currency.unwrap_or_default()
    );

    let churned = deploy_churn(&sim, &kb).await?;
    super::replay::queued_through_a_deploy(&sim, &kb).await?;
    super::fleet::three_replicas().await?;

    println!();
    println!("Metrics of the deploy-churn client (Prometheus text, excerpt):");
    for line in churned.runtime().metrics_text().lines().filter(|l| {
        l.starts_with("grag_client_circuit_state") || l.starts_with("grag_client_requests_total")
    }) {
        println!("   {line}");
    }

    let log = sim.log().entries();
    let scoped = log.iter().filter(|e| e.operation != Some("health")).count();
    let all_tenant = log
        .iter()
        .filter(|e| e.operation != Some("health"))
        .all(|e| e.header("x-tenant-id") == Some("knoll"));
    let all_ids = log.iter().all(|e| e.header("x-request-id").is_some());
    println!();
    println!(
        "Done in {:.1} s. The simulator saw {} requests; {} of {} scoped ones carried X-Tenant-ID: knoll, {} an X-Request-ID.",
        started.elapsed().as_secs_f64(),
        log.len(),
        if all_tenant { "all" } else { "NOT all" },
        scoped,
        if all_ids {
            "every one"
        } else {
            "NOT every one"
        },
    );
    sim.stop().await;
    anyhow::ensure!(
        all_tenant && all_ids,
        "a request went out without its headers"
    );
    Ok(())
}

async fn ledger(grag: &Grag) -> Result<()> {
    for group in [SpendGrouping::Service, SpendGrouping::Provider] {
        let spend = grag.ledger().spend(&group).await?;
        let items: Vec<String> = spend
            .items
            .iter()
            .map(|i| {
                format!(
                    "{} {:.4} {}",
                    i.key,
                    i.cost,
                    i.currency.as_deref().unwrap_or("")
                )
            })
            .collect();
        println!(
            "   → spend by {:<8}: {}",
            group.as_str(),
            if items.is_empty() {
                "nothing yet".to_owned()
            } else {
                items.join(", ")
            }
        );
    }
    Ok(())
}
