//! The request pipeline: scope check, remembered answers, breaker admission,
//! throttle, the one place headers are assembled, per-attempt timeout,
//! classification, breaker bookkeeping, retries inside the deadline.

use std::borrow::Cow;
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use tokio::time::Instant;

use crate::alerts::Alert;
use crate::backoff::{Attempted, Next, RetryCase, next, parse_retry_after};
use crate::breaker::{Admission, Generation};
use crate::call::Call;
use crate::classify::{Outcome, classify};
use crate::client::Client;
use crate::clock;
use crate::endpoint::{Endpoint, Lane, Method, ScopeNeed};
use crate::error::{Error, bounded, error_chain};
use crate::policy::{BudgetIx, OutcomeKind, Policy, RetrySchedule, StateTrigger, TaxonomyRow};
use crate::pool::Pool;
use crate::reply::{Ledger, Reply};
use crate::scope::IdKind;
use crate::telemetry::{self, AttemptLog};
use crate::throttle::HeldSlots;

/// What one attempt brought back.
pub(crate) enum Attempt {
    Answer {
        status: u16,
        /// The parsed `Retry-After`, if the answer carried one that parses.
        retry_after: Option<Duration>,
        echoed_id: Option<String>,
        /// An error answer's `Content-Type` (bounded); `None` on a 2xx.
        content_type: Option<Box<str>>,
        /// The whole 2xx body (at most the route's cap), or the first
        /// `limits.error_body` bytes of an error answer.
        body: Bytes,
    },
    /// A 2xx whose body passed the route's cap: reading stopped there.
    TooLarge { status: u16, limit: usize },
    /// No answer. `maybe_sent`: the request may have reached the server.
    Failed { maybe_sent: bool, reason: String },
    /// The HTTP client could not build the request: nothing was sent.
    Unbuildable { reason: String },
    /// A pooled connection closed under the request before it was written:
    /// nothing was sent, and it says nothing about the origin's health.
    Stale { reason: String },
}

impl Attempt {
    /// The outcome an attempt that ends the call is classified as.
    fn kind(&self) -> OutcomeKind {
        match self {
            Attempt::Answer { .. } => OutcomeKind::Status,
            Attempt::TooLarge { .. } => OutcomeKind::TooLarge,
            Attempt::Failed { .. } | Attempt::Stale { .. } => OutcomeKind::Connection,
            Attempt::Unbuildable { .. } => OutcomeKind::InvalidRequest,
        }
    }

    fn status(&self) -> Option<u16> {
        match self {
            Attempt::Answer { status, .. } | Attempt::TooLarge { status, .. } => Some(*status),
            Attempt::Failed { .. } | Attempt::Unbuildable { .. } | Attempt::Stale { .. } => None,
        }
    }
}

/// The running state of one call across its attempts.
struct Run<'c, 'a> {
    client: &'c Client,
    call: &'c Call<'a>,
    started: Instant,
    deadline: Instant,
    attempt: u32,
    /// The row and detail of the previous attempt, for escalation (T16 -> T13).
    previous: Option<(&'static TaxonomyRow, Option<String>)>,
    /// The request body's digest, computed once per call and only when logged.
    body_digest: Option<String>,
}

/// What a successful opening hands on: the reply and, for a stream, its
/// response and its throttle permit, held for as long as the stream is open.
pub(crate) struct Opened {
    pub reply: Reply,
    pub stream: Option<(reqwest::Response, HeldSlots)>,
    /// When the call started: a stream that carries an answer is held to
    /// the overall deadline from here.
    pub started: Instant,
    /// When the answering attempt's request was sent: a stream's silence is
    /// measured from here, since a buffering proxy holds the head too (§6.4).
    pub sent: Instant,
}

impl Client {
    /// Runs a call through the pipeline and returns the successful answer.
    pub async fn send(&self, call: Call<'_>) -> Result<Reply, Error> {
        Ok(self.run(&call, false).await?.reply)
    }

    /// The attempt loop shared by plain calls and stream openings, in the
    /// call's span (`spans`).
    pub(crate) async fn run(&self, call: &Call<'_>, stream: bool) -> Result<Opened, Error> {
        use tracing::Instrument;
        let span = crate::spans::call(self, call);
        let result = self.attempts(call, stream).instrument(span.clone()).await;
        crate::spans::finished(&span, &result);
        result
    }

