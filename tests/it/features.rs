//! Feature states for the UI (policy §9), read through
//! `grag.runtime().feature_state(..)` against the simulator: available by
//! default; updating while the breaker is open; warming up while the origin is
//! deploy-suspected after the close; dark after a stable dark 503; paused after
//! a 402; degraded while a fail-open stage is down. And the optional warm-up
//! pair of §7, fired exactly once after a close, only when asked for.
//!
//! The spec's policy runs at 1/50: probes every 100 ms, deploy-suspected 2.4 s.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use grag_client::types::{CreateKb, SearchRequest};
use grag_client::{Config, Grag, KbId, PipelineId};
use grag_sim::embedded;
use grag_sim::{Fault, Rule, Sim};
use sdk_runtime::CircuitState;
use sdk_runtime::alerts::CollectAlerts;
use sdk_runtime::{FeatureStatus, OutcomeKind, Policy};
use tokio::time::Instant;

const DIVISOR: u32 = 50;
static SCALED: LazyLock<&'static Policy> = LazyLock::new(|| embedded::policy(DIVISOR));

const UPDATING: &str = "Wird gerade aktualisiert";
const WARMING_UP: &str =
    "Die KI-Dienste starten gerade — die erste Antwort kann bis zu zwei Minuten dauern.";
const PAUSED: &str = "KI pausiert";
const DEGRADED: &str = "Eingeschränkt verfügbar — ein Verarbeitungsschritt ist ausgefallen, das Ergebnis kann unvollständig sein.";

const SEARCH_PATH: &str = "/ai-gateway/api/v1/retrieval/collections/kb-methodik/search/rerank";
const SCORE_PATH: &str = "/groundedness/api/v1/score";

async fn sim() -> Sim {
    embedded::start(embedded::sim_config(DIVISOR)).await
}

fn config(sim: &Sim) -> Config {
    embedded::config(sim, embedded::TENANT)
}

fn client(config: Config) -> Grag {
    embedded::client_with(config, &SCALED)
}

/// Every feature the spec names.
fn features() -> Vec<&'static str> {
    SCALED.features.iter().map(|f| f.name).collect()
}

fn state(grag: &Grag, feature: &str) -> FeatureStatus {
    grag.runtime()
        .feature_state(feature)
        .unwrap_or_else(|| panic!("the spec has no feature {feature}"))
}

fn available() -> FeatureStatus {
    FeatureStatus {
        state: "available",
        copy: None,
        stage: None,
    }
}

fn shown(state: &'static str, copy: Option<&'static str>) -> FeatureStatus {
    FeatureStatus {
        state,
        copy,
        stage: None,
    }
}

fn assert_all(grag: &Grag, want: &FeatureStatus) {
    for feature in features() {
        assert_eq!(&state(grag, feature), want, "feature {feature}");
    }
}

fn kb() -> KbId {
    KbId::parse("kb-methodik").expect("a valid KB id")
}

async fn create_kb(grag: &Grag) {
    grag.workspaces()
        .create_kb(&CreateKb::new(kb(), "Methodik"))
        .await
        .expect("create_kb");
}

async fn search(grag: &Grag) -> Result<(), grag_client::Error> {
    let query = SearchRequest::new("Prüffristen", 1);
    grag.ai_gateway(&grag_sim::embedded::pipeline())
        .search_rerank(&kb(), &query)
        .await
        .map(drop)
}

