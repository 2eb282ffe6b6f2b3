//! The origin circuit breaker (policy §5.2) end to end over the simulator:
//! opening on distinct endpoints, failing fast while open, the probe loop, the
//! single canary, reopening on a deploy 401, deploy-suspected after a close,
//! the open-too-long alert, a full deploy churn, stale attempts (the
//! generation rule) and the metrics. Durations are the spec's, compressed.

mod common_resilience;

use std::collections::BTreeMap;
use std::time::Duration;

use common_resilience::{Env, fast_policy, policy, ready_now, sim_config, wait_until};
use grag_client::types::{CreateKb, SearchRequest, SpendGrouping};
use grag_client::{Error, KbId, PipelineId};
use grag_sim::{ChurnPhase, Fault, Rule};
use sdk_runtime::ErrorKind;
use sdk_runtime::breaker::CircuitState;
use tokio::task::JoinSet;
use tokio::time::Instant;

const UPDATING: &str = "Wird gerade aktualisiert";
const WARMING_UP: &str =
    "Die KI-Dienste starten gerade — die erste Antwort kann bis zu zwei Minuten dauern.";

/// Scaled(100): probe every 50 ms, deploy-suspected 1.2 s, window 300 ms.
const PROBE_INTERVAL: Duration = Duration::from_millis(50);
const DEPLOY_SUSPECTED: Duration = Duration::from_millis(1200);

#[track_caller]
fn assert_circuit_open(e: &Error) {
    assert_eq!(e.row(), "T21", "{e}");
    assert_eq!(e.class(), "circuit_open", "{e}");
    assert_eq!(e.kind(), ErrorKind::CircuitOpen, "{e}");
    assert_eq!(e.message(), Some(UPDATING), "the German state text: {e}");
    assert_eq!(e.status(), None, "{e}");
}

fn pipeline() -> PipelineId {
    PipelineId::parse("run-1").expect("a valid pipeline id")
}

fn kb(id: &str) -> KbId {
    KbId::parse(id).expect("a valid KB id")
}

/// Requests that reached any route but the public health probe.
fn non_probe_requests(env: &Env) -> usize {
    env.sim
        .log()
        .entries()
        .iter()
        .filter(|e| e.operation != Some("health"))
        .count()
}

/// When the last request but a probe arrived: after the breaker opened on
/// it, nothing else was sent, so the open happened after this instant.
fn last_arrival(env: &Env) -> Instant {
    env.sim
        .log()
        .entries()
        .iter()
        .filter(|e| e.operation != Some("health"))
        .map(|e| e.arrived)
        .max()
        .expect("the opening requests are logged")
}

/// `metric{labels} value` lines of the Prometheus text, by series.
fn series(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect()
}

// ---- opening -----------------------------------------------------------------

#[tokio::test]
async fn opens_on_failures_of_three_distinct_endpoints_within_the_window() {
    let env = Env::start().await;
    env.health_down();
    let faults = env.sim.faults();
    for op in ["get_settings", "totals", "spend"] {
        faults.push(Rule::new(Fault::BadGateway).on(op));
    }

    let e = env.grag.workspaces().get_settings().await.unwrap_err();
    assert_eq!(e.row(), "T12", "{e}");
    assert_eq!(env.state(), CircuitState::Closed, "one endpoint failed");
    let e = env.grag.ledger().totals(&pipeline()).await.unwrap_err();
    assert_eq!(e.row(), "T12", "{e}");
    assert_eq!(env.state(), CircuitState::Closed, "two endpoints failed");

    // The third distinct endpoint's first failure opens it; its retry is refused.
    let e = env
        .grag
        .ledger()
        .spend(SpendGrouping::Service)
        .await
        .unwrap_err();
    assert_eq!(env.state(), CircuitState::Open, "three distinct endpoints");
    assert_circuit_open(&e);
    assert_eq!(e.attempts(), 1, "one attempt was sent before it opened");
    assert_eq!(
        env.count("spend"),
        1,
        "the retry after the open was not sent"
    );
    assert_eq!(
        env.feature("search"),
        ("updating", Some(UPDATING)),
        "features show as updating"
    );
}