    async fn attempts(&self, call: &Call<'_>, stream: bool) -> Result<Opened, Error> {
        let policy = self.shared.policy;
        let endpoint = call.endpoint;
        self.check_scope(call)?;
        let started = Instant::now();
        let mut run = Run {
            client: self,
            call,
            started,
            deadline: clock::after(started, self.shared.deadline),
            attempt: 0,
            previous: None,
            body_digest: None,
        };
        // A body serde refused is a client bug (T31), whatever the origin's
        // state: refused before admission, the breaker or the throttle.
        if let Some(reason) = &call.unencodable {
            let row = self.row(OutcomeKind::InvalidRequest);
            let error = self
                .error(OutcomeKind::InvalidRequest, row, call)
                .with_detail(reason.clone());
            self.finish_row(row, &error, endpoint, None, Some(reason.clone()), false);
            return Err(run.fail(error, false));
        }
        // A stable answer (a dark feature) fails fast without sending a byte.
        let remembered = self.memory().fail_fast(endpoint, started);
        if let Some(r) = remembered {
            let error = self
                .error(OutcomeKind::Status, Some(r.row), call)
                .with_status_opt(r.status, r.detail)
                .with_detail_prefix("remembered");
            return Err(run.fail(error, false));
        }
        // The route's own class bounds every row's: an R0 route is never re-sent.
        let retries = &self.shared.retries;
        let route_schedule = retries[endpoint.retry].schedule;
        let mut rendered: Option<String> = None;
        loop {
            run.attempt += 1;
            crate::spans::resent(run.attempt);
            let now = Instant::now();
            let mut admission = self.breaker().admit(now, false);
            // A breaker no live loop probes is probed by the call itself.
            if matches!(admission, Admission::Rejected(_)) && self.catch_up().await {
                admission = self.breaker().admit(Instant::now(), false);
            }
            let generation = match admission {
                Admission::Allowed(g) | Admission::Canary(g) => g,
                Admission::Rejected(_) => {
                    // Never open without a live probe loop (it may have died
                    // with the runtime it was spawned on).
                    self.ensure_probe_loop();
                    let error = self.circuit_open_error(call).with_attempts(run.attempt - 1);
                    return Err(run.fail(error, false));
                }
            };
            // Rendered once the breaker admits the call: failing fast allocates nothing.
            if rendered.is_none() {
                let path = call.render_path();
                let path = path.map_err(|reason| run.fail(self.invalid_scope(call, reason), false));
                rendered = Some(path?);
            }
            let path = rendered.as_deref().unwrap_or_default();
            let (budgets, n) = self.budgets(endpoint);
            let budgets = budgets.map(BudgetIx::get);
            let permit = self.shared.throttle.admit_all(&budgets[..n]);
            let Ok(permit) = tokio::time::timeout_at(run.deadline, permit).await else {
                return Err(run.deadline_error(None, false));
            };
            // The fleet's share, after this replica's own (issue 17).
            let fleet_slots = match self.fleet_stage(call, &budgets[..n], run.deadline).await {
                Ok(slots) => slots,
                Err(None) => return Err(run.deadline_error(None, false)),
                Err(Some(error)) => return Err(run.fail(error, false)),
            };
            let request_id = uuid::Uuid::new_v4().to_string();
            let attempt_started = Instant::now();
            let deploy = self.breaker().deploy_suspected(attempt_started);
            let timeout = call.timeout.unwrap_or(endpoint.timeout);
            let budget = policy.timeouts[timeout].budget(deploy);
            let attempt_deadline = clock::after(attempt_started, budget).min(run.deadline);
            let request = self.request(call, path, &request_id);
            telemetry::sent(self, call, &request_id, run.attempt);
            let limits = Limits::of(policy, endpoint);
            let attempt_span = crate::spans::attempt(run.attempt);
            let performed = tracing::Instrument::instrument(
                perform(&self.shared.pool, request, stream, limits),
                attempt_span.clone(),
            );
            let mut head_withheld = false;
            let (mut result, response) = match tokio::time::timeout_at(attempt_deadline, performed)
                .await
            {
                Ok(done) => done,
                Err(_) if attempt_deadline == run.deadline => {
                    self.record_breaker(generation, endpoint.path, true);
                    // Ended in flight: the request may have arrived.
                    let unknown = !endpoint.idempotent;
                    return Err(run.deadline_error(Some(request_id), unknown));
                }
                Err(_) => {
                    head_withheld = stream;
                    let reason = if stream {
                        format!(
                            "no response head within the {} ms attempt timeout (a proxy may be holding the stream)",
                            budget.as_millis()
                        )
                    } else {
                        format!(
                            "no answer within the {} ms attempt timeout",
                            budget.as_millis()
                        )
                    };
                    let failed = Attempt::Failed {
                        maybe_sent: true,
                        reason,
                    };
                    (failed, None)
                }
            };
            let status = result.status();
            let success_status =
                matches!(result, Attempt::Answer { status, .. } if (200..300).contains(&status));
            // Only an error answer is read for its detail: a 2xx body is the reply's.
            let (detail, retry_after) = match &result {
                Attempt::Answer {
                    status,
                    body,
                    retry_after,
                    content_type,
                    ..
                } if !success_status => (
                    detail_of(*status, content_type.as_deref(), body, policy.limits.detail),
                    *retry_after,
                ),
                Attempt::Answer { .. } => (None, None),
                Attempt::TooLarge { limit, .. } => (
                    Some(format!("the body passed the route's {limit}-byte cap")),
                    None,
                ),
                Attempt::Failed { reason, .. }
                | Attempt::Unbuildable { reason }
                | Attempt::Stale { reason } => (Some(bounded(reason, policy.limits.detail)), None),
            };
            let row = if success_status {
                None
            } else {
                let outcome = match &result {
                    Attempt::Answer { status, .. } => Outcome::Status {
                        status: *status,
                        detail: detail.as_deref(),
                        retry_after: retry_after.is_some(),
                    },
                    other => Outcome::Other(other.kind()),
                };
                run.escalate(classify(policy, endpoint, &outcome), &detail)
            };
            crate::spans::attempt_done(&attempt_span, status, row);
            // A request that could not be built, or never left a connection
            // that closed under it, says nothing about the origin.
            if !matches!(result, Attempt::Unbuildable { .. } | Attempt::Stale { .. }) {
                self.record_breaker(
                    generation,
                    endpoint.path,
                    row.is_some_and(|r| r.feeds_breaker),
                );
            }
            let answered = success_status
                || row.is_some_and(|r| r.is_success() || r.matches.conflict.is_some());
            // The ID the platform's logs know the request by: its echo, else ours.
            let echoed = match &mut result {
                Attempt::Answer { echoed_id, .. } => echoed_id.take(),
                _ => None,
            };
            let log = AttemptLog {
                client: self,
                call,
                request_id: &request_id,
                echoed_id: echoed.as_deref(),
                status,
                row,
                attempt: run.attempt,
                retry_after,
                latency: attempt_started.elapsed(),
            };
            // 2xx, and the rows that are answers rather than errors (409 on a
            // create route, 409 still-processing on a poll route).
            if answered {
                let Attempt::Answer { status, body, .. } = result else {
                    unreachable!("an answer has a status");
                };
                self.memory().record_success(endpoint);
                // The line is written when the body is decoded: a 2xx that does
                // not decode is logged (and counted) as T24, not as a success.
                let ledger = Ledger {
                    line: telemetry::pending(&log, run.digest()),
                    started: run.started,
                    attempts: run.attempt,
                };
                let request_id = echoed.unwrap_or(request_id);
                self.note(endpoint, &request_id, Some(status), true);
                let reply = Reply::new(self.clone(), endpoint, status, body, request_id, ledger);
                let stream = response.map(|r| (r, permit.detach().with_fleet(fleet_slots)));
                return Ok(Opened {
                    reply,
                    stream,
                    started: run.started,
                    sent: attempt_started,
                });
            }
            telemetry::attempt(&log, run.digest());
            // A platform-wide wait pauses the whole fleet, not just this call.
            if let (Some(429 | 503), Some(wait)) = (status, retry_after) {
                self.fleet_pause(wait);
            }
            if status == Some(429) {
                let hot_for = policy.throttle.polling.interval * policy.throttle.polling.hot_factor;
                self.memory().saw_429(Instant::now(), hot_for);
            }
            let maybe_sent = !matches!(
                result,
                Attempt::Failed {
                    maybe_sent: false,
                    ..
                } | Attempt::Unbuildable { .. }
                    | Attempt::Stale { .. }
            );
            let schedule = row
                .and_then(|r| r.retry)
                .map(|i| retries[i].schedule)
                .unwrap_or(RetrySchedule::Never);
            let case = RetryCase {
                row: schedule,
                route: route_schedule,
                get: endpoint.method == Method::Get,
                deploy_suspected: deploy,
                idempotent: endpoint.idempotent,
                maybe_sent,
            };
            let kind = result.kind();
            // A write that may have arrived and ended on a row that does not
            // know its outcome (no answer, a 500, a gateway's 502/504): the
            // caller must look first.
            let unknown =
                !endpoint.idempotent && maybe_sent && row.is_some_and(|r| r.outcome_unknown);
            let joined_id = echoed.as_ref().unwrap_or(&request_id);
            let final_error = |detail: Option<String>| {
                self.error(kind, row, call)
                    .with_head_withheld(head_withheld)
                    .with_outcome_unknown_row(unknown, row)
                    .with_attempts(run.attempt)
                    .with_request_id(joined_id.clone())
                    .with_status_opt(status, detail)
            };
            let attempted = Attempted {
                case,
                attempt: run.attempt,
                retry_after,
                defer_server_waits: self.defer_server_waits,
                now: Instant::now(),
                deadline: run.deadline,
            };
            // A job stream whose head is withheld is not opened again here:
            // its follower polls instead, and a proxy holding streams would
            // hold the next opening too.
            let decision = if head_withheld && self.falls_back(endpoint) {
                Next::Fail { exhausted: false }
            } else {
                next(&attempted, &mut rand::rng())
            };
            let resume = match decision {
                Next::RetryAt(at) => at,
                Next::Fail { exhausted } => {
                    let error = final_error(detail.clone());
                    self.finish_row(row, &error, endpoint, status, detail, deploy);
                    return Err(run.fail(error, exhausted));
                }
                // The server's wait outlasts the deadline, or the caller (a
                // job queue) waits it out itself, holding nothing: say so.
                Next::Wait(wait) => {
                    let error = final_error(detail.clone()).with_retry_after(wait);
                    self.finish_row(row, &error, endpoint, status, detail, deploy);
                    return Err(run.fail(error, false));
                }
                Next::Deadline => return Err(run.deadline_error(Some(request_id), unknown)),
            };
            run.previous = row.map(|r| (r, detail));
            // The request ended: its throttle slots are free while we back off.
            drop(fleet_slots);
            drop(permit);
            tokio::time::sleep_until(resume).await;
        }
    }

