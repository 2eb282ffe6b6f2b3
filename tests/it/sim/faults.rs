//! Every fault, scripted from Rust and over the admin routes, observed on the
//! wire, through the generated client, and in the request log.

use std::time::{Duration, SystemTime};

use crate::kit::sim::{self as kit, client, raw, scoped};
use grag_client::types::SearchRequest;
use grag_client::{KbId, SessionId};
use grag_sim::embedded;
use grag_sim::{ChurnPhase, Fault, RetryAfter, Rule};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::time::Instant;

fn list_kbs_url(sim: &grag_sim::Sim) -> String {
    format!("{}/workspaces/api/v1/kbs", sim.url())
}

async fn get(sim: &grag_sim::Sim) -> reqwest::Response {
    scoped(&raw(), Method::GET, list_kbs_url(sim))
        .send()
        .await
        .unwrap()
}

fn statuses(sim: &grag_sim::Sim, operation: &str) -> Vec<u16> {
    sim.log()
        .of(operation)
        .iter()
        .map(|e| e.status.unwrap_or(0))
        .collect()
}

#[tokio::test]
async fn deploy_churn_refuses_connections_then_answers_401_404_422_then_heals() {
    // The phases are steps and answer counts, not windows of the clock: refused
    // until the test steps, then three transient answers, then healthy.
    let sim = kit::sim().await;
    let grag = client(&sim, "knoll");
    assert_eq!(get(&sim).await.status(), 200);
    // An open stream, cut by the deploy.
    let mut stream = scoped(
        &raw(),
        Method::GET,
        format!("{}/next/api/agents/sessions/s-1/stream", sim.url()),
    )
    .send()
    .await
    .unwrap();
    stream.chunk().await.unwrap().unwrap();

    sim.faults().deploy_churn_stepped(Some(3)).await;
    assert!(sim.faults().churning());
    assert_eq!(sim.faults().churn_phase(), Some(ChurnPhase::Refused));
    let refused = raw()
        .get(format!("{}/workspaces/health", sim.url()))
        .send()
        .await;
    assert!(refused.unwrap_err().is_connect(), "connection refused");
    let cut = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match stream.chunk().await {
                Ok(Some(_)) => continue,
                other => return other.map(|_| ()),
            }
        }
    })
    .await
    .expect("the open stream ends");
    assert!(cut.is_err(), "cut, not a clean end");
    // Through the client: retried (R1), then a connection error (T1).
    let e = grag.workspaces().list_kbs().await.unwrap_err();
    assert_eq!(e.class_name(), "connection", "{e}");
    assert_eq!(
        sim.faults().churn_phase(),
        Some(ChurnPhase::Refused),
        "refused until the step, however long the client took"
    );

    // Containers come up: health is fine, authenticated routes are not yet.
    assert_eq!(sim.faults().churn_step().await, Some(ChurnPhase::Flaky));
    let health = raw()
        .get(format!("{}/workspaces/health", sim.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(
        sim.faults().churn_phase(),
        Some(ChurnPhase::Flaky),
        "health does not count against the flaky answers"
    );
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(get(&sim).await.status().as_u16());
    }
    seen.sort();
    assert_eq!(seen, [401, 404, 422]);

    // The third transient answer was the last one.
    assert!(!sim.faults().churning());
    assert_eq!(get(&sim).await.status(), 200);
    grag.workspaces().list_kbs().await.unwrap();

    let notes: Vec<_> = sim.log().notes().into_iter().map(|n| n.what).collect();
    assert!(notes[0].contains("listener closed"), "{notes:?}");
    assert!(notes[1].contains("open again"), "{notes:?}");
    let churned: Vec<_> = sim
        .log()
        .entries()
        .into_iter()
        .filter(|e| e.has_fault("deploy_churn"))
        .map(|e| e.faults[0].clone())
        .collect();
    assert_eq!(churned.len(), 3, "{churned:?}");
}

