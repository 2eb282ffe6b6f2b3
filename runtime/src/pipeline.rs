//! The request pipeline: scope check, remembered answers, breaker admission,
//! throttle, the one place headers are assembled, per-attempt timeout,
//! classification, breaker bookkeeping, retries inside the deadline.

use std::time::SystemTime;

use bytes::Bytes;
use tokio::time::Instant;

use crate::alerts::Alert;
use crate::backoff::{parse_retry_after, retry_delay};
use crate::breaker::{Admission, Generation};
use crate::call::Call;
use crate::classify::{Outcome, classify};
use crate::client::Client;
use crate::endpoint::{Endpoint, Lane, Method, ScopeNeed};
use crate::error::{Error, ErrorKind, error_chain};
use crate::policy::{OutcomeKind, RetrySchedule, StateTrigger, TaxonomyRow};
use crate::reply::Reply;
use crate::scope::IdKind;
use crate::telemetry::{self, AttemptLog};

/// What one attempt brought back.
pub(crate) enum Attempt {
    Answer {
        status: u16,
        retry_after: Option<String>,
        echoed_id: Option<String>,
        body: Bytes,
    },
    /// No answer. `maybe_sent`: the request may have reached the server.
    Failed { maybe_sent: bool, reason: String },
}

impl Attempt {
    fn status(&self) -> Option<u16> {
        match self {
            Attempt::Answer { status, .. } => Some(*status),
            Attempt::Failed { .. } => None,
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
}

impl Client {
    /// Runs a call through the pipeline and returns the successful answer.
    pub async fn send(&self, call: Call<'_>) -> Result<Reply, Error> {
        let (reply, _) = self.run(&call, false).await?;
        Ok(reply)
    }

    /// The attempt loop shared by plain calls and stream openings.
    pub(crate) async fn run(
        &self,
        call: &Call<'_>,
        stream: bool,
    ) -> Result<(Reply, Option<reqwest::Response>), Error> {
        let policy = self.shared.policy;
        let endpoint = call.endpoint;
        let path = self.check_scope(call)?;
        let started = Instant::now();
        let mut run = Run {
            client: self,
            call,
            started,
            deadline: started + policy.deadline,
            attempt: 0,
            previous: None,
        };
        // A stable answer (a dark feature) fails fast without sending a byte.
        let remembered = self.memory().fail_fast(endpoint, started);
        if let Some(r) = remembered {
            let error = self
                .error(ErrorKind::Status, Some(r.row), call)
                .with_status_opt(r.status, r.detail)
                .with_detail_prefix("remembered");
            return Err(run.fail(error, false));
        }
        loop {
            run.attempt += 1;
            let now = Instant::now();
            let admission = self.breaker().admit(now, false);
            let generation = match admission {
                Admission::Allowed(g) | Admission::Canary(g) => g,
                Admission::Rejected(_) => {
                    let error = self.circuit_open_error(call).with_attempts(run.attempt - 1);
                    return Err(run.fail(error, false));
                }
            };
            let budgets = [Some(endpoint.budget), self.extra_budget];
            let admission = self.shared.throttle.admit_all(&budgets);
            let permit = tokio::time::timeout_at(run.deadline, admission).await;
            let Ok(permit) = permit else {
                return Err(run.deadline_error(None));
            };
            let request_id = uuid::Uuid::new_v4().to_string();
            let attempt_started = Instant::now();
            let deploy = self.breaker().deploy_suspected(attempt_started);
            let budget = policy.timeouts[endpoint.timeout].budget(deploy);
            let attempt_deadline = (attempt_started + budget).min(run.deadline);
            let request = self.request(call, &path, &request_id);
            let (result, response) =
                match tokio::time::timeout_at(attempt_deadline, perform(request, stream)).await {
                    Ok(done) => done,
                    Err(_) if attempt_deadline == run.deadline => {
                        self.record_breaker(generation, endpoint.path, true);
                        return Err(run.deadline_error(Some(request_id)));
                    }
                    Err(_) => {
                        let reason = format!(
                            "no answer within the {} ms attempt timeout",
                            budget.as_millis()
                        );
                        (
                            Attempt::Failed {
                                maybe_sent: true,
                                reason,
                            },
                            None,
                        )
                    }
                };
            let status = result.status();
            let (detail, retry_after) = match &result {
                Attempt::Answer {
                    body, retry_after, ..
                } => (detail_of(body), retry_after.clone()),
                Attempt::Failed { reason, .. } => (Some(reason.clone()), None),
            };
            let success_status = status.is_some_and(|s| (200..300).contains(&s));
            let row = if success_status {
                None
            } else {
                let outcome = match status {
                    Some(status) => Outcome::Status {
                        status,
                        detail: detail.as_deref(),
                        retry_after: retry_after.is_some(),
                    },
                    None => Outcome::Connection,
                };
                run.escalate(classify(policy, endpoint, &outcome), &detail)
            };
            self.record_breaker(
                generation,
                endpoint.path,
                row.is_some_and(|r| r.feeds_breaker),
            );
            telemetry::attempt(&AttemptLog {
                client: self,
                call,
                request_id: &request_id,
                status,
                row,
                attempt: run.attempt,
                retry_after: retry_after.as_deref(),
                latency: attempt_started.elapsed(),
            });
            // 2xx, and the rows that are answers rather than errors (409 on a
            // create route, 409 still-processing on a poll route).
            if success_status || row.is_some_and(|r| r.is_success() || r.matches.conflict.is_some())
            {
                let Attempt::Answer {
                    status,
                    echoed_id,
                    body,
                    ..
                } = result
                else {
                    unreachable!("a success has a status");
                };
                self.memory().record_success(endpoint);
                // The call is counted when the reply is decoded: a body that
                // does not decode is a decode error, not a success.
                let reply = Reply::new(
                    self.clone(),
                    endpoint,
                    status,
                    body,
                    echoed_id.unwrap_or(request_id),
                    run.started,
                    run.attempt > 1,
                );
                return Ok((reply, response));
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
                }
            );
            let schedule = row
                .and_then(|r| r.retry)
                .and_then(|i| policy.retries.get(i))
                .map(|c| c.schedule)
                .unwrap_or(RetrySchedule::Never);
            let eligible = match schedule {
                RetrySchedule::Never => false,
                // One extra attempt, for a GET, inside the deploy-suspected window.
                RetrySchedule::DeployWindow { .. } => endpoint.method == Method::Get && deploy,
                _ => true,
            } && (endpoint.idempotent || !maybe_sent);
            if !eligible || run.attempt >= schedule.attempts() {
                let kind = if status.is_some() {
                    ErrorKind::Status
                } else {
                    ErrorKind::Connection
                };
                let error = self
                    .error(kind, row, call)
                    .with_attempts(run.attempt)
                    .with_request_id(request_id)
                    .with_status_opt(status, detail.clone());
                if let Some(row) = row {
                    self.memory()
                        .record_final(endpoint, row, status, detail, Instant::now());
                    self.row_alert(row, &error, deploy);
                }
                return Err(run.fail(error, eligible));
            }
            let server_delay = retry_after
                .as_deref()
                .and_then(|v| parse_retry_after(v, SystemTime::now()));
            let delay = retry_delay(&schedule, run.attempt, server_delay, &mut rand::rng());
            if Instant::now() + delay >= run.deadline {
                return Err(run.deadline_error(Some(request_id)));
            }
            run.previous = row.map(|r| (r, detail));
            // The request ended: its throttle slots are free while we back off.
            drop(permit);
            tokio::time::sleep(delay).await;
        }
    }

    /// Refuses a call whose scope does not fit its route, before a byte is
    /// sent (T22): a missing workspace, an ID of another kind as the
    /// workspace, a workspace on a route that takes none, a bad path value,
    /// a hand-made descriptor outside the policy.
    fn check_scope(&self, call: &Call<'_>) -> Result<String, Error> {
        let endpoint = call.endpoint;
        let invalid = |reason: String| {
            self.error(
                ErrorKind::InvalidScope,
                self.row(OutcomeKind::InvalidScope),
                call,
            )
            .with_detail(reason)
        };
        // A hand-built descriptor may name classes this policy does not have.
        let policy = self.shared.policy;
        let in_range = endpoint.timeout < policy.timeouts.len()
            && endpoint.retry < policy.retries.len()
            && endpoint.budget < policy.throttle.budgets.len()
            && self
                .extra_budget
                .is_none_or(|b| b < policy.throttle.budgets.len())
            && endpoint.stream.is_none_or(|s| s < policy.streams.len());
        if !in_range {
            return Err(invalid(format!(
                "{} names a class the policy lacks",
                endpoint.path
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
        call.render_path().map_err(invalid)
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
        let method = reqwest::Method::from_bytes(endpoint.method.as_str().as_bytes())
            .expect("a known method");
        let mut url = format!("{}{}", shared.base_url, path);
        for (i, (name, value)) in call.query.iter().enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            crate::call::encode_segment(name, &mut url);
            url.push('=');
            crate::call::encode_segment(value, &mut url);
        }
        let mut request = shared
            .http
            .request(method, url)
            .header(names.request_id, request_id);
        if endpoint.scope != ScopeNeed::Public {
            if endpoint.lane == Lane::Key {
                request = request.header(names.authorization, format!("Bearer {}", shared.api_key));
            }
            request = request.header(names.tenant, shared.tenant.as_str());
        }
        if let Some(workspace) = call.workspace {
            request = request.header(names.workspace, workspace.as_str());
        }
        if endpoint.pipeline_id
            && let Some(pipeline) = &self.pipeline_id
        {
            request = request.header(names.pipeline, pipeline.as_ref());
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
        self.shared.alerts.alert(Alert {
            name,
            endpoint: Some(error.endpoint()),
            row: Some(error.row()),
            detail: error.detail().map(str::to_owned),
            request_id: error.request_id().map(str::to_owned),
        });
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
        kind: ErrorKind,
        row: Option<&'static TaxonomyRow>,
        endpoint: &Endpoint,
    ) -> Error {
        let (name, class) = row
            .map(|r| (r.row, r.class))
            .unwrap_or(("-", "unclassified"));
        Error::new(kind, name, class, endpoint.operation)
            .with_message(self.shared.policy.message(class))
    }

    /// A call that ended before an answer could be used: classified, and
    /// marked replayable where the route may be queued.
    pub(crate) fn error(
        &self,
        kind: ErrorKind,
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
        let error = self.error(
            ErrorKind::CircuitOpen,
            self.row(OutcomeKind::CircuitOpen),
            call,
        );
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
                self.client.shared.policy.taxonomy.get(target).or(Some(row))
            }
            _ => Some(row),
        }
    }

    fn deadline_error(&mut self, request_id: Option<String>) -> Error {
        let client = self.client;
        let error = client
            .error(
                ErrorKind::Deadline,
                client.row(OutcomeKind::Deadline),
                self.call,
            )
            .with_attempts(self.attempt)
            .with_detail(format!(
                "the {} s overall deadline ended the call, not the platform",
                client.shared.policy.deadline.as_secs()
            ));
        let error = match request_id {
            Some(id) => error.with_request_id(id),
            None => error,
        };
        self.fail(error, false)
    }

    /// Ends the call with `error`: metrics, and the retry-exhaustion alert
    /// when the row's retries were used up (the row itself raised none).
    fn fail(&mut self, error: Error, exhausted: bool) -> Error {
        let client = self.client;
        let retry_exhausted = client.shared.policy.alerts.retry_exhausted;
        if exhausted && self.attempt > 1 {
            client.raise(retry_exhausted, &error);
        }
        client.count_call(
            self.call.endpoint,
            error.class(),
            self.attempt > 1,
            self.started,
        );
        error
    }
}

/// Sends one request and reads the answer (the whole body, unless a stream).
pub(crate) async fn perform(
    request: reqwest::RequestBuilder,
    stream: bool,
) -> (Attempt, Option<reqwest::Response>) {
    let response = match request.send().await {
        Ok(r) => r,
        Err(e) => {
            let maybe_sent = !e.is_connect();
            return (
                Attempt::Failed {
                    maybe_sent,
                    reason: error_chain(&e),
                },
                None,
            );
        }
    };
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let retry_after = header("retry-after");
    let echoed_id = header("x-request-id");
    if stream && (200..300).contains(&status) {
        let answer = Attempt::Answer {
            status,
            retry_after,
            echoed_id,
            body: Bytes::new(),
        };
        return (answer, Some(response));
    }
    match response.bytes().await {
        Ok(body) => (
            Attempt::Answer {
                status,
                retry_after,
                echoed_id,
                body,
            },
            None,
        ),
        Err(e) => (
            Attempt::Failed {
                maybe_sent: true,
                reason: error_chain(&e),
            },
            None,
        ),
    }
}

/// The `detail` of a `{"detail": "..."}` envelope (or the raw text, shortened).
fn detail_of(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Envelope {
        detail: serde_json::Value,
    }
    if body.is_empty() {
        return None;
    }
    match serde_json::from_slice::<Envelope>(body) {
        Ok(Envelope {
            detail: serde_json::Value::String(s),
        }) => Some(s),
        Ok(Envelope { detail }) => Some(detail.to_string()),
        Err(_) => Some(String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned()),
    }
}