/// Dark answers are stable flags of one feature, not an outage: three dark
/// routes do not open the breaker (which would forget them on the close and
/// trip again, forever).
#[tokio::test]
async fn dark_features_do_not_open_the_breaker() {
    let env = Env::start().await;
    for operation in ["list_kbs", "get_settings", "spend"] {
        env.sim.faults().dark(operation);
    }
    let errors = [
        env.grag.workspaces().list_kbs().await.unwrap_err(),
        env.grag.workspaces().get_settings().await.unwrap_err(),
        env.grag
            .ledger()
            .spend(SpendGrouping::Service)
            .await
            .unwrap_err(),
    ];
    for e in &errors {
        assert_eq!(e.row(), "T13", "{e}");
    }
    assert_eq!(env.state(), CircuitState::Closed);
    // A fourth, healthy route still flows.
    env.grag
        .workspaces()
        .health()
        .await
        .expect("health is not dark");
}

#[tokio::test]
async fn three_failures_of_one_endpoint_do_not_open() {
    let env = Env::start().await;
    env.sim
        .faults()
        .push(Rule::new(Fault::BadGateway).on("list_kbs"));
    for _ in 0..3 {
        let e = env.grag.workspaces().list_kbs().await.unwrap_err();
        assert_eq!(e.row(), "T12", "{e}");
    }
    assert_eq!(
        env.count("list_kbs"),
        9,
        "three calls of three attempts each"
    );
    assert_eq!(
        env.state(),
        CircuitState::Closed,
        "nine failures of one endpoint are one distinct endpoint"
    );

    // One more distinct endpoint is still only two.
    env.sim
        .faults()
        .push(Rule::new(Fault::BadGateway).on("get_settings"));
    env.grag.workspaces().get_settings().await.unwrap_err();
    assert_eq!(env.state(), CircuitState::Closed);
    assert_eq!(
        env.count("get_settings"),
        3,
        "still closed: every retry sent"
    );
}

#[tokio::test]
async fn failures_older_than_the_window_do_not_add_up() {
    let env = Env::start().await;
    let faults = env.sim.faults();
    for op in ["get_settings", "totals", "spend"] {
        faults.push(Rule::new(Fault::BadGateway).on(op));
    }
    env.grag.workspaces().get_settings().await.unwrap_err();
    env.grag.ledger().totals(&pipeline()).await.unwrap_err();
    // The 30 s window at 1/100 is 300 ms: let the first two slide out.
    tokio::time::sleep(Duration::from_millis(350)).await;
    env.grag
        .ledger()
        .spend(SpendGrouping::Service)
        .await
        .unwrap_err();
    assert_eq!(
        env.state(),
        CircuitState::Closed,
        "three distinct endpoints, but not within 30 s"
    );
    assert_eq!(env.count("spend"), 3);
}

// ---- open --------------------------------------------------------------------

#[tokio::test]
async fn while_open_calls_fail_fast_without_a_request() {
    let env = Env::start().await;
    env.health_down();
    env.open_breaker().await;
    let before = non_probe_requests(&env);

    // Fails fast: each call is over on its first poll, without waiting.
    let kb_1 = kb("kb-1");
    let workspaces = env.grag.workspaces();
    let results = [
        ready_now(async { workspaces.list_kbs().await.map(drop) }),
        ready_now(async { workspaces.get_settings().await.map(drop) }),
        ready_now(async { workspaces.list_documents(&kb_1).await.map(drop) }),
    ];
    for result in results {
        let e = result
            .expect("fails fast: ready on the first poll")
            .unwrap_err();
        assert_circuit_open(&e);
        assert_eq!(e.attempts(), 0, "nothing sent: {e}");
    }
    assert_eq!(
        non_probe_requests(&env),
        before,
        "no request reached the sim"
    );
    assert_eq!(env.state(), CircuitState::Open, "health still down");
}