    /// Whether `endpoint` is a stream with a polling fallback (a job stream).
    fn falls_back(&self, endpoint: &Endpoint) -> bool {
        endpoint
            .stream
            .is_some_and(|i| self.shared.policy.streams[i].fallback.is_some())
    }

    /// The budgets a call of `endpoint` draws from: its route's, and the
    /// caller's mode (a bulk backfill, the fan-out) if the client has one.
    fn budgets(&self, endpoint: &Endpoint) -> ([BudgetIx; 2], usize) {
        match self.extra_budget {
            Some(extra) if extra != endpoint.budget => ([endpoint.budget, extra], 2),
            _ => ([endpoint.budget, endpoint.budget], 1),
        }
    }

    /// The row ended the call: remember a stable answer, raise the row's alert.
    fn finish_row(
        &self,
        row: Option<&'static TaxonomyRow>,
        error: &Error,
        endpoint: &'static Endpoint,
        status: Option<u16>,
        detail: Option<String>,
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

    /// A call refused before a byte is sent (T22).
    fn invalid_scope(&self, call: &Call<'_>, reason: impl Into<Cow<'static, str>>) -> Error {
        self.error_of(OutcomeKind::InvalidScope, call)
            .with_detail(reason)
    }

    /// Refuses a call whose scope does not fit its route, before a byte is
    /// sent (T22): a descriptor that is not one of the policy's own routes
    /// (§3.4: a hand-made one could drop the tenant and the key), a missing
    /// workspace, an ID of another kind as the workspace, a workspace on a
    /// route that takes none. Path values are checked when the path is rendered.
    fn check_scope(&self, call: &Call<'_>) -> Result<(), Error> {
        let endpoint = call.endpoint;
        let invalid = |reason: String| self.invalid_scope(call, reason);
        let policy = self.shared.policy;
        let known = policy.routes.iter().any(|r| std::ptr::eq(*r, endpoint));
        if !known {
            return Err(invalid(format!(
                "{} is not a route of the {} policy: only its generated route table is sent",
                endpoint.path, policy.api
            )));
        }
        match (endpoint.scope, call.workspace) {
            (ScopeNeed::Workspace, None) => {
                return Err(invalid(format!(
                    "{} needs a workspace (X-Workspace-ID)",
                    endpoint.path
                )));
            }
            (ScopeNeed::Workspace, Some(id)) if id.kind() != IdKind::Workspace => {
                return Err(invalid(format!("{id:?} is not a workspace")));
            }
            (ScopeNeed::Public | ScopeNeed::Tenant, Some(_)) => {
                return Err(invalid(format!("{} takes no workspace", endpoint.path)));
            }
            _ => {}
        }
        Ok(())
    }

    /// The only place a request and its headers are assembled.
    pub(crate) fn request(
        &self,
        call: &Call<'_>,
        path: &str,
        request_id: &str,
    ) -> reqwest::RequestBuilder {
        let shared = &self.shared;
        let endpoint = call.endpoint;
        let names = &shared.policy.headers;
        let method = match endpoint.method {
            Method::Get => reqwest::Method::GET,
            Method::Post => reqwest::Method::POST,
            Method::Put => reqwest::Method::PUT,
            Method::Patch => reqwest::Method::PATCH,
            Method::Delete => reqwest::Method::DELETE,
        };
        let mut url = format!("{}{}", shared.base_url, path);
        for (i, (name, value)) in call.query.iter().enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            crate::call::encode_segment(name, &mut url);
            url.push('=');
            crate::call::encode_segment(value, &mut url);
        }
        let mut request = shared
            .pool
            .client()
            .request(method, url)
            .header(names.request_id, request_id);
        if endpoint.scope != ScopeNeed::Public {
            if endpoint.lane == Lane::Key {
                request = request.header(names.authorization, shared.authorization.clone());
            }
            request = request.header(names.tenant, shared.tenant.as_str());
        }
        // The generator gives a workspace route and a pipeline route only to
        // an API that names the header.
        if let (Some(workspace), Some(name)) = (call.workspace, names.workspace) {
            request = request.header(name, workspace.as_str());
        }
        if endpoint.pipeline_id
            && let (Some(pipeline), Some(name)) = (&self.pipeline_id, names.pipeline)
        {
            request = request.header(name, pipeline.as_ref());
        }
        if let Some(body) = &call.body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone());
        }
        request
    }

    fn record_breaker(&self, generation: Generation, endpoint: &'static str, failed: bool) {
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
    fn note(&self, endpoint: &Endpoint, request_id: &str, status: Option<u16>, ok: bool) {
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
    fn exhausted(&self, error: &Error, call: &Call<'_>) {
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

    pub(crate) fn row(&self, kind: OutcomeKind) -> Option<&'static TaxonomyRow> {
        self.shared
            .policy
            .taxonomy
            .iter()
            .find(|r| r.matches.outcome == kind)
    }

    /// An error of `endpoint` classified by `row` (or unclassified when the
    /// spec has none), with the class's German message.
    pub(crate) fn classified(
        &self,
        kind: OutcomeKind,
        row: Option<&'static TaxonomyRow>,
        endpoint: &Endpoint,
    ) -> Error {
        let (name, class, message) = match row {
            Some(r) => (r.row, r.class, r.message),
            None => (
                "-",
                "unclassified",
                self.shared.policy.message("unclassified"),
            ),
        };
        Error::new(kind, name, class, endpoint.operation).with_message(message)
    }

    /// An error of `endpoint` classified by the row of `kind`: for outcomes
    /// with no status or detail to match, where the kind alone decides.
    pub(crate) fn failure(&self, kind: OutcomeKind, endpoint: &Endpoint) -> Error {
        self.classified(kind, self.row(kind), endpoint)
    }

    /// [`Client::failure`] for a call: marked replayable where the route may be queued.
    pub(crate) fn error_of(&self, kind: OutcomeKind, call: &Call<'_>) -> Error {
        self.error(kind, self.row(kind), call)
    }

    /// A call the generated method refuses before anything is sent (an
    /// argument that contradicts its proof): the invalid-scope row.
    pub fn refused(&self, endpoint: &'static Endpoint, detail: &'static str) -> Error {
        self.failure(OutcomeKind::InvalidScope, endpoint)
            .with_detail(detail)
    }

    /// A call that ended before an answer could be used: classified, and
    /// marked replayable where the route may be queued.
    pub(crate) fn error(
        &self,
        kind: OutcomeKind,
        row: Option<&'static TaxonomyRow>,
        call: &Call<'_>,
    ) -> Error {
        self.classified(kind, row, call.endpoint)
            .with_replayable(call.endpoint.replay)
    }

    /// T21, with the German text of the breaker-open feature state.
    fn circuit_open_error(&self, call: &Call<'_>) -> Error {
        let policy = self.shared.policy;
        let copy = policy
            .states
            .iter()
            .find(|s| s.when == StateTrigger::BreakerOpen)
            .and_then(|s| s.copy);
        let error = self.error_of(OutcomeKind::CircuitOpen, call);
        let error = error.with_detail("the origin breaker is open: failing fast without sending");
        match copy {
            Some(copy) => error.with_message(Some(copy)),
            None => error,
        }
    }
}

impl Run<'_, '_> {
    /// Classifies by the row's escalation when the retry brought back the same detail.
    fn escalate(
        &self,
        row: Option<&'static TaxonomyRow>,
        detail: &Option<String>,
    ) -> Option<&'static TaxonomyRow> {
        let row = row?;
        match (row.escalate_to, &self.previous) {
            (Some(target), Some((previous, previous_detail)))
                if std::ptr::eq(*previous, row) && previous_detail == detail =>
            {
                Some(&self.client.shared.policy.taxonomy[target])
            }
            _ => Some(row),
        }
    }

    /// The request body's sha256, computed at most once per call, and only
    /// when attempt lines are logged at all.
    fn digest(&mut self) -> Option<&str> {
        if self.body_digest.is_none() && telemetry::enabled(self.client) {
            self.body_digest = self.call.body.as_deref().and_then(telemetry::body_digest);
        }
        self.body_digest.as_deref()
    }

    /// The deadline ended the call; `in_flight`: a request of a call that is
    /// not idempotent may have reached the server unanswered.
    fn deadline_error(&mut self, request_id: Option<String>, in_flight: bool) -> Error {
        let client = self.client;
        let row = client.row(OutcomeKind::Deadline);
        let unknown = in_flight && row.is_some_and(|r| r.outcome_unknown);
        let error = client
            .error(OutcomeKind::Deadline, row, self.call)
            .with_outcome_unknown_row(unknown, row)
            .with_attempts(self.attempt)
            .with_detail(format!(
                "the {} s overall deadline ended the call, not the platform",
                client.shared.deadline.as_secs()
            ));
        let error = match request_id {
            Some(id) => error.with_request_id(id),
            None => error,
        };
        self.fail(error, false)
    }

    /// Ends the call with `error`: metrics, and when the row's retries were
    /// used up (the row itself raised no alert) a log line with the call's
    /// context and the retry-exhaustion alert, for every such call or only
    /// when their rate is elevated, as the policy says.
    fn fail(&mut self, error: Error, exhausted: bool) -> Error {
        let client = self.client;
        if let Some(id) = error.request_id() {
            client.note(self.call.endpoint, id, error.status(), false);
        }
        if exhausted && self.attempt > 1 {
            client.exhausted(&error, self.call);
        }
        client.count_call(
            self.call.endpoint,
            error.class_name(),
            self.attempt > 1,
            self.started,
        );
        error
    }
}

