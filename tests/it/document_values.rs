//! One test over the generated policies: the numbers the source documents
//! state themselves (GRAG `000_…`, Core `004_…`), pinned to the document's
//! value with its section. Editing the YAML away from the document fails
//! here; so does a constant or fixture elsewhere that drifts from the spec
//! (`LockRetry::CORE_POLICY`, the replay queue's lock rule).
//! Numbers marked `inferred` in the spec are ours, not the document's, and
//! are not pinned here.

use std::time::Duration;

use grag_client::policy::{POLICY as GRAG, budget, retry, stream, timeout};
use sdk_runtime::policy::{Policy, Replay, RetrySchedule, StreamPolicy};

const fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

const fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

fn stream_of(policy: &Policy, index: sdk_runtime::policy::StreamIx) -> &StreamPolicy {
    &policy.streams[index]
}

#[test]
fn grag_streams_keep_the_documents_contract() {
    // §6.1 ingest progress.
    let jobs = stream_of(&GRAG, stream::ORCHESTRATOR);
    assert_eq!(jobs.first_event, Some("subscribed"), "§6.1 opening event");
    assert_eq!(jobs.keepalive, Some(s(20)), "§6.1 KEEPALIVE_MS = 20_000");
    assert_eq!(
        jobs.ceiling,
        Some(s(30 * 60)),
        "§6.1 STREAM_TIMEOUT_MS = 30 min"
    );
    assert_eq!(jobs.watchdog, s(45), "§6.1 no bytes for 45 s");
    assert!(
        jobs.resync_after_reconnect,
        "§6.1 poll once after any reconnect"
    );
    assert_eq!((jobs.error_event, jobs.timeout_event), ("error", "timeout"));
    let fallback = jobs.fallback.as_ref().expect("§6.1 falls back to polling");
    assert_eq!(fallback.route.path, "/next/api/pipeline/status/{job_id}");
    // §6.2 chat.
    let chat = stream_of(&GRAG, stream::CHAT);
    assert_eq!(chat.watchdog, s(150), "§6.2 150 s since last event");
    assert_eq!(chat.keepalive, None, "§6.2 no keepalive frames");
    assert!(!chat.resend, "§4.2/§6.2 never auto-resent");
    let stages = chat.stages.as_ref().expect("§6.2 stage trace");
    assert_eq!(
        stages.fail_closed,
        ["generate"],
        "§6.2 only generate fails closed"
    );
    // §6.3 the 30-min ceiling is the relay's too; agent errors are surfaced.
    let agent = stream_of(&GRAG, stream::AGENT);
    assert_eq!(agent.error_event, "error");
}

#[test]
fn grag_polling_timeouts_and_deadline_keep_the_documents_numbers() {
    // §8 / §6.1: job status every 5 s, never below 2 s, ×2 while a 429 is hot.
    let polling = &GRAG.throttle.polling;
    assert_eq!(polling.interval, s(5), "§6.1/§8 fallback polling every 5 s");
    assert_eq!(polling.floor, s(2), "§8 never below 2 s");
    assert_eq!(polling.hot_factor, 2, "§8 back off ×2 while a 429 is hot");
    // §8 throttle.
    assert_eq!(GRAG.throttle.max_in_flight, 8, "§8 8 concurrent");
    assert_eq!(GRAG.throttle.per_second, 50, "§8 50 req/s");
    let b = &GRAG.throttle.budgets;
    assert_eq!(
        b[budget::INGEST].max_in_flight,
        Some(2),
        "§8 ingest semaphore of 2"
    );
    assert_eq!(
        b[budget::RETRIEVAL].per_minute,
        Some(100),
        "§8 retrieval ≤ 100/min"
    );
    assert_eq!(
        b[budget::BACKFILL].per_minute,
        Some(30),
        "§8 backfill ≤ 30 rpm"
    );
    assert_eq!(
        b[budget::FANOUT].max_in_flight,
        Some(2),
        "§8 at most 2 in flight"
    );
    // §4.1, §5.2, §7 timeouts and the deadline.
    let t = &GRAG.timeouts;
    assert_eq!(t[timeout::DEFAULT].per_attempt, s(30), "§4.1 30 s default");
    assert_eq!(
        t[timeout::LLM].per_attempt,
        s(150),
        "§4.1 150 s LLM/groundedness"
    );
    assert_eq!(
        t[timeout::SEARCH].deploy_suspected,
        Some(s(60)),
        "§4.1/§7 60 s first call"
    );
    assert_eq!(t[timeout::PROBE].per_attempt, s(3), "§5.2 curl -m 3");
    assert_eq!(t[timeout::CANARY].per_attempt, s(5), "§5.2 curl -m 5");
    assert_eq!(GRAG.deadline, s(180), "§4.1 180 s interactive deadline");
    // App. B: the 2 s floor when a 429 carries no Retry-After.
    assert!(matches!(
        GRAG.retries[retry::R3].schedule,
        RetrySchedule::RetryAfter { floor, .. } if floor == s(2)
    ));
    assert!(
        matches!(
            GRAG.retries[retry::R2].schedule,
            RetrySchedule::DeployWindow { attempts: 2 }
        ),
        "§2/§5.2 a single extra retry"
    );
    assert!(matches!(
        GRAG.retries[retry::R5].schedule,
        RetrySchedule::Once { attempts: 2 }
    ));
}