/// Polls `pred` every 2 ms for at most `timeout`.
async fn eventually(timeout: Duration, mut pred: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if pred() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Opens the breaker with 502s from three distinct endpoints. `/health`
/// answers 502 as well, so the probes keep it open until the faults are cleared.
async fn open_breaker(sim: &Sim, grag: &Grag) {
    for route in ["get_settings", "list_documents", "totals", "health"] {
        sim.faults().push(Rule::new(Fault::BadGateway).on(route));
    }
    let runtime = grag.runtime();
    let first = grag.workspaces().get_settings().await.unwrap_err();
    assert_eq!(first.class_name(), "bad_gateway", "{first}");
    let second = grag.workspaces().list_documents(&kb()).await.unwrap_err();
    assert_eq!(second.class_name(), "bad_gateway", "{second}");
    assert_eq!(
        runtime.circuit_state(),
        CircuitState::Closed,
        "two endpoints must not open it"
    );
    let pipeline = PipelineId::parse("run-1").unwrap();
    let third = grag.ledger().totals(&pipeline).await.unwrap_err();
    assert!(
        matches!(third.class_name(), "bad_gateway" | "circuit_open"),
        "{third}"
    );
    assert_eq!(runtime.circuit_state(), CircuitState::Open);
}

/// Lets the platform heal and waits for the probes and the canary to close.
async fn heal(sim: &Sim, grag: &Grag) {
    sim.faults().clear();
    let closed = eventually(Duration::from_secs(5), || {
        grag.runtime().circuit_state() == CircuitState::Closed
    })
    .await;
    assert!(closed, "the breaker did not close after the faults cleared");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_feature_is_available_by_default() {
    let sim = sim().await;
    let grag = client(config(&sim));
    assert!(features().len() >= 6, "{:?}", features());
    assert_all(&grag, &available());
    grag.workspaces().list_kbs().await.expect("list_kbs");
    assert_all(&grag, &available());
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_feature_has_no_state() {
    let sim = sim().await;
    let grag = client(config(&sim));
    assert_eq!(grag.runtime().feature_state("teleport"), None);
    assert_eq!(grag.runtime().feature_state(""), None);
    // Marking a stage of an unknown feature invents no feature.
    grag.runtime().stage_failed("teleport", "beam");
    assert_eq!(grag.runtime().feature_state("teleport"), None);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updating_while_the_breaker_is_open_then_warming_up_after_the_close() {
    let sim = sim().await;
    let grag = client(config(&sim));
    open_breaker(&sim, &grag).await;
    assert_all(&grag, &shown("updating", Some(UPDATING)));

    // Interactive calls fail fast with the same German text, without sending.
    let canaries = sim.log().count("list_kbs");
    let error = grag.workspaces().list_kbs().await.unwrap_err();
    assert_eq!(error.kind(), OutcomeKind::CircuitOpen, "{error}");
    assert_eq!(error.class_name(), "circuit_open");
    assert_eq!(error.row(), "T21");
    assert_eq!(error.message(), Some(UPDATING));
    assert_eq!(error.attempts(), 0);
    assert_eq!(sim.log().count("list_kbs"), canaries);
    assert_all(&grag, &shown("updating", Some(UPDATING)));

    heal(&sim, &grag).await;
    assert!(grag.runtime().deploy_suspected());
    assert_all(&grag, &shown("warming_up", Some(WARMING_UP)));

    // The deploy-suspected window (120 s, here 2.4 s) ends: available again.
    let window = SCALED.breaker.as_ref().unwrap().deploy_suspected;
    let calm = eventually(window * 2, || !grag.runtime().deploy_suspected()).await;
    assert!(calm, "still deploy-suspected after {:?}", window * 2);
    assert_all(&grag, &available());
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dark_after_a_stable_dark_503_and_the_next_call_fails_fast() {
    let sim = sim().await;
    let grag = client(config(&sim));
    sim.faults().dark("search_rerank");

    let error = search(&grag).await.unwrap_err();
    assert_eq!(error.class_name(), "feature_dark", "{error}");
    assert_eq!(error.row(), "T13");
    assert_eq!(error.status(), Some(503));
    assert_eq!(
        sim.log().count("search_rerank"),
        1,
        "a dark answer is final"
    );
    assert_eq!(state(&grag, "search"), shown("dark", None));
    // Only the feature behind the dark route is hidden.
    for feature in features().into_iter().filter(|f| *f != "search") {
        assert_eq!(state(&grag, feature), available(), "feature {feature}");
    }

    // The next call fails fast from the cache: nothing reaches the platform.
    let again = search(&grag).await.unwrap_err();
    assert_eq!(again.class_name(), "feature_dark", "{again}");
    assert_eq!(again.row(), "T13");
    assert_eq!(
        sim.log().count("search_rerank"),
        1,
        "the cached dark answer"
    );
    assert_eq!(state(&grag, "search"), shown("dark", None));
    assert_eq!(grag.runtime().circuit_state(), CircuitState::Closed);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_after_a_402_until_that_route_succeeds_again() {
    let sim = sim().await;
    let alerts = Arc::new(CollectAlerts::default());
    let grag = client(config(&sim).alerts(alerts.clone()));
    create_kb(&grag).await;
    sim.faults()
        .push(Rule::new(Fault::Budget).on("search_rerank").once());

    let error = search(&grag).await.unwrap_err();
    assert_eq!(error.class_name(), "budget_exhausted", "{error}");
    assert_eq!(error.row(), "T5");
    assert_eq!(error.status(), Some(402));
    assert_eq!(error.message(), Some(PAUSED));
    assert_eq!(
        sim.log().count("search_rerank"),
        1,
        "a 402 is never retried"
    );
    assert_eq!(state(&grag, "search"), shown("paused", Some(PAUSED)));
    assert_eq!(alerts.names(), ["budget_exhausted"]);

    // The budget was raised: the next search gets through and clears the state.
    search(&grag)
        .await
        .expect("search after the budget was raised");
    assert_eq!(sim.log().count("search_rerank"), 2);
    assert_eq!(state(&grag, "search"), available());
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn degraded_with_the_failed_stage_until_it_recovers() {
    let sim = sim().await;
    let grag = client(config(&sim));
    let runtime = grag.runtime();
    runtime.stage_failed("chat", "groundedness");
    assert_eq!(
        state(&grag, "chat"),
        FeatureStatus {
            state: "degraded",
            copy: Some(DEGRADED),
            stage: Some("groundedness".into()),
        }
    );
    for feature in features().into_iter().filter(|f| *f != "chat") {
        assert_eq!(state(&grag, feature), available(), "feature {feature}");
    }
    // The latest failed stage is the one shown.
    runtime.stage_failed("chat", "rerank");
    assert_eq!(state(&grag, "chat").stage.as_deref(), Some("rerank"));

    runtime.stage_recovered("chat");
    assert_eq!(state(&grag, "chat"), available());
    sim.stop().await;
}

/// Requests of the warm-up pair: (search on kb-methodik, groundedness score).
fn warm_up_requests(sim: &Sim) -> (usize, usize) {
    let entries = sim.log().entries();
    let count = |path: &str| {
        entries
            .iter()
            .filter(|e| e.method == "POST" && e.path == path)
            .count()
    };
    (count(SEARCH_PATH), count(SCORE_PATH))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_up_pair_fires_exactly_once_after_a_close() {
    let sim = sim().await;
    let grag = client(config(&sim).warm_up(true));
    create_kb(&grag).await;
    open_breaker(&sim, &grag).await;
    assert_eq!(
        warm_up_requests(&sim),
        (0, 0),
        "nothing warms up while open"
    );

    heal(&sim, &grag).await;
    let fired = sim
        .log()
        .wait_for(Duration::from_secs(2), |entries| {
            let of = |path: &str| entries.iter().any(|e| e.path == path);
            of(SEARCH_PATH) && of(SCORE_PATH)
        })
        .await;
    assert!(fired, "the warm-up pair did not fire after the close");
    // Give a duplicate every chance to show up.
    tokio::time::sleep(SCALED.breaker.as_ref().unwrap().probe_interval * 3).await;
    assert_eq!(warm_up_requests(&sim), (1, 1), "exactly one of each");
    let entries = sim.log().entries();
    for path in [SEARCH_PATH, SCORE_PATH] {
        let entry = entries.iter().find(|e| e.path == path).unwrap();
        assert_eq!(entry.status, Some(200), "{path}");
        assert_eq!(entry.header("x-tenant-id"), Some("knoll"), "{path}");
    }
    // Every ai-gateway call carries X-Pipeline-Id: the warm-up rerank its
    // own, documented one (POLICY.md), so its cost is booked to no run.
    let own = grag_client::policy::POLICY
        .warm_up
        .iter()
        .find(|w| w.endpoint.operation == "search_rerank")
        .and_then(|w| w.pipeline_id);
    assert_eq!(
        own,
        Some("breaker-warm-up"),
        "the spec's warm-up pipeline id"
    );
    let header = |path: &str| {
        let entry = entries.iter().find(|e| e.path == path).unwrap();
        entry.header("x-pipeline-id").map(str::to_owned)
    };
    assert_eq!(header(SEARCH_PATH).as_deref(), own);
    assert_eq!(
        header(SCORE_PATH),
        None,
        "groundedness carries no pipeline id"
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_warm_up_pair_without_opting_in() {
    let sim = sim().await;
    let grag = client(config(&sim));
    create_kb(&grag).await;
    open_breaker(&sim, &grag).await;
    heal(&sim, &grag).await;
    // As long as the opted-in test above gives the pair to show up, and more.
    tokio::time::sleep(SCALED.breaker.as_ref().unwrap().probe_interval * 5).await;
    assert_eq!(warm_up_requests(&sim), (0, 0));
    sim.stop().await;
}

/// §7.3: the pair runs with `-m 150`, the rerank included: a rerank slower
/// than search's deploy-suspected budget (60 s) but within the llm class
/// (150 s) warms up instead of timing out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_warm_up_rerank_runs_with_the_llm_budget() {
    let search = &SCALED.timeouts[grag_client::policy::timeout::SEARCH];
    let llm = &SCALED.timeouts[grag_client::policy::timeout::LLM];
    let slow = (search.budget(true) + llm.per_attempt) / 2;
    assert!(search.budget(true) < slow && slow < llm.per_attempt);
    let sim = sim().await;
    let grag = client(config(&sim).warm_up(true));
    create_kb(&grag).await;
    let delay = sim
        .faults()
        .push(Rule::new(Fault::delay(slow)).on("search_rerank"));
    open_breaker(&sim, &grag).await;
    // Heal everything but the slow rerank.
    for active in sim.faults().rules() {
        if active.id != delay {
            sim.faults().remove(active.id);
        }
    }
    let closed = eventually(Duration::from_secs(5), || {
        grag.runtime().circuit_state() == CircuitState::Closed
    })
    .await;
    assert!(closed, "the breaker did not close after the faults cleared");
    let outcome = |text: &str| {
        text.lines()
            .find(|l| l.starts_with(r#"grag_client_requests_total{service="ai-gateway""#))
            .map(str::to_owned)
    };
    // A hang guard only: the warm-up ends once, either way.
    let mut line = None;
    for _ in 0..200 {
        line = outcome(&grag.runtime().metrics_text());
        if line.is_some() {
            break;
        }
        tokio::time::sleep(SCALED.breaker.as_ref().unwrap().probe_interval).await;
    }
    let line = line.expect("the warm-up rerank never ended");
    assert!(
        line.contains(r#"error_class="ok""#) && line.contains(r#"retried="false""#),
        "{line}"
    );
    sim.stop().await;
}