/// Whether the HTTP stack knows the request was never written: hyper calls a
/// request "canceled" when its connection closed before it was sent (a pooled
/// connection the server had just closed). Such a call is not sent: it may be
/// retried even when not idempotent.
fn never_written(e: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_canceled)
        {
            return true;
        }
        source = s.source();
    }
    false
}

/// What reading one answer needs: its size caps and the headers it reads.
#[derive(Clone, Copy)]
pub(crate) struct Limits {
    /// Largest 2xx body.
    response: usize,
    /// Bytes of an error body read for its detail.
    error_body: usize,
    /// The answer headers read: the echoed request ID and the server's wait.
    request_id: &'static str,
    retry_after: &'static str,
}

impl Limits {
    pub(crate) fn of(policy: &Policy, endpoint: &Endpoint) -> Self {
        Limits {
            response: endpoint.max_response,
            error_body: policy.limits.error_body,
            request_id: policy.headers.request_id,
            retry_after: policy.headers.retry_after,
        }
    }
}

/// Longest echoed request ID kept; a longer one is ignored (ours is used).
const MAX_ECHOED_ID: usize = 128;

/// What an error's detail keeps of a `Content-Type` header, and of an HTML
/// page's `<title>`.
const MAX_CONTENT_TYPE: usize = 100;
const MAX_TITLE: usize = 120;