#[tokio::test]
async fn the_probe_loop_hits_health_every_probe_interval_while_open() {
    let env = Env::start().await;
    env.health_down();
    env.open_breaker().await;
    let opened_after = last_arrival(&env);
    tokio::time::sleep(Duration::from_millis(420)).await;

    let probes = env.sim.log().of("health");
    assert!(
        (4..=9).contains(&probes.len()),
        "about one probe per 50 ms in 420 ms: {}",
        probes.len()
    );
    assert!(
        probes[0].arrived.duration_since(opened_after) >= PROBE_INTERVAL,
        "the first probe comes one interval after the open: {:?}",
        probes[0].arrived.duration_since(opened_after)
    );
    let gaps = env.gaps("health");
    for gap in &gaps {
        assert!(
            *gap >= PROBE_INTERVAL,
            "never faster than 5 s (scaled): {gaps:?}"
        );
    }
    let mut sorted = gaps.clone();
    sorted.sort();
    assert!(
        sorted[sorted.len() / 2] < Duration::from_millis(100),
        "every 5 s (scaled), not slower: {gaps:?}"
    );
    for probe in &probes {
        assert_eq!(probe.method, "GET");
        assert_eq!(probe.path, "/workspaces/health");
        assert_eq!(probe.header("authorization"), None, "the probe is public");
        assert_eq!(probe.header("x-tenant-id"), None, "the probe is public");
    }
    assert_eq!(env.count("list_kbs"), 0, "no canary while probes fail");
    assert_eq!(env.state(), CircuitState::Open);
}

// ---- half-open and the canary ------------------------------------------------

#[tokio::test]
async fn two_healthy_probes_then_exactly_one_canary_whose_200_closes() {
    let env = Env::start().await;
    // A slow canary (25 ms of its 50 ms timeout) keeps the half-open period
    // long enough for concurrent callers to try.
    env.sim.faults().push(
        Rule::new(Fault::delay(Duration::from_millis(25)))
            .on("list_kbs")
            .once(),
    );
    env.open_breaker().await;
    let opened_after = last_arrival(&env);

    assert!(
        env.wait_for_state(CircuitState::HalfOpen, Duration::from_secs(1))
            .await,
        "half-open after healthy probes (state {:?})",
        env.state()
    );
    assert_eq!(env.count("health"), 2, "two consecutive healthy probes");
    assert!(
        opened_after.elapsed() >= PROBE_INTERVAL * 2,
        "two probe intervals after the open: {:?}",
        opened_after.elapsed()
    );

    // Everyone but the canary is rejected while half-open.
    let before = env.count("get_settings");
    let mut callers = JoinSet::new();
    for i in 0..10 {
        let grag = env.grag.clone();
        callers.spawn(async move {
            if i % 2 == 0 {
                grag.workspaces().list_kbs().await.map(drop)
            } else {
                grag.workspaces().get_settings().await.map(drop)
            }
        });
    }
    while let Some(result) = callers.join_next().await {
        let e = result.expect("the caller ran").unwrap_err();
        assert_circuit_open(&e);
    }
    assert_eq!(env.count("get_settings"), before, "only the canary flows");

    assert!(
        env.wait_for_state(CircuitState::Closed, Duration::from_secs(1))
            .await,
        "the canary's 200 closes (state {:?})",
        env.state()
    );
    let canaries = env.sim.log().of("list_kbs");
    assert_eq!(canaries.len(), 1, "exactly one canary: {canaries:#?}");
    let canary = &canaries[0];
    assert_eq!(canary.status, Some(200));
    assert_eq!(canary.method, "GET");
    assert_eq!(canary.path, "/workspaces/api/v1/kbs");
    assert!(
        canary
            .header("authorization")
            .is_some_and(|a| a.starts_with("Bearer ")),
        "the canary is an authenticated read"
    );
    assert_eq!(canary.header("x-tenant-id"), Some("knoll"));
    assert!(env.grag.runtime().deploy_suspected());

    // The probe loop is done; calls flow again.
    let probes = env.count("health");
    env.grag.workspaces().list_kbs().await.unwrap();
    env.grag.workspaces().get_settings().await.unwrap();
    tokio::time::sleep(PROBE_INTERVAL * 2).await;
    assert_eq!(env.count("health"), probes, "no probes while closed");
}

