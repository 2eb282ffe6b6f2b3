//! The client behind a real nginx, as the platform is reached (GRAG §6.4,
//! App. B: Traefik and a Plesk nginx in front): each test starts its own
//! nginx ([`harness`]) in front of the simulator, with the settings a
//! deployment really has: nginx's defaults as Plesk leaves them (buffering
//! on, HTTP/1.0 to the upstream), buffering off, a short keep-alive,
//! `limit_req` answering 429, a small `client_max_body_size`, an upstream
//! that is down (502) and a `proxy_read_timeout` shorter than a slow route
//! (504).
//!
//! Without an nginx binary the suite says how to run it and passes;
//! `SDK_REQUIRE_NGINX=1` (set by `.ci/run`) makes a missing binary a failure.
//! What is asserted is driven by request counts and by what nginx logged;
//! the few waits are the proxy's own timers (a keep-alive, a read timeout),
//! which only real time can pass, with margins of half a second or more.

#[path = "../nginx/harness.rs"]
mod harness;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::kit::document::TEXT_B64;
use crate::kit::sim::upload_for_job;
use grag_client::policy::POLICY;
use grag_client::types::{
    ChatEvent, ChatRequest, CompletionRequest, CreateConversation, CreateKb, JobStatus,
    OrchestratorEvent, Point, UploadDocument, UpsertPoints,
};
use grag_client::{Config, ConversationId, DocumentId, Error, Grag, KbId, PipelineId, TenantId};
use grag_jobs::{JobState, Jobs, Upload};
use grag_sim::embedded::{self, KEY, TENANT};
use grag_sim::{Fault, Rule, Sim, SimConfig};
use harness::{Nginx, Setup};
use sdk_runtime::alerts::CollectAlerts;
use sdk_runtime::{JobProgress, Policy, TurnUpdate};

/// Only bounds a test that would otherwise hang; never an assertion about speed.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// The spec's policy at 1/5 (attempt timeout 6 s, watchdog 9 s, polling
/// every second), the buffering burst at the spec's 250 ms; the silence is
/// the simulator's job time, which only gets longer on a slow machine.
fn policy() -> &'static Policy {
    grag_sim::embedded::buffering_policy(5)
}

/// The simulator at 1/1000, its jobs held until their first subscriber and
/// then running `job` (queue time) long, the stream ceiling out of the way.
fn sim_config(job: Duration) -> SimConfig {
    let mut sim = embedded::sim_config(1000).with_held_jobs();
    sim.job_queue = job;
    sim.job_node_pace = Duration::from_millis(5);
    sim.stream_ceiling = Duration::from_secs(600);
    sim.chat_silence = job;
    sim
}

/// A simulator, an nginx in front of it, and a client of [`TENANT`] on the
/// nginx whose alerts are collected.
struct Proxied {
    sim: Sim,
    nginx: Nginx,
    grag: Grag,
    alerts: Arc<CollectAlerts>,
}

impl Proxied {
    /// `None` when nginx is absent and not required (the harness said so).
    async fn start(sim: SimConfig, setup: Setup) -> Option<Proxied> {
        Proxied::start_with(sim, setup, policy(), |c| c).await
    }

    async fn start_with(
        sim: SimConfig,
        setup: Setup,
        policy: &'static Policy,
        adjust: impl FnOnce(Config) -> Config,
    ) -> Option<Proxied> {
        let binary = harness::binary()?;
        let sim = embedded::start(sim).await;
        let nginx = Nginx::start(&binary, sim.addr(), &setup);
        let alerts = Arc::new(CollectAlerts::default());
        let config =
            Config::new(nginx.url(), KEY, TenantId::parse(TENANT).unwrap()).alerts(alerts.clone());
        let grag = Grag::with_policy(adjust(config), policy).expect("a client");
        Some(Proxied {
            sim,
            nginx,
            grag,
            alerts,
        })
    }