/// Sends one request and reads the answer: a 2xx body incrementally up to
/// the route's cap, an error body up to `error_body` bytes; a stream's body
/// is left to the SSE parser. Redirects are never followed (the client is
/// built without), so a 3xx arrives here as an answer. The pool hears of
/// every answer before its body is read.
pub(crate) async fn perform(
    pool: &Pool,
    request: reqwest::RequestBuilder,
    stream: bool,
    limits: Limits,
) -> (Attempt, Option<reqwest::Response>) {
    let mut response = match request.send().await {
        Ok(r) => r,
        Err(e) if e.is_builder() => {
            let reason = error_chain(&e);
            return (Attempt::Unbuildable { reason }, None);
        }
        Err(e) if never_written(&e) => {
            let reason = error_chain(&e);
            return (Attempt::Stale { reason }, None);
        }
        Err(e) => {
            let maybe_sent = !e.is_connect();
            let reason = error_chain(&e);
            return (Attempt::Failed { maybe_sent, reason }, None);
        }
    };
    let status = response.status().as_u16();
    let headers = response.headers();
    pool.answered(status, headers);
    let retry_after = headers
        .get(limits.retry_after)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, SystemTime::now()));
    let echoed_id = headers
        .get(limits.request_id)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= MAX_ECHOED_ID)
        .map(str::to_owned);
    let success = (200..300).contains(&status);
    let content_type = (!success).then(|| {
        let value = headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("no content type");
        bounded(value, MAX_CONTENT_TYPE).into_boxed_str()
    });
    if stream && success {
        let answer = Attempt::Answer {
            status,
            retry_after,
            echoed_id,
            content_type,
            body: Bytes::new(),
        };
        return (answer, Some(response));
    }
    let cap = if success {
        limits.response
    } else {
        limits.error_body
    };
    // A declared length over the cap is refused before a byte of the body is read.
    if success && response.content_length().is_some_and(|n| n > cap as u64) {
        return (Attempt::TooLarge { status, limit: cap }, None);
    }
    let mut body = BytesMut::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = cap - body.len();
                if chunk.len() > room {
                    if success {
                        return (Attempt::TooLarge { status, limit: cap }, None);
                    }
                    // An error body is only read for its detail: the rest is left unread.
                    body.extend_from_slice(&chunk[..room]);
                    break;
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(e) => {
                let reason = error_chain(&e);
                let failed = Attempt::Failed {
                    maybe_sent: true,
                    reason,
                };
                return (failed, None);
            }
        }
    }
    let answer = Attempt::Answer {
        status,
        retry_after,
        echoed_id,
        content_type,
        body: body.freeze(),
    };
    (answer, None)
}