#[tokio::test]
async fn a_stepped_churn_stays_flaky_until_the_next_step_and_a_timed_one_can_be_stepped() {
    let sim = kit::sim().await;
    // Stepped, with no answer count: flaky until the second step.
    sim.faults().deploy_churn_stepped(None).await;
    assert_eq!(sim.faults().churn_step().await, Some(ChurnPhase::Flaky));
    let mut seen = Vec::new();
    for _ in 0..6 {
        seen.push(get(&sim).await.status().as_u16());
    }
    assert_eq!(seen, [401, 404, 422, 401, 404, 422], "in turn");
    assert_eq!(sim.faults().churn_phase(), Some(ChurnPhase::Flaky));
    assert_eq!(sim.faults().churn_step().await, None);
    assert_eq!(get(&sim).await.status(), 200);
    assert_eq!(sim.faults().churn_step().await, None, "nothing to step");

    // A timed churn far longer than any test: a step ends its refusal now,
    // and its flaky phase (zero long here) with it.
    sim.faults()
        .deploy_churn_for(Duration::from_secs(3600), Duration::ZERO)
        .await;
    assert!(
        raw()
            .get(format!("{}/workspaces/health", sim.url()))
            .send()
            .await
            .unwrap_err()
            .is_connect()
    );
    assert_eq!(sim.faults().churn_step().await, None);
    assert!(!sim.faults().churning());
    assert_eq!(get(&sim).await.status(), 200);

    // A clear ends a stepped refusal too.
    sim.faults().deploy_churn_stepped(Some(1)).await;
    sim.faults().clear();
    assert!(!sim.faults().churning());
    let back = kit::wait_for(Duration::from_secs(10), || async {
        raw()
            .get(format!("{}/workspaces/health", sim.url()))
            .send()
            .await
            .is_ok()
    })
    .await;
    assert!(back, "the listener opens again after a clear");
    assert_eq!(get(&sim).await.status(), 200);
}

#[tokio::test]
async fn rate_limits_with_retry_after_seconds_date_or_none() {
    let sim = kit::sim().await;
    let faults = sim.faults();
    faults.once(
        "list_kbs",
        Fault::RateLimited {
            retry_after: Some(RetryAfter::Seconds(7)),
        },
    );
    let r = get(&sim).await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "7");
    assert_eq!(r.text().await.unwrap(), "Too Many Requests");

    faults.once(
        "list_kbs",
        Fault::RateLimited {
            retry_after: Some(RetryAfter::DateIn(30)),
        },
    );
    let r = get(&sim).await;
    let date = r.headers()["retry-after"].to_str().unwrap().to_owned();
    let when = httpdate::parse_http_date(&date).unwrap();
    let ahead = when.duration_since(SystemTime::now()).unwrap();
    assert!(
        ahead > Duration::from_secs(28) && ahead <= Duration::from_secs(30),
        "{date}"
    );

    faults.once("list_kbs", Fault::RateLimited { retry_after: None });
    let r = get(&sim).await;
    assert_eq!(r.status(), 429);
    assert!(!r.headers().contains_key("retry-after"));

    // The client waits (R3: 2 s floor, 20 ms at 1/100) and tries again.
    sim.log().clear();
    faults.push(
        Rule::new(Fault::RateLimited { retry_after: None })
            .on("list_kbs")
            .times(2),
    );
    client(&sim, "knoll").workspaces().list_kbs().await.unwrap();
    assert_eq!(statuses(&sim, "list_kbs"), [429, 429, 200]);
    assert!(
        sim.log()
            .gaps("list_kbs")
            .iter()
            .all(|g| *g >= Duration::from_millis(20))
    );
    assert!(sim.log().entries()[0].has_fault("rate_limited"));
}

#[tokio::test]
async fn budget_and_admin_gate_are_final() {
    let sim = kit::sim().await;
    let grag = client(&sim, "knoll");
    sim.faults().once("list_kbs", Fault::Budget);
    let e = grag.workspaces().list_kbs().await.unwrap_err();
    assert_eq!(
        (e.status(), e.row(), e.class_name()),
        (Some(402), "T5", "budget_exhausted")
    );
    sim.faults().once("put_settings", Fault::AdminGate);
    let e = grag
        .workspaces()
        .put_settings(&json!({}))
        .await
        .unwrap_err();
    assert_eq!(
        (e.status(), e.row(), e.class_name()),
        (Some(403), "T4", "admin_gate")
    );
    assert_eq!(sim.log().len(), 2, "neither is retried");
    assert!(sim.log().entries()[0].has_fault("budget"));
    assert!(sim.log().entries()[1].has_fault("admin_gate"));
}