    fn buffered(&self, stream: &str) -> usize {
        let prefix = format!("knoll_sse_buffered_total{{stream=\"{stream}\"}} ");
        self.grag
            .runtime()
            .metrics_text()
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()).map(str::to_owned))
            .map_or(0, |n| n.parse().unwrap())
    }
}

/// Follows a job to its end: what it yielded in words, and whether its
/// stream reported buffering.
async fn follow(mut progress: JobProgress<OrchestratorEvent, JobStatus>) -> (Vec<String>, bool) {
    let (seen, end) = crate::kit::sim::follow(&mut progress, HANG_GUARD).await;
    assert!(end.is_none(), "{end:?} after {seen:?}");
    assert_eq!(
        seen.last().map(String::as_str),
        Some("completed"),
        "{seen:?}"
    );
    (seen, progress.was_buffered())
}

async fn conversation(grag: &Grag) -> grag_client::Existing<ConversationId> {
    grag.workspaces()
        .ensure_conversation(&CreateConversation::new(
            ConversationId::parse("conv-1").unwrap(),
        ))
        .await
        .unwrap()
}

/// One chat turn to its end: whether it ended with `done`, and whether it was buffered.
async fn chat_turn(grag: &Grag) -> (bool, bool) {
    let conversation = conversation(grag).await;
    let request = ChatRequest::new(conversation.id().clone(), "Wie oft werden Brücken geprüft?");
    let mut turn =
        tokio::time::timeout(HANG_GUARD, grag.bff().chat_stream(&conversation, &request))
            .await
            .expect("the turn opens in time")
            .expect("the turn opens");
    let mut done = false;
    tokio::time::timeout(HANG_GUARD, async {
        while let Some(update) = turn.next().await {
            if let TurnUpdate::Event(ChatEvent::Done(_)) = update.expect("no error") {
                done = true;
            }
        }
    })
    .await
    .expect("the turn ends");
    (done, turn.was_buffered())
}

// ---- item 1: buffering, measured from when the request was sent -------------------------------

#[tokio::test]
async fn behind_plesk_defaults_buffering_is_detected_on_both_lanes_and_jobs_switch_to_polling() {
    // Each job and the chat's completion take 2 s; nginx (buffering on,
    // HTTP/1.0 upstream) holds the head and every event until the upstream
    // ends, so all of it arrives at once ~2 s after the request.
    let Some(p) = Proxied::start(sim_config(Duration::from_secs(2)), Setup::plesk_defaults()).await
    else {
        return;
    };
    let first = upload_for_job(&p.grag, "doc-1").await;
    let (seen, buffered) = follow(p.grag.bff().orchestrator_events(&first)).await;
    assert!(buffered, "the job stream reports it: {seen:?}");
    assert_eq!(p.buffered("orchestrator"), 1);
    assert!(p.alerts.names().is_empty(), "one stream is no proof");
    assert!(!p.grag.runtime().polling_only());

    // The chat lane: the answer arrives whole, and buffering is reported.
    let (done, buffered) = chat_turn(&p.grag).await;
    assert!(done, "the answer arrives whole");
    assert!(buffered, "the turn reports it");
    assert_eq!(p.buffered("chat"), 1);

    // The second stream confirms it: one alert, jobs polled from now on.
    assert_eq!(p.alerts.names(), ["sse_fallbacks_sustained"], "confirmed");
    assert!(p.grag.runtime().polling_only());
    let streams = p.sim.log().count("orchestrator_events");
    let third = upload_for_job(&p.grag, "doc-3").await;
    p.sim.start_job(TENANT, third.as_str());
    let (seen, buffered) = follow(p.grag.bff().orchestrator_events(&third)).await;
    assert!(!buffered);
    assert!(
        seen[..seen.len() - 1]
            .iter()
            .all(|s| s.starts_with("status")),
        "{seen:?}"
    );
    assert_eq!(
        p.sim.log().count("orchestrator_events"),
        streams,
        "no stream opened behind the buffering proxy"
    );
    let alert = &p.alerts.taken()[0];
    eprintln!(
        "buffering alert: {} [{}] {}",
        alert.name,
        alert.endpoint.unwrap_or("-"),
        alert.detail.as_deref().unwrap_or("")
    );
}

