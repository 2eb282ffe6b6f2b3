//! Conclude: what a judged attempt does to the breaker, the memory and the
//! telemetry, and whether the call is done, retried at an instant, or failed.

use std::time::Duration;

use sdk_policy::endpoint::{Endpoint, Method};
use sdk_policy::policy::{RetrySchedule, TaxonomyRow};
use tokio::time::Instant;

use super::Run;
use super::admit::Admitted;
use super::attempt::Sent;
use super::fleet::{fleet_pause, fleet_share_dark};
use super::judge::{BreakerNews, Previous, Verdict};
use super::{Answered, Opened, StreamSlots};
use crate::backoff::{Attempted, Next, RetryCase, next};
use crate::breaker::Transition;
use crate::client::{Caller, Parts};
use crate::error::{Class, Detail, Error};
use crate::gate::Gate;
use crate::plan::Plan;
use crate::recorder::Recorder;
use crate::reply::{Ledger, Reply};
use crate::telemetry::{self, AttemptLog};
use crate::wire::Attempt;

/// How the call goes on after one attempt.
#[expect(
    clippy::large_enum_variant,
    reason = "a step lives on the stack for one attempt: a box would allocate on every success"
)]
pub(super) enum Step {
    Done(Answered),
    /// Attempt again at this instant; nothing is held while waiting.
    RetryAt(Instant),
    /// `exhausted`: the row's retries were used up.
    Fail {
        error: Error,
        exhausted: bool,
    },
}

/// Concludes attempt `run.attempt` from its verdict; with the breaker's
/// transition, if the attempt made one, for the client to act on.
pub(super) fn conclude(
    parts: &Parts,
    caller: &Caller,
    run: &mut Run<'_, '_>,
    mut sent: Sent,
    verdict: Verdict,
    admitted: Admitted<'_>,
) -> (Step, Option<Transition>) {
    let Parts {
        plan,
        gate,
        recorder,
        ..
    } = parts;
    let endpoint = run.call.endpoint;
    let status = sent.attempt.status();
    crate::spans::attempt_done(&sent.span, status, verdict.row);
    let transition = match verdict.breaker {
        BreakerNews::Silent => None,
        news => gate.record(
            admitted.generation,
            endpoint.path,
            news == BreakerNews::Failure,
        ),
    };
    // The ID the platform's logs know the request by: its echo, else ours.
    let echoed = match &mut sent.attempt {
        Attempt::Answer { echoed_id, .. } => echoed_id.take(),
        _ => None,
    };
    run.digest(plan);
    let digest = run.body_digest.as_deref();
    let (latency, circuit_state) = line_readings(plan, gate, sent.started);
    let log = AttemptLog {
        scope: &run.scope,
        request_id: &sent.request_id,
        echoed_id: echoed.as_deref(),
        status,
        row: verdict.row,
        attempt: run.attempt,
        retry_after: verdict.retry_after,
        latency,
        circuit_state,
    };
    if verdict.answered
        && let Attempt::Answer { status, body, .. } = sent.attempt
    {
        gate.memory().record_success(endpoint);
        // The line is written when the body is decoded: a 2xx that does
        // not decode is logged (and counted) as T24, not as a success.
        let ledger = Ledger {
            line: telemetry::pending(plan.policy, &log, digest),
            started: run.started,
            attempts: run.attempt,
        };
        let request_id = echoed.unwrap_or(sent.request_id);
        caller.note(endpoint, &request_id, Some(status), true);
        let recorder = std::sync::Arc::clone(recorder);
        let reply = Reply::new(recorder, endpoint, status, body, request_id, ledger);
        let answered = answered(reply, sent.response, admitted, run.started, sent.started);
        return (Step::Done(answered), transition);
    }
    telemetry::attempt(plan.policy, &log, digest);
    heed_waits(plan, gate, recorder, status, &verdict);
    let request_id = echoed.unwrap_or_else(|| sent.request_id.clone());
    // The request ended: its throttle slots are free while the call backs off.
    drop(admitted);
    let step = retry_or_fail(
        plan, gate, recorder, caller, run, &sent, verdict, request_id,
    );
    (step, transition)
}

/// What the answering attempt hands on. Only an open stream keeps the
/// call's slots, until it ends; a read's are freed when `admitted` drops here.
fn answered(
    reply: Reply,
    response: Option<reqwest::Response>,
    admitted: Admitted<'_>,
    started: Instant,
    sent: Instant,
) -> Answered {
    let Some(response) = response else {
        return Answered::Whole(reply);
    };
    let fleet = admitted.fleet;
    let slots = StreamSlots {
        local: admitted.permit.detach(),
        fleet,
    };
    Answered::Stream(Opened {
        reply,
        response,
        slots,
        started,
        sent,
    })
}

/// What only an attempt's log line reads, its latency and the breaker's
/// state: no clock read or lock taken when no line is written.
fn line_readings(plan: &Plan, gate: &Gate, started: Instant) -> (Duration, &'static str) {
    match telemetry::enabled(plan.policy) {
        true => (started.elapsed(), gate.breaker().state().as_str()),
        false => (Duration::ZERO, ""),
    }
}