#[tokio::test]
async fn bad_gateway_is_plain_text_and_retried_when_idempotent() {
    let sim = kit::sim().await;
    sim.faults().once("list_kbs", Fault::BadGateway);
    let r = get(&sim).await;
    assert_eq!(r.status(), 502);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    assert_eq!(r.text().await.unwrap(), "Bad Gateway");

    sim.faults().once("list_kbs", Fault::BadGateway);
    client(&sim, "knoll").workspaces().list_kbs().await.unwrap();
    assert_eq!(statuses(&sim, "list_kbs"), [502, 502, 200]);
}

#[tokio::test]
async fn a_dark_route_answers_the_same_503_every_time() {
    let sim = kit::sim().await;
    sim.faults().dark("search_rerank");
    let url = format!(
        "{}/ai-gateway/api/v1/retrieval/collections/kb-1/search/rerank",
        sim.url()
    );
    let mut details = Vec::new();
    for _ in 0..2 {
        let r = scoped(&raw(), Method::POST, url.clone())
            .json(&json!({ "query_text": "x", "top_k": 1 }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 503);
        details.push(r.json::<Value>().await.unwrap()["detail"].clone());
    }
    assert_eq!(details[0], details[1]);
    assert!(details[0].as_str().unwrap().contains("feature flag"));
    let e = client(&sim, "knoll")
        .ai_gateway(&embedded::pipeline())
        .search_rerank(&KbId::parse("kb-1").unwrap(), &SearchRequest::new("x", 1))
        .await
        .unwrap_err();
    assert_eq!((e.row(), e.class_name()), ("T13", "feature_dark"));
    // Other routes are unaffected.
    assert_eq!(get(&sim).await.status(), 200);
}

#[tokio::test]
async fn safety_503_is_transient_and_retried_once() {
    let sim = kit::sim().await;
    sim.faults().once("list_kbs", Fault::Safety);
    client(&sim, "knoll").workspaces().list_kbs().await.unwrap();
    assert_eq!(statuses(&sim, "list_kbs"), [503, 200]);
    assert!(sim.log().entries()[0].has_fault("safety"));

    sim.faults()
        .push(Rule::new(Fault::Safety).on("list_kbs").times(2));
    let e = client(&sim, "knoll")
        .workspaces()
        .list_kbs()
        .await
        .unwrap_err();
    assert_eq!(
        (e.row(), e.class_name(), e.attempts()),
        ("T14", "safety_closed", 2)
    );
}

#[tokio::test]
async fn wal_backpressure_is_503_with_retry_after() {
    let sim = kit::sim().await;
    sim.faults().once(
        "upsert_points",
        Fault::Backpressure {
            retry_after: RetryAfter::Seconds(3),
        },
    );
    let r = scoped(
        &raw(),
        Method::PUT,
        format!("{}/voyager/api/v1/collections/kb-1/points", sim.url()),
    )
    .json(&json!({ "points": [] }))
    .send()
    .await
    .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "3");
    assert!(r.text().await.unwrap().contains("backpressure"));

    // R4 honours Retry-After (0 s here, so the test does not wait).
    sim.faults().once(
        "list_kbs",
        Fault::Backpressure {
            retry_after: RetryAfter::Seconds(0),
        },
    );
    client(&sim, "knoll").workspaces().list_kbs().await.unwrap();
    assert_eq!(statuses(&sim, "list_kbs"), [503, 200]);
}