#[tokio::test]
async fn a_canary_401_reopens_and_the_next_canary_closes() {
    let env = Env::start().await;
    // The deploy's 401 window: health is fine, authenticated reads are not yet.
    env.sim.faults().push(
        Rule::new(Fault::Status {
            status: 401,
            detail: "Invalid API key".into(),
            retry_after: None,
        })
        .on("list_kbs")
        .once(),
    );
    env.open_breaker().await;

    let log = env.sim.log();
    assert!(
        log.wait_for(Duration::from_secs(1), |entries| entries
            .iter()
            .any(|e| e.operation == Some("list_kbs") && e.status.is_some()))
            .await,
        "a canary was sent"
    );
    assert!(
        env.wait_for_state(CircuitState::Open, Duration::from_millis(80))
            .await,
        "the 401 canary reopens (state {:?})",
        env.state()
    );
    assert!(!env.grag.runtime().deploy_suspected(), "not closed");
    let before = env.count("get_settings");
    let e = env.grag.workspaces().get_settings().await.unwrap_err();
    assert_circuit_open(&e);
    assert_eq!(env.count("get_settings"), before, "rejected: nothing sent");

    assert!(
        env.wait_for_state(CircuitState::Closed, Duration::from_secs(1))
            .await,
        "the next canary closes (state {:?})",
        env.state()
    );
    let sequence: Vec<(&str, Option<u16>)> = log
        .entries()
        .iter()
        .filter(|e| matches!(e.operation, Some("health" | "list_kbs")))
        .map(|e| (e.operation.unwrap_or_default(), e.status))
        .collect();
    assert_eq!(
        sequence,
        [
            ("health", Some(200)),
            ("health", Some(200)),
            ("list_kbs", Some(401)),
            ("health", Some(200)),
            ("health", Some(200)),
            ("list_kbs", Some(200)),
        ],
        "two healthy probes before each canary; the reopen starts the count again"
    );
    let canaries = log.of("list_kbs");
    let probes = log.of("health");
    assert!(
        probes[2].arrived.duration_since(canaries[0].arrived) >= PROBE_INTERVAL,
        "after the reopen the next probe waits an interval"
    );
}

// ---- after a close -----------------------------------------------------------

#[tokio::test]
async fn deploy_suspected_for_the_scaled_120_s_after_a_close_then_not() {
    let env = Env::start().await;
    assert!(!env.grag.runtime().deploy_suspected());
    assert_eq!(env.feature("chat"), ("available", None));
    env.open_breaker().await;
    assert!(
        env.wait_for_state(CircuitState::Closed, Duration::from_secs(1))
            .await
    );
    let observed = Instant::now();
    // The close happened after the canary arrived and before it was observed.
    let canary = env.sim.log().of("list_kbs")[0].arrived;

    assert!(env.grag.runtime().deploy_suspected());
    assert_eq!(env.feature("chat"), ("warming_up", Some(WARMING_UP)));

    tokio::time::sleep_until(canary + DEPLOY_SUSPECTED - Duration::from_millis(200)).await;
    assert!(
        env.grag.runtime().deploy_suspected(),
        "still deploy-suspected 200 ms before the end of the 1.2 s window"
    );
    tokio::time::sleep_until(observed + DEPLOY_SUSPECTED + Duration::from_millis(50)).await;
    assert!(
        !env.grag.runtime().deploy_suspected(),
        "the window ends after 120 s (scaled)"
    );
    assert_eq!(env.feature("chat"), ("available", None));
}

#[tokio::test]
async fn deploy_suspected_gives_search_its_longer_attempt_timeout() {
    let env = Env::start().await;
    let kb = kb("kb-methodik");
    env.grag
        .workspaces()
        .create_kb(&CreateKb {
            kb_id: kb.clone(),
            name: "Methodik".into(),
            description: None,
        })
        .await
        .unwrap();
    let search = SearchRequest {
        query_text: "Standsicherheit".into(),
        top_k: 1,
    };
    let slow = || Rule::new(Fault::delay(Duration::from_millis(420))).on("search_rerank");

    // Outside the window: 30 s (300 ms scaled) ends the first attempt.
    env.sim.faults().push(slow().once());
    env.grag
        .ai_gateway()
        .search_rerank(&kb, &search)
        .await
        .unwrap();
    assert_eq!(env.count("search_rerank"), 2, "the slow attempt timed out");

    // Inside: 60 s (600 ms scaled) lets the same slow answer through.
    env.enter_deploy_window().await;
    env.sim.faults().push(slow().once());
    env.grag
        .ai_gateway()
        .search_rerank(&kb, &search)
        .await
        .unwrap();
    assert_eq!(
        env.count("search_rerank"),
        3,
        "one attempt: the deploy-suspected budget held"
    );
}

