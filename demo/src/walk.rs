//! The narrated walk against the in-process simulator: its table of scenes,
//! the acts of the first seven, and the summary at the end.

use anyhow::{Context, Result};
use base64::Engine;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use grag_client::policy::{POLICY, stream};
use grag_client::types::JobStatus;
use grag_client::types::{
    ChatEvent, ChatRequest, CreateConversation, CreateKb, OrchestratorEvent, SearchRequest,
    SpendGrouping, UploadDocument,
};
use grag_client::{
    ConversationId, Created, DocumentId, Grag, JobDone, JobProgress, JobUpdate, TurnUpdate,
};
use grag_sim::{Fault, Rule};
use tokio::time::Instant;

use crate::scene::{Scene, play, short, stamp};
use crate::stage::{QUESTION, SPEED, Walk};
use crate::{churn, fleet, replay};

const DOCUMENT: &str = "Prüfbericht Brücke Mühlenweg\n\n\
    Die Brücke am Mühlenweg wurde im März geprüft. Die Standsicherheit ist gegeben.\n\n\
    Brücken werden nach DIN 1076 alle sechs Jahre einer Hauptprüfung unterzogen, \
    dazwischen alle drei Jahre einer einfachen Prüfung.\n\n\
    An zwei Lagern wurden Schäden der Schadensklasse 2 festgestellt; \
    die Instandsetzung ist bis Jahresende vorgesehen.";

/// The walk, scene by scene.
const SCENES: &[Scene<Walk>] = &[
    Scene {
        say: "Is the platform up?",
        route: "GET /workspaces/health  (public: no headers)",
        act: health,
    },
    Scene {
        say: "Create the knowledge base {kb}",
        route: "POST /workspaces/api/v1/kbs",
        act: create_kb,
    },
    Scene {
        say: "Upload a document and follow its ingest",
        route: "POST /workspaces/api/v1/kbs/{kb}/documents",
        act: upload,
    },
    Scene {
        say: "List the documents",
        route: "GET /workspaces/api/v1/kbs/{kb}/documents",
        act: documents,
    },
    Scene {
        say: "Search the knowledge base (stamped with pipeline id demo-run)",
        route: "POST /ai-gateway/api/v1/retrieval/collections/{kb}/search/rerank",
        act: search,
    },
    Scene {
        say: "Ask a chat question",
        route: "POST /workspaces/api/v1/conversations, then POST /next/api/chat/stream (SSE)",
        act: chat,
    },
    Scene {
        say: "Read the ledger",
        route: "GET /ledger/api/v1/ledger/spend?group_by=…  and  /ledger/totals?pipeline_id=demo-run",
        act: ledger_scene,
    },
    Scene {
        say: "Deploy churn: the breaker opens, fails fast, probes, and one canary closes it",
        route: "origin breaker (policy §5.2), probe GET /workspaces/health, canary GET /workspaces/api/v1/kbs",
        act: churn::deploy_churn,
    },
    Scene {
        say: "Writes during a deploy: queued durably, replayed after it, each exactly once",
        route: "grag-jobs on SQLite (policy §5.3): upload → convert → upsert points, KG upserts",
        act: replay::queued_through_a_deploy,
    },
    Scene {
        say: "Three replicas, one tenant: the budgets kept through Redis, then without it",
        route: "policy fleet: one EVALSHA per free admission (rate, rolling windows, leases, pauses)",
        act: fleet::three_replicas,
    },
];

/// The whole flow against the in-process simulator.
pub(crate) async fn simulated() -> Result<()> {
    let mut walk = Walk::open().await?;
    println!("GRAG demo: the generated client against the local simulator");
    println!(
        "   simulator at {}, tenant `knoll`, time running {SPEED}× faster than the platform",
        walk.sim.url()
    );
    println!(
        "   (set GRAG_URL, GRAG_API_KEY and GRAG_TENANT to run the read-only part against a platform)"
    );
    play(&mut walk, SCENES).await?;
    summary(walk).await
}

