//! One test per taxonomy row of the spec (generated `POLICY.md`, policy §2),
//! end to end against the simulator over loopback with the spec's policy in
//! compressed time. Each test asserts the row and class of the final error,
//! the attempts the simulator saw on the route (the row's retry class), the
//! alerts raised and the German message the spec gives the class.
//!
//! The stream rows T17–T19 are covered with the streams.

use std::time::Duration;

use crate::kit::resilience::{
    Env, WallClock, early_in_a_second, policy, ready_now, sim_config, whole_second,
};
use grag_client::types::{
    ChatMessage, ChatRole, Chunk, CompletionRequest, ConvertRequest, CreateConversation, CreateKb,
    Point, ScoreRequest, SearchRequest, SpendGrouping, UploadDocument, UpsertPoints,
};
use grag_client::{
    ConversationId, Created, DocumentId, EntityId, Error, ErrorClass, KbId, Progress, TenantId,
    WorkspaceId,
};
use grag_sim::{Fault, RetryAfter, Rule};
use sdk_runtime::breaker::CircuitState;
use sdk_runtime::{Call, OutcomeKind};
use tokio::time::Instant;

// The German copy of the spec's "Messages for final errors" table, written out
// here so a wrong lookup in the runtime cannot pass by construction.
const MSG_CONNECTION: &str =
    "Die KI-Dienste sind gerade nicht erreichbar. Bitte in Kürze erneut versuchen.";
const MSG_CLIENT_CONTRACT: &str =
    "Interner Fehler bei der Anfrage an die KI-Dienste. Das Team wurde benachrichtigt.";
const MSG_AUTH: &str =
    "Die Anmeldung bei den KI-Diensten ist fehlgeschlagen. Bitte später erneut versuchen.";
const MSG_ADMIN_GATE: &str = "Diese Aktion erfordert eine Freigabe durch den Betrieb.";
const MSG_BUDGET: &str = "KI pausiert";
const MSG_NOT_FOUND: &str = "Der angeforderte Eintrag wurde nicht gefunden.";
const MSG_TOO_LARGE: &str = "Die Datenmenge ist zu groß für eine Anfrage.";
const MSG_VALIDATION: &str =
    "Die Anfrage wurde von den KI-Diensten abgelehnt. Das Team wurde benachrichtigt.";
const MSG_RATE_LIMITED: &str =
    "Gerade sind zu viele Anfragen unterwegs. Bitte einen Moment warten und erneut versuchen.";
const MSG_BAD_GATEWAY: &str = "Die KI-Dienste haben nicht geantwortet. Bitte erneut versuchen.";
const MSG_DARK: &str = "Diese Funktion ist derzeit nicht verfügbar.";
const MSG_SAFETY: &str =
    "Die Anfrage wurde vorübergehend nicht angenommen. Bitte später erneut versuchen.";
const MSG_BACKPRESSURE: &str =
    "Die KI-Dienste sind ausgelastet; die Verarbeitung wird später fortgesetzt.";
const MSG_AMBIGUOUS: &str =
    "Die KI-Dienste sind vorübergehend nicht verfügbar. Bitte später erneut versuchen.";
const MSG_DEADLINE: &str = "Die Anfrage hat zu lange gedauert. Bitte erneut versuchen.";
const MSG_CIRCUIT_OPEN: &str = "Wird gerade aktualisiert";
const MSG_INVALID_SCOPE: &str =
    "Interner Fehler: ungültiger Mandant oder ungültige Kennung. Das Team wurde benachrichtigt.";
const MSG_SERVER_ERROR: &str =
    "Bei den KI-Diensten ist ein Fehler aufgetreten. Bitte erneut versuchen.";
const MSG_DECODE: &str =
    "Die Antwort der KI-Dienste war unverständlich. Das Team wurde benachrichtigt.";
const MSG_CLIENT_ERROR: &str = "Die Anfrage konnte nicht verarbeitet werden.";
/// A non-idempotent call whose outcome is unknown: never „erneut versuchen“.
const MSG_UNKNOWN: &str = "Ob der Vorgang ausgeführt wurde, ist unklar. Bitte zuerst den aktuellen Stand prüfen, bevor Sie es erneut versuchen.";

/// One exhausted call raises no alert: GRAG alerts on an elevated rate of
/// them only (policy.yaml `alerts.retry_exhausted_rate`, §5.1 churn is
/// routine); the exhaustion is a log line.
#[track_caller]
fn assert_no_alert(env: &Env) {
    assert_eq!(env.alert_names(), Vec::<&str>::new());
}

/// Row, class and German message of a final error.
#[track_caller]
fn assert_row(e: &Error, row: &str, class: &str, message: &str) {
    assert_eq!(e.row(), row, "row of {e}");
    assert_eq!(e.class_name(), class, "class of {e}");
    assert_eq!(e.class().as_str(), class, "the generated class of {e}");
    assert_eq!(e.message(), Some(message), "German message of {e}");
    let spec = grag_client::policy::POLICY
        .taxonomy
        .iter()
        .find(|r| r.row == row);
    assert_eq!(
        Some(e.replay()),
        spec.map(|r| r.replay),
        "the queue reads the row's `replay` from {e}"
    );
}

#[test]
fn every_class_of_the_taxonomy_is_a_variant_of_error_class() {
    let classes: Vec<&str> = policy()
        .taxonomy
        .iter()
        .map(|r| r.class)
        .filter(|c| *c != "success")
        .collect();
    for class in &classes {
        let variant = ErrorClass::ALL.iter().find(|c| c.as_str() == *class);
        let variant = *variant.unwrap_or_else(|| panic!("{class} has a variant"));
        assert_ne!(variant, ErrorClass::Unclassified, "{class} has a variant");
        assert_eq!(variant.as_str(), *class);
        assert_eq!(variant.to_string(), *class);
    }
    // One variant per class, in row order, and the fallback last.
    let mut distinct = classes.clone();
    distinct.dedup();
    let mut seen = Vec::new();
    distinct.retain(|c| {
        let new = !seen.contains(c);
        seen.push(*c);
        new
    });
    let all: Vec<&str> = ErrorClass::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(all[..all.len() - 1], distinct[..]);
    assert_eq!(ErrorClass::ALL.last(), Some(&ErrorClass::Unclassified));
}

