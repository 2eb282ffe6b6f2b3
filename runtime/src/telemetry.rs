//! One structured log line per attempt (policy §10.2), never a body.

use std::time::Duration;

use sdk_policy::endpoint::Endpoint;
use sdk_policy::log::{AttemptLine, MAX_PATH_FIELDS, SentLine};
use sdk_policy::policy::{Policy, TaxonomyRow};
use sdk_policy::scope::Id;

use crate::call::Call;

/// What every line of one call says of its scope, gathered once per call:
/// its route, tenant, workspace, pipeline id and the policy's path fields.
pub(crate) struct LogScope<'a> {
    pub endpoint: &'static Endpoint,
    pub tenant: &'a str,
    pub workspace: Option<&'a str>,
    /// The pipeline ID the call carries, if its route takes one.
    pub pipeline: Option<&'a str>,
    /// Empty when lines are not logged: nothing is computed for them then.
    pub path_values: [Option<&'a str>; MAX_PATH_FIELDS],
    pub body_len: usize,
}

impl<'a> LogScope<'a> {
    pub(crate) fn of(policy: &Policy, tenant: &'a Id, call: &'a Call<'a>) -> Self {
        let path_values = match enabled(policy) {
            true => path_values(policy, call),
            false => [None; MAX_PATH_FIELDS],
        };
        LogScope {
            endpoint: call.endpoint,
            tenant: tenant.as_str(),
            workspace: call.workspace.map(Id::as_str),
            pipeline: call.pipeline.filter(|_| call.endpoint.pipeline_id),
            path_values,
            body_len: call.body.as_ref().map_or(0, |b| b.len()),
        }
    }
}

/// The values of the policy's path fields for one call, in their order.
pub(crate) fn path_values<'a>(
    policy: &Policy,
    call: &'a Call<'a>,
) -> [Option<&'a str>; MAX_PATH_FIELDS] {
    let mut out = [None; MAX_PATH_FIELDS];
    for (slot, (_, names)) in out.iter_mut().zip(policy.log.path_fields) {
        *slot = path_value(call.endpoint.path, &call.path, names);
    }
    out
}

/// Everything one attempt's log line says beyond its call's scope.
pub(crate) struct AttemptLog<'a> {
    pub scope: &'a LogScope<'a>,
    pub request_id: &'a str,
    /// The answer's `X-Request-ID`, if it came with one.
    pub echoed_id: Option<&'a str>,
    pub status: Option<u16>,
    pub row: Option<&'static TaxonomyRow>,
    pub attempt: u32,
    pub retry_after: Option<Duration>,
    /// Read only for the log line: zero when no line is written (the clock
    /// is not read for nothing).
    pub latency: Duration,
    /// The origin breaker's state as the attempt concluded.
    pub circuit_state: &'static str,
}

/// The echo worth logging beside our own ID: only one that differs.
fn differing<'a>(ours: &str, echoed: Option<&'a str>) -> Option<&'a str> {
    echoed.filter(|e| *e != ours)
}

/// The line of a request leaving, written before its answer (§10.1: the
/// request ID is logged on send and on receive).
pub(crate) fn sent(policy: &Policy, scope: &LogScope<'_>, request_id: &str, attempt: u32) {
    if !enabled(policy) {
        return;
    }
    let endpoint = scope.endpoint;
    policy.log_lines.sent(&SentLine {
        request_id,
        tenant: scope.tenant,
        pipeline_id: scope.pipeline,
        operation: endpoint.operation,
        method: endpoint.method.as_str(),
        path: endpoint.path,
        attempt,
    });
}

/// Whether attempt lines are logged at all: nothing is computed for them otherwise.
pub(crate) fn enabled(policy: &Policy) -> bool {
    policy.log_lines.enabled()
}

/// Writes the attempt's line through the policy's [`LogLines`](sdk_policy::log::LogLines).
/// Only the body's length and sha256 are logged, never its content.
pub(crate) fn attempt(policy: &Policy, log: &AttemptLog<'_>, digest: Option<&str>) {
    if !enabled(policy) {
        return;
    }
    let scope = log.scope;
    Line {
        endpoint: scope.endpoint,
        tenant: scope.tenant,
        request_id: log.request_id,
        echoed_id: differing(log.request_id, log.echoed_id),
        workspace: scope.workspace,
        pipeline: scope.pipeline,
        path_values: &scope.path_values,
        status: log.status,
        row: log.row,
        attempt: log.attempt,
        retry_after: log.retry_after,
        latency: log.latency,
        circuit_state: log.circuit_state,
        body_len: scope.body_len,
        body_sha256: digest,
    }
    .emit(policy);
}

/// The line of a successful attempt, written once its body is decoded
/// (a 2xx that does not decode is a T24 line, not an `ok` one).
pub(crate) struct PendingLine {
    request_id: String,
    echoed_id: Option<String>,
    workspace: Option<String>,
    pipeline: Option<String>,
    path_values: [Option<String>; MAX_PATH_FIELDS],
    status: Option<u16>,
    row: Option<&'static TaxonomyRow>,
    attempt: u32,
    latency: Duration,
    circuit_state: &'static str,
    body_len: usize,
    body_sha256: Option<String>,
}