#[test]
fn grag_breaker_keeps_the_documents_numbers() {
    let b = GRAG
        .breaker
        .as_ref()
        .expect("§5.2 one breaker for the origin");
    assert_eq!(
        (b.threshold, b.window),
        (3, s(30)),
        "§5.2 ≥3 failures within 30 s"
    );
    assert!(b.distinct_endpoints, "§5.2 across distinct endpoints");
    assert_eq!(b.probe.path, "/workspaces/health", "§5.2 probe route");
    assert_eq!(b.canary.path, "/workspaces/api/v1/kbs", "§5.2 canary read");
    assert_eq!(b.probe_interval, s(5), "§5.2 5 s interval");
    assert_eq!(b.probe_timeout, s(3), "§5.2 curl -m 3");
    assert_eq!(b.healthy_probes, 2, "§5.2 2 consecutive healthy probes");
    assert_eq!(b.canary_timeout, s(5), "§5.2 curl -m 5");
    assert_eq!(b.alert_after, s(5 * 60), "§5.2 open > 5 min");
    assert_eq!(b.deploy_suspected, s(120), "§5.2 120 s after open→close");
    assert_eq!(
        GRAG.ids.reserved_tenants,
        ["default", "system", "canary"],
        "§3.1"
    );
    assert_eq!(GRAG.ids.pattern.text, "^[a-z0-9][a-z0-9-]{0,62}$", "§3.3");
}

#[test]
fn the_replay_queue_keeps_the_core_documents_lock_rule() {
    // Core "Persistence Contention Policy": 3 attempts, 0.02 s × attempt.
    let replay = GRAG.replay.as_ref().expect("§5.3 replay queue");
    assert_eq!(replay.lock_attempts, 3);
    assert_eq!(replay.lock_step, ms(20));
    assert_eq!(replay.split, 256, "App. A split batch (≤256 points)");
    assert_eq!(replay.kinds, ["ingest", "kg"], "§10.3 kind=ingest|kg");
    // The store's constant and the queue's rule are the spec's.
    assert_eq!(sdk_queue::LockRetry::CORE_POLICY, grag_jobs::lock_retry());
    assert_eq!(
        sdk_queue::LockRetry::CORE_POLICY,
        sdk_queue::LockRetry {
            attempts: replay.lock_attempts,
            step: replay.lock_step,
        }
    );
}

#[test]
fn the_job_stores_retention_is_the_specs_own_numbers() {
    // The policy names no retention (§1.4 only says Knoll's state is the
    // source of truth): ours, River's defaults (completed 24 h, discarded 7 d).
    let replay = GRAG.replay.as_ref().expect("§5.3 replay queue");
    let hours = |h: u64| std::time::Duration::from_secs(h * 3600);
    assert_eq!(replay.keep_done, hours(24));
    assert_eq!(replay.keep_failed, hours(24 * 7));
    assert_eq!(replay.prune_batch, 500);
    assert_eq!(replay.prune_every, std::time::Duration::from_secs(60));
    // Ours too: some 500 uploads of a few MB each still held.
    assert_eq!(replay.store_bound, 2 << 30);
    let rules = include_str!("../../generated/grag-client/alerts.rules.yml");
    let rule = rules
        .split("- alert: ")
        .find(|r| r.starts_with(&format!("\"{}\"", replay.store_alert)))
        .expect("a rule for the store's alert");
    assert!(
        rule.contains(&format!(
            "({})) > {}\"",
            replay.store_bytes_metric, replay.store_bound
        )),
        "the rule reads the store's bytes against the spec's bound: {rule}"
    );
    let md = include_str!("../../generated/grag-client/POLICY.md");
    assert!(
        md.contains("Retention (§1.4; ours") && md.contains("(inferred)): a done job"),
        "POLICY.md marks the retention numbers as ours"
    );
}