#[tokio::test]
async fn t31_a_body_that_cannot_be_encoded_is_refused_before_sending() {
    use std::collections::BTreeMap;
    let env = Env::start().await;
    let endpoint = policy()
        .routes
        .iter()
        .find(|e| e.operation == "complete")
        .expect("the spec has complete");
    // JSON object keys must be strings: serde_json refuses this map.
    let body = BTreeMap::from([((1, 2), "value")]);
    let run = grag_sim::testkit::pipeline();
    let e: Error = env
        .grag
        .runtime()
        .send(Call::new(endpoint).pipeline(run.id()).json(&body))
        .await
        .unwrap_err()
        .into();
    assert_row(&e, "T31", "invalid_request", MSG_CLIENT_CONTRACT);
    assert_eq!(e.class(), ErrorClass::InvalidRequest);
    assert_eq!(e.kind(), OutcomeKind::InvalidRequest);
    assert_eq!(e.attempts(), 0, "refused before any attempt: {e}");
    assert!(
        e.detail()
            .is_some_and(|d| d.contains("could not be encoded")),
        "{e}"
    );
    assert_eq!(env.total(), 0, "nothing reached the platform");
    assert_eq!(env.alert_names(), ["client_contract"]);
    assert_eq!(env.state(), CircuitState::Closed);

    // A client bug stays one with the breaker open: T31, not T21.
    env.health_down();
    env.open_breaker().await;
    let e: Error = env
        .grag
        .runtime()
        .send(Call::new(endpoint).pipeline(run.id()).json(&body))
        .await
        .unwrap_err()
        .into();
    assert_eq!(e.class(), ErrorClass::InvalidRequest, "{e}");
}

fn kb(id: &str) -> KbId {
    KbId::parse(id).expect("a valid KB id")
}

fn status(status: u16, detail: &str) -> Fault {
    Fault::Status {
        status,
        detail: detail.into(),
        retry_after: None,
    }
}

fn completion() -> CompletionRequest {
    CompletionRequest::new(vec![ChatMessage::new(
        ChatRole::User,
        "Fasse das Gutachten zusammen.",
    )])
}

fn score_request() -> ScoreRequest {
    ScoreRequest::new(
        "Die Brücke ist standsicher.",
        vec![Chunk::new("c1", "Die Brücke ist standsicher.")],
    )
}

fn search() -> SearchRequest {
    SearchRequest::new("Standsicherheit", 3)
}

fn create_kb_body(id: &str, name: &str) -> CreateKb {
    CreateKb::new(kb(id), name)
}

/// Alerts raised after the first `from`.
fn alerts_since(env: &Env, from: usize) -> Vec<&'static str> {
    env.alert_names().split_off(from)
}

// ---- T1 connection -----------------------------------------------------------

#[tokio::test]
async fn t01_connection_refused_is_retried_three_times_then_t1() {
    let env = Env::start().await;
    // The deploy churn's first phase: the listener is closed, connects are
    // refused, until a step that this test never takes.
    env.sim.faults().deploy_churn_stepped(Some(0)).await;
    let e = env.grag.workspaces().list_kbs().await.unwrap_err();
    assert_row(&e, "T1", "connection", MSG_CONNECTION);
    assert_eq!(e.kind(), OutcomeKind::Connection);
    assert_eq!(e.status(), None, "no status came back: {e}");
    assert_eq!(e.attempts(), 3, "R1: three attempts for an idempotent call");
    assert_eq!(env.total(), 0, "refused: nothing reached the platform");
    assert_no_alert(&env);
    assert_eq!(
        env.state(),
        CircuitState::Closed,
        "failures of one endpoint do not open the breaker"
    );
}

#[tokio::test]
async fn t01_connection_reset_mid_body_is_retried_only_when_idempotent() {
    let env = Env::start().await;
    env.sim
        .faults()
        .push(Rule::new(Fault::ResetMidBody).on("list_kbs"));
    env.sim
        .faults()
        .push(Rule::new(Fault::ResetMidBody).on("complete"));

    let e = env.grag.workspaces().list_kbs().await.unwrap_err();
    assert_row(&e, "T1", "connection", MSG_CONNECTION);
    assert_eq!(e.kind(), OutcomeKind::Connection);
    assert_eq!(e.attempts(), 3);
    assert_eq!(
        env.count("list_kbs"),
        3,
        "R1: three attempts reached the sim"
    );

    // A completion spends budget: once it may have reached the server it is
    // never sent again.
    let e = env
        .grag
        .ai_gateway(&grag_sim::testkit::pipeline())
        .complete(&completion())
        .await
        .unwrap_err();
    assert_row(&e, "T1", "connection", MSG_UNKNOWN);
    assert!(e.outcome_unknown(), "{e}");
    assert_eq!(e.attempts(), 1);
    assert_eq!(
        env.count("complete"),
        1,
        "non-idempotent after send: one attempt"
    );
}

#[tokio::test]
async fn t01_attempt_timeout_is_t1_retried_only_when_idempotent() {
    // 1/100: default attempt timeout 300 ms, llm 1.5 s, deadline 1.8 s, so
    // three attempts fit with 900 ms to spare (at 1/1000 it was 90 ms, which
    // a loaded machine can eat). The platform would answer after 5 s.
    let env = Env::start().await;
    env.sim
        .faults()
        .push(Rule::new(Fault::delay(Duration::from_secs(5))).on("get_settings"));
    env.sim
        .faults()
        .push(Rule::new(Fault::delay(Duration::from_secs(5))).on("complete"));

    let started = Instant::now();
    let e = env.grag.workspaces().get_settings().await.unwrap_err();
    let took = started.elapsed();
    assert_row(&e, "T1", "connection", MSG_CONNECTION);
    assert_eq!(e.kind(), OutcomeKind::Connection);
    assert!(
        e.detail().is_some_and(|d| d.contains("attempt timeout")),
        "the attempt timeout ended each attempt: {e}"
    );
    assert_eq!(e.attempts(), 3);
    assert_eq!(env.count("get_settings"), 3, "R1: three attempts");
    assert!(
        took >= Duration::from_millis(900),
        "three 300 ms attempt timeouts: {took:?}"
    );

    let started = Instant::now();
    let e = env
        .grag
        .ai_gateway(&grag_sim::testkit::pipeline())
        .complete(&completion())
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert_row(&e, "T1", "connection", MSG_UNKNOWN);
    assert!(e.outcome_unknown(), "{e}");
    assert_eq!(e.attempts(), 1);
    assert_eq!(env.count("complete"), 1, "non-idempotent: never resent");
    assert!(
        took >= Duration::from_millis(1500),
        "the llm timeout class (150 s scaled) ended the attempt: {took:?}"
    );
}

// ---- T2 client contract ------------------------------------------------------

#[tokio::test]
async fn t02_400_naming_the_tenant_is_client_contract_never_retried() {
    let env = Env::start().await;
    env.sim
        .faults()
        .push(Rule::new(status(400, "invalid X-Tenant-ID header")).on("list_kbs"));
    let e = env.grag.workspaces().list_kbs().await.unwrap_err();
    assert_row(&e, "T2", "client_contract", MSG_CLIENT_CONTRACT);
    assert_eq!(e.status(), Some(400));
    assert_eq!(e.attempts(), 1);
    assert_eq!(env.count("list_kbs"), 1, "R0");
    assert_eq!(env.alert_names(), ["client_contract"]);
}

// ---- T3 auth -----------------------------------------------------------------