#[tokio::test]
async fn a_close_forgets_remembered_dark_answers() {
    let env = Env::start().await;
    let kb = kb("kb-methodik");
    env.grag
        .workspaces()
        .create_kb(&CreateKb {
            kb_id: kb.clone(),
            name: "Methodik".into(),
            description: None,
        })
        .await
        .unwrap();
    let search = SearchRequest {
        query_text: "Standsicherheit".into(),
        top_k: 1,
    };
    let dark = env.sim.faults().dark("search_rerank");
    let e = env
        .grag
        .ai_gateway()
        .search_rerank(&kb, &search)
        .await
        .unwrap_err();
    assert_eq!(e.row(), "T13", "{e}");
    let e = env
        .grag
        .ai_gateway()
        .search_rerank(&kb, &search)
        .await
        .unwrap_err();
    assert_eq!(e.row(), "T13", "{e}");
    assert_eq!(env.count("search_rerank"), 1, "remembered");

    // A deploy: the flag may have flipped.
    env.sim.faults().remove(dark);
    env.enter_deploy_window().await;
    assert_eq!(env.feature("search"), ("warming_up", Some(WARMING_UP)));
    env.grag
        .ai_gateway()
        .search_rerank(&kb, &search)
        .await
        .unwrap();
    assert_eq!(env.count("search_rerank"), 2, "asked again after the close");
}

#[tokio::test]
async fn every_close_fires_the_warm_up_pair_once() {
    let env = Env::with_warm_up().await;
    for close in 1..=2 {
        env.open_breaker().await;
        assert!(
            env.wait_for_state(CircuitState::Closed, Duration::from_secs(1))
                .await
        );
        let log = env.sim.log();
        assert!(
            log.wait_for(Duration::from_secs(1), |entries| {
                let n = |op| entries.iter().filter(|e| e.operation == Some(op)).count();
                n("search_rerank") >= close && n("score") >= close
            })
            .await,
            "the warm-up pair (search/rerank, groundedness) after close {close}"
        );
        tokio::time::sleep(PROBE_INTERVAL).await;
        assert_eq!(env.count("search_rerank"), close, "once per close");
        assert_eq!(env.count("score"), close, "once per close");
    }
    let search = &env.sim.log().of("search_rerank")[0];
    assert_eq!(
        search.path,
        "/ai-gateway/api/v1/retrieval/collections/kb-methodik/search/rerank"
    );
    assert_eq!(search.header("x-tenant-id"), Some("knoll"));
}

// ---- the open alert ----------------------------------------------------------