/// A structured detail without what the server echoed of the request: a
/// FastAPI/pydantic 422 lists `{type, loc, msg, input, ctx, url}` per field,
/// and `input` (like the values of `ctx`) quotes the rejected value,
/// Mandanten content. Those two keys are removed, in lists and objects at any
/// depth; everything else stays (a `HTTPException(423, detail={"code":
/// "finding_locked", "message": …})` keeps its code and message). The text
/// is bounded by the caller ([`detail_of`]).
pub(crate) fn operator_view(detail: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    /// pydantic's echo of the request: the value itself and its context.
    const ECHOES: [&str; 2] = ["input", "ctx"];
    match detail {
        Value::Array(items) => Value::Array(items.into_iter().map(operator_view).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .filter(|(k, _)| !ECHOES.contains(&k.as_str()))
                .map(|(k, v)| (k, operator_view(v)))
                .collect(),
        ),
        other => other,
    }
}

/// The `detail` of a `{"detail": ...}` envelope (or the raw text), cut to
/// `max` bytes; an HTML page (a proxy's own 502, a panel's `error_docs`)
/// becomes one line for an operator ([`page_line`]) and is kept out of the
/// error, its Display and the logs. Only error answers are read for it.
fn detail_of(status: u16, content_type: Option<&str>, body: &[u8], max: usize) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Envelope {
        detail: serde_json::Value,
    }
    if body.is_empty() {
        return None;
    }
    if is_html(content_type, body) {
        return Some(bounded(&page_line(status, content_type, body), max));
    }
    let text = match serde_json::from_slice::<Envelope>(body) {
        Ok(Envelope {
            detail: serde_json::Value::String(s),
        }) => s,
        Ok(Envelope { detail }) => operator_view(detail).to_string(),
        // One byte past the cap, so a longer text is cut and marked as such.
        Err(_) => String::from_utf8_lossy(&body[..body.len().min(max + 1)]).into_owned(),
    };
    Some(bounded(&text, max))
}