#[tokio::test]
async fn t03_401_is_auth_not_retried_outside_the_deploy_window_once_more_for_get_inside() {
    let env = Env::start().await;
    let faults = env.sim.faults();

    // Outside the window: no retry, ops alert.
    faults.push(
        Rule::new(status(401, "Invalid API key"))
            .on("list_kbs")
            .once(),
    );
    let e = env.grag.workspaces().list_kbs().await.unwrap_err();
    assert_row(&e, "T3", "auth", MSG_AUTH);
    assert_eq!(e.status(), Some(401));
    assert_eq!(e.attempts(), 1);
    assert_eq!(
        env.count("list_kbs"),
        1,
        "R2 outside the window: one attempt"
    );
    assert_eq!(env.alert_names(), ["auth_outside_deploy"]);

    // A 403 that is not the admin gate is auth too.
    faults.push(
        Rule::new(status(403, "Forbidden"))
            .on("get_settings")
            .once(),
    );
    let e = env.grag.workspaces().get_settings().await.unwrap_err();
    assert_row(&e, "T3", "auth", MSG_AUTH);
    assert_eq!(env.count("get_settings"), 1);

    // Inside the deploy-suspected window: exactly one extra attempt for a GET,
    // and no ops alert (a deploy explains it).
    env.enter_deploy_window().await;
    let alerts = env.alert_names().len();
    let before = env.count("list_kbs");
    let rule = faults.push(Rule::new(status(401, "Invalid API key")).on("list_kbs"));
    let e = env.grag.workspaces().list_kbs().await.unwrap_err();
    faults.remove(rule);
    assert!(env.grag.runtime().deploy_suspected());
    assert_row(&e, "T3", "auth", MSG_AUTH);
    assert_eq!(e.attempts(), 2);
    assert_eq!(
        env.count("list_kbs") - before,
        2,
        "R2: a GET gets exactly one extra attempt inside the window"
    );
    assert!(
        !alerts_since(&env, alerts).contains(&"auth_outside_deploy"),
        "no auth alert inside the deploy window: {:?}",
        env.alert_names()
    );

    // Not a GET: R2 does not apply.
    let rule = faults.push(Rule::new(status(401, "Invalid API key")).on("create_kb"));
    let e = env
        .grag
        .workspaces()
        .create_kb(&create_kb_body("kb-1", "Methodik"))
        .await
        .unwrap_err();
    faults.remove(rule);
    assert_row(&e, "T3", "auth", MSG_AUTH);
    assert_eq!(env.count("create_kb"), 1, "a POST is not retried by R2");
}

// ---- T4 admin gate -----------------------------------------------------------

#[tokio::test]
async fn t04_403_admin_gate_is_never_retried_and_alerts_ops() {
    let env = Env::start().await;
    env.sim
        .faults()
        .push(Rule::new(Fault::AdminGate).on("create_kb"));
    let e = env
        .grag
        .workspaces()
        .create_kb(&create_kb_body("kb-1", "Methodik"))
        .await
        .unwrap_err();
    assert_row(&e, "T4", "admin_gate", MSG_ADMIN_GATE);
    assert_eq!(e.status(), Some(403));
    assert_eq!(e.attempts(), 1);
    assert_eq!(env.count("create_kb"), 1, "R0");
    assert_eq!(env.alert_names(), ["admin_gate"]);
}

// ---- T5 budget ---------------------------------------------------------------

#[tokio::test]
async fn t05_402_is_budget_exhausted_ki_pausiert() {
    let env = Env::start().await;
    env.sim.faults().push(Rule::new(Fault::Budget).on("score"));
    let e = env
        .grag
        .groundedness()
        .score(&score_request())
        .await
        .unwrap_err();
    assert_row(&e, "T5", "budget_exhausted", MSG_BUDGET);
    assert_eq!(e.status(), Some(402));
    assert_eq!(e.attempts(), 1);
    assert_eq!(env.count("score"), 1, "R0: a hard stop");
    assert_eq!(env.alert_names(), ["budget_exhausted"]);
    assert_eq!(
        env.feature("groundedness"),
        ("paused", Some("KI pausiert")),
        "the feature shows as paused"
    );
}

// ---- T6 not found ------------------------------------------------------------

#[tokio::test]
async fn t06_404_is_not_found_once_more_for_get_only_inside_the_deploy_window() {
    let env = Env::start().await;
    let missing = kb("kb-missing");

    let e = env
        .grag
        .workspaces()
        .list_documents(&missing)
        .await
        .unwrap_err();
    assert_row(&e, "T6", "not_found", MSG_NOT_FOUND);
    assert_eq!(e.status(), Some(404));
    assert_eq!(e.attempts(), 1);
    assert_eq!(env.count("list_documents"), 1, "outside the window: R0");
    assert!(env.alert_names().is_empty(), "{:?}", env.alert_names());

    env.enter_deploy_window().await;
    let e = env
        .grag
        .workspaces()
        .list_documents(&missing)
        .await
        .unwrap_err();
    assert_row(&e, "T6", "not_found", MSG_NOT_FOUND);
    assert_eq!(e.attempts(), 2);
    assert_eq!(
        env.count("list_documents"),
        3,
        "inside the window a GET gets exactly one extra attempt"
    );

    let upload = UploadDocument::new(
        DocumentId::parse("doc-1").unwrap(),
        "gutachten.txt",
        "text/plain",
        "R3V0YWNodGVu",
    );
    let e = env
        .grag
        .workspaces()
        .upload_document(&missing, &upload)
        .await
        .unwrap_err();
    assert_row(&e, "T6", "not_found", MSG_NOT_FOUND);
    assert_eq!(
        env.count("upload_document"),
        1,
        "a POST is not retried by R2"
    );
}

// ---- T7 409 on create --------------------------------------------------------

#[tokio::test]
async fn t07_409_on_a_create_route_is_success_existing() {
    let env = Env::start().await;
    let body = create_kb_body("kb-methodik", "Methodik");
    let first = env.grag.workspaces().create_kb(&body).await.unwrap();
    assert!(first.is_new(), "{first:?}");
    let second = env.grag.workspaces().create_kb(&body).await.unwrap();
    assert_eq!(second, Created::Existing);
    assert_eq!(env.statuses("create_kb"), [Some(201), Some(409)]);

    let conversation = CreateConversation::new(ConversationId::parse("conv-1").unwrap());
    let first = env
        .grag
        .workspaces()
        .create_conversation(&conversation)
        .await
        .unwrap();
    assert!(first.is_new(), "{first:?}");
    let second = env
        .grag
        .workspaces()
        .create_conversation(&conversation)
        .await
        .unwrap();
    assert_eq!(second, Created::Existing);
    assert_eq!(env.count("create_conversation"), 2, "a success: no retry");
    assert!(env.alert_names().is_empty(), "{:?}", env.alert_names());
}

// ---- T8 409 on the docfold result --------------------------------------------

#[tokio::test]
async fn t08_409_on_the_docfold_result_is_still_processing() {
    let mut config = sim_config();
    config.conversion_time = Duration::from_secs(30);
    let env = Env::with(config, policy()).await;
    let job = env
        .grag
        .docfold()
        .convert(&ConvertRequest::new(
            DocumentId::parse("doc-1").unwrap(),
            "gutachten.txt",
            "text/plain",
            "R3V0YWNodGVu",
        ))
        .await
        .unwrap();
    let progress = env.grag.docfold().result(&job.conversion_id).await.unwrap();
    assert_eq!(progress, Progress::Processing);
    assert_eq!(
        env.statuses("result"),
        [Some(409)],
        "poll again later: the call itself does not retry"
    );
    assert!(env.alert_names().is_empty(), "{:?}", env.alert_names());
}