/// A platform-wide wait pauses the whole fleet, not just this call; a
/// 429 makes polling slower for a while.
fn heed_waits(
    plan: &Plan,
    gate: &Gate,
    recorder: &Recorder,
    status: Option<u16>,
    verdict: &Verdict,
) {
    if let (Some(429 | 503), Some(wait)) = (status, verdict.retry_after) {
        fleet_pause(gate, wait);
    }
    if status == Some(429) {
        recorder.metrics.rate_limited(verdict.retry_after.is_some());
        let polling = &plan.policy.throttle.polling;
        let hot_for = polling.interval * polling.hot_factor;
        gate.memory().saw_429(Instant::now(), hot_for);
    }
}

/// After a failed attempt: retried at an instant (`backoff::next`), or
/// the call fails with the verdict's error, its row remembered and alerted.
#[expect(
    clippy::too_many_arguments,
    reason = "each part it reads, named: no world object"
)]
fn retry_or_fail(
    plan: &Plan,
    gate: &Gate,
    recorder: &Recorder,
    caller: &Caller,
    run: &mut Run<'_, '_>,
    sent: &Sent,
    verdict: Verdict,
    request_id: String,
) -> Step {
    let endpoint = run.call.endpoint;
    let (exhausted, wait) = match decide(plan, caller, run, sent, &verdict) {
        Ok(at) => {
            run.previous = (verdict.row).map(|row| Previous {
                row,
                detail: verdict.detail,
            });
            return Step::RetryAt(at);
        }
        Err(Ended::Deadline) => {
            let request_id = Some(sent.request_id.clone());
            let error = run.deadline_error(plan, request_id, verdict.unknown);
            return Step::Fail {
                error,
                exhausted: false,
            };
        }
        Err(Ended::Fail { exhausted, wait }) => (exhausted, wait),
    };
    let status = sent.attempt.status();
    let error = plan
        .error(Class::Judged(sent.attempt.kind(), verdict.row), endpoint)
        .with_head_withheld(sent.head_withheld)
        .with_outcome_unknown(verdict.unknown)
        .with_attempts(run.attempt)
        .with_request_id(request_id)
        .with_status_opt(status, verdict.detail.clone());
    let error = match wait {
        Some(wait) => error.with_retry_after(wait),
        None => error,
    };
    let (row, detail) = (verdict.row, verdict.detail);
    settle(
        gate,
        recorder,
        row,
        &error,
        endpoint,
        status,
        detail,
        sent.deploy,
    );
    Step::Fail { error, exhausted }
}

/// How a call that is not retried ends.
enum Ended {
    Deadline,
    /// `wait`: the server's wait outlasts the deadline, or the caller (a
    /// job queue) waits it out itself, holding nothing.
    Fail {
        exhausted: bool,
        wait: Option<Duration>,
    },
}

/// Whether a failed attempt is retried (at an instant) or the call ends.
fn decide(
    plan: &Plan,
    caller: &Caller,
    run: &Run<'_, '_>,
    sent: &Sent,
    verdict: &Verdict,
) -> Result<Instant, Ended> {
    let endpoint = run.call.endpoint;
    let retries = &plan.retries;
    let schedule = verdict.row.and_then(|r| r.retry);
    let case = RetryCase {
        row: schedule.map_or(RetrySchedule::Never, |i| retries[i].schedule),
        // The route's own class bounds every row's: an R0 route is never re-sent.
        route: retries[endpoint.retry].schedule,
        get: endpoint.method == Method::Get,
        deploy_suspected: sent.deploy,
        idempotent: endpoint.idempotent,
        maybe_sent: verdict.maybe_sent,
    };
    let attempted = Attempted {
        case,
        attempt: run.attempt,
        retry_after: verdict.retry_after,
        defer_server_waits: caller.defer_server_waits,
        now: Instant::now(),
        deadline: run.deadline,
    };
    // A job stream whose head is withheld is not opened again here: its
    // follower polls instead, and a proxy holding streams would hold
    // the next opening too.
    if sent.head_withheld && plan.falls_back(endpoint) {
        return Err(Ended::Fail {
            exhausted: false,
            wait: None,
        });
    }
    match next(&attempted, &mut rand::rng()) {
        Next::RetryAt(at) => Ok(at),
        Next::Deadline => Err(Ended::Deadline),
        Next::Fail { exhausted } => Err(Ended::Fail {
            exhausted,
            wait: None,
        }),
        Next::Wait(wait) => Err(Ended::Fail {
            exhausted: false,
            wait: Some(wait),
        }),
    }
}

/// The row ended the call: remember a stable answer (across the fleet
/// too), raise the row's alert unless deploys explain it.
#[expect(
    clippy::too_many_arguments,
    reason = "each part it reads, named: no world object"
)]
pub(super) fn settle(
    gate: &Gate,
    recorder: &Recorder,
    row: Option<&'static TaxonomyRow>,
    error: &Error,
    endpoint: &'static Endpoint,
    status: Option<u16>,
    detail: Option<Detail>,
    deploy: bool,
) {
    let Some(row) = row else { return };
    if let Some(for_) = row.remember_for {
        fleet_share_dark(gate, endpoint, row, status, for_);
    }
    (gate.memory()).record_final(endpoint, row, status, detail, Instant::now());
    if let Some(name) = row.alert
        && !(row.alert_outside_deploy && deploy)
    {
        recorder.raise(name, error);
    }
}
