//! Conclude: what a judged attempt does to the breaker, the memory and the
//! telemetry, and whether the call is done, retried at an instant, or failed.

use std::time::Duration;

use tokio::time::Instant;

use super::Answered;
use super::Run;
use super::admit::Admitted;
use super::attempt::{Attempt, Sent};
use super::judge::Verdict;
use crate::alerts::Alert;
use crate::backoff::{Attempted, Next, RetryCase, next};
use crate::breaker::{CircuitState, Generation};
use crate::call::Call;
use crate::client::Client;
use crate::endpoint::{Endpoint, Method};
use crate::error::{Class, Detail, Error};
use crate::policy::{RetrySchedule, TaxonomyRow};
use crate::reply::{Ledger, Reply};
use crate::telemetry::{self, AttemptLog};

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

impl Client {
    /// Concludes attempt `run.attempt` from its verdict.
    pub(super) fn conclude(
        &self,
        run: &mut Run<'_, '_>,
        mut sent: Sent,
        verdict: Verdict,
        admitted: Admitted<'_>,
    ) -> Step {
        let endpoint = run.call.endpoint;
        let status = sent.attempt.status();
        crate::spans::attempt_done(&sent.span, status, verdict.row);
        if let Some(failed) = verdict.breaker {
            self.record_breaker(admitted.generation, endpoint.path, failed);
        }
        // The ID the platform's logs know the request by: its echo, else ours.
        let echoed = match &mut sent.attempt {
            Attempt::Answer { echoed_id, .. } => echoed_id.take(),
            _ => None,
        };
        let log = AttemptLog {
            client: self,
            call: run.call,
            request_id: &sent.request_id,
            echoed_id: echoed.as_deref(),
            status,
            row: verdict.row,
            attempt: run.attempt,
            retry_after: verdict.retry_after,
            // Only a line reads it: no clock read when none is written.
            latency: if telemetry::enabled(self) {
                sent.started.elapsed()
            } else {
                Duration::ZERO
            },
        };
        if verdict.answered
            && let Attempt::Answer { status, body, .. } = sent.attempt
        {
            self.memory().record_success(endpoint);
            // The line is written when the body is decoded: a 2xx that does
            // not decode is logged (and counted) as T24, not as a success.
            let ledger = Ledger {
                line: telemetry::pending(&log, run.digest()),
                started: run.started,
                attempts: run.attempt,
            };
            let request_id = echoed.unwrap_or(sent.request_id);
            self.note(endpoint, &request_id, Some(status), true);
            let reply = Reply::new(self.clone(), endpoint, status, body, request_id, ledger);
            let stream = sent.response.map(|r| {
                let slots = admitted.permit.detach();
                (r, slots.with_fleet(admitted.fleet))
            });
            return Step::Done(Answered {
                reply,
                stream,
                started: run.started,
                sent: sent.started,
            });
        }
        telemetry::attempt(&log, run.digest());
        self.heed_waits(status, &verdict);
        let request_id = echoed.unwrap_or_else(|| sent.request_id.clone());
        // The request ended: its throttle slots are free while the call backs off.
        drop(admitted);
        self.retry_or_fail(run, &sent, verdict, request_id)
    }

    /// A platform-wide wait pauses the whole fleet, not just this call; a
    /// 429 makes polling slower for a while.
    fn heed_waits(&self, status: Option<u16>, verdict: &Verdict) {
        if let (Some(429 | 503), Some(wait)) = (status, verdict.retry_after) {
            self.fleet_pause(wait);
        }
        if status == Some(429) {
            self.shared
                .metrics
                .rate_limited(verdict.retry_after.is_some());
            let polling = &self.shared.policy.throttle.polling;
            let hot_for = polling.interval * polling.hot_factor;
            self.memory().saw_429(Instant::now(), hot_for);
        }
    }