#[tokio::test]
async fn the_open_alert_fires_after_the_scaled_5_min_and_not_before() {
    // 1/1000: alert after 300 ms open, probes every 5 ms.
    let env = Env::with(sim_config(), fast_policy()).await;
    env.health_down();
    env.open_breaker().await;
    let observed = Instant::now();
    let opened_after = last_arrival(&env);

    tokio::time::sleep_until(observed + Duration::from_millis(200)).await;
    assert!(
        !env.alert_names().contains(&"breaker_open_long"),
        "not before 5 min (scaled): {:?}",
        env.alert_names()
    );
    assert!(
        wait_until(Duration::from_secs(2), || env
            .alert_names()
            .contains(&"breaker_open_long"))
        .await,
        "the alert fires once the breaker is open past 5 min (scaled)"
    );
    let fired = Instant::now();
    assert!(
        fired.duration_since(opened_after) >= Duration::from_millis(300),
        "{:?} after the open",
        fired.duration_since(opened_after)
    );
    assert!(
        fired.duration_since(opened_after) < Duration::from_millis(800),
        "{:?} after the open",
        fired.duration_since(opened_after)
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let count = env
        .alert_names()
        .iter()
        .filter(|n| **n == "breaker_open_long")
        .count();
    assert_eq!(count, 1, "once per open period");
    assert_eq!(env.state(), CircuitState::Open);
}

// ---- a whole deploy ----------------------------------------------------------

#[tokio::test]
async fn a_full_deploy_churn_is_survived() {
    let env = Env::start().await;
    env.grag.workspaces().list_kbs().await.unwrap();
    // The deploy's phases are steps of this test, not windows of the clock:
    // refused until the first step, flaky until the second.
    env.sim.faults().deploy_churn_stepped(None).await;

    // Refused connections on three distinct endpoints open the breaker.
    let e = env
        .grag
        .workspaces()
        .list_documents(&kb("kb-1"))
        .await
        .unwrap_err();
    assert_eq!(e.row(), "T1", "{e}");
    let e = env.grag.workspaces().get_settings().await.unwrap_err();
    assert_eq!(e.row(), "T1", "{e}");
    let e = env
        .grag
        .ledger()
        .spend(SpendGrouping::Service)
        .await
        .unwrap_err();
    assert!(matches!(e.row(), "T1" | "T21"), "{e}");
    assert_eq!(env.state(), CircuitState::Open, "opened during refused");

    // Once the listener is back (flaky phase), calls still fail fast and
    // send nothing while probes and canaries work the breaker.
    let listener_back = Instant::now();
    assert_eq!(env.sim.faults().churn_step().await, Some(ChurnPhase::Flaky));
    let log = env.sim.log();
    assert!(
        log.wait_for(Duration::from_secs(10), |entries| entries
            .iter()
            .any(|e| e.operation == Some("health")))
            .await,
        "probes reach the platform after the refused phase"
    );
    let first_probe = log.of("health")[0].arrived;
    assert!(
        first_probe >= listener_back,
        "no probe got through while refused"
    );
    let before = env.count("get_settings");
    let e = env.grag.workspaces().get_settings().await.unwrap_err();
    assert_circuit_open(&e);
    assert_eq!(env.count("get_settings"), before, "failed fast");

    // Flaky until a canary has met it (and reopened the breaker), then healthy.
    assert!(
        log.wait_for(Duration::from_secs(10), |entries| entries
            .iter()
            .any(
                |e| e.operation == Some("list_kbs") && e.has_fault("deploy_churn")
            ))
        .await,
        "a canary hits the flaky phase"
    );
    assert_eq!(env.sim.faults().churn_step().await, None);
    assert!(
        env.wait_for_state(CircuitState::Closed, Duration::from_secs(10))
            .await,
        "probes and the canary close the breaker after the deploy (state {:?})",
        env.state()
    );
    let canaries = log.of("list_kbs");
    // The first list_kbs is the warm-up call before the churn.
    let (closing, failed) = canaries[1..].split_last().expect("a canary closed it");
    assert!(
        !failed.is_empty(),
        "a canary hit the flaky phase and reopened"
    );
    for canary in failed {
        assert!(
            matches!(canary.status, Some(401 | 404 | 422)),
            "flaky canaries reopen: {canary:?}"
        );
    }
    assert_eq!(closing.status, Some(200));
    assert!(
        !closing.has_fault("deploy_churn"),
        "the closing canary was answered after the deploy: {closing:?}"
    );

    assert!(
        env.grag.runtime().deploy_suspected(),
        "deploy-suspected follows"
    );
    assert_eq!(env.feature("chat"), ("warming_up", Some(WARMING_UP)));
    env.grag.workspaces().list_kbs().await.unwrap();
    env.grag.workspaces().get_settings().await.unwrap();
    env.grag
        .ledger()
        .spend(SpendGrouping::Service)
        .await
        .unwrap();

    let metrics = series(&env.grag.runtime().metrics_text());
    assert_eq!(metrics.get("grag_client_circuit_state"), Some(&0.0));
    assert!(
        metrics
            .keys()
            .any(|k| k.starts_with("grag_client_requests_total{")
                && k.contains(r#"error_class="connection""#)),
        "{metrics:#?}"
    );
}

// ---- generations -------------------------------------------------------------

#[tokio::test]
async fn an_attempt_started_before_a_state_change_does_not_count_after_it() {
    let env = Env::start().await;
    let faults = env.sim.faults();
    // A slow attempt, admitted while closed: it times out (a breaker-feeding
    // T1) only after the breaker has opened and closed again.
    faults.push(
        Rule::new(Fault::delay(Duration::from_secs(2)))
            .on("get_settings")
            .once(),
    );
    let grag = env.grag.clone();
    let slow = tokio::spawn(async move { grag.workspaces().get_settings().await.map(drop) });
    assert!(
        env.sim
            .log()
            .wait_for(Duration::from_secs(1), |e| e
                .iter()
                .any(|e| e.operation == Some("get_settings")))
            .await
    );

    let rules: Vec<u64> = ["list_documents", "totals", "spend"]
        .into_iter()
        .map(|op| faults.push(Rule::new(Fault::BadGateway).on(op)))
        .collect();
    let kb1 = kb("kb-1");
    let pid = pipeline();
    let ledger = env.grag.ledger();
    let workspaces = env.grag.workspaces();
    let _ = tokio::join!(
        workspaces.list_documents(&kb1),
        ledger.totals(&pid),
        ledger.spend(SpendGrouping::Service),
    );
    for rule in rules {
        faults.remove(rule);
    }
    assert_eq!(env.state(), CircuitState::Open);
    assert!(
        env.wait_for_state(CircuitState::Closed, Duration::from_secs(1))
            .await
    );
    slow.await
        .expect("the slow call ran")
        .expect("its retry, admitted after the close, succeeds");
    assert_eq!(env.count("get_settings"), 2, "timed out once, then retried");

    // Within 300 ms of that stale timeout, two more distinct endpoints fail.
    // Counted with the stale one they would be three and open the breaker.
    for op in ["totals", "spend"] {
        faults.push(Rule::new(Fault::BadGateway).on(op));
    }
    env.grag.ledger().totals(&pipeline()).await.unwrap_err();
    env.grag
        .ledger()
        .spend(SpendGrouping::Service)
        .await
        .unwrap_err();
    assert_eq!(
        env.state(),
        CircuitState::Closed,
        "the stale attempt's failure was ignored"
    );
    // The two do count: a third distinct endpoint opens it.
    faults.push(Rule::new(Fault::BadGateway).on("list_documents"));
    env.grag
        .workspaces()
        .list_documents(&kb("kb-1"))
        .await
        .unwrap_err();
    assert_eq!(env.state(), CircuitState::Open);
}

// ---- metrics -----------------------------------------------------------------

#[tokio::test]
async fn the_metrics_show_the_circuit_state_and_calls_by_error_class() {
    let env = Env::start().await;
    env.grag.workspaces().list_kbs().await.unwrap();
    let metrics = series(&env.grag.runtime().metrics_text());
    assert_eq!(metrics.get("grag_client_circuit_state"), Some(&0.0));
    assert_eq!(
        metrics.get(
            r#"grag_client_requests_total{service="workspaces",error_class="ok",retried="false"}"#
        ),
        Some(&1.0),
        "{metrics:#?}"
    );

    let health = env.health_down();
    env.sim
        .faults()
        .push(Rule::new(Fault::BadGateway).on("list_kbs").times(3));
    env.grag.workspaces().list_kbs().await.unwrap_err();
    env.open_breaker().await;
    env.grag.workspaces().list_kbs().await.unwrap_err();

    let text = env.grag.runtime().metrics_text();
    let metrics = series(&text);
    assert_eq!(
        metrics.get("grag_client_circuit_state"),
        Some(&2.0),
        "{text}"
    );
    assert!(
        metrics
            .get(r#"grag_client_requests_total{service="workspaces",error_class="bad_gateway",retried="true"}"#)
            .is_some_and(|v| *v >= 1.0),
        "{text}"
    );
    assert!(
        metrics
            .get(r#"grag_client_requests_total{service="workspaces",error_class="circuit_open",retried="false"}"#)
            .is_some_and(|v| *v >= 1.0),
        "{text}"
    );
    assert!(
        text.contains("grag_client_circuit_open_seconds_total"),
        "{text}"
    );
    assert!(
        text.contains("grag_client_request_duration_seconds"),
        "{text}"
    );

    env.sim.faults().remove(health);
    assert!(
        env.wait_for_state(CircuitState::Closed, Duration::from_secs(1))
            .await
    );
    let metrics = series(&env.grag.runtime().metrics_text());
    assert_eq!(metrics.get("grag_client_circuit_state"), Some(&0.0));
    assert!(
        metrics
            .get("grag_client_circuit_open_seconds_total")
            .is_some_and(|v| *v > 0.0),
        "time spent open is counted: {metrics:#?}"
    );
}

// Keep the scaled(100) policy the default of this binary.
#[test]
fn the_tests_run_the_spec_policy_compressed_a_hundredfold() {
    let p = policy();
    assert_eq!(p.breaker.probe_interval, PROBE_INTERVAL);
    assert_eq!(p.breaker.deploy_suspected, DEPLOY_SUSPECTED);
    assert_eq!(p.breaker.threshold, 3);
    assert!(p.breaker.distinct_endpoints);
    assert_eq!(
        fast_policy().breaker.alert_after,
        Duration::from_millis(300)
    );
}
