//! The Core client against a scripted loopback Core: each rule of the Core
//! reliability policy (Transport, Error Surface, Idempotency), with the
//! linear backoff's exact delays under paused tokio time.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use core_client::types::{AnalyseRequest, Decision, Discussion};
use core_client::{Config, Core, DocumentId, FindingId, SessionId, TenantId};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::time::Instant;

mod taxonomy;

/// What the scripted Core does with the next request.
#[derive(Debug, Clone)]
enum Step {
    /// Answers this status with `{"detail": ...}`.
    Status(u16, &'static str),
    /// Answers 200 with this body, verbatim.
    Raw(&'static str),
    /// Answers this status with this JSON body, verbatim.
    Body(u16, &'static str),
    /// Takes the request (it counts as applied), then answers only after this long.
    Hang(Duration),
    /// Answers 302 to this path on the same server.
    Redirect(&'static str),
    /// Answers 200 with a JSON string of this many bytes in all.
    Sized(usize),
}

#[derive(Default)]
struct Shared {
    /// Path and arrival of every request.
    seen: Mutex<Vec<(String, Instant)>>,
    script: Mutex<VecDeque<Step>>,
}

struct CoreSim {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl CoreSim {
    async fn start(script: impl IntoIterator<Item = Step>) -> CoreSim {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        shared.script.lock().unwrap().extend(script);
        let app = Router::new().fallback(answer).with_state(shared.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        CoreSim { addr, shared }
    }

    fn client(&self) -> Core {
        self.client_with(|c| c)
    }

    fn client_with(&self, adjust: impl FnOnce(Config) -> Config) -> Core {
        Core::new(adjust(config(&self.url()))).expect("a Core client")
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn paths(&self) -> Vec<String> {
        self.shared
            .seen
            .lock()
            .unwrap()
            .iter()
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Waits between consecutive requests.
    fn gaps(&self) -> Vec<Duration> {
        let seen = self.shared.seen.lock().unwrap();
        seen.windows(2).map(|w| w[1].1 - w[0].1).collect()
    }
}

/// The client configuration the tests use, against `url`.
fn config(url: &str) -> Config {
    Config::new(url, "core-key", TenantId::parse("tenant-1").unwrap())
}

async fn answer(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let path = request.uri().path().to_owned();
    shared
        .seen
        .lock()
        .unwrap()
        .push((path.clone(), Instant::now()));
    let step = shared.script.lock().unwrap().pop_front();
    let json = |status: u16, body: String| {
        Response::builder()
            .status(StatusCode::from_u16(status).unwrap())
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap()
    };
    match step {
        Some(Step::Status(status, detail)) => json(status, json!({ "detail": detail }).to_string()),
        Some(Step::Raw(body)) => json(200, body.to_owned()),
        Some(Step::Body(status, body)) => json(status, body.to_owned()),
        Some(Step::Hang(after)) => {
            tokio::time::sleep(after).await;
            json(200, ok_body(&path))
        }
        Some(Step::Redirect(to)) => Response::builder()
            .status(StatusCode::FOUND)
            .header("location", to)
            .body(Body::empty())
            .unwrap(),
        Some(Step::Sized(bytes)) => json(200, format!("\"{}\"", "x".repeat(bytes - 2))),
        None => json(200, ok_body(&path)),
    }
}

/// A well-formed answer of the route at `path`.
fn ok_body(path: &str) -> String {
    if path.ends_with("/analyse") {
        json!({ "document_id": "doc-1", "summary": "Tragwerk geprüft", "findings": [] })
    } else {
        json!({ "session_id": "s-1", "status": "open", "step": 2 })
    }
    .to_string()
}

fn analyse() -> AnalyseRequest {
    AnalyseRequest::new(DocumentId::parse("doc-1").unwrap(), "Prüfbericht")
}

fn decision() -> Decision {
    Decision::new(FindingId::parse("f-1").unwrap())
}

fn discussion() -> Discussion {
    Discussion::new("Bitte Lastannahme prüfen")
}

fn session() -> SessionId {
    SessionId::parse("s-1").unwrap()
}

const ANALYSE: &str = "/core/v1/analyse";
const ACCEPT: &str = "/platform/v1/sessions/s-1/accept";

#[tokio::test(start_paused = true)]
async fn a_5xx_is_retried_after_0_25_s_and_the_spent_attempts_are_a_typed_error() {
    let core = CoreSim::start([Step::Status(503, "busy"), Step::Status(500, "boom")]).await;
    let error = core
        .client()
        .engine()
        .analyse(&analyse())
        .await
        .unwrap_err();
    assert_eq!(
        (error.row(), error.class_name()),
        ("C2", "server_error"),
        "{error}"
    );
    assert_eq!(error.status(), Some(500), "the last cause");
    assert_eq!(error.detail(), Some("boom"));
    assert_eq!(error.attempts(), 2, "retry_attempts defaults to 2");
    assert_eq!(core.paths(), [ANALYSE, ANALYSE]);
    assert_eq!(core.gaps(), [Duration::from_millis(250)], "0.25 s × 1");
}

#[tokio::test(start_paused = true)]
async fn a_transport_failure_is_retried_and_then_succeeds() {
    // The first attempt gets no answer within its 30 s: a timeout, retried.
    let core = CoreSim::start([Step::Hang(Duration::from_secs(60))]).await;
    let analysis = core.client().engine().analyse(&analyse()).await.unwrap();
    assert_eq!(analysis.summary, "Tragwerk geprüft");
    assert_eq!(
        core.gaps(),
        [Duration::from_secs(30) + Duration::from_millis(250)],
        "the attempt timeout, then 0.25 s"
    );
}

#[tokio::test(start_paused = true)]
async fn a_4xx_is_surfaced_at_once_with_its_status_and_detail() {
    let core = CoreSim::start([Step::Status(422, "text must not be empty")]).await;
    let error = core
        .client()
        .engine()
        .analyse(&analyse())
        .await
        .unwrap_err();
    assert_eq!(
        (error.row(), error.class_name()),
        ("C3", "http_error"),
        "{error}"
    );
    assert_eq!(error.status(), Some(422));
    assert_eq!(error.detail(), Some("text must not be empty"));
    assert_eq!(
        (error.attempts(), core.paths().len()),
        (1, 1),
        "never retried"
    );
}

/// An error's class is read by its own API only (by the route table of the
/// policy that classified it): a Core error converted by hand into GRAG's
/// error type is unclassified there, never the GRAG class its row's index
/// names; converted back, it is Core's class again. A client running a
/// scaled copy of the policy keeps the route table, so its errors read as
/// Core's classes too.
#[tokio::test(start_paused = true)]
async fn an_error_is_read_as_a_class_of_its_own_api_only() {
    let core = CoreSim::start([
        Step::Status(422, "text must not be empty"),
        Step::Status(422, "text must not be empty"),
    ])
    .await;
    let error = core
        .client()
        .engine()
        .analyse(&analyse())
        .await
        .unwrap_err();
    assert_eq!(error.class(), core_client::ErrorClass::HttpError);
    let raw = sdk_runtime::Error::from(error);
    let row = raw.row_index().expect("a row classified it").get();
    let as_grag = grag_client::Error::from(raw);
    assert_eq!(
        as_grag.class(),
        grag_client::ErrorClass::Unclassified,
        "Core's row {row} read as a GRAG class"
    );
    let back = core_client::Error::from(as_grag.into_inner());
    assert_eq!(back.class(), core_client::ErrorClass::HttpError);

    let scaled = core_client::policy::POLICY.scaled(10);
    let client = Core::with_policy(config(&core.url()), scaled).expect("a Core client");
    let error = client.engine().analyse(&analyse()).await.unwrap_err();
    assert_eq!(error.class(), core_client::ErrorClass::HttpError);
}

#[tokio::test(start_paused = true)]
async fn a_2xx_that_is_not_json_is_a_client_error_and_not_retried() {
    let core = CoreSim::start([Step::Raw("<html>proxy error</html>")]).await;
    let error = core
        .client()
        .engine()
        .analyse(&analyse())
        .await
        .unwrap_err();
    assert_eq!(
        (error.row(), error.class_name()),
        ("C5", "invalid_json"),
        "{error}"
    );
    assert_eq!(error.status(), Some(200));
    assert_eq!(
        error.attempts(),
        1,
        "sent once and answered, not \"refused before sending\""
    );
    assert_eq!(core.paths().len(), 1, "never retried");
}

/// A workflow action the Platform applied (200) with a body that is not JSON:
/// the error must not read as "never sent", which would invite a resend.
#[tokio::test(start_paused = true)]
async fn an_applied_workflow_action_with_an_undecodable_body_counts_its_attempt() {
    let core = CoreSim::start([Step::Raw("OK")]).await;
    let error = core
        .client()
        .sessions()
        .reject(&session(), &decision())
        .await
        .unwrap_err();
    assert_eq!(error.class_name(), "invalid_json", "{error}");
    assert_eq!(error.attempts(), 1, "{error}");
    assert!(!error.outcome_unknown(), "answered 200: applied, {error}");
    assert_eq!(core.paths(), ["/platform/v1/sessions/s-1/reject"]);
}

#[tokio::test(start_paused = true)]
async fn a_workflow_action_without_an_answer_is_sent_once_and_says_read_the_session() {
    // The Platform applied the accept, then the answer never came in time.
    let core = CoreSim::start([Step::Hang(Duration::from_secs(60))]).await;
    let client = core.client();
    let error = client
        .sessions()
        .accept(&session(), &decision())
        .await
        .unwrap_err();
    assert_eq!(
        (error.row(), error.class_name()),
        ("C1", "transport"),
        "{error}"
    );
    assert!(error.outcome_unknown(), "{error}");
    assert_eq!(error.attempts(), 1);
    assert_eq!(core.paths(), [ACCEPT], "the server saw exactly one accept");

    // What the docs of `accept` say to do: read the session first.
    let state = client.sessions().get_session(&session()).await.unwrap();
    assert_eq!(state.step, 2);
    assert_eq!(
        core.paths(),
        [ACCEPT, "/platform/v1/sessions/s-1"],
        "still one accept"
    );
}

/// Idempotency: "failures ... before a successful response is observed" are
/// unknown completions. A 5xx is one: the Platform may have applied the step
/// and then failed (a FastAPI handler raising after its write answers 500).
#[tokio::test(start_paused = true)]
async fn a_5xx_answer_to_a_workflow_action_is_an_unknown_outcome_never_re_sent() {
    for (status, detail) in [
        (500, "Internal Server Error"),
        (502, "bad gateway"),
        (503, "database is locked"),
        (504, "gateway timeout"),
    ] {
        let core = CoreSim::start([Step::Status(status, detail)]).await;
        let error = core
            .client()
            .sessions()
            .advance(&session())
            .await
            .unwrap_err();
        assert_eq!(
            (error.class_name(), error.status()),
            ("server_error", Some(status))
        );
        assert!(
            error.outcome_unknown(),
            "{status}: the step may have been applied: {error}"
        );
        let copy = core_client::policy::POLICY
            .taxonomy
            .iter()
            .find(|r| r.row == "C2")
            .and_then(|r| r.unknown_message);
        assert!(
            copy.is_some_and(|c| c.contains("aktuellen Stand")),
            "{copy:?}"
        );
        assert_eq!(
            error.message(),
            copy,
            "{status}: check the state, not „erneut versuchen“"
        );
        assert_eq!(
            core.paths().len(),
            1,
            "{status}: not idempotent: never re-sent"
        );
    }
}

/// The four workflow actions of the Idempotency section, each sent the way a
/// caller sends it; the route's last path segment names the action.
async fn send_action(client: &Core, action: &str) -> core_client::Error {
    let sessions = client.sessions();
    let outcome = match action {
        "accept" => sessions.accept(&session(), &decision()).await,
        "reject" => sessions.reject(&session(), &decision()).await,
        "advance" => sessions.advance(&session()).await,
        "discuss" => sessions.discuss(&session(), &discussion()).await,
        other => panic!("not a workflow action: {other}"),
    };
    outcome.expect_err("the scripted Core fails it")
}

/// Idempotency, Workflow Actions: accept, reject, advance and discuss "are not
/// universally idempotent". Whichever of them meets a failure after it may
/// have reached the Platform (a 5xx, or no answer in time) is sent once and
/// says its outcome is unknown, so the caller reads the session first.
#[tokio::test(start_paused = true)]
async fn every_workflow_action_is_sent_once_and_unknown_after_a_5xx_or_no_answer() {
    let failures = [
        Step::Status(500, "Internal Server Error"),
        Step::Status(503, "database is locked"),
        Step::Hang(Duration::from_secs(60)),
    ];
    for action in ["accept", "reject", "advance", "discuss"] {
        for failure in &failures {
            let core = CoreSim::start([failure.clone()]).await;
            let error = send_action(&core.client(), action).await;
            assert!(
                error.outcome_unknown(),
                "{action} after {failure:?}: it may have been applied: {error}"
            );
            assert_eq!(error.attempts(), 1, "{action} after {failure:?}: {error}");
            assert_eq!(
                core.paths(),
                [format!("/platform/v1/sessions/s-1/{action}")],
                "{action} after {failure:?}: the Platform saw it exactly once"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_4xx_answer_to_a_workflow_action_is_a_known_outcome() {
    let core = CoreSim::start([Step::Status(409, "step already advanced")]).await;
    let error = core
        .client()
        .sessions()
        .advance(&session())
        .await
        .unwrap_err();
    assert_eq!(error.class_name(), "http_error", "{error}");
    assert!(!error.outcome_unknown(), "refused, so not applied: {error}");
    assert_eq!(
        error.message(),
        core_client::policy::POLICY.message("http_error")
    );
    assert_eq!(core.paths().len(), 1);
}

/// Error Surface: `CoreClientHTTPError(status_code, detail)`. A FastAPI
/// `HTTPException(423, detail={"code": ..., "message": ...})` keeps its
/// structure; only what echoes the request (pydantic's `input`, `ctx`) goes.
#[tokio::test(start_paused = true)]
async fn a_structured_error_detail_reaches_the_caller_whole() {
    let core = CoreSim::start([Step::Body(
        423,
        r#"{"detail": {"code": "finding_locked", "message": "Der Befund wird gerade bearbeitet."}}"#,
    )])
    .await;
    let error = core
        .client()
        .sessions()
        .accept(&session(), &decision())
        .await
        .unwrap_err();
    assert_eq!(error.status(), Some(423), "{error}");
    let detail: serde_json::Value = serde_json::from_str(error.detail().unwrap()).unwrap();
    assert_eq!(
        detail,
        json!({"code": "finding_locked", "message": "Der Befund wird gerade bearbeitet."})
    );
}

/// Contract calls are stateless (at-least-once): a 5xx is retried and the
/// outcome question does not arise.
#[tokio::test(start_paused = true)]
async fn a_5xx_answer_to_a_contract_call_is_retried_not_unknown() {
    let core = CoreSim::start([Step::Status(500, "boom"), Step::Status(500, "boom")]).await;
    let error = core
        .client()
        .engine()
        .analyse(&analyse())
        .await
        .unwrap_err();
    assert!(!error.outcome_unknown(), "idempotent: {error}");
    assert_eq!(core.paths().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_workflow_action_that_never_left_is_retried() {
    // Nothing listens: the connection is refused, so the request was not sent.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let client = Core::new(config(&format!("http://127.0.0.1:{port}"))).unwrap();
    let error = client
        .sessions()
        .accept(&session(), &decision())
        .await
        .unwrap_err();
    assert_eq!(error.class_name(), "transport", "{error}");
    assert_eq!(error.attempts(), 2, "refused, so safe to send again");
    assert!(!error.outcome_unknown(), "it never reached a server");
}

#[test]
fn the_core_policy_has_no_breaker_no_streams_and_no_workspace() {
    let policy = &core_client::policy::POLICY;
    assert!(policy.breaker.is_none());
    assert!(policy.streams.is_empty());
    assert_eq!(policy.headers.workspace, None);
    assert_eq!(policy.headers.pipeline, None);
}

#[tokio::test(start_paused = true)]
async fn with_three_attempts_the_waits_are_0_25_s_then_0_5_s() {
    let core = CoreSim::start([
        Step::Status(502, "bad gateway"),
        Step::Status(503, "busy"),
        Step::Status(500, "boom"),
    ])
    .await;
    let client = core.client_with(|c| c.retry_attempts(3));
    let error = client.engine().analyse(&analyse()).await.unwrap_err();
    assert_eq!(error.attempts(), 3, "{error}");
    assert_eq!(
        core.gaps(),
        [Duration::from_millis(250), Duration::from_millis(500)],
        "retry_backoff_seconds × attempt"
    );
}

#[tokio::test(start_paused = true)]
async fn a_zero_backoff_retries_at_once() {
    let core = CoreSim::start([Step::Status(503, "busy")]).await;
    let client = core.client_with(|c| c.retry_backoff(Duration::ZERO));
    client.engine().analyse(&analyse()).await.unwrap();
    assert_eq!(core.gaps(), [Duration::ZERO]);
}

#[test]
fn a_retry_configuration_below_the_minimums_is_refused_when_the_client_is_built() {
    let config = config("http://127.0.0.1:9").retry_attempts(0);
    let error = Core::new(config).err().expect("0 attempts is refused");
    assert_eq!(
        error.to_string(),
        "invalid retry configuration: retry_attempts 0 is below the minimum of 1 (C1)"
    );
}

/// Retry bounds stay low: more attempts than the spec's maximum are refused
/// with the bound in the message, not summed into the deadline (where
/// 100 000 attempts overflowed).
#[test]
fn a_retry_configuration_above_the_maximum_is_refused_when_the_client_is_built() {
    let bounds = core_client::policy::POLICY
        .retries
        .iter()
        .find_map(|r| r.configurable)
        .expect("C1 is configurable");
    let top = config("http://127.0.0.1:9").retry_attempts(bounds.max_attempts);
    assert!(Core::new(top).is_ok(), "the maximum itself is allowed");
    for attempts in [bounds.max_attempts + 1, 100_000, u32::MAX] {
        let config = config("http://127.0.0.1:9").retry_attempts(attempts);
        let error = Core::new(config).err().expect("refused");
        assert_eq!(
            error.to_string(),
            format!(
                "invalid retry configuration: retry_attempts {attempts} is above the maximum of {} \
                 (C1): retry bounds stay low, every attempt may repeat the work",
                bounds.max_attempts
            )
        );
    }
}

#[tokio::test(start_paused = true)]
async fn the_exhaustion_alert_fires_on_an_elevated_rate_not_on_every_call() {
    use sdk_runtime::alerts::CollectAlerts;
    let rate = core_client::policy::POLICY
        .alerts
        .retry_exhausted_rate
        .expect("the Core policy alerts on a rate");
    assert_eq!((rate.at_least, rate.within), (5, Duration::from_secs(300)));
    // Every call fails twice: ten 503s per five calls, and five more after.
    let core = CoreSim::start((0..30).map(|_| Step::Status(503, "busy"))).await;
    let alerts = Arc::new(CollectAlerts::default());
    let sink = alerts.clone();
    let client = core.client_with(move |c| c.alerts(sink));
    for call in 1..=4 {
        client.engine().analyse(&analyse()).await.unwrap_err();
        assert!(alerts.taken().is_empty(), "call {call}: not elevated yet");
    }
    client.engine().analyse(&analyse()).await.unwrap_err();
    let raised = alerts.taken();
    assert_eq!(raised.len(), 1, "{raised:?}");
    assert_eq!(raised[0].name, "retry_exhausted");
    assert!(
        raised[0]
            .detail
            .as_deref()
            .is_some_and(|d| d.starts_with("5 calls exhausted their retries within 300 s")),
        "{raised:?}"
    );
    // Still elevated inside the same window: no second alert.
    for _ in 0..5 {
        client.engine().analyse(&analyse()).await.unwrap_err();
    }
    assert_eq!(alerts.taken().len(), 1, "one alert per window");
}

#[tokio::test(start_paused = true)]
async fn the_core_metrics_carry_the_core_names_and_no_breaker_series() {
    let core = CoreSim::start([]).await;
    let client = core.client();
    client.engine().analyse(&analyse()).await.unwrap();
    let text = client.runtime().metrics_text();
    assert!(
        text.contains(
            r#"core_client_requests_total{service="engine",error_class="ok",retried="false"} 1"#
        ),
        "{text}"
    );
    assert!(!text.contains("grag_client"), "{text}");
    assert!(
        !text.contains("circuit"),
        "no breaker, no breaker metric: {text}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_inferred_deadline_follows_a_configured_retry_attempts() {
    // The Core document sets no deadline; ours (65 s) fits the default two
    // attempts. Configured for three, the third attempt keeps its whole 30 s:
    // two timeouts, then an answer 20 s into the third (at 80.75 s).
    let core = CoreSim::start([
        Step::Hang(Duration::from_secs(60)),
        Step::Hang(Duration::from_secs(60)),
        Step::Hang(Duration::from_secs(20)),
    ])
    .await;
    let client = core.client_with(|c| c.retry_attempts(3));
    let deadline = client.runtime().deadline();
    assert_eq!(
        deadline,
        Duration::from_secs(90) + Duration::from_millis(750),
        "3 × 30 s + 0.25 s + 0.5 s"
    );
    let started = Instant::now();
    let analysis = client.engine().analyse(&analyse()).await.unwrap();
    assert_eq!(analysis.summary, "Tragwerk geprüft");
    assert_eq!(core.paths().len(), 3);
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(80) + Duration::from_millis(750)
    );
    // The default keeps the policy's 65 s; a fourth attempt and a longer step grow it.
    assert_eq!(core.client().runtime().deadline(), Duration::from_secs(65));
    let longer = core.client_with(|c| c.retry_attempts(4).retry_backoff(Duration::from_secs(1)));
    assert_eq!(longer.runtime().deadline(), Duration::from_secs(4 * 30 + 6));
}