    /// After a failed attempt: retried at an instant (`backoff::next`), or
    /// the call fails with the verdict's error, its row remembered and alerted.
    fn retry_or_fail(
        &self,
        run: &mut Run<'_, '_>,
        sent: &Sent,
        verdict: Verdict,
        request_id: String,
    ) -> Step {
        let endpoint = run.call.endpoint;
        let retries = &self.shared.retries;
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
            defer_server_waits: self.defer_server_waits,
            now: Instant::now(),
            deadline: run.deadline,
        };
        // A job stream whose head is withheld is not opened again here: its
        // follower polls instead, and a proxy holding streams would hold
        // the next opening too.
        let decision = if sent.head_withheld && self.falls_back(endpoint) {
            Next::Fail { exhausted: false }
        } else {
            next(&attempted, &mut rand::rng())
        };
        let (exhausted, wait) = match decision {
            Next::RetryAt(at) => {
                run.previous = verdict.row.map(|r| (r, verdict.detail));
                return Step::RetryAt(at);
            }
            Next::Deadline => {
                let error = run.deadline_error(Some(sent.request_id.clone()), verdict.unknown);
                return Step::Fail {
                    error,
                    exhausted: false,
                };
            }
            Next::Fail { exhausted } => (exhausted, None),
            // The server's wait outlasts the deadline, or the caller (a job
            // queue) waits it out itself, holding nothing: say so.
            Next::Wait(wait) => (false, Some(wait)),
        };
        let status = sent.attempt.status();
        let error = self
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
        self.finish_row(
            verdict.row,
            &error,
            endpoint,
            status,
            verdict.detail,
            sent.deploy,
        );
        Step::Fail { error, exhausted }
    }

    /// Whether `endpoint` is a stream with a polling fallback (a job stream).
    fn falls_back(&self, endpoint: &Endpoint) -> bool {
        endpoint
            .stream
            .is_some_and(|i| self.shared.policy.streams[i].fallback.is_some())
    }

    /// The row ended the call: remember a stable answer, raise the row's alert.
    pub(super) fn finish_row(
        &self,
        row: Option<&'static TaxonomyRow>,
        error: &Error,
        endpoint: &'static Endpoint,
        status: Option<u16>,
        detail: Option<Detail>,
        deploy: bool,
    ) {
        if let Some(row) = row {
            if let Some(for_) = row.remember_for {
                self.fleet_share_dark(endpoint, row, status, for_);
            }
            self.memory()
                .record_final(endpoint, row, status, detail, Instant::now());
            self.row_alert(row, error, deploy);
        }
    }

    pub(super) fn record_breaker(
        &self,
        generation: Generation,
        endpoint: &'static str,
        failed: bool,
    ) {
        // A success changes nothing but a half-open breaker's canary: while
        // the state word says closed there is nothing to record (a breaker
        // that left closed since has another generation, which ignores it).
        if !failed && self.shared.breaker.state() == CircuitState::Closed {
            return;
        }
        let now = Instant::now();
        let transition = {
            let mut breaker = self.breaker();
            if failed {
                breaker.record_failure(generation, endpoint, now)
            } else {
                breaker.record_success(generation, now)
            }
        };
        self.on_transition(transition);
    }

    /// The alert a final row raises, unless deploys explain it.
    fn row_alert(&self, row: &'static TaxonomyRow, error: &Error, deploy: bool) {
        let Some(name) = row.alert else { return };
        if row.alert_outside_deploy && deploy {
            return;
        }
        self.raise(name, error);
    }

    /// Notes a call that reached the platform in the caller's handle, if any.
    pub(super) fn note(
        &self,
        endpoint: &Endpoint,
        request_id: &str,
        status: Option<u16>,
        ok: bool,
    ) {
        if let Some(refs) = &self.refs {
            refs.note(crate::RequestRef {
                service: endpoint.service,
                operation: endpoint.operation,
                request_id: request_id.to_owned(),
                status,
                ok,
            });
        }
    }

    /// Counts one finished call in the metrics.
    pub(crate) fn count_call(
        &self,
        endpoint: &Endpoint,
        class: &'static str,
        retried: bool,
        started: Instant,
    ) {
        self.shared
            .metrics
            .call(endpoint.service, class, retried, started.elapsed());
    }

    pub(crate) fn raise(&self, name: &'static str, error: &Error) {
        self.raise_with(name, error, error.detail().map(str::to_owned));
    }

    /// [`Client::raise`] with a detail of the alert's own.
    pub(crate) fn raise_with(&self, name: &'static str, error: &Error, detail: Option<String>) {
        self.alert(Alert {
            endpoint: Some(error.endpoint()),
            row: Some(error.row()),
            detail,
            request_id: error.request_id().map(str::to_owned),
            ..self.alert_of(name)
        });
    }

    /// A call whose retries were used up: logged with its context; alerted
    /// every time, or when the rate the policy names is reached.
    pub(super) fn exhausted(&self, error: &Error, call: &Call<'_>) {
        let policy = self.shared.policy;
        let values = telemetry::path_values(self, call);
        let fields = policy.log.path_fields.len().min(values.len());
        policy
            .log_lines
            .retry_exhausted(&crate::log::ExhaustedLine {
                operation: error.endpoint(),
                row: error.row(),
                status: error.status(),
                attempts: error.attempts(),
                request_id: error.request_id(),
                tenant: self.tenant().as_str(),
                workspace: call.workspace.map(|w| w.as_str()),
                path_values: &values[..fields],
                pipeline_id: self
                    .pipeline_id
                    .as_deref()
                    .filter(|_| call.endpoint.pipeline_id),
            });
        let name = policy.alerts.retry_exhausted;
        let Some(alarm) = &self.shared.exhaustion else {
            self.raise(name, error);
            return;
        };
        let mut alarm = alarm.lock().unwrap_or_else(|e| e.into_inner());
        if alarm.record(Instant::now()) {
            let rate = alarm.rate();
            drop(alarm);
            let detail = format!(
                "{} calls exhausted their retries within {} s; the last: {}",
                rate.at_least,
                rate.within.as_secs(),
                error.detail().unwrap_or("no detail")
            );
            self.raise_with(name, error, Some(detail));
        }
    }
}
