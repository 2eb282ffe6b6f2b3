//! A small policy for the runtime's own unit tests.
//!
//! The runtime executes any API's policy and must not depend on a generated
//! one, so its tests of job following ([`crate::follow`]) and chat turns
//! ([`crate::turn`]) run against this fixture instead: a job-progress stream
//! with its status route and a chat stream, with the numbers of a real
//! contract (45 s watchdog, 20 s keepalives, a 30 min ceiling, polling every
//! 5 s and twice as slow while a 429 is hot, a reopen after 6 polls; a 150 s
//! chat watchdog whose `generate` stage fails closed; the buffering rule and
//! the sustained-fallback rate) and the taxonomy rows those tests reach.
//! Nothing else: no breaker, no replay queue, no warm-up calls.

use std::time::Duration;

use sdk_policy::Endpoint;
use sdk_policy::Method;
use sdk_policy::Policy;
use sdk_policy::ScopeNeed;
use sdk_policy::log::{
    AlertLine, AttemptLine, ExhaustedLine, LogLines, LogNames, SentLine, StreamFailedLine,
};
use sdk_policy::policy::*;

/// Indexes into [`POLICY`]'s streams.
pub const PROGRESS: StreamIx = StreamIx::new(0);
pub const CHAT: StreamIx = StreamIx::new(1);

/// A job's progress events; falls back to [`JOB_STATUS`].
pub static JOB_EVENTS: Endpoint = Endpoint {
    service: "jobs",
    operation: "job_events",
    method: Method::Get,
    path: "/jobs/{job_id}/events",
    stream: Some(PROGRESS),
    idempotent: true,
    route: RouteIx::new(0),
    ..ROUTE
};

/// A job's status, polled when its stream fails.
pub static JOB_STATUS: Endpoint = Endpoint {
    service: "jobs",
    operation: "job_status",
    method: Method::Get,
    path: "/jobs/{job_id}",
    idempotent: true,
    route: RouteIx::new(1),
    ..ROUTE
};

/// One chat turn, streamed.
pub static CHAT_STREAM: Endpoint = Endpoint {
    service: "chat",
    operation: "chat_stream",
    method: Method::Post,
    path: "/chat/stream",
    stream: Some(CHAT),
    route: RouteIx::new(2),
    ..ROUTE
};

/// What the three routes share.
const ROUTE: Endpoint = Endpoint {
    service: "",
    operation: "",
    method: Method::Get,
    path: "",
    scope: ScopeNeed::Tenant,
    lane: sdk_policy::Lane::Key,
    timeout: TimeoutIx::new(0),
    retry: RetryIx::new(0),
    idempotent: false,
    budget: BudgetIx::new(0),
    replay: false,
    conflict: Conflict::Error,
    pipeline_id: false,
    stream: None,
    max_response: 16 << 20,
    route: RouteIx::new(0),
};

/// A tenant name these rules accept.
pub const TENANT: &str = "tenant-a";

/// Writes no log line: the tests read alerts through
/// [`crate::alerts::CollectAlerts`] and counts through the metrics.
#[derive(Debug)]
struct Quiet;

