//! The taxonomy rows of the spec (generated `POLICY.md`, policy §2), end to
//! end against the simulator over loopback with the spec's policy in
//! compressed time. Each row of [`CASES`] is one failing call on a fresh
//! simulator, and [`check`] asserts all of it: the row, class and German copy
//! of the final error, its status, the attempts the client made and the
//! requests that reached the route (the row's retry class), the alerts raised
//! and whether the outcome is unknown. The rows of another shape (successes, a
//! remembered answer that expires) are ordinary tests in `shapes`.

mod calls;
mod copy;
mod shapes;

use std::ops::Range;
use std::time::Duration;

use grag_client::{Error, ErrorClass};
use grag_sim::{Fault, RetryAfter, Rule};
use sdk_runtime::CircuitState;
use sdk_runtime::OutcomeKind;
use tokio::time::Instant;

use crate::kit::resilience::{Env, policy, ready_now};
use calls::*;
use copy::*;

const UNKNOWN_503: &str = "upstream answered 503 (code 7731)";

/// How a case makes the platform (or the client) fail.
#[derive(Clone, Copy)]
enum Inject {
    /// Nothing scripted: the call fails of itself.
    Nothing,
    /// Connects refused: the deploy churn's first phase, never stepped on.
    Refused,
    /// The route answers dark.
    Dark,
    /// A JSON error answer with this status and detail, on every attempt.
    Status(u16, &'static str),
    /// A fault of the simulator's own, on every attempt.
    Fault(fn() -> Fault),
    /// These rules on the route, in order.
    Rules(fn() -> Vec<Rule>),
    /// The breaker open (three distinct 502s) and kept open (health down).
    OpenBreaker,
}

/// What the final error's detail says.
#[derive(Clone, Copy)]
enum Detail {
    Any,
    Is(&'static str),
    Has(&'static [&'static str]),
}

/// What a case checks beyond the common assertions (see [`Then::check`]).
#[derive(Clone, Copy, Debug)]
enum Then {
    AgentsStayDark,
    CountedAsDecode,
    FiveHundredsLeaveTheBreakerClosed,
    GroundednessPaused,
    NoWaitBeforeTheRetry,
    NotReplayable,
    NothingReachedThePlatform,
    Replayable,
    SaysTheWait,
    SearchStaysDark,
    SearchUpdating,
    StillAClientBugWithTheBreakerOpen,
    TheFloorWasWaited,
    TheGraphStaysDark,
    TheNextCallGoesOut,
}

/// One failing call and everything its final error must show.
struct Case {
    what: &'static str,
    route: Route,
    inject: Inject,
    /// Inside the deploy-suspected window (the breaker opened and closed).
    in_window: bool,
    /// Over on its first poll: it neither sends nor waits.
    fast: bool,
    row: &'static str,
    class: &'static str,
    copy: &'static str,
    status: Option<u16>,
    attempts: u32,
    /// Requests that reached the route.
    sent: usize,
    alerts: &'static [&'static str],
    unknown: bool,
    kind: Option<OutcomeKind>,
    detail: Detail,
    took: Range<Duration>,
    then: Option<Then>,
}

/// A case's defaults: one attempt that reached the route, no status, no alert.
const CASE: Case = Case {
    what: "",
    route: Route::ListKbs,
    inject: Inject::Nothing,
    in_window: false,
    fast: false,
    row: "",
    class: "",
    copy: "",
    status: None,
    attempts: 1,
    sent: 1,
    alerts: &[],
    unknown: false,
    kind: None,
    detail: Detail::Any,
    took: Duration::ZERO..Duration::MAX,
    then: None,
};

const fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

use Inject::{Dark, Nothing, OpenBreaker, Refused, Rules, Status};
use OutcomeKind::{CircuitOpen, Connection, Deadline, Decode, InvalidRequest, InvalidScope};
use Route::*;