// ---- T9 payload too large ----------------------------------------------------

#[tokio::test]
async fn t09_413_is_payload_too_large_never_retried() {
    let env = Env::start().await;
    let points = (0..257)
        .map(|i| Point::new(format!("p-{i}"), vec![0.0, 1.0]))
        .collect::<Vec<_>>();
    let e = env
        .grag
        .voyager()
        .upsert_points(&kb("kb-1"), &UpsertPoints::new(points))
        .await
        .unwrap_err();
    assert_row(&e, "T9", "payload_too_large", MSG_TOO_LARGE);
    assert_eq!(e.status(), Some(413));
    assert_eq!(e.attempts(), 1);
    assert_eq!(env.count("upsert_points"), 1, "R0");
}

// ---- T10 validation ----------------------------------------------------------

#[tokio::test]
async fn t10_422_is_validation_pages_contract_drift_outside_the_window_once_more_for_get_inside() {
    let env = Env::start().await;
    let faults = env.sim.faults();

    // A FastAPI validation 422 on a POST (the spec states no rule the
    // simulator could refuse a typed body by, so the answer is scripted).
    faults.push(
        Rule::new(status(422, "name must not be empty"))
            .on("create_kb")
            .once(),
    );
    let e = env
        .grag
        .workspaces()
        .create_kb(&create_kb_body("kb-1", " "))
        .await
        .unwrap_err();
    assert_row(&e, "T10", "validation", MSG_VALIDATION);
    assert_eq!(e.status(), Some(422));
    assert_eq!(e.attempts(), 1);
    assert_eq!(env.count("create_kb"), 1, "R0 for a POST");
    assert_eq!(env.alert_names(), ["contract_drift"]);

    // A GET outside the window: one attempt.
    faults.push(
        Rule::new(status(422, "Field required"))
            .on("get_settings")
            .once(),
    );
    let e = env.grag.workspaces().get_settings().await.unwrap_err();
    assert_row(&e, "T10", "validation", MSG_VALIDATION);
    assert_eq!(
        env.count("get_settings"),
        1,
        "outside the window: one attempt"
    );

    // Inside the window: a GET gets exactly one extra attempt, a POST none.
    env.enter_deploy_window().await;
    let before = env.count("get_settings");
    let alerts = env.alert_names().len();
    let rule = faults.push(Rule::new(status(422, "Field required")).on("get_settings"));
    let e = env.grag.workspaces().get_settings().await.unwrap_err();
    faults.remove(rule);
    assert_row(&e, "T10", "validation", MSG_VALIDATION);
    assert_eq!(e.attempts(), 2);
    assert_eq!(
        env.count("get_settings") - before,
        2,
        "R2 inside the window"
    );
    assert!(
        !alerts_since(&env, alerts).contains(&"contract_drift"),
        "§5.1: a 422 inside the deploy window is routine, no page: {:?}",
        env.alert_names()
    );

    let rule = faults.push(Rule::new(status(422, "name must not be empty")).on("create_kb"));
    let e = env
        .grag
        .workspaces()
        .create_kb(&create_kb_body("kb-1", " "))
        .await
        .unwrap_err();
    faults.remove(rule);
    assert_row(&e, "T10", "validation", MSG_VALIDATION);
    assert_eq!(env.count("create_kb"), 2, "a POST is not retried by R2");
}

// ---- T11 rate limited --------------------------------------------------------

#[tokio::test]
async fn t11_429_without_retry_after_waits_the_floor_and_gives_up_after_three() {
    let env = Env::start().await;
    env.sim
        .faults()
        .push(Rule::new(Fault::RateLimited { retry_after: None }).on("list_kbs"));
    let e = env.grag.workspaces().list_kbs().await.unwrap_err();
    assert_row(&e, "T11", "rate_limited", MSG_RATE_LIMITED);
    assert_eq!(e.status(), Some(429));
    assert_eq!(e.attempts(), 3);
    assert_eq!(env.count("list_kbs"), 3, "R3: three attempts");
    let gaps = env.gaps("list_kbs");
    for gap in &gaps {
        // 2 s floor + up to 1 s jitter, at 1/100.
        assert!(
            *gap >= Duration::from_millis(20),
            "the 2 s floor (20 ms scaled) when Retry-After is absent: {gaps:?}"
        );
        // Generous on purpose (a loaded machine stretches a gap); what it
        // catches is the unscaled 2 s floor.
        assert!(*gap < Duration::from_secs(1), "{gaps:?}");
    }
    assert_no_alert(&env);
    assert!(
        env.grag.runtime().rate_limit_hot(),
        "polling slows while hot"
    );
    assert_eq!(
        rate_limited(&env, "absent"),
        Some(3),
        "every 429 is counted"
    );
    assert_eq!(rate_limited(&env, "present"), Some(0));
}

