//! `cargo xtask demo`: a narrated walk through the generated client.
//!
//! Without `GRAG_URL` it starts the GRAG simulator in-process (time running
//! ten times faster than the platform's) and walks the whole flow: KB, upload
//! and ingest progress, documents, search, chat, ledger, and a deploy churn
//! that takes the breaker through open, probes, canary and close. With `GRAG_URL`,
//! `GRAG_API_KEY` and `GRAG_TENANT` it runs only the read-only part against
//! that platform.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use base64::Engine;
use grag_client::types::{
    ChatRequest, CreateConversation, CreateKb, SearchRequest, SpendGrouping, UploadDocument,
};
use grag_client::{Config, ConversationId, Created, DocumentId, Grag, KbId, PipelineId, TenantId};
use grag_sim::{Sim, SimConfig};
use serde_json::Value;
use tokio::time::Instant;

/// How much faster than the platform the simulator runs in the demo.
const SPEED: f64 = 10.0;

const DOCUMENT: &str = "Prüfbericht Brücke Mühlenweg\n\n\
    Die Brücke am Mühlenweg wurde im März geprüft. Die Standsicherheit ist gegeben.\n\n\
    Brücken werden nach DIN 1076 alle sechs Jahre einer Hauptprüfung unterzogen, \
    dazwischen alle drei Jahre einer einfachen Prüfung.\n\n\
    An zwei Lagern wurden Schäden der Schadensklasse 2 festgestellt; \
    die Instandsetzung ist bis Jahresende vorgesehen.";

const QUESTION: &str = "Wie oft werden Brücken nach DIN 1076 geprüft?";