fn health(walk: &mut Walk) -> BoxFuture<'_, Result<()>> {
    async move {
        let health = walk.grag.workspaces().health().await?;
        println!("   → {}", health.status);
        Ok(())
    }
    .boxed()
}

fn create_kb(walk: &mut Walk) -> BoxFuture<'_, Result<()>> {
    async move {
        let create =
            CreateKb::new(walk.kb.clone(), "Prüfberichte").with_description("Demo knowledge base");
        match walk.grag.workspaces().create_kb(&create).await? {
            Created::New(kb) => println!(
                "   → 201 created: {} „{}“",
                kb.kb_id,
                kb.name.unwrap_or_default()
            ),
            Created::Existing => println!("   → already there"),
        }
        println!("   Once more, as a replay after a lost answer would:");
        match walk.grag.workspaces().create_kb(&create).await? {
            Created::Existing => println!(
                "   → 409 Conflict, returned as Created::Existing: already provisioned, which is a success (T7)"
            ),
            Created::New(_) => println!("   → created again (unexpected)"),
        }
        Ok(())
    }
    .boxed()
}

/// Uploads the report, then follows its ingest through a stream the relay
/// stalls: the client's watchdog gives it up and polls instead.
fn upload(walk: &mut Walk) -> BoxFuture<'_, Result<()>> {
    async move {
        let doc = DocumentId::parse("doc-pruefbericht")?;
        let upload = UploadDocument::new(
            doc.clone(),
            "pruefbericht-muehlenweg.txt",
            "text/plain",
            base64::engine::general_purpose::STANDARD.encode(DOCUMENT),
        );
        let job = match walk.grag.workspaces().upload_document(&walk.kb, &upload).await? {
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
            Created::Existing => {
                anyhow::bail!("{doc} was already there: no new ingest job to follow")
            }
        };
        println!(
            "   GET /next/api/orchestrator/events/{job}  (SSE, the relay told to go silent after 3 events)"
        );
        // The stall is the simulator's; the watchdog, polling cadence and resync
        // are the client's, from the spec, at the demo's speed.
        walk.sim.faults().push(
            Rule::new(Fault::SseStall { after_events: 3 })
                .on("orchestrator_events")
                .once(),
        );
        let live = Grag::with_policy(walk.config()?, POLICY.scaled(SPEED as u32))?;
        let mut progress = live.bff().orchestrator_events(&job);
        follow(&mut progress, &job.to_string()).await?;
        fallback_series(&live);
        Ok(())
    }
    .boxed()
}

/// Prints the ingest's updates until it completes.
async fn follow(progress: &mut JobProgress<OrchestratorEvent, JobStatus>, job: &str) -> Result<()> {
    let ingest = Instant::now();
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
    Ok(())
}

/// The series of the stream that fell back, not the first one listed.
fn fallback_series(live: &Grag) {
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
}

fn documents(walk: &mut Walk) -> BoxFuture<'_, Result<()>> {
    async move {
        for d in walk.grag.workspaces().list_documents(&walk.kb).await? {
            println!(
                "   → {}  {}  {}",
                d.document_id,
                d.filename,
                d.status.unwrap_or_default()
            );
        }
        Ok(())
    }
    .boxed()
}

fn search(walk: &mut Walk) -> BoxFuture<'_, Result<()>> {
    async move {
        println!("   „{QUESTION}“");
        let query = SearchRequest::new(QUESTION, 2);
        for hit in walk
            .grag
            .ai_gateway(&walk.pipeline)
            .search_rerank(&walk.kb, &query)
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
        Ok(())
    }
    .boxed()
}