/// The spec's policy at 1/10 (attempt timeout 3 s, polling every 500 ms),
/// the buffering burst left at 250 ms as in [`policy`].
fn policy_10() -> &'static Policy {
    static POLICY_10: OnceLock<&'static Policy> = OnceLock::new();
    POLICY_10.get_or_init(|| {
        let scaled = POLICY.scaled(10);
        Box::leak(Box::new(Policy {
            buffering: policy().buffering.clone(),
            ..scaled.clone()
        }))
    })
}

#[tokio::test]
async fn a_job_longer_than_the_open_timeout_behind_plesk_defaults_is_opened_once_and_polled() {
    // Each job runs 4 s; the stream's opening waits 3 s for its head, which
    // nginx holds until the job ends: every opening times out.
    let Some(p) = Proxied::start_with(
        sim_config(Duration::from_secs(4)),
        Setup::plesk_defaults(),
        policy_10(),
        |c| c,
    )
    .await
    else {
        return;
    };
    for (n, doc) in ["doc-1", "doc-2"].into_iter().enumerate() {
        let job = upload_for_job(&p.grag, doc).await;
        let (seen, buffered) = follow(p.grag.bff().orchestrator_events(&job)).await;
        assert!(buffered, "{seen:?}");
        assert_eq!(seen[0], "fell back: connection", "{seen:?}");
        assert_eq!(
            p.sim.log().count("orchestrator_events"),
            n + 1,
            "opened once per job, not again and again"
        );
    }
    assert_eq!(p.buffered("orchestrator"), 2);
    assert_eq!(
        p.alerts
            .names()
            .iter()
            .filter(|a| **a == "sse_fallbacks_sustained")
            .count(),
        1
    );
    assert!(
        p.grag.runtime().polling_only(),
        "jobs are polled from now on"
    );
    let third = upload_for_job(&p.grag, "doc-3").await;
    p.sim.start_job(TENANT, third.as_str());
    follow(p.grag.bff().orchestrator_events(&third)).await;
    assert_eq!(
        p.sim.log().count("orchestrator_events"),
        2,
        "no third opening"
    );
}

#[tokio::test]
async fn with_buffering_off_streams_are_live_and_nothing_is_reported() {
    let Some(p) = Proxied::start(sim_config(Duration::from_secs(2)), Setup::unbuffered()).await
    else {
        return;
    };
    for doc in ["doc-1", "doc-2"] {
        let job = upload_for_job(&p.grag, doc).await;
        let (seen, buffered) = follow(p.grag.bff().orchestrator_events(&job)).await;
        assert!(!buffered, "{seen:?}");
        assert_eq!(seen.first().map(String::as_str), Some("subscribed"));
    }
    let (done, buffered) = chat_turn(&p.grag).await;
    assert!(done && !buffered);
    assert_eq!(p.buffered("orchestrator") + p.buffered("chat"), 0);
    assert!(p.alerts.names().is_empty(), "{:?}", p.alerts.names());
    assert!(!p.grag.runtime().polling_only());
}

// ---- item 2: a proxy's HTML page is one operator line ---------------------------------------

/// The error is one line, names the page by its title, and carries no HTML.
fn assert_one_line(e: &Error, status: u16, title: &str) {
    assert_eq!(e.status(), Some(status), "{e}");
    let detail = e.detail().expect("a detail");
    let display = e.to_string();
    for text in [detail, display.as_str()] {
        assert!(!text.contains('<') && !text.contains('\n'), "{text:?}");
    }
    assert!(
        detail.starts_with("an HTML error page, not the platform's answer: \"")
            && detail.contains(&format!("\"{title}\" (text/html, ")),
        "{detail:?}"
    );
}