#[tokio::test]
async fn a_cold_start_slows_only_the_first_answer_of_each_model_route() {
    let query = SearchRequest::new("x", 1);
    let kb = KbId::parse("kb-1").unwrap();
    let setup = |cold_start: Duration| {
        let (kb, query) = (kb.clone(), query.clone());
        async move {
            let mut config = kit::config();
            config.cold_start = cold_start;
            let sim = embedded::start(config).await;
            let grag = client(&sim, "knoll");
            grag.workspaces()
                .create_kb(&grag_client::types::CreateKb::new(kb, "kb"))
                .await
                .unwrap();
            sim.faults().cold_start();
            let url = format!(
                "{}/ai-gateway/api/v1/retrieval/collections/kb-1/search/rerank",
                sim.url()
            );
            let cold = scoped(&raw(), Method::POST, url).json(&query);
            (sim, grag, cold)
        }
    };

    // The first answer comes at least the cold start later.
    let (sim, _, cold) = setup(Duration::from_millis(150)).await;
    let started = Instant::now();
    let r = cold.send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(started.elapsed() >= Duration::from_millis(150));

    // The second is not held: with an hour-long cold start, it is answered
    // while the first still waits.
    let (sim_2, grag, cold) = setup(Duration::from_secs(3600)).await;
    let first = tokio::spawn(cold.send());
    let arrived = kit::wait_for(Duration::from_secs(10), || async {
        sim_2.log().count("search_rerank") == 1
    })
    .await;
    assert!(arrived, "the cold call reached the simulator");
    grag.ai_gateway(&embedded::pipeline())
        .search_rerank(&kb, &query)
        .await
        .unwrap();
    assert!(!first.is_finished(), "the first answer still waits");
    first.abort();
    let log = sim.log().of("search_rerank");
    assert!(log[0].has_fault("cold_start"));
    let log = sim_2.log().of("search_rerank");
    assert_eq!(log.len(), 2);
    assert_eq!(log[0].status, None, "the cold one is still unanswered");
    assert_eq!(log[1].status, Some(200));
    assert!(log[1].faults.is_empty());
    // The other model routes are still cold.
    assert_eq!(sim.faults().rules().len(), 3);
    assert_eq!(sim_2.faults().rules().len(), 3);
}

#[tokio::test]
async fn a_reset_mid_body_is_a_connection_failure() {
    let sim = kit::sim().await;
    let grag = client(&sim, "knoll");
    grag.workspaces()
        .put_settings(&json!({ "a": "a long enough value to cut in half" }))
        .await
        .unwrap();
    sim.faults().once("get_settings", Fault::ResetMidBody);
    let r = scoped(
        &raw(),
        Method::GET,
        format!("{}/workspaces/api/v1/settings", sim.url()),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(r.status(), 200, "the status line got through");
    assert!(r.bytes().await.is_err(), "the body did not");

    // The client sees T1 and retries the idempotent read.
    sim.log().clear();
    sim.faults().once("get_settings", Fault::ResetMidBody);
    let settings = grag.workspaces().get_settings().await.unwrap();
    assert_eq!(settings["a"], "a long enough value to cut in half");
    let log = sim.log().of("get_settings");
    assert_eq!(log.len(), 2);
    assert!(log[0].has_fault("reset_mid_body"));
    assert_ne!(log[0].connection, log[1].connection, "a new connection");
}

#[tokio::test]
async fn rules_match_by_route_or_service_and_count_skip_and_times() {
    let sim = kit::sim().await;
    sim.faults().push(
        Rule::new(Fault::Status {
            status: 500,
            detail: "boom".into(),
            retry_after: None,
        })
        .on("service:workspaces")
        .skip(1)
        .times(2),
    );
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(get(&sim).await.status().as_u16());
    }
    assert_eq!(seen, [200, 500, 500, 200]);
    assert!(sim.faults().rules().is_empty(), "used up");
    let id = sim.faults().on("*", Fault::Budget);
    assert_eq!(
        raw()
            .get(format!("{}/workspaces/health", sim.url()))
            .send()
            .await
            .unwrap()
            .status(),
        402
    );
    assert!(sim.faults().remove(id));
    assert_eq!(get(&sim).await.status(), 200);
}