pub fn run() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: no tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let live = std::env::var("GRAG_URL").is_ok_and(|u| !u.is_empty());
    let result = runtime.block_on(async {
        if live {
            read_only().await
        } else {
            simulated().await
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("\ndemo failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn step(n: u32, what: &str, route: &str) {
    println!();
    println!("{n}. {what}");
    println!("   {route}");
}

fn stamp(since: Instant) -> String {
    format!("[{:5.2} s]", since.elapsed().as_secs_f64())
}

fn short(text: &str, max: usize) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        format!("{}…", one_line.chars().take(max).collect::<String>())
    }
}

/// The whole flow against the in-process simulator.
async fn simulated() -> Result<()> {
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
    let create = CreateKb {
        kb_id: kb.clone(),
        name: "Prüfberichte".into(),
        description: Some("Demo knowledge base".into()),
    };
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
    let upload = UploadDocument {
        document_id: doc.clone(),
        filename: "pruefbericht-muehlenweg.txt".into(),
        content_type: "text/plain".into(),
        content_base64: base64::engine::general_purpose::STANDARD.encode(DOCUMENT),
        metadata: None,
    };
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
    println!("   GET /next/api/orchestrator/events/{job}  (SSE)");
    let ingest = Instant::now();
    let mut events = grag.bff().orchestrator_events(&job).await?;
    let mut resynced = false;
    while let Some(event) = events.next().await {
        let event = event?;
        let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
        match event.event.as_str() {
            "node_start" | "node_complete" | "node_fail" => println!(
                "   {} {:<14} {}",
                stamp(ingest),
                event.event,
                data["node"].as_str().unwrap_or("?")
            ),
            "completed" => println!(
                "   {} completed: {} chunks indexed",
                stamp(ingest),
                data["results"]["chunks"]
            ),
            other => println!("   {} {other}", stamp(ingest)),
        }
        if event.event == "subscribed" && !resynced {
            // Pub/sub does not replay: poll once after subscribing.
            let status = grag.bff().pipeline_status(&job).await?;
            println!(
                "   {} status poll to resync (GET /next/api/pipeline/status/{job}): {}, {:.0} %",
                stamp(ingest),
                status.status,
                status.progress * 100.0
            );
            resynced = true;
        }
    }
    if events.keepalives() > 0 {
        println!("   ({} keepalive comments on the way)", events.keepalives());
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
    let run = grag.with_pipeline_id(&pipeline);
    let query = SearchRequest {
        query_text: QUESTION.into(),
        top_k: 2,
    };
    for hit in run.ai_gateway().search_rerank(&kb, &query).await?.results {
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
    let conversation = ConversationId::parse("conv-demo")?;
    grag.workspaces()
        .create_conversation(&CreateConversation {
            conversation_id: conversation.clone(),
            title: Some("Prüffristen".into()),
            kb_ids: Some(vec![kb.clone()]),
        })
        .await?;
    println!("   conversation {conversation} created (the chat stream does not create it)");
    let chat = Instant::now();
    let mut turn = grag
        .bff()
        .chat_stream(&ChatRequest {
            conversation_id: conversation.clone(),
            message: QUESTION.into(),
            kb_ids: None,
        })
        .await?;
    let mut answer = String::new();
    let mut pieces = 0;
    let mut first_piece = None;
    while let Some(event) = turn.next().await {
        let event = event?;
        let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
        match event.event.as_str() {
            "trace" => {
                let extra: Vec<String> = data
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(k, _)| !matches!(k.as_str(), "stage" | "status"))
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect();
                println!(
                    "   {} stage {:<13} {:<6} {}",
                    stamp(chat),
                    data["stage"].as_str().unwrap_or("?"),
                    data["status"].as_str().unwrap_or("?"),
                    extra.join(", ")
                );
            }
            "delta" => {
                first_piece.get_or_insert_with(|| chat.elapsed().as_secs_f64());
                pieces += 1;
                answer.push_str(data["text"].as_str().unwrap_or(""));
            }
            "done" => {
                println!(
                    "   {} answer, streamed in {pieces} pieces from {:.2} s on:",
                    stamp(chat),
                    first_piece.unwrap_or_default(),
                );
                println!("            „{}“", short(&answer, 200));
                println!(
                    "   {} done; saved in the conversation: {}",
                    stamp(chat),
                    data["persisted"]
                );
            }
            other => println!("   {} {other}", stamp(chat)),
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

/// The deploy churn runs at 1/CHURN_SPEED of the platform's time, client and
/// simulator alike: the breaker's 5 s probe interval becomes 100 ms.
const CHURN_SPEED: u32 = 50;

fn stamp_at(since: Instant, at: Instant) -> String {
    format!(
        "[{:5.2} s]",
        at.saturating_duration_since(since).as_secs_f64()
    )
}

/// One failed call, as the UI would learn it.
fn failed(since: Instant, what: &str, error: &grag_client::Error) {
    println!(
        "   {} ✗ {what}: {} ({}) after {} attempt(s) — „{}“",
        stamp(since),
        error.class(),
        error.row(),
        error.attempts(),
        error.message().unwrap_or("")
    );
}

/// Step 8: a deploy takes the platform away and brings it back. A second
/// client with the same policy, compressed, goes through the whole breaker
/// cycle in well under a second. Returns that client for its metrics.
async fn deploy_churn(sim: &Sim, kb: &KbId) -> Result<Grag> {
    step(
        8,
        "Deploy churn: the breaker opens, fails fast, probes, and one canary closes it",
        "origin breaker (policy §5.2), probe GET /workspaces/health, canary GET /workspaces/api/v1/kbs",
    );
    let policy = grag_client::policy::POLICY.scaled(CHURN_SPEED);
    let breaker = &policy.breaker;
    let grag = Grag::with_policy(
        Config::new(sim.url(), "demo-key", TenantId::parse("knoll")?),
        policy,
    )?;
    let shrink = SPEED / f64::from(CHURN_SPEED);
    let refused = sim.config().churn_refused.mul_f64(shrink);
    let flaky = sim.config().churn_flaky.mul_f64(shrink);
    println!(
        "   a second client runs the same policy at 1/{CHURN_SPEED}: probes every {} ms instead of 5 s,",
        breaker.probe_interval.as_millis()
    );
    println!(
        "   deploy-suspected for {:.1} s instead of 2 min. The platform refuses connections for {:.2} s,",
        breaker.deploy_suspected.as_secs_f64(),
        refused.as_secs_f64()
    );
    println!(
        "   then answers 401/404/422 for {:.2} s while /workspaces/health already says 200.",
        flaky.as_secs_f64()
    );

    // The breaker as a UI sees it: its state, sampled every millisecond.
    let watcher = {
        let grag = grag.clone();
        tokio::spawn(async move {
            let mut seen: Vec<(Instant, &'static str)> = Vec::new();
            loop {
                let state = grag.runtime().circuit_state().as_str();
                if seen.last().is_none_or(|(_, last)| *last != state) {
                    seen.push((Instant::now(), state));
                }
                if state == "closed" && seen.len() > 1 {
                    return seen;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };

    let churn = Instant::now();
    sim.faults().deploy_churn_for(refused, flaky).await;
    println!("   {} the deploy starts", stamp(churn));
    let query = SearchRequest {
        query_text: QUESTION.into(),
        top_k: 2,
    };
    // Three distinct endpoints fail at the connection level (R1 retries each).
    match grag.workspaces().list_documents(kb).await {
        Ok(_) => anyhow::bail!("list_documents answered during the refusal"),
        Err(e) => failed(churn, "GET /workspaces/api/v1/kbs/kb-demo/documents", &e),
    }
    match grag.workspaces().get_settings().await {
        Ok(_) => anyhow::bail!("get_settings answered during the refusal"),
        Err(e) => failed(churn, "GET /workspaces/api/v1/settings", &e),
    }
    match grag.ledger().spend(SpendGrouping::Service).await {
        Ok(_) => anyhow::bail!("spend answered during the refusal"),
        Err(e) => failed(churn, "GET /ledger/api/v1/ledger/spend", &e),
    }
    let state = grag.runtime().circuit_state().as_str();
    anyhow::ensure!(
        state == "open",
        "the breaker is {state} after three endpoints failed"
    );
    println!(
        "   {} breaker open: 3 distinct endpoints failed within {:.1} s (30 s at platform speed)",
        stamp(churn),
        breaker.window.as_secs_f64()
    );

    // Interactive calls now fail fast, with the state text for the UI.
    let asked = Instant::now();
    match grag.ai_gateway().search_rerank(kb, &query).await {
        Ok(_) => anyhow::bail!("search went through an open breaker"),
        Err(e) => println!(
            "   {} ✗ search (interactive): {} ({}) in {} µs, {} attempts, nothing sent — „{}“",
            stamp(churn),
            e.class(),
            e.row(),
            asked.elapsed().as_micros(),
            e.attempts(),
            e.message().unwrap_or("")
        ),
    }
    if let Some(chat) = grag.runtime().feature_state("chat") {
        println!(
            "   {} feature chat: {} — „{}“",
            stamp(churn),
            chat.state,
            chat.copy.unwrap_or("")
        );
    }

    println!(
        "   … the probe loop takes over: GET /workspaces/health every {} ms, then one canary read",
        breaker.probe_interval.as_millis()
    );
    let seen = tokio::time::timeout(Duration::from_secs(10), watcher)
        .await
        .context("the breaker did not close within 10 s")?
        .context("the breaker watcher")?;
    let closed_at = seen.last().map_or(churn, |(at, _)| *at);

    // What the platform saw, merged with the breaker states seen client-side.
    let log = sim.log();
    let mut timeline: Vec<(Instant, String)> = log
        .notes()
        .into_iter()
        .filter(|n| n.at >= churn)
        .map(|n| (n.at, format!("platform: {}", n.what)))
        .collect();
    let mut probes = 0;
    let mut canaries = Vec::new();
    for e in log.entries().into_iter().filter(|e| e.arrived >= churn) {
        let status = e.status.map_or("—".to_owned(), |s| s.to_string());
        let churned = if e.has_fault("deploy_churn") {
            " (deploy churn)"
        } else {
            ""
        };
        let line = match e.operation {
            Some("health") => {
                probes += 1;
                format!("platform: probe  {} {} → {status}", e.method, e.path)
            }
            Some("list_kbs") => {
                canaries.push(e.status);
                let outcome = if e.status == Some(200) {
                    "closes the breaker"
                } else {
                    "the breaker reopens"
                };
                format!(
                    "platform: canary {} {} → {status}{churned}: {outcome}",
                    e.method, e.path
                )
            }
            _ => format!(
                "platform: call   {} {} → {status}{churned}",
                e.method, e.path
            ),
        };
        timeline.push((e.arrived, line));
    }
    timeline.extend(
        seen.iter()
            .skip(1)
            .map(|(at, state)| (*at, format!("breaker {state} (as the client sees it)"))),
    );
    timeline.sort_by_key(|(at, _)| *at);
    println!("   what the platform saw meanwhile, and the breaker as the client saw it:");
    for (at, what) in &timeline {
        println!("   {} {what}", stamp_at(churn, *at));
    }
    println!(
        "   Probes during the refusal were refused and never reached the platform; {probes} did.\n   \
         After each pair of healthy probes exactly one canary read went out: {} canary read(s), answered {}.",
        canaries.len(),
        canaries
            .iter()
            .map(|s| s.map_or("—".to_owned(), |s| s.to_string()))
            .collect::<Vec<_>>()
            .join(", ")
    );

    // Deploy-suspected: the UI says the first answers may be slow.
    anyhow::ensure!(
        grag.runtime().deploy_suspected(),
        "not deploy-suspected after the close"
    );
    if let Some(chat) = grag.runtime().feature_state("chat") {
        println!(
            "   {} deploy-suspected ({:.1} s here, 2 min at platform speed): feature chat is {} — „{}“",
            stamp(churn),
            breaker.deploy_suspected.as_secs_f64(),
            chat.state,
            chat.copy.unwrap_or("")
        );
    }
    let hits = grag.ai_gateway().search_rerank(kb, &query).await?.results;
    println!(
        "   {} ✓ search: 200, {} hit(s), {:.2} s after the close (while deploy-suspected, search waits up to 1 min instead of 30 s)",
        stamp(churn),
        hits.len(),
        closed_at.elapsed().as_secs_f64()
    );
    Ok(grag)
}

async fn ledger(grag: &Grag) -> Result<()> {
    for group in [SpendGrouping::Service, SpendGrouping::Provider] {
        let spend = grag.ledger().spend(group).await?;
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

/// The read-only part against the platform named by the environment.
async fn read_only() -> Result<()> {
    let config = Config::from_env().context("GRAG_URL, GRAG_API_KEY and GRAG_TENANT")?;
    let tenant = config.tenant().clone();
    let grag = Grag::new(config)?;
    let url = std::env::var("GRAG_URL").unwrap_or_default();
    println!("GRAG demo, read-only, against {url} as tenant `{tenant}`");
    let mut failed = 0;
    let mut report = |what: &str, e: grag_client::Error| {
        failed += 1;
        println!(
            "   ✗ {what}: {} ({}){}",
            e.class(),
            e.row(),
            e.message().map(|m| format!(" — „{m}“")).unwrap_or_default()
        );
        println!("     {e}");
    };

    step(1, "Is the platform up?", "GET /workspaces/health  (public)");
    match tokio::time::timeout(Duration::from_secs(10), grag.workspaces().health()).await {
        Ok(Ok(h)) => println!("   → {}", h.status),
        Ok(Err(e)) => report("health", e),
        Err(_) => println!("   ✗ no answer within 10 s"),
    }

    step(
        2,
        "Knowledge bases of the tenant",
        "GET /workspaces/api/v1/kbs",
    );
    let mut first = None;
    match grag.workspaces().list_kbs().await {
        Ok(kbs) => {
            println!("   → {} knowledge bases", kbs.len());
            for kb in kbs.iter().take(10) {
                println!("     {}  {}", kb.kb_id, kb.name.as_deref().unwrap_or(""));
            }
            first = kbs.into_iter().next().map(|k| k.kb_id);
        }
        Err(e) => report("list_kbs", e),
    }

    if let Some(kb) = first {
        step(
            3,
            &format!("Documents of {kb}"),
            &format!("GET /workspaces/api/v1/kbs/{kb}/documents"),
        );
        match grag.workspaces().list_documents(&kb).await {
            Ok(docs) => {
                println!("   → {} documents", docs.len());
                for d in docs.iter().take(10) {
                    println!(
                        "     {}  {}  {}",
                        d.document_id,
                        d.filename,
                        d.status.as_deref().unwrap_or("")
                    );
                }
            }
            Err(e) => report("list_documents", e),
        }
    }

    step(
        4,
        "The tenant's spend",
        "GET /ledger/api/v1/ledger/spend?group_by=service|provider",
    );
    for group in [SpendGrouping::Service, SpendGrouping::Provider] {
        match grag.ledger().spend(group).await {
            Ok(spend) => {
                let items: Vec<String> = spend
                    .items
                    .iter()
                    .map(|i| format!("{} {:.4}", i.key, i.cost))
                    .collect();
                let items = if items.is_empty() {
                    "nothing yet".to_owned()
                } else {
                    items.join(", ")
                };
                println!("   → by {}: {items}", group.as_str());
            }
            Err(e) => report("spend", e),
        }
    }
    println!();
    anyhow::ensure!(failed == 0, "{failed} read-only calls failed");
    println!("Done: every read-only call answered.");
    Ok(())
}