#[tokio::test]
async fn nginx_502_504_429_and_413_pages_become_one_operator_line() {
    // 502: the upstream is down.
    let Some(binary) = harness::binary() else {
        return;
    };
    let down = std::net::SocketAddr::from(([127, 0, 0, 1], harness::free_port()));
    let nginx = Nginx::start(&binary, down, &Setup::plesk_defaults());
    let config = Config::new(nginx.url(), KEY, TenantId::parse(TENANT).unwrap());
    let grag = Grag::with_policy(config, policy()).unwrap();
    let e = grag.workspaces().list_kbs().await.expect_err("502");
    assert_one_line(&e, 502, "502 Bad Gateway");
    assert!(e.attempts() > 1, "an idempotent read was retried: {e}");
    assert!(
        nginx.error_log().contains("connect() failed"),
        "nginx's own 502"
    );
    crate::book_output::shown("nginx-502", &e.to_string());
    drop(nginx);

    // 504: the route is slower than proxy_read_timeout; 429: limit_req; 413:
    // client_max_body_size.
    let setup = Setup::plesk_defaults()
        .http("limit_req_zone $binary_remote_addr zone=tight:1m rate=1r/m;")
        .server("client_max_body_size 1k;")
        .location("proxy_read_timeout 1s;")
        .server(
            "location /ledger/ { proxy_pass http://$UPSTREAM; limit_req zone=tight burst=1 nodelay; limit_req_status 429; }",
        );
    let Some(p) = Proxied::start(sim_config(Duration::from_secs(2)), setup).await else {
        return;
    };
    p.sim
        .faults()
        .push(Rule::new(Fault::delay(Duration::from_secs(3))).on("list_kbs"));
    let e = p.grag.workspaces().list_kbs().await.expect_err("504");
    assert_one_line(&e, 504, "504 Gateway Time-out");
    eprintln!("nginx 504, operator line: {e}");

    let mut last = None;
    for _ in 0..3 {
        match p
            .grag
            .ledger()
            .totals(&PipelineId::parse("run-1").unwrap())
            .await
        {
            Ok(_) => continue,
            Err(e) => {
                last = Some(e);
                break;
            }
        }
    }
    let e = last.expect("limit_req answers 429 past its burst");
    assert_one_line(&e, 429, "429 Too Many Requests");

    let kb = KbId::parse("kb-1").unwrap();
    let big = UpsertPoints::new(vec![point("p-1", 512)]);
    let e = p
        .grag
        .voyager()
        .upsert_points(&kb, &big)
        .await
        .expect_err("413");
    assert_one_line(&e, 413, "413 Request Entity Too Large");
    let access = p
        .nginx
        .access_when(|lines| lines.iter().any(|a| a.status == 413));
    assert!(access.iter().any(|a| a.status == 413), "{access:?}");
}

fn point(id: &str, dimensions: usize) -> Point {
    Point::new(
        id,
        (0..dimensions)
            .map(|i| (i as f64 * 0.618_033_988_749_895).fract())
            .collect::<Vec<_>>(),
    )
}

// ---- item 3: a proxy keep-alive shorter than the pool idle ----------------------------------

/// Calls until two in a row went out on one connection (the pool is in use
/// and warm: a replacement, built on a blocking thread, has taken over),
/// at most 100 calls 20 ms apart; the nginx connection of the last.
async fn warm(p: &Proxied) -> u64 {
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        p.grag.workspaces().list_kbs().await.expect("list_kbs");
        let access = logged(p);
        if let [.., a, b] = access.as_slice()
            && a.connection == b.connection
        {
            return b.connection;
        }
    }
    panic!("no connection was reused: {:?}", p.nginx.access());
}

/// nginx's access log once it has a line for every `list_kbs` the simulator answered.
fn logged(p: &Proxied) -> Vec<harness::Access> {
    let answered = p.sim.log().count("list_kbs");
    p.nginx.access_when(|lines| lines.len() >= answered)
}

