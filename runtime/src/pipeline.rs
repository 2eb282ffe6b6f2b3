//! The request pipeline: scope check, throttle, the one place headers are
//! assembled, per-attempt timeout, classification, retries inside the deadline.

use std::time::SystemTime;

use bytes::Bytes;
use tokio::time::Instant;

use crate::backoff::{parse_retry_after, retry_delay};
use crate::call::Call;
use crate::classify::{Outcome, classify};
use crate::client::Client;
use crate::endpoint::{Lane, ScopeNeed};
use crate::error::{Error, ErrorKind};
use crate::policy::{OutcomeKind, RetrySchedule, TaxonomyRow};
use crate::reply::Reply;
use crate::telemetry::{self, AttemptLog};

/// What one attempt brought back.
pub(crate) enum Attempt {
    Answer {
        status: u16,
        retry_after: Option<String>,
        echoed_id: Option<String>,
        body: Bytes,
    },
    /// The request may have reached the server (reset, timeout mid-answer).
    Failed { maybe_sent: bool, reason: String },
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
        let deadline = started + policy.deadline;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let permit =
                tokio::time::timeout_at(deadline, self.shared.throttle.admit(endpoint.budget))
                    .await;
            let Ok(_permit) = permit else {
                return Err(self.deadline_error(call, attempt - 1, None));
            };
            let request_id = uuid::Uuid::new_v4().to_string();
            let attempt_started = Instant::now();
            let budget = endpoint.timeout.budget(false);
            let attempt_deadline = (attempt_started + budget).min(deadline);
            let request = self.request(call, &path, &request_id);
            let sent = tokio::time::timeout_at(attempt_deadline, perform(request, stream)).await;
            let (result, response) = match sent {
                Ok((result, response)) => (result, response),
                Err(_) if attempt_deadline == deadline => {
                    return Err(self.deadline_error(call, attempt, Some(request_id)));
                }
                Err(_) => (
                    Attempt::Failed {
                        maybe_sent: true,
                        reason: format!(
                            "no answer within the {} ms attempt timeout",
                            budget.as_millis()
                        ),
                    },
                    None,
                ),
            };
            let (outcome, detail, maybe_sent, retry_after, status) = match &result {
                Attempt::Answer {
                    status,
                    retry_after,
                    body,
                    ..
                } => {
                    let detail = detail_of(body);
                    let outcome_detail = detail.clone();
                    (
                        Some(outcome_detail),
                        detail,
                        true,
                        retry_after.clone(),
                        Some(*status),
                    )
                }
                Attempt::Failed { maybe_sent, reason } => {
                    (None, Some(reason.clone()), *maybe_sent, None, None)
                }
            };
            let success_status = status.is_some_and(|s| (200..300).contains(&s));
            let row = if success_status {
                None
            } else {
                let outcome = match (status, &outcome) {
                    (Some(status), Some(d)) => Outcome::Status {
                        status,
                        detail: d.as_deref(),
                        retry_after: retry_after.is_some(),
                    },
                    _ => Outcome::Connection,
                };
                classify(policy, endpoint, &outcome)
            };
            telemetry::attempt(&AttemptLog {
                client: self,
                call,
                request_id: &request_id,
                status,
                row,
                attempt,
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
                let reply = Reply::new(
                    policy,
                    endpoint,
                    status,
                    body,
                    echoed_id.unwrap_or(request_id),
                );
                return Ok((reply, response));
            }
            let schedule = row
                .and_then(|r| r.retry)
                .and_then(|i| policy.retries.get(i))
                .map(|c| c.schedule)
                .unwrap_or(RetrySchedule::Never);
            let retryable = attempt < schedule.attempts()
                && (endpoint.idempotent || !maybe_sent)
                && match schedule {
                    RetrySchedule::Never => false,
                    // Only GET inside the deploy-suspected window; no window is open
                    // until the breaker has closed once.
                    RetrySchedule::DeployWindow { .. } => false,
                    _ => true,
                };
            let error = || {
                let kind = if status.is_some() {
                    ErrorKind::Status
                } else {
                    ErrorKind::Connection
                };
                self.error(kind, row, call)
                    .with_attempts(attempt)
                    .with_request_id(request_id.clone())
                    .with_status_opt(status, detail.clone())
            };
            if !retryable {
                return Err(error());
            }
            let server_delay = retry_after
                .as_deref()
                .and_then(|v| parse_retry_after(v, SystemTime::now()));
            let delay = retry_delay(&schedule, attempt, server_delay, &mut rand::rng());
            if Instant::now() + delay >= deadline {
                return Err(self.deadline_error(call, attempt, Some(request_id)));
            }
            tokio::time::sleep(delay).await;
        }
    }

    /// Refuses a call whose scope is incomplete, before a byte is sent (T22).
    fn check_scope(&self, call: &Call<'_>) -> Result<String, Error> {
        let endpoint = call.endpoint;
        if endpoint.scope == ScopeNeed::Workspace && call.workspace.is_none() {
            return Err(self
                .error(
                    ErrorKind::InvalidScope,
                    self.row(OutcomeKind::InvalidScope),
                    call,
                )
                .with_detail(format!(
                    "{} needs a workspace (X-Workspace-ID)",
                    endpoint.path
                )));
        }
        call.render_path().map_err(|reason| {
            self.error(
                ErrorKind::InvalidScope,
                self.row(OutcomeKind::InvalidScope),
                call,
            )
            .with_detail(reason)
        })
    }

    /// The only place a request and its headers are assembled.
    fn request(&self, call: &Call<'_>, path: &str, request_id: &str) -> reqwest::RequestBuilder {
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

    pub(crate) fn row(&self, kind: OutcomeKind) -> Option<&'static TaxonomyRow> {
        self.shared
            .policy
            .taxonomy
            .iter()
            .find(|r| r.matches.outcome == kind)
    }

    /// An error classified by `row` (or unclassified when the spec has none).
    pub(crate) fn error(
        &self,
        kind: ErrorKind,
        row: Option<&'static TaxonomyRow>,
        call: &Call<'_>,
    ) -> Error {
        let (name, class) = row
            .map(|r| (r.row, r.class))
            .unwrap_or(("-", "unclassified"));
        Error::new(kind, name, class, call.endpoint.operation)
            .with_message(self.shared.policy.message(class))
    }

    fn deadline_error(&self, call: &Call<'_>, attempts: u32, request_id: Option<String>) -> Error {
        let error = self
            .error(ErrorKind::Deadline, self.row(OutcomeKind::Deadline), call)
            .with_attempts(attempts)
            .with_detail(format!(
                "the {} s overall deadline ended the call, not the platform",
                self.shared.policy.deadline.as_secs()
            ));
        match request_id {
            Some(id) => error.with_request_id(id),
            None => error,
        }
    }
}

/// Sends one request and reads the answer (the whole body, unless a stream).
async fn perform(
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

/// An error with its sources, for people: reqwest hides the useful part there.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