/// Opens the conversation, then streams one turn of it.
fn chat(walk: &mut Walk) -> BoxFuture<'_, Result<()>> {
    async move {
        let conversation = walk
            .grag
            .workspaces()
            .ensure_conversation(
                &CreateConversation::new(ConversationId::parse("conv-demo")?)
                    .with_title("Prüffristen")
                    .with_kb_ids(vec![walk.kb.clone()]),
            )
            .await?;
        println!(
            "   conversation {} created (the chat stream does not create it; chat_stream takes only this proof)",
            conversation.id()
        );
        let chat = Instant::now();
        let mut turn = walk
            .grag
            .bff()
            .chat_stream(
                &conversation,
                &ChatRequest::new(conversation.id().clone(), QUESTION),
            )
            .await?;
        let mut answer = Answer::default();
        while let Some(update) = turn.next().await {
            match update? {
                TurnUpdate::Event(event) => answer.show(chat, event),
                TurnUpdate::Degraded(stage) => println!(
                    "   {} degraded: stage {} failed open",
                    stamp(chat),
                    stage.stage
                ),
            }
        }
        println!("   (the long pause before `generate` is normal: the completion is not streamed)");
        Ok(())
    }
    .boxed()
}

/// The chat turn's answer as it streams in.
#[derive(Default)]
struct Answer {
    text: String,
    pieces: usize,
    first_piece: Option<f64>,
}

impl Answer {
    /// Prints one event of the turn, gathering the answer's pieces.
    fn show(&mut self, chat: Instant, event: ChatEvent) {
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
                self.first_piece
                    .get_or_insert_with(|| chat.elapsed().as_secs_f64());
                self.pieces += 1;
                self.text.push_str(&d.text);
            }
            ChatEvent::Done(done) => {
                println!(
                    "   {} answer, streamed in {} pieces from {:.2} s on:",
                    stamp(chat),
                    self.pieces,
                    self.first_piece.unwrap_or_default(),
                );
                println!("            „{}“", short(&self.text, 200));
                println!(
                    "   {} done; saved in the conversation: {}",
                    stamp(chat),
                    done.persisted.unwrap_or(false)
                );
            }
            other => println!("   {} {}", stamp(chat), other.name()),
        }
    }
}

fn ledger_scene(walk: &mut Walk) -> BoxFuture<'_, Result<()>> {
    async move {
        ledger(&walk.grag).await?;
        let totals = walk.grag.ledger().totals(&walk.pipeline).await?;
        println!(
            "   → pipeline demo-run: {} call(s), {:.4} {}",
            totals.calls.unwrap_or(0),
            totals.total_cost.unwrap_or(0.0),
            totals.currency.unwrap_or_default()
        );
        Ok(())
    }
    .boxed()
}

/// The churned client's breaker metrics, then what the simulator saw of the
/// whole walk: every scoped request carried the tenant, every one an id.
async fn summary(walk: Walk) -> Result<()> {
    if let Some(churned) = &walk.churned {
        println!();
        println!("Metrics of the deploy-churn client (Prometheus text, excerpt):");
        for line in churned.runtime().metrics_text().lines().filter(|l| {
            l.starts_with("grag_client_circuit_state")
                || l.starts_with("grag_client_requests_total")
        }) {
            println!("   {line}");
        }
    }
    let log = walk.sim.log().entries();
    let scoped = log.iter().filter(|e| e.operation != Some("health")).count();
    let all_tenant = log
        .iter()
        .filter(|e| e.operation != Some("health"))
        .all(|e| e.header("x-tenant-id") == Some("knoll"));
    let all_ids = log.iter().all(|e| e.header("x-request-id").is_some());
    println!();
    println!(
        "Done in {:.1} s. The simulator saw {} requests; {} of {} scoped ones carried X-Tenant-ID: knoll, {} an X-Request-ID.",
        walk.started.elapsed().as_secs_f64(),
        log.len(),
        if all_tenant { "all" } else { "NOT all" },
        scoped,
        if all_ids {
            "every one"
        } else {
            "NOT every one"
        },
    );
    walk.sim.stop().await;
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