#[test]
fn the_replay_column_keeps_the_documents_queue_rules() {
    let replay = |row: &str| {
        GRAG.taxonomy
            .iter()
            .find(|r| r.row == row)
            .unwrap_or_else(|| panic!("row {row}"))
            .replay
    };
    // §5.3.2: "on breaker-open or terminal connection failure, the job flips
    // to pending_replay"; §5.2 counts 502/503 with the connection-level ones.
    assert_eq!(replay("T21"), Replay::Outage, "§5.3.2 breaker open");
    assert_eq!(replay("T1"), Replay::Outage, "§5.3.2 connection failure");
    for row in ["T12", "T14", "T16"] {
        assert_eq!(replay(row), Replay::Outage, "{row}: §5.2 a 502/503");
    }
    // App. A: "503 + Retry-After (WAL) → honor Retry-After / re-queue ingest".
    assert_eq!(replay("T15"), Replay::Later, "App. A re-queue ingest");
    // §5.1: "transient 401/404/422 answers can occur while containers come up".
    for row in ["T3", "T6", "T10"] {
        assert_eq!(replay(row), Replay::Deploy, "{row}: §5.1 deploy churn");
    }
    // Verdicts: 402 hard stop, 413 split, 400 client bug, admin runbook, a
    // scope refused before sending (App. A, §3).
    for row in ["T5", "T9", "T2", "T4", "T22"] {
        assert_eq!(replay(row), Replay::Never, "{row}: App. A / §3");
    }
    // The Core document queues nothing: no row replays.
    for r in core_client::policy::POLICY.taxonomy {
        assert_eq!(
            r.replay,
            Replay::Never,
            "{}: Core has no replay queue",
            r.row
        );
    }
}

#[test]
fn core_keeps_the_documents_transport_numbers() {
    let core = &core_client::policy::POLICY;
    let configurable: Vec<_> = core
        .retries
        .iter()
        .filter_map(|r| r.configurable.map(|b| (r.schedule, b)))
        .collect();
    assert_eq!(configurable.len(), 1, "CoreClient's one bounded retry");
    let (schedule, bounds) = configurable[0];
    assert_eq!(
        schedule,
        RetrySchedule::Linear {
            attempts: 2,
            step: ms(250)
        },
        "retry_attempts default 2, retry_backoff_seconds default 0.25"
    );
    assert_eq!(bounds.min_attempts, 1, "retry_attempts minimum 1");
    // "Keep retry bounds low": the document names no maximum; ours holds
    // its default and stays in single digits.
    assert!(
        (2..10).contains(&bounds.max_attempts),
        "retry_attempts maximum {}",
        bounds.max_attempts
    );
    assert_eq!(
        bounds.min_step,
        Duration::ZERO,
        "retry_backoff_seconds minimum 0.0"
    );
    // "Alert on elevated retry-exhaustion rates": a rate, not every call.
    assert!(core.alerts.retry_exhausted_rate.is_some());
    assert!(
        core.breaker.is_none() && core.streams.is_empty(),
        "no breaker, no streams"
    );
}

#[test]
fn core_workflow_actions_are_its_only_non_idempotent_routes() {
    // Idempotency: contract calls are at-least-once; "session actions
    // (accept/reject/advance/discuss) ... are not universally idempotent".
    let non_idempotent: Vec<&str> = core_client::policy::ENDPOINTS
        .iter()
        .filter(|e| !e.idempotent)
        .map(|e| e.operation)
        .collect();
    assert_eq!(
        non_idempotent,
        ["accept", "reject", "advance", "discuss"],
        "Idempotency: Workflow Actions"
    );
}