/// The 429 counter's value for `retry_after` (the metric's name from the spec).
fn rate_limited(env: &Env, retry_after: &str) -> Option<u64> {
    let name = grag_client::policy::POLICY.metrics.rate_limited;
    let series = format!("{name}_total{{retry_after=\"{retry_after}\"}} ");
    let text = env.grag.runtime().metrics_text();
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn t11_429_retry_after_in_seconds_is_honored() {
    let env = Env::start().await;
    env.sim
        .faults()
        .push(Rule::new(Fault::rate_limited_secs(1)).on("list_kbs").once());
    env.grag.workspaces().list_kbs().await.unwrap();
    assert_eq!(env.statuses("list_kbs"), [Some(429), Some(200)]);
    assert_eq!(rate_limited(&env, "present"), Some(1));
    assert_eq!(rate_limited(&env, "absent"), Some(0));
    let gap = env.gaps("list_kbs")[0];
    // Retry-After is the server's word, never scaled: 1 s + up to 10 ms jitter.
    assert!(
        gap >= Duration::from_secs(1),
        "Retry-After: 1 waits a second: {gap:?}"
    );
    // Not a second wait on top (the floor or a backoff after the server's word).
    assert!(gap < Duration::from_secs(2), "{gap:?}");
}

#[tokio::test]
async fn t11_429_retry_after_as_http_date_is_honored() {
    let env = Env::start().await;
    // The date names the next whole second; start early in a second so it is
    // at least 500 ms away (far above the 20 ms floor).
    early_in_a_second().await;
    let clock = WallClock::now();
    env.sim.faults().push(
        Rule::new(Fault::RateLimited {
            retry_after: Some(RetryAfter::DateIn(1)),
        })
        .on("list_kbs")
        .once(),
    );
    env.grag.workspaces().list_kbs().await.unwrap();
    let log = env.sim.log().of("list_kbs");
    assert_eq!(log.len(), 2, "one retry");
    let first = clock.at(log[0].arrived);
    let retry = clock.at(log[1].arrived);
    let date = whole_second(first) + Duration::from_secs(1);
    assert!(
        retry + Duration::from_millis(2) >= date,
        "the retry waited for the HTTP date: {:?} before it",
        date.duration_since(retry).unwrap_or_default()
    );
    assert!(
        retry < date + Duration::from_secs(1),
        "{:?} after the date",
        retry.duration_since(date).unwrap_or_default()
    );
}

// ---- T12 bad gateway ---------------------------------------------------------

#[tokio::test]
async fn t12_502_is_bad_gateway_retried_by_r1_only_when_idempotent() {
    let env = Env::start().await;
    env.sim
        .faults()
        .push(Rule::new(Fault::BadGateway).on("list_kbs"));
    env.sim
        .faults()
        .push(Rule::new(Fault::BadGateway).on("complete"));

    let e = env.grag.workspaces().list_kbs().await.unwrap_err();
    assert_row(&e, "T12", "bad_gateway", MSG_BAD_GATEWAY);
    assert_eq!(e.status(), Some(502));
    assert_eq!(e.attempts(), 3);
    assert_eq!(env.count("list_kbs"), 3, "R1: three attempts");
    assert_no_alert(&env);

    let e = env
        .grag
        .ai_gateway(&grag_sim::testkit::pipeline())
        .complete(&completion())
        .await
        .unwrap_err();
    assert_row(&e, "T12", "bad_gateway", MSG_UNKNOWN);
    assert!(
        e.outcome_unknown(),
        "a gateway's 502: the upstream may have run it: {e}"
    );
    assert_eq!(e.attempts(), 1);
    assert_eq!(env.count("complete"), 1, "non-idempotent: never resent");
    assert_eq!(env.state(), CircuitState::Closed, "two endpoints only");
}

// ---- T13 dark ----------------------------------------------------------------

#[tokio::test]
async fn t13_dark_503_is_stable_remembered_and_the_next_call_fails_fast() {
    let env = Env::start().await;
    env.sim.faults().dark("search_rerank");
    let kb = kb("kb-methodik");

    let e = env
        .grag
        .ai_gateway(&grag_sim::testkit::pipeline())
        .search_rerank(&kb, &search())
        .await
        .unwrap_err();
    assert_row(&e, "T13", "feature_dark", MSG_DARK);
    assert_eq!(e.status(), Some(503));
    assert_eq!(e.attempts(), 1);
    assert_eq!(env.count("search_rerank"), 1, "R0: a stable answer");

    // Remembered: the next call fails fast (over on its first poll) without a request.
    let query = search();
    let e = ready_now(
        env.grag
            .ai_gateway(&grag_sim::testkit::pipeline())
            .search_rerank(&kb, &query),
    )
    .expect("fails fast: ready on the first poll")
    .unwrap_err();
    assert_row(&e, "T13", "feature_dark", MSG_DARK);
    assert_eq!(e.attempts(), 0, "nothing was sent");
    assert_eq!(env.count("search_rerank"), 1, "no request reached the sim");
    assert_eq!(env.feature("search"), ("dark", None));
    assert_eq!(
        env.feature("chat"),
        ("available", None),
        "only search is dark"
    );
}

#[tokio::test]
async fn t13_a_remembered_dark_answer_is_asked_again_after_the_scaled_5_min() {
    // The spec remembers a dark answer for 5 min (T13 `remember_for`); at
    // 1/100 that is 3 s, far more than the two calls in between take.
    let env = Env::start().await;
    let dark = env.sim.faults().dark("score");
    let e = env
        .grag
        .groundedness()
        .score(&score_request())
        .await
        .unwrap_err();
    assert_row(&e, "T13", "feature_dark", MSG_DARK);
    env.sim.faults().remove(dark);
    let e = env
        .grag
        .groundedness()
        .score(&score_request())
        .await
        .unwrap_err();
    assert_row(&e, "T13", "feature_dark", MSG_DARK);
    assert_eq!(env.count("score"), 1, "remembered meanwhile");

    let remembered = policy()
        .taxonomy
        .iter()
        .find(|r| r.row == "T13")
        .and_then(|r| r.remember_for)
        .expect("T13 remembers");
    assert_eq!(remembered, Duration::from_secs(3));
    tokio::time::sleep(remembered + Duration::from_millis(50)).await;
    env.grag
        .groundedness()
        .score(&score_request())
        .await
        .expect("after 5 min (scaled) the route is asked again");
    assert_eq!(env.count("score"), 2);
    assert_eq!(env.feature("groundedness"), ("available", None));
}

// ---- T14 safety --------------------------------------------------------------

#[tokio::test]
async fn t14_safety_503_is_retried_exactly_once() {
    let env = Env::start().await;
    let rule = env.sim.faults().push(Rule::new(Fault::Safety).on("score"));
    let e = env
        .grag
        .groundedness()
        .score(&score_request())
        .await
        .unwrap_err();
    assert_row(&e, "T14", "safety_closed", MSG_SAFETY);
    assert_eq!(e.status(), Some(503));
    assert_eq!(e.attempts(), 2);
    assert_eq!(env.count("score"), 2, "R5: exactly one retry");
    // R5 retries at once; the unscaled 2 s floor or R1's backoff would
    // show here (the zero delay itself is backoff's unit test).
    assert!(
        env.gaps("score")[0] < Duration::from_secs(1),
        "R5 does not wait: {:?}",
        env.gaps("score")
    );
    assert_no_alert(&env);

    // Transient: one refusal, then the retry goes through.
    env.sim.faults().remove(rule);
    env.sim
        .faults()
        .push(Rule::new(Fault::Safety).on("score").once());
    env.grag
        .groundedness()
        .score(&score_request())
        .await
        .unwrap();
    assert_eq!(env.count("score"), 4);
}

// ---- T15 backpressure --------------------------------------------------------

#[tokio::test]
async fn t15_503_with_retry_after_is_backpressure_and_honors_it() {
    let env = Env::start().await;
    let rule = env.sim.faults().push(
        Rule::new(Fault::Backpressure {
            retry_after: RetryAfter::Seconds(0),
        })
        .on("list_documents"),
    );
    let e = env
        .grag
        .workspaces()
        .list_documents(&kb("kb-1"))
        .await
        .unwrap_err();
    env.sim.faults().remove(rule);
    assert_row(&e, "T15", "backpressure", MSG_BACKPRESSURE);
    assert_eq!(e.status(), Some(503));
    assert_eq!(e.attempts(), 3);
    assert_eq!(env.count("list_documents"), 3, "R4: three attempts");
    assert_no_alert(&env);

    // Retry-After: 1 is waited for (not scaled, not the 2 s floor).
    env.sim.faults().push(
        Rule::new(Fault::Backpressure {
            retry_after: RetryAfter::Seconds(1),
        })
        .on("list_kbs")
        .once(),
    );
    env.grag.workspaces().list_kbs().await.unwrap();
    let gap = env.gaps("list_kbs")[0];
    assert!(gap >= Duration::from_secs(1), "{gap:?}");
    assert!(gap < Duration::from_secs(2), "{gap:?}");
}

// ---- T16 ambiguous -----------------------------------------------------------

const UNKNOWN_503: &str = "upstream answered 503 (code 7731)";

#[tokio::test]
async fn t16_unknown_503_retried_once_and_the_same_detail_twice_becomes_dark() {
    let env = Env::start().await;
    env.sim
        .faults()
        .push(Rule::new(status(503, UNKNOWN_503)).on("get_entity"));
    let workspace = WorkspaceId::parse("ws-7").unwrap();
    let entity = EntityId::parse("e-1").unwrap();

    let e = env
        .grag
        .kg(&workspace)
        .get_entity(&entity)
        .await
        .unwrap_err();
    assert_row(&e, "T13", "feature_dark", MSG_DARK);
    assert_eq!(e.detail(), Some(UNKNOWN_503));
    assert_eq!(e.attempts(), 2);
    assert_eq!(env.count("get_entity"), 2, "T16 retries once (R5)");

    // Now treated as dark: remembered, the next call sends nothing.
    let e = env
        .grag
        .kg(&workspace)
        .get_entity(&entity)
        .await
        .unwrap_err();
    assert_row(&e, "T13", "feature_dark", MSG_DARK);
    assert_eq!(env.count("get_entity"), 2, "no request reached the sim");
    assert_eq!(env.feature("knowledge_graph"), ("dark", None));
}

#[tokio::test]
async fn t16_unknown_503_with_a_different_detail_stays_ambiguous() {
    let env = Env::start().await;
    let faults = env.sim.faults();
    faults.push(
        Rule::new(status(503, "upstream answered 503 (code 1)"))
            .on("get_settings")
            .once(),
    );
    faults.push(
        Rule::new(status(503, "upstream answered 503 (code 2)"))
            .on("get_settings")
            .once(),
    );

    let e = env.grag.workspaces().get_settings().await.unwrap_err();
    assert_row(&e, "T16", "ambiguous", MSG_AMBIGUOUS);
    assert_eq!(e.status(), Some(503));
    assert_eq!(e.detail(), Some("upstream answered 503 (code 2)"));
    assert_eq!(e.attempts(), 2);
    assert_eq!(env.count("get_settings"), 2, "R5: exactly one retry");
    assert_no_alert(&env);

    // Not remembered: the next call reaches the platform (and succeeds).
    env.grag.workspaces().get_settings().await.unwrap();
    assert_eq!(env.count("get_settings"), 3);
    assert_eq!(env.feature("chat"), ("available", None));
}

// ---- T20 deadline ------------------------------------------------------------

#[tokio::test]
async fn t20_deadline_ends_a_call_the_platform_is_too_slow_for() {
    // 1/100: llm attempt timeout 1.5 s, overall deadline 1.8 s, so the retry
    // has 300 ms to start (at 1/1000 it had 30 ms, which a loaded machine
    // missed). The platform would answer after a minute.
    let env = Env::start().await;
    env.sim
        .faults()
        .push(Rule::new(Fault::delay(Duration::from_secs(60))).on("score"));
    let started = Instant::now();
    let e = env
        .grag
        .groundedness()
        .score(&score_request())
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert_row(&e, "T20", "deadline", MSG_DEADLINE);
    assert_eq!(e.kind(), OutcomeKind::Deadline);
    assert_eq!(e.status(), None, "the platform did not answer: {e}");
    let detail = e.detail().unwrap_or_default();
    assert!(
        detail.contains("deadline") && detail.contains("not the platform"),
        "the error says the deadline ended the call: {e}"
    );
    assert_eq!(
        e.attempts(),
        2,
        "the retry after the first timeout ran into the deadline"
    );
    assert_eq!(env.count("score"), 2);
    assert!(
        took >= Duration::from_millis(1800),
        "the whole deadline was used: {took:?}"
    );
    assert!(took < Duration::from_millis(6000), "{took:?}");
}

#[tokio::test]
async fn t11_a_retry_after_past_the_deadline_ends_the_call_with_its_row_and_the_wait() {
    // 1/100: deadline 1.8 s; Retry-After: 3600 is not scaled. Had the call
    // slept toward it, the 1.8 s deadline would have ended it as T20.
    let env = Env::start().await;
    env.sim
        .faults()
        .push(Rule::new(Fault::rate_limited_secs(3600)).on("list_kbs"));
    let e = env.grag.workspaces().list_kbs().await.unwrap_err();
    assert_row(&e, "T11", "rate_limited", MSG_RATE_LIMITED);
    assert_eq!(e.kind(), OutcomeKind::Status);
    assert_eq!(e.retry_after(), Some(Duration::from_secs(3600)), "{e}");
    assert!(
        e.to_string().contains("3600 s"),
        "Display says what the server asked: {e}"
    );
    assert_eq!(env.count("list_kbs"), 1, "no retry could fit the deadline");
}

// ---- T21 circuit open --------------------------------------------------------

#[tokio::test]
async fn t21_circuit_open_fails_fast_with_the_german_state_text() {
    let env = Env::start().await;
    env.health_down();
    env.open_breaker().await;
    let platform_requests = |env: &Env| {
        env.sim
            .log()
            .entries()
            .iter()
            .filter(|e| e.operation != Some("health"))
            .count()
    };
    let before = platform_requests(&env);

    let e = ready_now(env.grag.workspaces().list_kbs())
        .expect("fails fast: ready on the first poll")
        .unwrap_err();
    assert_row(&e, "T21", "circuit_open", MSG_CIRCUIT_OPEN);
    assert_eq!(e.kind(), OutcomeKind::CircuitOpen);
    assert_eq!(e.attempts(), 0);
    assert_eq!(e.status(), None);

    let e = env
        .grag
        .workspaces()
        .create_kb(&create_kb_body("kb-1", "Methodik"))
        .await
        .unwrap_err();
    assert_row(&e, "T21", "circuit_open", MSG_CIRCUIT_OPEN);
    assert!(e.replayable(), "a replay route goes to the replay queue");
    let e = env
        .grag
        .ai_gateway(&grag_sim::testkit::pipeline())
        .complete(&completion())
        .await
        .unwrap_err();
    assert_row(&e, "T21", "circuit_open", MSG_CIRCUIT_OPEN);
    assert!(!e.replayable());

    assert_eq!(
        platform_requests(&env),
        before,
        "no request reached the sim while open"
    );
    assert_eq!(
        env.feature("search"),
        ("updating", Some("Wird gerade aktualisiert"))
    );
}

// ---- T22 invalid scope -------------------------------------------------------

#[tokio::test]
async fn t22_invalid_scope_is_refused_before_a_byte_is_sent() {
    let env = Env::start().await;
    for reserved in ["default", "system", "canary"] {
        assert!(TenantId::parse(reserved).is_err(), "{reserved} is reserved");
    }
    assert!(KbId::parse("Kb 1").is_err());
    assert!(KbId::parse("../kbs").is_err());

    let runtime = env.grag.runtime();
    // A kg-service route without its workspace.
    let e: Error = runtime
        .send(Call::new(&grag_client::kg_service::GET_ENTITY).path("e-1"))
        .await
        .unwrap_err()
        .into();
    assert_row(&e, "T22", "invalid_scope", MSG_INVALID_SCOPE);
    assert_eq!(e.kind(), OutcomeKind::InvalidScope);
    assert_eq!(e.attempts(), 0);
    // A path value that would fold onto another route.
    let e: Error = runtime
        .send(Call::new(&grag_client::workspaces::LIST_DOCUMENTS).path(".."))
        .await
        .unwrap_err()
        .into();
    assert_row(&e, "T22", "invalid_scope", MSG_INVALID_SCOPE);
    // A workspace on a tenant route.
    let workspace = WorkspaceId::parse("ws-7").unwrap();
    let e: Error = runtime
        .send(Call::new(&grag_client::workspaces::LIST_KBS).workspace(workspace.id()))
        .await
        .unwrap_err()
        .into();
    assert_row(&e, "T22", "invalid_scope", MSG_INVALID_SCOPE);

    assert_eq!(env.total(), 0, "not a byte reached the platform");
}

// ---- T23 other 5xx -----------------------------------------------------------

#[tokio::test]
async fn t23_other_5xx_is_server_error_retried_by_r1_only_when_idempotent() {
    let env = Env::start().await;
    let faults = env.sim.faults();
    for op in ["list_kbs", "get_settings", "spend"] {
        faults.push(Rule::new(status(500, "Internal Server Error")).on(op));
    }
    faults.push(Rule::new(status(504, "Gateway Timeout")).on("complete"));

    let e = env.grag.workspaces().list_kbs().await.unwrap_err();
    assert_row(&e, "T23", "server_error", MSG_SERVER_ERROR);
    assert_eq!(e.status(), Some(500));
    assert_eq!(e.attempts(), 3);
    assert_eq!(env.count("list_kbs"), 3, "R1: three attempts");
    assert_no_alert(&env);

    let e = env
        .grag
        .ai_gateway(&grag_sim::testkit::pipeline())
        .complete(&completion())
        .await
        .unwrap_err();
    assert_row(&e, "T23", "server_error", MSG_UNKNOWN);
    assert!(
        e.outcome_unknown(),
        "a 504: the upstream got it and may have run it: {e}"
    );
    assert_eq!(e.status(), Some(504));
    assert_eq!(env.count("complete"), 1, "non-idempotent: never resent");

    // 500s do not feed the breaker, even on three distinct endpoints.
    env.grag.workspaces().get_settings().await.unwrap_err();
    env.grag
        .ledger()
        .spend(&SpendGrouping::Service)
        .await
        .unwrap_err();
    assert_eq!(env.state(), CircuitState::Closed);
}

/// §5.3.3 and the taxonomy's `outcome_unknown` column: per status, whether an
/// answer to a write that is not idempotent settles its outcome. A 500 (a
/// handler that raised after its write), a 502 and a 504 (a gateway whose
/// upstream got the request) do not; a 503 (refused: dark, safety, WAL) and a
/// 4xx do. An idempotent call is never "unknown": sending it again is safe.
#[tokio::test]
async fn a_5xx_answer_to_a_write_that_is_not_idempotent_is_unknown_per_status() {
    let cases: [(u16, &str, bool); 6] = [
        (500, "Internal Server Error", true),
        (502, "Bad Gateway", true),
        (504, "Gateway Timeout", true),
        (503, "rerank is disabled", false),
        (503, "admission control: overloaded", false),
        (429, "Too Many Requests", false),
    ];
    for (code, detail, unknown) in cases {
        let env = Env::start().await;
        env.sim
            .faults()
            .push(Rule::new(status(code, detail)).on("complete"));
        let e = env
            .grag
            .ai_gateway(&grag_sim::testkit::pipeline())
            .complete(&completion())
            .await
            .unwrap_err();
        assert_eq!(e.status(), Some(code), "{e}");
        assert_eq!(e.outcome_unknown(), unknown, "{code} {detail}: {e}");
        if unknown {
            assert_eq!(
                e.message(),
                Some(MSG_UNKNOWN),
                "{code}: check the state first"
            );
        } else {
            assert_ne!(e.message(), Some(MSG_UNKNOWN), "{code}: a known outcome");
        }
        assert_eq!(env.count("complete"), 1, "{code}: never re-sent");
    }
    // Starlette's plain-text 500 behind uvicorn (an unhandled exception after the write).
    let env = Env::start().await;
    env.sim
        .faults()
        .push(Rule::new(Fault::Unhandled).on("complete"));
    let e = env
        .grag
        .ai_gateway(&grag_sim::testkit::pipeline())
        .complete(&completion())
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(500), "{e}");
    assert!(e.outcome_unknown(), "{e}");
    assert_eq!(e.message(), Some(MSG_UNKNOWN));
    // The same 500 on an idempotent read: retried, never unknown.
    let env = Env::start().await;
    env.sim
        .faults()
        .push(Rule::new(status(500, "Internal Server Error")).on("list_kbs"));
    let e = env.grag.workspaces().list_kbs().await.unwrap_err();
    assert!(!e.outcome_unknown(), "{e}");
    assert_eq!(e.message(), Some(MSG_SERVER_ERROR));
}