#[tokio::test]
async fn a_pool_idle_configured_below_the_proxy_keep_alive_lets_connections_go_first() {
    // nginx drops idle client connections after 2 s and announces nothing;
    // the deployment lowers the pool idle to 1 s (the spec's floor).
    let setup = Setup::unbuffered().server("keepalive_timeout 2s;");
    let Some(p) = Proxied::start_with(sim_config(Duration::ZERO), setup, &POLICY, |c| {
        c.pool_idle(POLICY.pool_idle_floor)
    })
    .await
    else {
        return;
    };
    assert_eq!(p.grag.runtime().pool_idle(), Duration::from_secs(1));
    let reused = warm(&p).await;
    // Idle 1.5 s: past ours, within nginx's. The spec's 4 s would reuse the
    // connection here, and at nginx's edge (~2 s) write onto one it is closing.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    p.grag.workspaces().list_kbs().await.unwrap();
    let access = logged(&p);
    let last = access.last().unwrap();
    assert_ne!(last.connection, reused, "{access:?}");
    assert_eq!(
        last.connection_requests, 1,
        "a fresh connection: {access:?}"
    );

    // Below the floor the client is refused, not clamped.
    let config = Config::new(p.nginx.url(), KEY, TenantId::parse(TENANT).unwrap())
        .pool_idle(POLICY.pool_idle_floor / 2);
    let refused = Grag::new(config).err().expect("refused below the floor");
    assert!(
        refused.to_string().contains("below the floor of 1s"),
        "{refused}"
    );
}

#[tokio::test]
async fn a_keep_alive_timeout_nginx_announces_lowers_the_pool_idle() {
    // `keepalive_timeout 3s 3s`: nginx closes after 3 s and says
    // `Keep-Alive: timeout=3`; the client keeps connections 3 s less the
    // spec's 1 s margin. The client is left at the spec's 4 s.
    let setup = Setup::unbuffered().server("keepalive_timeout 3s 3s;");
    let Some(p) = Proxied::start_with(sim_config(Duration::ZERO), setup, &POLICY, |c| c).await
    else {
        return;
    };
    assert_eq!(p.grag.runtime().pool_idle(), POLICY.pool_idle);
    let reused = warm(&p).await;
    assert_eq!(p.grag.runtime().pool_idle(), Duration::from_secs(2));
    // Idle 2.5 s: past the announced limit less the margin, within nginx's 3 s.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    p.grag.workspaces().list_kbs().await.unwrap();
    let access = logged(&p);
    let last = access.last().unwrap();
    assert_ne!(last.connection, reused, "{access:?}");
    assert_eq!(
        last.connection_requests, 1,
        "a fresh connection: {access:?}"
    );
}

/// nginx closes an idle connection after 2 s and announces nothing; the
/// client keeps the spec's 4 s. A completion is not idempotent: one written
/// on a connection nginx is closing at that moment would be lost unanswered
/// and could not be sent again. Writes go out on connections idle at most
/// `pool_idle_floor`, so every completion sent at nginx's edge (1.990–2.000 s
/// after the previous answer) is answered, and reaches the upstream once.
#[tokio::test]
async fn completions_sent_at_the_proxys_keep_alive_edge_all_arrive_exactly_once() {
    const CLIENTS: usize = 20;
    const ROUNDS: usize = 10;
    let setup = Setup::unbuffered().server("keepalive_timeout 2s;");
    let Some(p) = Proxied::start_with(sim_config(Duration::ZERO), setup, &POLICY, |c| c).await
    else {
        return;
    };
    assert_eq!(p.grag.runtime().pool_idle(), POLICY.pool_idle);
    let completion = CompletionRequest::new(Vec::new()).with_max_tokens(16);
    let run = PipelineId::parse("run-edge").unwrap();
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..CLIENTS {
        let config = Config::new(p.nginx.url(), KEY, TenantId::parse(TENANT).unwrap());
        let grag = Grag::with_policy(config, &POLICY).expect("a client");
        let (completion, run) = (completion.clone(), run.clone());
        clients.spawn(async move {
            let gateway = grag.ai_gateway(&run);
            gateway
                .complete(&completion)
                .await
                .expect("the first completion");
            for round in 0..ROUNDS {
                let edge = Duration::from_millis(1990 + ((c + round) % 11) as u64);
                tokio::time::sleep(edge).await;
                if let Err(e) = gateway.complete(&completion).await {
                    panic!("client {c}, round {round}, {edge:?} idle: {e}");
                }
            }
        });
    }
    while let Some(done) = clients.join_next().await {
        done.expect("every completion at the edge was answered");
    }
    assert_eq!(
        p.sim.log().count("complete"),
        CLIENTS * (ROUNDS + 1),
        "each completion reached the upstream exactly once"
    );
}