#[tokio::test]
async fn admin_routes_script_the_same_faults_and_stay_out_of_the_log() {
    let mut config = kit::config();
    config.stream_ceiling = Duration::from_millis(50);
    let sim = embedded::start(config).await;
    let http = raw();
    let admin = |path: &str| format!("{}/_sim/{path}", sim.url());

    let r = http
        .post(admin("faults"))
        .json(&json!({ "route": "list_kbs", "fault": { "kind": "bad_gateway" }, "times": 1 }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let r = http
        .post(admin("faults"))
        .json(&json!([
            { "route": "spend", "fault": { "kind": "rate_limited", "retry_after": { "date_in": 5 } } },
            { "route": "orchestrator_events", "fault": { "kind": "sse_stall", "after_events": 1 } }
        ]))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.json::<Value>().await.unwrap()["ids"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let rules: Value = http
        .get(admin("faults"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(rules.as_array().unwrap().len(), 3);
    let bad = http
        .post(admin("faults"))
        .json(&json!({ "fault": "x" }))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 422);

    assert_eq!(get(&sim).await.status(), 502);
    let spend = scoped(
        &http,
        Method::GET,
        format!("{}/ledger/api/v1/ledger/spend?group_by=service", sim.url()),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(spend.status(), 429);
    assert!(httpdate::parse_http_date(spend.headers()["retry-after"].to_str().unwrap()).is_ok());

    let log: Value = http
        .get(admin("log"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let requests = log["requests"].as_array().unwrap();
    assert_eq!(requests.len(), 2, "admin calls are not logged");
    assert_eq!(requests[0]["faults"], json!(["bad_gateway"]));
    assert_eq!(requests[0]["status"], 502);
    assert_eq!(requests[0]["operation"], "list_kbs");

    assert_eq!(
        http.delete(admin("faults")).send().await.unwrap().status(),
        204
    );
    assert_eq!(get(&sim).await.status(), 200);
}

#[tokio::test]
async fn admin_routes_switch_the_agent_plane_and_show_the_config() {
    let sim = embedded::start(kit::config()).await;
    let http = raw();
    let admin = |path: &str| format!("{}/_sim/{path}", sim.url());

    // The agent plane switch.
    let r = http
        .post(admin("agent-plane"))
        .json(&json!({ "running": false }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let grag = client(&sim, "knoll");
    let session = SessionId::parse("s-1").unwrap();
    let Err(e) = grag.bff().agent_session_stream(&session).await else {
        panic!("dark");
    };
    assert_eq!(e.status(), Some(503));

    let config: Value = http
        .get(admin("config"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(config["keepalive_ms"], 20.0);
    assert_eq!(config["max_points"], 256);
    assert_eq!(
        http.post(admin("cold-start"))
            .send()
            .await
            .unwrap()
            .status(),
        204
    );
    assert_eq!(sim.faults().rules().len(), 4);
}

#[tokio::test]
async fn an_admin_deploy_refuses_until_stepped_and_a_reset_forgets_everything() {
    let sim = embedded::start(kit::config()).await;
    let http = raw();
    let admin = |path: &str| format!("{}/_sim/{path}", sim.url());
    assert_eq!(
        http.post(admin("cold-start"))
            .send()
            .await
            .unwrap()
            .status(),
        204
    );
    assert_eq!(get(&sim).await.status(), 200);
    assert!(!sim.faults().rules().is_empty());
    assert!(!sim.log().is_empty());

    // A deploy through the admin route: refused shortly after the answer (an
    // hour long: the test, not the clock, ends it with a step).
    let r = http
        .post(admin("churn"))
        .json(&json!({ "refused_ms": 3_600_000, "flaky_ms": 0, "delay_ms": 10 }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let refused = kit::wait_for(Duration::from_secs(10), || async {
        raw()
            .get(admin("config"))
            .send()
            .await
            .is_err_and(|e| e.is_connect())
    })
    .await;
    assert!(refused, "the admin route's deploy closes the listener");
    assert_eq!(sim.faults().churn_phase(), Some(ChurnPhase::Refused));
    assert_eq!(sim.faults().churn_step().await, None, "no flaky phase");
    assert_eq!(
        http.post(admin("reset")).send().await.unwrap().status(),
        204
    );
    assert!(sim.faults().rules().is_empty());
    assert!(sim.log().is_empty());
    assert_eq!(get(&sim).await.status(), 200);
}