/// The taxonomy rows, one failing call each; [`check`] runs them.
#[rustfmt::skip]
static CASES: &[Case] = &[
    Case { what: "refused connects are retried three times", route: ListKbs, inject: Refused, row: "T1", class: "connection", copy: MSG_CONNECTION, attempts: 3, sent: 0, kind: Some(Connection), then: Some(Then::NothingReachedThePlatform), ..CASE },
    Case { what: "a reset mid body is retried when idempotent", route: ListKbs, inject: Inject::Fault(|| Fault::ResetMidBody), row: "T1", class: "connection", copy: MSG_CONNECTION, attempts: 3, sent: 3, kind: Some(Connection), ..CASE },
    Case { what: "a completion reset mid body is never resent", route: Complete, inject: Inject::Fault(|| Fault::ResetMidBody), row: "T1", class: "connection", copy: MSG_UNKNOWN, unknown: true, ..CASE },
    Case { what: "attempt timeouts end each of three attempts", route: GetSettings, inject: Inject::Fault(|| Fault::delay(Duration::from_secs(5))), row: "T1", class: "connection", copy: MSG_CONNECTION, attempts: 3, sent: 3, kind: Some(Connection), detail: Detail::Has(&["attempt timeout"]), took: ms(900)..Duration::MAX, ..CASE },
    Case { what: "the llm timeout class ends a completion's one attempt", route: Complete, inject: Inject::Fault(|| Fault::delay(Duration::from_secs(5))), row: "T1", class: "connection", copy: MSG_UNKNOWN, unknown: true, took: ms(1500)..Duration::MAX, ..CASE },
    Case { what: "a 400 naming the tenant header", route: ListKbs, inject: Status(400, "invalid X-Tenant-ID header"), row: "T2", class: "client_contract", copy: MSG_CLIENT_CONTRACT, status: Some(400), alerts: &["client_contract"], ..CASE },
    Case { what: "a 401 outside the deploy window", route: ListKbs, inject: Status(401, "Invalid API key"), row: "T3", class: "auth", copy: MSG_AUTH, status: Some(401), alerts: &["auth_outside_deploy"], ..CASE },
    Case { what: "a 403 that is not the admin gate", route: GetSettings, inject: Status(403, "Forbidden"), row: "T3", class: "auth", copy: MSG_AUTH, status: Some(403), alerts: &["auth_outside_deploy"], ..CASE },
    Case { what: "a 401 on a GET inside the window: one more attempt, no alert", route: ListKbs, inject: Status(401, "Invalid API key"), row: "T3", class: "auth", copy: MSG_AUTH, status: Some(401), in_window: true, attempts: 2, sent: 2, ..CASE },
    Case { what: "a 401 on a POST inside the window: not retried", route: CreateKb, inject: Status(401, "Invalid API key"), row: "T3", class: "auth", copy: MSG_AUTH, status: Some(401), in_window: true, ..CASE },
    Case { what: "the admin gate's 403", route: CreateKb, inject: Inject::Fault(|| Fault::AdminGate), row: "T4", class: "admin_gate", copy: MSG_ADMIN_GATE, status: Some(403), alerts: &["admin_gate"], ..CASE },
    Case { what: "a 402 pauses the feature", route: Score, inject: Inject::Fault(|| Fault::Budget), row: "T5", class: "budget_exhausted", copy: MSG_BUDGET, status: Some(402), alerts: &["budget_exhausted"], then: Some(Then::GroundednessPaused), ..CASE },
    Case { what: "a 404 outside the window", route: ListDocuments, inject: Nothing, row: "T6", class: "not_found", copy: MSG_NOT_FOUND, status: Some(404), ..CASE },
    Case { what: "a 404 on a GET inside the window: one more attempt", route: ListDocuments, inject: Nothing, row: "T6", class: "not_found", copy: MSG_NOT_FOUND, status: Some(404), in_window: true, attempts: 2, sent: 2, ..CASE },
    Case { what: "a 404 on a POST inside the window: not retried", route: UploadDocument, inject: Nothing, row: "T6", class: "not_found", copy: MSG_NOT_FOUND, status: Some(404), in_window: true, ..CASE },
    Case { what: "a 413 for 257 points", route: UpsertPoints, inject: Nothing, row: "T9", class: "payload_too_large", copy: MSG_TOO_LARGE, status: Some(413), ..CASE },
    Case { what: "a 422 on a POST pages contract drift", route: CreateKb, inject: Status(422, "name must not be empty"), row: "T10", class: "validation", copy: MSG_VALIDATION, status: Some(422), alerts: &["contract_drift"], ..CASE },
    Case { what: "a 422 on a GET outside the window", route: GetSettings, inject: Status(422, "Field required"), row: "T10", class: "validation", copy: MSG_VALIDATION, status: Some(422), alerts: &["contract_drift"], ..CASE },
    Case { what: "a 422 on a GET inside the window: one more attempt, no page", route: GetSettings, inject: Status(422, "Field required"), row: "T10", class: "validation", copy: MSG_VALIDATION, status: Some(422), in_window: true, attempts: 2, sent: 2, ..CASE },
    Case { what: "a 422 on a POST inside the window: not retried", route: CreateKb, inject: Status(422, "name must not be empty"), row: "T10", class: "validation", copy: MSG_VALIDATION, status: Some(422), in_window: true, ..CASE },
    Case { what: "a 429 without Retry-After waits the floor, three times", route: ListKbs, inject: Inject::Fault(|| Fault::RateLimited { retry_after: None }), row: "T11", class: "rate_limited", copy: MSG_RATE_LIMITED, status: Some(429), attempts: 3, sent: 3, then: Some(Then::TheFloorWasWaited), ..CASE },
    Case { what: "a Retry-After past the deadline ends the call at once", route: ListKbs, inject: Inject::Fault(|| Fault::rate_limited_secs(3600)), row: "T11", class: "rate_limited", copy: MSG_RATE_LIMITED, status: Some(429), kind: Some(OutcomeKind::Status), then: Some(Then::SaysTheWait), ..CASE },
    Case { what: "a 429 to a completion is not resent", route: Complete, inject: Status(429, "Too Many Requests"), row: "T11", class: "rate_limited", copy: MSG_RATE_LIMITED, status: Some(429), ..CASE },
    Case { what: "a 502 is retried when idempotent", route: ListKbs, inject: Inject::Fault(|| Fault::BadGateway), row: "T12", class: "bad_gateway", copy: MSG_BAD_GATEWAY, status: Some(502), attempts: 3, sent: 3, ..CASE },
    Case { what: "a 502 to a completion: the upstream may have run it", route: Complete, inject: Inject::Fault(|| Fault::BadGateway), row: "T12", class: "bad_gateway", status: Some(502), copy: MSG_UNKNOWN, unknown: true, ..CASE },
    Case { what: "a plain 502 to a completion", route: Complete, inject: Status(502, "Bad Gateway"), row: "T12", class: "bad_gateway", status: Some(502), copy: MSG_UNKNOWN, unknown: true, ..CASE },
    Case { what: "a dark 503 is stable and remembered", route: SearchRerank, inject: Dark, row: "T13", class: "feature_dark", copy: MSG_DARK, status: Some(503), then: Some(Then::SearchStaysDark), ..CASE },
    Case { what: "a dark 503 to a completion is a known outcome", route: Complete, inject: Status(503, "rerank is disabled"), row: "T13", class: "feature_dark", copy: MSG_DARK, status: Some(503), ..CASE },
    Case { what: "the safety 503 is retried at once, exactly once", route: Score, inject: Inject::Fault(|| Fault::Safety), row: "T14", class: "safety_closed", copy: MSG_SAFETY, status: Some(503), attempts: 2, sent: 2, then: Some(Then::NoWaitBeforeTheRetry), ..CASE },
    Case { what: "a safety 503 to a completion is a known outcome", route: Complete, inject: Status(503, "admission control: overloaded"), row: "T14", class: "safety_closed", copy: MSG_SAFETY, status: Some(503), ..CASE },
    Case { what: "a 503 with Retry-After is backpressure, three attempts", route: ListDocuments, inject: Inject::Fault(|| Fault::Backpressure { retry_after: RetryAfter::Seconds(0) }), row: "T15", class: "backpressure", copy: MSG_BACKPRESSURE, status: Some(503), attempts: 3, sent: 3, ..CASE },
    Case { what: "the same unknown 503 twice becomes dark", route: GetEntity, inject: Status(503, UNKNOWN_503), row: "T13", class: "feature_dark", copy: MSG_DARK, status: Some(503), attempts: 2, sent: 2, detail: Detail::Is(UNKNOWN_503), then: Some(Then::TheGraphStaysDark), ..CASE },
    Case { what: "two different unknown 503s stay ambiguous", route: GetSettings, inject: Rules(two_unknown_503s), row: "T16", class: "ambiguous", copy: MSG_AMBIGUOUS, status: Some(503), attempts: 2, sent: 2, detail: Detail::Is("upstream answered 503 (code 2)"), then: Some(Then::TheNextCallGoesOut), ..CASE },
    Case { what: "the deadline ends a call the platform is too slow for", route: Score, inject: Inject::Fault(|| Fault::delay(Duration::from_secs(60))), row: "T20", class: "deadline", copy: MSG_DEADLINE, attempts: 2, sent: 2, kind: Some(Deadline), detail: Detail::Has(&["deadline", "not the platform"]), took: ms(1800)..ms(6000), ..CASE },
    Case { what: "an open breaker fails a read fast", route: ListKbs, inject: OpenBreaker, row: "T21", class: "circuit_open", copy: MSG_CIRCUIT_OPEN, attempts: 0, sent: 0, fast: true, kind: Some(CircuitOpen), then: Some(Then::SearchUpdating), ..CASE },
    Case { what: "an open breaker sends a replay route to the replay queue", route: CreateKb, inject: OpenBreaker, row: "T21", class: "circuit_open", copy: MSG_CIRCUIT_OPEN, attempts: 0, sent: 0, then: Some(Then::Replayable), ..CASE },
    Case { what: "an open breaker fails a completion, not replayable", route: Complete, inject: OpenBreaker, row: "T21", class: "circuit_open", copy: MSG_CIRCUIT_OPEN, attempts: 0, sent: 0, then: Some(Then::NotReplayable), ..CASE },
    Case { what: "a kg-service route without its workspace", route: NoWorkspace, inject: Nothing, row: "T22", class: "invalid_scope", copy: MSG_INVALID_SCOPE, attempts: 0, sent: 0, kind: Some(InvalidScope), then: Some(Then::NothingReachedThePlatform), ..CASE },
    Case { what: "a path value that folds onto another route", route: DotDotPath, inject: Nothing, row: "T22", class: "invalid_scope", copy: MSG_INVALID_SCOPE, attempts: 0, sent: 0, then: Some(Then::NothingReachedThePlatform), ..CASE },
    Case { what: "a workspace on a tenant route", route: StrayWorkspace, inject: Nothing, row: "T22", class: "invalid_scope", copy: MSG_INVALID_SCOPE, attempts: 0, sent: 0, then: Some(Then::NothingReachedThePlatform), ..CASE },
    Case { what: "a 500 is retried when idempotent, never unknown", route: ListKbs, inject: Status(500, "Internal Server Error"), row: "T23", class: "server_error", copy: MSG_SERVER_ERROR, status: Some(500), attempts: 3, sent: 3, then: Some(Then::FiveHundredsLeaveTheBreakerClosed), ..CASE },
    Case { what: "a 500 to a completion: it may have been written", route: Complete, inject: Status(500, "Internal Server Error"), row: "T23", class: "server_error", status: Some(500), copy: MSG_UNKNOWN, unknown: true, ..CASE },
    Case { what: "uvicorn's plain-text 500 to a completion", route: Complete, inject: Inject::Fault(|| Fault::Unhandled), row: "T23", class: "server_error", status: Some(500), copy: MSG_UNKNOWN, unknown: true, ..CASE },
    Case { what: "a 504 to a completion: the upstream got it", route: Complete, inject: Status(504, "Gateway Timeout"), row: "T23", class: "server_error", status: Some(504), copy: MSG_UNKNOWN, unknown: true, ..CASE },
    Case { what: "a 200 whose body does not decode pages contract drift", route: ListKbs, inject: Status(200, "not a list"), row: "T24", class: "decode", copy: MSG_DECODE, status: Some(200), kind: Some(Decode), alerts: &["contract_drift"], then: Some(Then::CountedAsDecode), ..CASE },
    Case { what: "a 409 where a 409 is an error", route: PutSettings, inject: Status(409, "settings version conflict"), row: "T25", class: "client_error", copy: MSG_CLIENT_ERROR, status: Some(409), ..CASE },
    Case { what: "a 405", route: Spend, inject: Status(405, "method not allowed"), row: "T25", class: "client_error", copy: MSG_CLIENT_ERROR, status: Some(405), ..CASE },
    Case { what: "a 400 without a scope detail pages contract drift", route: Spend, inject: Status(400, "group_by must be service or provider"), row: "T27", class: "bad_request", copy: MSG_VALIDATION, status: Some(400), alerts: &["contract_drift"], ..CASE },
    Case { what: "a body that cannot be encoded is refused before sending", route: Unencodable, inject: Nothing, row: "T31", class: "invalid_request", copy: MSG_CLIENT_CONTRACT, attempts: 0, sent: 0, kind: Some(InvalidRequest), detail: Detail::Has(&["could not be encoded"]), alerts: &["client_contract"], then: Some(Then::StillAClientBugWithTheBreakerOpen), ..CASE },
    Case { what: "a 503 on the agent relay is the agent plane dark", route: AgentSessionStream, inject: Status(503, "Service Unavailable"), row: "T33", class: "feature_dark", copy: MSG_DARK, status: Some(503), then: Some(Then::AgentsStayDark), ..CASE },
];