#[test]
fn the_unknown_outcome_column_is_the_documents_decision() {
    let unknown = |row: &str| {
        grag_client::policy::POLICY
            .taxonomy
            .iter()
            .find(|r| r.row == row)
            .unwrap_or_else(|| panic!("row {row}"))
            .outcome_unknown
    };
    for row in ["T1", "T12", "T20", "T23"] {
        assert!(unknown(row), "{row}: §5.3.3 in-flight ambiguity");
    }
    for row in ["T11", "T13", "T14", "T15", "T16", "T25", "T24", "T30"] {
        assert!(!unknown(row), "{row}: a refusal or an applied 2xx is known");
    }
}

// ---- T24 decode --------------------------------------------------------------

#[tokio::test]
async fn t24_a_2xx_body_that_does_not_decode_is_decode_never_retried() {
    let env = Env::start().await;
    // 200 with `{"detail": ...}` where a list of knowledge bases belongs.
    env.sim
        .faults()
        .push(Rule::new(status(200, "not a list")).on("list_kbs"));
    let e = env.grag.workspaces().list_kbs().await.unwrap_err();
    assert_row(&e, "T24", "decode", MSG_DECODE);
    assert_eq!(
        e.attempts(),
        1,
        "sent and answered 200: not \"refused before sending\""
    );
    assert_eq!(e.kind(), OutcomeKind::Decode);
    assert_eq!(e.status(), Some(200));
    assert_eq!(env.count("list_kbs"), 1, "R0");
    assert_eq!(
        env.alert_names(),
        ["contract_drift"],
        "the spec pages T24 as contract drift"
    );
    // The call ended with class decode, and the metrics say so (§10.3).
    let metrics = env.grag.runtime().metrics_text();
    assert!(
        metrics.contains(r#"error_class="decode""#) && !metrics.contains(r#"error_class="ok""#),
        "grag_client_requests_total counts the call as decode, not ok:\n{metrics}"
    );
}

// ---- T25 other 4xx -----------------------------------------------------------

#[tokio::test]
async fn t25_other_4xx_is_client_error_never_retried() {
    let env = Env::start().await;
    let faults = env.sim.faults();
    // 409 on a route whose 409 is an error (not a create, not a poll).
    faults.push(Rule::new(status(409, "settings version conflict")).on("put_settings"));
    // 405 on a route that has no other method.
    faults.push(Rule::new(status(405, "method not allowed")).on("spend"));

    let e = env
        .grag
        .workspaces()
        .put_settings(&serde_json::json!({"locale": "de"}))
        .await
        .unwrap_err();
    assert_row(&e, "T25", "client_error", MSG_CLIENT_ERROR);
    assert_eq!(e.status(), Some(409));
    assert_eq!(e.attempts(), 1);
    assert_eq!(env.count("put_settings"), 1, "R0");

    let e = env
        .grag
        .ledger()
        .spend(&SpendGrouping::Provider)
        .await
        .unwrap_err();
    assert_row(&e, "T25", "client_error", MSG_CLIENT_ERROR);
    assert_eq!(e.status(), Some(405));
    assert_eq!(env.count("spend"), 1, "R0");
    assert!(env.alert_names().is_empty(), "{:?}", env.alert_names());
}

// ---- T27 a plain 400 ------------------------------------------------------------

#[tokio::test]
async fn t27_a_400_without_a_scope_detail_pages_as_contract_drift() {
    let env = Env::start().await;
    env.sim
        .faults()
        .push(Rule::new(status(400, "group_by must be service or provider")).on("spend"));
    let e = env
        .grag
        .ledger()
        .spend(&SpendGrouping::Provider)
        .await
        .unwrap_err();
    assert_row(&e, "T27", "bad_request", MSG_VALIDATION);
    assert_eq!(e.status(), Some(400));
    assert_eq!(env.count("spend"), 1, "R0 (§4.2)");
    assert_eq!(env.alert_names(), ["contract_drift"]);
}

#[tokio::test]
async fn an_elevated_rate_of_exhausted_calls_raises_one_alert_per_window() {
    // GRAG §5.1 calls deploy churn routine: exhausted calls are alerted only
    // at the spec's rate (10 within 5 min, 3 s at 1/100), once per window.
    let rate = grag_client::policy::POLICY
        .alerts
        .retry_exhausted_rate
        .expect("GRAG alerts on a rate of exhausted calls");
    assert_eq!(rate.at_least, 10);
    assert_eq!(rate.within, Duration::from_secs(300));
    let env = Env::start().await;
    // A 504: a 500 also renews the connection pool (uvicorn), which costs
    // more per call than the scaled window leaves.
    env.sim
        .faults()
        .push(Rule::new(status(504, "Gateway Timeout")).on("list_kbs"));
    for call in 1..rate.at_least {
        let e = env.grag.workspaces().list_kbs().await.unwrap_err();
        assert_eq!(e.row(), "T23", "{e}");
        assert_eq!(e.attempts(), 3, "{e}");
        assert!(env.alert_names().is_empty(), "alerted after {call} calls");
    }
    for _ in 0..5 {
        env.grag.workspaces().list_kbs().await.unwrap_err();
    }
    let alerts = env.alerts.taken();
    assert_eq!(alerts.len(), 1, "one alert in the window: {alerts:?}");
    assert_eq!(alerts[0].name, "retry_exhausted");
    assert!(
        alerts[0]
            .detail
            .as_deref()
            .is_some_and(|d| d.starts_with("10 calls exhausted their retries")),
        "{alerts:?}"
    );
}

#[tokio::test]
async fn an_alert_carries_its_severity_from_degradation_yaml_for_the_sink_to_route() {
    // degradation.yaml: budget_exhausted pages, auth_outside_deploy goes to ops.
    let env = Env::start().await;
    env.sim.faults().push(Rule::new(Fault::Budget).on("score"));
    env.sim.faults().push(
        Rule::new(status(401, "Invalid API key"))
            .on("list_kbs")
            .once(),
    );
    env.grag
        .groundedness()
        .score(&score_request())
        .await
        .unwrap_err();
    env.grag.workspaces().list_kbs().await.unwrap_err();
    let raised: Vec<(&str, &str)> = env
        .alerts
        .taken()
        .iter()
        .map(|a| (a.name, a.severity))
        .collect();
    assert_eq!(
        raised,
        [("budget_exhausted", "page"), ("auth_outside_deploy", "ops")]
    );
    // Every alert of the spec has one, the runtime's own included.
    let policy = &grag_client::policy::POLICY;
    for (alert, severity) in [
        ("breaker_open_long", "page"),
        ("contract_drift", "page"),
        ("client_contract", "page"),
        ("admin_gate", "ops"),
        ("replay_failures", "ops"),
        ("sse_fallbacks_sustained", "ops"),
        ("retry_exhausted", "ops"),
        ("fleet_degraded", "ops"),
        ("replay_store_large", "ops"),
    ] {
        assert_eq!(policy.severity(alert), Some(severity), "{alert}");
    }
    assert_eq!(policy.alerts.severities.len(), 11);
}

#[tokio::test]
async fn t33_on_the_agent_relay_the_route_decides_a_503_is_the_agent_plane_dark() {
    // §2: route + detail text decide an ambiguous 503; §6.3: on the agent
    // session relay, 503 = agent plane dark, whatever the detail.
    let env = Env::start().await;
    let faults = env.sim.faults();
    faults.push(Rule::new(status(503, "Service Unavailable")).on("agent_session_stream"));
    faults.push(
        Rule::new(status(503, "Service Unavailable"))
            .on("get_settings")
            .once(),
    );
    let session = grag_client::SessionId::parse("session-1").unwrap();
    let e = env
        .grag
        .bff()
        .agent_session_stream(&session)
        .await
        .err()
        .expect("the opening is refused");
    assert_eq!((e.row(), e.class_name()), ("T33", "feature_dark"), "{e}");
    assert_eq!(e.attempts(), 1, "dark: not retried");
    assert_eq!(env.count("agent_session_stream"), 1);
    assert_eq!(env.feature("agents").0, "dark");
    // Remembered: the next opening fails fast without a request.
    let e = env
        .grag
        .bff()
        .agent_session_stream(&session)
        .await
        .err()
        .expect("the opening is refused");
    assert_eq!(e.row(), "T33", "{e}");
    assert_eq!(env.count("agent_session_stream"), 1, "nothing sent");
    // Elsewhere the same answer is still ambiguous: retried once (T16).
    env.grag.workspaces().get_settings().await.unwrap();
    assert_eq!(env.count("get_settings"), 2, "T16 retries once");
    assert_eq!(env.state(), CircuitState::Closed);
}