impl LogLines for Quiet {
    fn enabled(&self) -> bool {
        false
    }
    fn sent(&self, _: &SentLine<'_>) {}
    fn attempt(&self, _: &AttemptLine<'_>) {}
    fn alert(&self, _: &AlertLine<'_>) {}
    fn retry_exhausted(&self, _: &ExhaustedLine<'_>) {}
    fn stream_failed(&self, _: &StreamFailedLine<'_>) {}
    fn breaker(&self, _: &str, _: &str) {}
    fn warm_up(&self, _: &str, _: bool) {}
}

/// Taxonomy row `index`, matching every outcome of `outcome`, never retried.
const fn row(
    index: u16,
    row: &'static str,
    outcome: OutcomeKind,
    class: &'static str,
) -> TaxonomyRow {
    TaxonomyRow {
        index: RowIx::new(index),
        row,
        matches: RowMatch {
            outcome,
            status: None,
            detail: None,
            retry_after: None,
            conflict: None,
            keyless: None,
            routes: None,
        },
        class,
        success: false,
        retry: Some(RetryIx::new(0)),
        feeds_breaker: false,
        outcome_unknown: false,
        alert: None,
        alert_outside_deploy: false,
        feature_state: None,
        remember_for: None,
        escalate_to: None,
        replay: Replay::Never,
        action: "",
        message: None,
        unknown_message: None,
    }
}

pub static POLICY: Policy = Policy {
    api: "sdk_test",
    headers: HeaderNames {
        authorization: "Authorization",
        auth_scheme: "Bearer",
        tenant: "X-Tenant-ID",
        workspace: None,
        request_id: "X-Request-ID",
        retry_after: "Retry-After",
        pipeline: None,
    },
    ids: IdRules {
        pattern: IdPattern {
            text: "^[a-z0-9][a-z0-9-]{0,62}$",
            first: &[(b'a', b'z'), (b'0', b'9')],
            rest: &[(b'a', b'z'), (b'0', b'9'), (b'-', b'-')],
            min_len: 1,
            max_len: 63,
        },
        reserved_tenants: &[],
        opaque: &[],
        opaque_max_len: 256,
    },
    reserved_floor: &[],
    timeouts: &[TimeoutClass {
        name: "default",
        per_attempt: Duration::from_secs(30),
        deploy_suspected: None,
    }],
    deadline: Duration::from_secs(180),
    retries: &[RetryClass {
        name: "never",
        schedule: RetrySchedule::Never,
        configurable: None,
    }],
    breaker: None,
    throttle: ThrottlePolicy {
        max_in_flight: 8,
        per_second: 50,
        rate_period: Duration::from_secs(1),
        budget_period: Duration::from_secs(60),
        budgets: &[BudgetPolicy {
            name: "global",
            max_in_flight: None,
            per_minute: None,
        }],
        polling: PollingPolicy {
            interval: Duration::from_secs(5),
            floor: Duration::from_secs(2),
            hot_factor: 2,
        },
    },
    taxonomy: &[
        row(0, "T1", OutcomeKind::Connection, "connection"),
        row(1, "T20", OutcomeKind::Deadline, "deadline"),
        TaxonomyRow {
            alert: Some("contract_drift"),
            ..row(2, "T24", OutcomeKind::Decode, "decode")
        },
        row(3, "T17", OutcomeKind::StreamError, "stream_error"),
        row(4, "T18", OutcomeKind::StreamTimeout, "stream_timeout"),
        row(5, "T19", OutcomeKind::StreamStalled, "stream_stalled"),
        row(6, "T32", OutcomeKind::JobFailed, "job_failed"),
    ],
    detail_sets: &[],
    streams: &[
        StreamPolicy {
            name: "jobs",
            watchdog: Duration::from_secs(45),
            keepalive: Some(Duration::from_secs(20)),
            ceiling: Some(Duration::from_secs(30 * 60)),
            resync_after_reconnect: true,
            resend: true,
            first_event: Some("subscribed"),
            terminal_events: &["completed", "failed", "cancelled", "timeout"],
            ends_with_terminal: true,
            error_event: "error",
            timeout_event: "timeout",
            fallback: Some(StreamFallback {
                route: &JOB_STATUS,
                status_field: "status",
                completed: &["completed"],
                failed: &["failed", "cancelled"],
                error_field: Some("error"),
                reopen_after: 6,
            }),
            stages: None,
            lost_copy: None,
        },
        StreamPolicy {
            name: "chat",
            watchdog: Duration::from_secs(150),
            keepalive: None,
            ceiling: None,
            resync_after_reconnect: false,
            resend: false,
            first_event: None,
            terminal_events: &["done", "error"],
            ends_with_terminal: true,
            error_event: "error",
            timeout_event: "timeout",
            fallback: None,
            stages: Some(StagePolicy {
                event: "trace",
                stage_field: "stage",
                status_field: "status",
                failed: &["failed"],
                fail_closed: &["generate"],
                detail_field: Some("detail"),
                feature: "chat",
            }),
            lost_copy: Some("Your message is saved, the answer likely not. Send it again?"),
        },
    ],
    buffering: Some(BufferingRule {
        min_events: 3,
        burst: Duration::from_millis(250),
        silent_for: Duration::from_secs(5),
        confirm_after: 2,
        alert: "sse_fallbacks_sustained",
    }),
    fallbacks_sustained: Some((
        AlertRate {
            at_least: 5,
            within: Duration::from_secs(600),
        },
        "sse_fallbacks_sustained",
    )),
    states: &[
        FeatureStateCopy {
            state: "available",
            copy: None,
            when: StateTrigger::Otherwise,
        },
        FeatureStateCopy {
            state: "degraded",
            copy: None,
            when: StateTrigger::StageFailed,
        },
    ],
    messages: &[],
    warm_up: &[],
    features: &[FeaturePolicy {
        name: "chat",
        routes: &[&CHAT_STREAM],
    }],
    alerts: AlertNames {
        retry_exhausted: "retry_exhausted",
        retry_exhausted_rate: None,
        severities: &[AlertSeverity {
            alert: "retry_exhausted",
            severity: "ops",
        }],
    },
    limits: Limits {
        error_body: 64 << 10,
        detail: 1024,
        sse_line: 1 << 20,
        sse_event: 1 << 20,
    },
    routes: &[&JOB_EVENTS, &JOB_STATUS, &CHAT_STREAM],
    pool_idle: Duration::from_secs(4),
    pool_idle_floor: Duration::from_secs(1),
    keep_alive_margin: Some(Duration::from_secs(1)),
    metrics: MetricNames {
        requests: "sdk_test_requests",
        duration: "sdk_test_request_duration_seconds",
        circuit_state: None,
        circuit_open_seconds: None,
        sse_fallback: Some("sdk_test_sse_fallback"),
        sse_buffered: Some("sdk_test_sse_buffered"),
        rate_limited: "sdk_test_rate_limited",
        alerts: "sdk_test_alerts",
    },
    log: LogNames {
        target: "sdk_test",
        path_fields: &[],
    },
    log_lines: &Quiet,
    fresh_after: &[],
    replay: None,
    fleet: None,
};

#[cfg(test)]
mod tests {
    use super::POLICY;

    /// The fixture's stream and polling numbers are GRAG's (§6, §8): read from
    /// `spec/grag` here, so the fixture cannot drift from the spec unnoticed.
    #[test]
    fn the_fixture_streams_and_polling_are_the_grag_specs() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec/grag");
        let files = sdk_codegen::load::read_dir(&root).expect("spec/grag reads");
        let model = sdk_codegen::model(&files).expect("spec/grag is valid");
        for (fixture, spec) in [("jobs", "orchestrator"), ("chat", "chat")] {
            let ours = POLICY.streams.iter().find(|s| s.name == fixture).unwrap();
            let theirs = model.streams.iter().find(|s| s.name == spec).unwrap();
            assert_eq!(ours.watchdog, theirs.watchdog, "{fixture}: watchdog");
            assert_eq!(ours.keepalive, theirs.keepalive, "{fixture}: keepalive");
            assert_eq!(ours.ceiling, theirs.ceiling, "{fixture}: ceiling");
            assert_eq!(
                ours.first_event, theirs.first_event,
                "{fixture}: first event"
            );
            assert_eq!(ours.resend, theirs.resend, "{fixture}: resend");
            assert_eq!(
                ours.resync_after_reconnect, theirs.resync_after_reconnect,
                "{fixture}: resync"
            );
        }
        let polling = &POLICY.throttle.polling;
        let theirs = &model.throttle.value.polling;
        assert_eq!(polling.interval, theirs.interval);
        assert_eq!(polling.floor, theirs.floor);
        assert_eq!(polling.hot_factor, theirs.hot_factor);
    }
}