/// Runs one case on a fresh simulator and asserts everything it states.
async fn check(case: &'static Case) {
    let env = Env::start().await;
    if case.in_window {
        env.enter_deploy_window().await;
    }
    inject(&env, case).await;
    let operation = case.route.operation();
    let (alerts, sent) = (env.alert_names().len(), env.count(operation));
    let started = Instant::now();
    let e = if case.fast {
        ready_now(case.route.fail(&env)).expect("fails fast: ready on the first poll")
    } else {
        case.route.fail(&env).await
    };
    let took = started.elapsed();
    let what = case.what;
    if case.in_window {
        let suspected = env.grag.runtime().deploy_suspected();
        assert!(suspected, "{what}: the call ran inside the deploy window");
    }
    assert_row(&e, case.row, case.class, case.copy);
    assert_eq!(e.status(), case.status, "{what}: the status of {e}");
    assert_eq!(e.attempts(), case.attempts, "{what}: the attempts of {e}");
    assert_eq!(
        env.count(operation) - sent,
        case.sent,
        "{what}: requests on {operation}"
    );
    assert_eq!(
        alerts_since(&env, alerts),
        case.alerts,
        "{what}: the alerts"
    );
    assert_eq!(
        e.outcome_unknown(),
        case.unknown,
        "{what}: is the outcome unknown? {e}"
    );
    if let Some(kind) = case.kind {
        assert_eq!(e.kind(), kind, "{what}: {e}");
    }
    match case.detail {
        Detail::Any => {}
        Detail::Is(detail) => assert_eq!(e.detail(), Some(detail), "{what}"),
        Detail::Has(parts) => {
            let detail = e.detail().unwrap_or_default();
            assert!(
                parts.iter().all(|p| detail.contains(p)),
                "{what}: {parts:?} in {e}"
            );
        }
    }
    assert!(
        case.took.contains(&took),
        "{what}: took {took:?}, not in {:?}",
        case.took
    );
    let breaker = match case.inject {
        OpenBreaker => CircuitState::Open,
        _ => CircuitState::Closed,
    };
    assert_eq!(
        env.state(),
        breaker,
        "{what}: one endpoint's failures leave the breaker be"
    );
    if let Some(then) = case.then {
        then.check(&env, &e).await;
    }
}