#[cfg(test)]
mod tests {
    use super::detail_of;
    use serde_json::{Value, json};

    fn shown(body: Value, max: usize) -> Value {
        let text = detail_of(
            422,
            Some("application/json"),
            body.to_string().as_bytes(),
            max,
        )
        .expect("a detail");
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    }

    #[test]
    fn a_structured_detail_keeps_its_code_and_message() {
        let body = json!({"detail": {"code": "finding_locked", "message": "Befund ist gesperrt", "retry": false}});
        assert_eq!(
            shown(body, 4096),
            json!({"code": "finding_locked", "message": "Befund ist gesperrt", "retry": false})
        );
    }

    #[test]
    fn pydantic_input_and_ctx_are_removed_at_any_depth_the_rest_stays() {
        let body = json!({"detail": [{
            "type": "string_too_long",
            "loc": ["body", "query_text"],
            "msg": "String should have at most 200 characters",
            "input": "Mandantengeheimnis",
            "ctx": {"max_length": 200},
            "url": "https://errors.pydantic.dev/2.9/v/string_too_long",
            "nested": {"input": "Mandantengeheimnis", "kept": 1},
        }]});
        assert_eq!(
            shown(body, 4096),
            json!([{
                "type": "string_too_long",
                "loc": ["body", "query_text"],
                "msg": "String should have at most 200 characters",
                "url": "https://errors.pydantic.dev/2.9/v/string_too_long",
                "nested": {"kept": 1},
            }])
        );
    }