/// Captures a successful attempt's line, when lines are logged at all.
pub(crate) fn pending(
    policy: &Policy,
    log: &AttemptLog<'_>,
    digest: Option<&str>,
) -> Option<PendingLine> {
    if !enabled(policy) {
        return None;
    }
    let scope = log.scope;
    Some(PendingLine {
        request_id: log.request_id.to_owned(),
        echoed_id: differing(log.request_id, log.echoed_id).map(str::to_owned),
        workspace: scope.workspace.map(str::to_owned),
        pipeline: scope.pipeline.map(str::to_owned),
        path_values: scope.path_values.map(|v| v.map(str::to_owned)),
        status: log.status,
        row: log.row,
        attempt: log.attempt,
        latency: log.latency,
        circuit_state: log.circuit_state,
        body_len: scope.body_len,
        body_sha256: digest.map(str::to_owned),
    })
}

impl PendingLine {
    /// Writes the line, classified by how decoding ended (`row: None` is ok).
    pub(crate) fn emit(
        &self,
        policy: &Policy,
        tenant: &str,
        endpoint: &Endpoint,
        row: Option<&'static TaxonomyRow>,
    ) {
        let values = self.path_values.each_ref().map(Option::as_deref);
        Line {
            endpoint,
            tenant,
            request_id: &self.request_id,
            echoed_id: self.echoed_id.as_deref(),
            workspace: self.workspace.as_deref(),
            pipeline: self.pipeline.as_deref(),
            path_values: &values,
            status: self.status,
            row: row.or(self.row),
            attempt: self.attempt,
            retry_after: None,
            latency: self.latency,
            circuit_state: self.circuit_state,
            body_len: self.body_len,
            body_sha256: self.body_sha256.as_deref(),
        }
        .emit(policy);
    }
}

/// The fields of one line, however they were gathered.
struct Line<'a> {
    endpoint: &'a Endpoint,
    tenant: &'a str,
    request_id: &'a str,
    echoed_id: Option<&'a str>,
    workspace: Option<&'a str>,
    pipeline: Option<&'a str>,
    path_values: &'a [Option<&'a str>; MAX_PATH_FIELDS],
    status: Option<u16>,
    row: Option<&'static TaxonomyRow>,
    attempt: u32,
    retry_after: Option<Duration>,
    latency: Duration,
    circuit_state: &'static str,
    body_len: usize,
    body_sha256: Option<&'a str>,
}

impl Line<'_> {
    fn emit(&self, policy: &Policy) {
        let endpoint = self.endpoint;
        let fields = policy.log.path_fields.len().min(MAX_PATH_FIELDS);
        policy.log_lines.attempt(&AttemptLine {
            request_id: self.request_id,
            echoed_request_id: self.echoed_id,
            tenant: self.tenant,
            workspace: self.workspace,
            path_values: &self.path_values[..fields],
            pipeline_id: self.pipeline,
            service: endpoint.service,
            operation: endpoint.operation,
            method: endpoint.method.as_str(),
            path: endpoint.path,
            status: self.status,
            error_class: self.row.map(|r| r.class).unwrap_or("ok"),
            row: self.row.map(|r| r.row).unwrap_or("-"),
            attempt: self.attempt,
            retry_after_s: self.retry_after.map(|d| d.as_secs()),
            latency_ms: self.latency.as_millis() as u64,
            circuit_state: self.circuit_state,
            body_len: self.body_len,
            body_sha256: self.body_sha256.unwrap_or(""),
        });
    }
}

/// The value of the first placeholder named one of `names`, if the route has one.
/// (`analyse_id` and `ai_run_id` are the backend's context: put them on a
/// `tracing` span around the call and the JSON formatter adds them.)
fn path_value<'a>(template: &str, values: &[&'a str], names: &[&str]) -> Option<&'a str> {
    let mut rest = template;
    let mut index = 0;
    while let Some(open) = rest.find('{') {
        let close = open + rest[open..].find('}')?;
        if names.contains(&&rest[open + 1..close]) {
            return values.get(index).copied();
        }
        index += 1;
        rest = &rest[close + 1..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::path_value;

    #[test]
    fn path_value_finds_the_named_placeholder() {
        let template = "/search/v1/collections/{coll}/rerank";
        assert_eq!(
            path_value(template, &["c-1"], &["coll", "coll_id"]),
            Some("c-1")
        );
        let template = "/x/{job_id}/y/{coll_id}";
        assert_eq!(
            path_value(template, &["j", "k"], &["coll", "coll_id"]),
            Some("k")
        );
        assert_eq!(path_value("/x/{job_id}", &["j"], &["kb"]), None);
    }
}