async fn inject(env: &Env, case: &Case) {
    let faults = env.sim.faults();
    let operation = case.route.operation();
    match case.inject {
        Nothing => {}
        Refused => faults.deploy_churn_stepped(Some(0)).await,
        Dark => {
            faults.dark(operation);
        }
        Status(code, detail) => {
            faults.push(Rule::new(status(code, detail)).on(operation));
        }
        Inject::Fault(fault) => {
            faults.push(Rule::new(fault()).on(operation));
        }
        Rules(rules) => {
            for rule in rules() {
                faults.push(rule);
            }
        }
        OpenBreaker => {
            env.health_down();
            env.open_breaker().await;
        }
    }
}

#[test]
fn every_case_of_the_table_holds() {
    // Each case on a runtime and thread of its own, two at a time, as the
    // harness runs tests: a case's timers never wait on another case's work.
    let mut failed = Vec::new();
    for pair in CASES.chunks(2) {
        let runs: Vec<_> = pair
            .iter()
            .map(|case| {
                (
                    case.what,
                    std::thread::spawn(move || on_own_runtime(check(case))),
                )
            })
            .collect();
        failed.extend(
            runs.into_iter()
                .filter_map(|(what, run)| run.join().is_err().then_some(what)),
        );
    }
    assert!(
        failed.is_empty(),
        "failed cases (panics above): {failed:#?}"
    );
}