// ---- item 4: 413 by bytes --------------------------------------------------------------------

fn upload(doc: &str, points: usize, dimensions: usize) -> Upload {
    Upload {
        kb: KbId::parse("kb-1").unwrap(),
        document: UploadDocument::new(
            DocumentId::parse(doc).unwrap(),
            format!("{doc}.txt"),
            "text/plain",
            TEXT_B64,
        ),
        points: (0..points)
            .map(|i| point(&format!("{doc}-chunk-{i}"), dimensions))
            .collect(),
    }
}

#[tokio::test]
async fn an_upsert_nginx_refuses_by_bytes_is_halved_down_to_what_fits_and_one_point_too_many_fails()
{
    // 40 points of 1024 dimensions are ~0.7 MB of JSON, fewer than the
    // policy's 256-point split: only halving gets them under 64 KiB.
    let setup = Setup::unbuffered().server("client_max_body_size 64k;");
    let Some(p) = Proxied::start(sim_config(Duration::ZERO), setup).await else {
        return;
    };
    p.grag
        .workspaces()
        .create_kb(&CreateKb::new(
            KbId::parse("kb-1").unwrap(),
            "Brückenprüfung",
        ))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store =
        sdk_queue::SqliteStore::open(dir.path().join("jobs.sqlite"), grag_jobs::lock_retry())
            .unwrap();
    let jobs = Jobs::new(p.grag.clone(), Arc::new(store), "worker-1").unwrap();

    let job = jobs.submit_upload(upload("doc-1", 40, 1024)).await.unwrap();
    assert_eq!(job.state, JobState::Done, "{:?}", job.last_error);
    assert_eq!(p.sim.points(TENANT, "kb-1").len(), 40);
    // 40 → 20 → 10 → 5 refused by nginx, then batches of 3 (5 halved)
    // until done; no refused batch reached the platform.
    let accepted = p.sim.log().count("upsert_points");
    let count = |lines: &[harness::Access], status: u16| {
        lines
            .iter()
            .filter(|a| a.uri.ends_with("/points") && a.status == status)
            .count()
    };
    let access = p
        .nginx
        .access_when(|lines| count(lines, 413) >= 4 && count(lines, 200) >= accepted);
    assert_eq!(count(&access, 413), 4, "{access:?}");
    assert_eq!(count(&access, 200), accepted, "{access:?}");
    assert_eq!(accepted, 40_usize.div_ceil(3), "batches of 3: {access:?}");

    // One point of 8192 dimensions (~150 KB) fits no batch: the job fails, typed.
    let job = jobs.submit_upload(upload("doc-2", 3, 8192)).await.unwrap();
    assert_eq!(job.state, JobState::Failed, "{job:?}");
    let error = job.last_error.expect("the error is kept for the UI");
    assert_eq!(
        (error.status, error.class.as_str()),
        (Some(413), "payload_too_large")
    );
    assert!(
        error
            .detail
            .contains("point `doc-2-chunk-0` alone is refused as too large (413)")
            && error.detail.contains("\"413 Request Entity Too Large\""),
        "{}",
        error.detail
    );
    let access = p.nginx.access_when(|lines| count(lines, 413) >= 4 + 3);
    assert_eq!(
        count(&access, 413),
        4 + 3,
        "3 points, 2, then 1: never a loop"
    );
    assert_eq!(
        p.sim.log().count("upsert_points"),
        accepted,
        "none of them reached the platform"
    );
}