    #[test]
    fn a_structured_detail_is_bounded() {
        let long = "x".repeat(10_000);
        let body = json!({"detail": {"code": "finding_locked", "message": long}});
        let text = detail_of(
            423,
            Some("application/json"),
            body.to_string().as_bytes(),
            256,
        )
        .unwrap();
        assert!(text.len() <= 256, "{}", text.len());
        assert!(text.starts_with(r#"{"code":"finding_locked""#), "{text}");
        assert!(text.ends_with("[cut]"), "{text}");
    }
}

/// Whether an error body is an HTML page: said so by its `Content-Type`, or
/// (a proxy that labels it `text/plain` or not at all) by how it starts.
fn is_html(content_type: Option<&str>, body: &[u8]) -> bool {
    let declared = content_type.is_some_and(|t| {
        let t = t.trim_start().as_bytes();
        t.len() >= 9
            && (t[..9].eq_ignore_ascii_case(b"text/html")
                || starts_with_ci(t, b"application/xhtml"))
    });
    let start = body
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .map_or(&body[..0], |i| &body[i..]);
    declared || starts_with_ci(start, b"<!doctype html") || starts_with_ci(start, b"<html")
}

fn starts_with_ci(bytes: &[u8], prefix: &[u8]) -> bool {
    bytes.len() >= prefix.len() && bytes[..prefix.len()].eq_ignore_ascii_case(prefix)
}

/// One operator line for an HTML error page: its `<title>` (nginx: `502 Bad
/// Gateway`), else the status and content type, and the page's size (as
/// read, up to `limits.error_body`), never its text.
fn page_line(status: u16, content_type: Option<&str>, body: &[u8]) -> String {
    let kind = content_type.unwrap_or("no content type");
    match page_title(body) {
        Some(title) => format!(
            "an HTML error page, not the platform's answer: \"{title}\" ({kind}, {} bytes)",
            body.len()
        ),
        None => format!(
            "an HTML error page, not the platform's answer: status {status}, {kind}, {} bytes",
            body.len()
        ),
    }
}

/// The text of a page's first `<title>`, whitespace collapsed, control
/// characters dropped, bounded; `None` when it has none or it is empty.
fn page_title(body: &[u8]) -> Option<String> {
    let open =
        memchr::memmem::find_iter(body, b"<").find(|&i| starts_with_ci(&body[i..], b"<title"))?;
    let start = open + memchr::memchr(b'>', &body[open..])? + 1;
    let len = memchr::memmem::find_iter(&body[start..], b"</")
        .find(|&i| starts_with_ci(&body[start + i..], b"</title"))
        .unwrap_or(body.len() - start);
    let text = String::from_utf8_lossy(&body[start..start + len]);
    let title = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace(|c: char| c.is_control() || c == '"', "");
    (!title.is_empty()).then(|| bounded(&title, MAX_TITLE))
}

#[cfg(test)]
mod page_tests {
    use super::*;

    /// nginx 1.22's own 502 page, as it sends it.
    const NGINX_502: &str = "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.22.1</center>\r\n</body>\r\n</html>\r\n";

    #[test]
    fn a_proxy_page_becomes_one_line_with_its_title() {
        let line = detail_of(502, Some("text/html"), NGINX_502.as_bytes(), 1024).unwrap();
        assert_eq!(
            line,
            format!(
                "an HTML error page, not the platform's answer: \"502 Bad Gateway\" (text/html, {} bytes)",
                NGINX_502.len()
            )
        );
        assert!(!line.contains('<') && !line.contains('\n'));
    }

    #[test]
    fn a_page_without_a_title_or_mislabelled_is_still_one_line() {
        let page = b"  <!DOCTYPE html><html><body><h1>Service Unavailable</h1>\n<p>Plesk</p></body></html>";
        let line = detail_of(503, Some("text/plain"), page, 1024).unwrap();
        assert_eq!(
            line,
            format!(
                "an HTML error page, not the platform's answer: status 503, text/plain, {} bytes",
                page.len()
            )
        );
        let titled = b"<HTML><HEAD><TITLE>\n  Gateway\r\n Timeout </TITLE>";
        assert!(
            detail_of(504, None, titled, 1024)
                .unwrap()
                .contains("\"Gateway Timeout\" (no content type")
        );
        // A JSON or plain-text answer keeps its text.
        assert_eq!(
            detail_of(502, Some("text/plain"), b"Bad Gateway", 1024).as_deref(),
            Some("Bad Gateway")
        );
        assert_eq!(
            detail_of(
                500,
                Some("text/html; charset=utf-8"),
                b"{\"detail\":\"x\"}",
                1024
            )
            .as_deref(),
            Some(
                "an HTML error page, not the platform's answer: status 500, text/html; charset=utf-8, 14 bytes"
            ),
            "labelled HTML is not parsed as anything else"
        );
    }
}

/// The fleet stage (issue 17): compiled to nothing without the `redis` feature.
impl Client {
    /// This call's share of the fleet, after the local throttle admitted it.
    /// `Err(None)`: the deadline passed while waiting; `Err(Some(error))`:
    /// refused (the store is away and the policy fails closed, or another
    /// replica saw the route dark).
    #[cfg(feature = "redis")]
    async fn fleet_stage(
        &self,
        call: &Call<'_>,
        budgets: &[usize],
        deadline: Instant,
    ) -> Result<Option<crate::fleet::FleetSlots>, Option<Error>> {
        use crate::fleet::Refusal;
        let Some(fleet) = &self.shared.fleet else {
            return Ok(None);
        };
        let endpoint = call.endpoint;
        let admitted = fleet.admit(&self.shared.throttle, endpoint.path, budgets);
        match tokio::time::timeout_at(deadline, admitted).await {
            Err(_) => Err(None),
            Ok(Ok(slots)) => Ok(Some(slots)),
            Ok(Err(Refusal::Closed)) => Err(Some(self.circuit_open_error(call).with_detail(
                "the fleet's Redis is unreachable and the policy fails closed: nothing sent",
            ))),
            Ok(Err(Refusal::Dark { left, mark })) => {
                let policy = self.shared.policy;
                let mut parts = mark.split(' ');
                let row = parts
                    .next()
                    .and_then(|i| i.parse::<usize>().ok())
                    .and_then(|i| policy.taxonomy.get(i));
                let status = parts.next().and_then(|s| s.parse::<u16>().ok());
                let Some(row) = row else {
                    // A mark this client cannot read (another version's): send.
                    return Ok(None);
                };
                let until = clock::after(Instant::now(), left);
                let r = self.memory().remember_until(endpoint, row, status, until);
                Err(Some(
                    self.error(OutcomeKind::Status, Some(r.row), call)
                        .with_status_opt(r.status, r.detail)
                        .with_detail_prefix("remembered"),
                ))
            }
        }
    }

    #[cfg(not(feature = "redis"))]
    async fn fleet_stage(
        &self,
        _call: &Call<'_>,
        _budgets: &[usize],
        _deadline: Instant,
    ) -> Result<Option<crate::fleet::FleetSlots>, Option<Error>> {
        Ok(None)
    }

    /// A platform-wide wait (`Retry-After` on a 429 or 503) pauses every replica.
    fn fleet_pause(&self, wait: Duration) {
        #[cfg(feature = "redis")]
        if let Some(fleet) = &self.shared.fleet {
            fleet.pause(wait);
        }
        #[cfg(not(feature = "redis"))]
        let _ = wait;
    }

    /// A stable answer remembered for `for_` (a dark feature) is every
    /// replica's: the mark is the row's index and the status.
    fn fleet_share_dark(
        &self,
        endpoint: &'static Endpoint,
        row: &'static TaxonomyRow,
        status: Option<u16>,
        for_: Duration,
    ) {
        #[cfg(feature = "redis")]
        if let Some(fleet) = &self.shared.fleet
            && let Some(index) = self
                .shared
                .policy
                .taxonomy
                .iter()
                .position(|r| std::ptr::eq(r, row))
        {
            let status = status.map_or("-".to_string(), |s| s.to_string());
            fleet.share_dark(endpoint.path, format!("{index} {status}"), for_);
        }
        #[cfg(not(feature = "redis"))]
        let _ = (endpoint, row, status, for_);
    }
}