fn on_own_runtime(case: impl Future<Output = ()>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    runtime.expect("a tokio runtime").block_on(case);
}

/// Rows whose cases are not of the table's shape, each with where it is tested.
const ELSEWHERE: &[(&str, &str)] = &[
    (
        "T7",
        "taxonomy::shapes::t07_409_on_a_create_route_is_success_existing",
    ),
    (
        "T8",
        "taxonomy::shapes::t08_409_on_the_docfold_result_is_still_processing",
    ),
    ("T17", "streams::an_agent_error_frame_is_a_typed_error"),
    (
        "T18",
        "grag-sim streams::keepalives_every_interval_then_timeout_at_the_ceiling",
    ),
    (
        "T19",
        "grag-sim streams::a_stalled_stream_sends_no_byte_and_trips_the_watchdog",
    ),
    (
        "T26",
        "hardening::a_redirect_is_never_followed_and_is_contract_drift",
    ),
    (
        "T28",
        "hardening::a_401_on_the_keyless_bff_lane_is_the_platform_s_not_an_auth_alert",
    ),
    (
        "T29",
        "hardening::a_status_outside_every_contract_is_classified",
    ),
    (
        "T30",
        "hardening::an_endless_2xx_body_stops_at_the_route_cap",
    ),
    (
        "T32",
        "streams::a_failed_job_ends_in_job_failed_with_the_re_upload_copy",
    ),
];

#[test]
fn every_row_of_the_taxonomy_has_a_case() {
    let rows: Vec<&str> = policy().taxonomy.iter().map(|r| r.row).collect();
    let uncovered: Vec<&&str> = rows
        .iter()
        .filter(|row| !CASES.iter().any(|c| c.row == **row))
        .filter(|row| !ELSEWHERE.iter().any(|(r, _)| r == *row))
        .collect();
    assert!(
        uncovered.is_empty(),
        "taxonomy rows without a case: {uncovered:?}"
    );
    for (row, _) in ELSEWHERE {
        assert!(
            rows.contains(row),
            "{row} is no longer a row of the taxonomy"
        );
        assert!(
            !CASES.iter().any(|c| c.row == *row),
            "{row} has a case in the table now"
        );
    }
}

/// Row, class and German message of a final error, and the `replay` the queue reads.
#[track_caller]
fn assert_row(e: &Error, row: &str, class: &str, message: &str) {
    assert_eq!(e.row(), row, "row of {e}");
    assert_eq!(e.class_name(), class, "class of {e}");
    assert_eq!(e.class().as_str(), class, "the generated class of {e}");
    assert_eq!(e.message(), Some(message), "German message of {e}");
    let spec = policy().taxonomy.iter().find(|r| r.row == row);
    assert_eq!(
        Some(e.replay()),
        spec.map(|r| r.replay),
        "the queue reads the row's `replay` from {e}"
    );
}

// ---- the checks of single cases -----------------------------------------------

impl Then {
    async fn check(self, env: &Env, e: &Error) {
        match self {
            Then::NothingReachedThePlatform => {
                assert_eq!(env.total(), 0, "nothing reached the platform")
            }
            Then::GroundednessPaused => {
                let paused = ("paused", Some("KI pausiert"));
                assert_eq!(
                    env.feature("groundedness"),
                    paused,
                    "the feature shows as paused"
                )
            }
            Then::TheFloorWasWaited => {
                let gaps = env.gaps("list_kbs");
                for gap in &gaps {
                    // 2 s floor + up to 1 s jitter, at 1/100; generous above on purpose
                    // (a loaded machine stretches a gap): it catches the unscaled floor.
                    assert!(
                        *gap >= ms(20),
                        "the 2 s floor (20 ms scaled) when Retry-After is absent: {gaps:?}"
                    );
                    assert!(*gap < Duration::from_secs(1), "{gaps:?}");
                }
                assert!(
                    env.grag.runtime().rate_limit_hot(),
                    "polling slows while hot"
                );
                assert_eq!(rate_limited(env, "absent"), Some(3), "every 429 is counted");
                assert_eq!(rate_limited(env, "present"), Some(0));
            }
            // Had the call slept toward `Retry-After: 3600` (never scaled), the 1.8 s
            // deadline would have ended it as T20.
            Then::SaysTheWait => {
                assert_eq!(e.retry_after(), Some(Duration::from_secs(3600)), "{e}");
                assert!(
                    e.to_string().contains("3600 s"),
                    "Display says what the server asked: {e}"
                );
            }
            Then::SearchStaysDark => {
                let (run, query) = (grag_sim::embedded::pipeline(), search());
                let kb = kb("kb-methodik");
                let e = ready_now(env.grag.ai_gateway(&run).search_rerank(&kb, &query))
                    .expect("remembered: fails fast, ready on the first poll")
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
            // R5 retries at once; the unscaled 2 s floor or R1's backoff would show here.
            Then::NoWaitBeforeTheRetry => {
                let gaps = env.gaps("score");
                assert!(
                    gaps[0] < Duration::from_secs(1),
                    "R5 does not wait: {gaps:?}"
                );
            }
            Then::TheGraphStaysDark => {
                let e = Route::GetEntity.fail(env).await;
                assert_row(&e, "T13", "feature_dark", MSG_DARK);
                assert_eq!(
                    env.count("get_entity"),
                    2,
                    "remembered: no request reached the sim"
                );
                assert_eq!(env.feature("knowledge_graph"), ("dark", None));
            }
            // Not remembered: the next call reaches the platform (and succeeds).
            Then::TheNextCallGoesOut => {
                env.grag.workspaces().get_settings().await.unwrap();
                assert_eq!(env.count("get_settings"), 3);
                assert_eq!(env.feature("chat"), ("available", None));
            }
            Then::SearchUpdating => {
                let platform = env
                    .sim
                    .log()
                    .entries()
                    .iter()
                    .filter(|e| e.operation != Some("health"))
                    .count();
                Route::GetSettings.fail(env).await;
                let after = env
                    .sim
                    .log()
                    .entries()
                    .iter()
                    .filter(|e| e.operation != Some("health"))
                    .count();
                assert_eq!(after, platform, "no request reached the sim while open");
                assert_eq!(
                    env.feature("search"),
                    ("updating", Some("Wird gerade aktualisiert"))
                );
            }
            Then::Replayable => {
                assert!(
                    e.replayable(),
                    "a replay route goes to the replay queue: {e}"
                )
            }
            Then::NotReplayable => {
                assert!(!e.replayable(), "{e}")
            }
            // 500s do not feed the breaker, even on three distinct endpoints.
            Then::FiveHundredsLeaveTheBreakerClosed => {
                for op in ["get_settings", "spend"] {
                    env.sim
                        .faults()
                        .push(Rule::new(status(500, "Internal Server Error")).on(op));
                }
                Route::GetSettings.fail(env).await;
                Route::Spend.fail(env).await;
                assert_eq!(env.state(), CircuitState::Closed);
            }
            // The call ended with class decode, and the metrics say so (§10.3).
            Then::CountedAsDecode => {
                let metrics = env.grag.runtime().metrics_text();
                assert!(
                    metrics.contains(r#"error_class="decode""#)
                        && !metrics.contains(r#"error_class="ok""#),
                    "grag_client_requests_total counts the call as decode, not ok:\n{metrics}"
                );
            }
            // A client bug stays one with the breaker open: T31, not T21.
            Then::StillAClientBugWithTheBreakerOpen => {
                env.health_down();
                env.open_breaker().await;
                let e = Route::Unencodable.fail(env).await;
                assert_eq!(e.class(), ErrorClass::InvalidRequest, "{e}");
            }
            // §6.3: on the agent session relay a 503 is the agent plane dark, whatever
            // the detail; elsewhere the same answer is still ambiguous (T16).
            Then::AgentsStayDark => {
                assert_eq!(env.feature("agents").0, "dark");
                let e = Route::AgentSessionStream.fail(env).await;
                assert_eq!(e.row(), "T33", "{e}");
                assert_eq!(
                    env.count("agent_session_stream"),
                    1,
                    "remembered: nothing sent"
                );
                env.sim.faults().push(
                    Rule::new(status(503, "Service Unavailable"))
                        .on("get_settings")
                        .once(),
                );
                env.grag.workspaces().get_settings().await.unwrap();
                assert_eq!(env.count("get_settings"), 2, "T16 retries once");
            }
        }
    }
}

fn two_unknown_503s() -> Vec<Rule> {
    [
        "upstream answered 503 (code 1)",
        "upstream answered 503 (code 2)",
    ]
    .map(|detail| Rule::new(status(503, detail)).on("get_settings").once())
    .into()
}

/// The 429 counter's value for `retry_after` (the metric's name from the spec).
fn rate_limited(env: &Env, retry_after: &str) -> Option<u64> {
    let name = policy().metrics.rate_limited;
    let series = format!("{name}_total{{retry_after=\"{retry_after}\"}} ");
    let text = env.grag.runtime().metrics_text();
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.parse().ok())
}

/// Alerts raised after the first `from`.
fn alerts_since(env: &Env, from: usize) -> Vec<&'static str> {
    env.alert_names().split_off(from)
}
