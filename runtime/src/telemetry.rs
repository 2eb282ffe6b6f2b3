//! One structured log line per attempt (policy §10.2), never a body.

use std::time::Duration;

use crate::Endpoint;
use crate::call::Call;
use crate::client::Client;
use crate::log::{AttemptLine, MAX_PATH_FIELDS, SentLine};
use crate::policy::TaxonomyRow;
use crate::scope::Id;

/// Request bodies up to this size are hashed for the log line; a larger
/// one is logged by length alone (hashing megabytes per call buys nothing).
const MAX_HASHED_BODY: usize = 1 << 20;

/// Everything one attempt's log line says.
pub(crate) struct AttemptLog<'a> {
    pub client: &'a Client,
    pub call: &'a Call<'a>,
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
}

/// The echo worth logging beside our own ID: only one that differs.
fn differing<'a>(ours: &str, echoed: Option<&'a str>) -> Option<&'a str> {
    echoed.filter(|e| *e != ours)
}

/// The line of a request leaving, written before its answer (§10.1: the
/// request ID is logged on send and on receive).
pub(crate) fn sent(client: &Client, call: &Call<'_>, request_id: &str, attempt: u32) {
    if !enabled(client) {
        return;
    }
    let endpoint = call.endpoint;
    client.shared.policy.log_lines.sent(&SentLine {
        request_id,
        tenant: client.tenant().as_str(),
        pipeline_id: pipeline_id(call),
        operation: endpoint.operation,
        method: endpoint.method.as_str(),
        path: endpoint.path,
        attempt,
    });
}

/// The pipeline ID the call carries, if its route takes one.
fn pipeline_id<'a>(call: &Call<'a>) -> Option<&'a str> {
    call.pipeline.filter(|_| call.endpoint.pipeline_id)
}

/// Whether attempt lines are logged at all: nothing is computed for them otherwise.
pub(crate) fn enabled(client: &Client) -> bool {
    client.shared.policy.log_lines.enabled()
}

/// The sha256 of a request body, if it is small enough to be worth hashing.
pub(crate) fn body_digest(body: &[u8]) -> Option<String> {
    (body.len() <= MAX_HASHED_BODY).then(|| sha256_hex(body))
}

/// The values of the policy's path fields for one call, in their order.
pub(crate) fn path_values<'a>(
    client: &Client,
    call: &'a Call<'a>,
) -> [Option<&'a str>; MAX_PATH_FIELDS] {
    let mut out = [None; MAX_PATH_FIELDS];
    let fields = client.shared.policy.log.path_fields;
    for (slot, (_, names)) in out.iter_mut().zip(fields) {
        *slot = path_value(call.endpoint.path, &call.path, names);
    }
    out
}

/// Writes the attempt's line through the policy's [`LogLines`](crate::log::LogLines).
/// Only the body's length and sha256 are logged, never its content.
pub(crate) fn attempt(log: &AttemptLog<'_>, digest: Option<&str>) {
    if !enabled(log.client) {
        return;
    }
    let values = path_values(log.client, log.call);
    Line {
        endpoint: log.call.endpoint,
        request_id: log.request_id,
        echoed_id: differing(log.request_id, log.echoed_id),
        workspace: log.call.workspace.map(Id::as_str),
        pipeline: pipeline_id(log.call),
        path_values: &values,
        status: log.status,
        row: log.row,
        attempt: log.attempt,
        retry_after: log.retry_after,
        latency: log.latency,
        body_len: log.call.body.as_ref().map_or(0, |b| b.len()),
        body_sha256: digest,
    }
    .emit(log.client);
}

/// The line of a successful attempt, written once its body is decoded
/// (a 2xx that does not decode is a T24 line, not an `ok` one).
pub(crate) struct PendingLine {
    request_id: String,
    echoed_id: Option<String>,
    workspace: Option<Id>,
    pipeline: Option<String>,
    path_values: [Option<String>; MAX_PATH_FIELDS],
    status: Option<u16>,
    row: Option<&'static TaxonomyRow>,
    attempt: u32,
    latency: Duration,
    body_len: usize,
    body_sha256: Option<String>,
}

/// Captures a successful attempt's line, when lines are logged at all.
pub(crate) fn pending(log: &AttemptLog<'_>, digest: Option<&str>) -> Option<PendingLine> {
    if !enabled(log.client) {
        return None;
    }
    Some(PendingLine {
        request_id: log.request_id.to_owned(),
        echoed_id: differing(log.request_id, log.echoed_id).map(str::to_owned),
        workspace: log.call.workspace.cloned(),
        pipeline: pipeline_id(log.call).map(str::to_owned),
        path_values: path_values(log.client, log.call).map(|v| v.map(str::to_owned)),
        status: log.status,
        row: log.row,
        attempt: log.attempt,
        latency: log.latency,
        body_len: log.call.body.as_ref().map_or(0, |b| b.len()),
        body_sha256: digest.map(str::to_owned),
    })
}

impl PendingLine {
    /// Writes the line, classified by how decoding ended (`row: None` is ok).
    pub(crate) fn emit(
        &self,
        client: &Client,
        endpoint: &Endpoint,
        row: Option<&'static TaxonomyRow>,
    ) {
        let values = self.path_values.each_ref().map(Option::as_deref);
        Line {
            endpoint,
            request_id: &self.request_id,
            echoed_id: self.echoed_id.as_deref(),
            workspace: self.workspace.as_ref().map(Id::as_str),
            pipeline: self.pipeline.as_deref(),
            path_values: &values,
            status: self.status,
            row: row.or(self.row),
            attempt: self.attempt,
            retry_after: None,
            latency: self.latency,
            body_len: self.body_len,
            body_sha256: self.body_sha256.as_deref(),
        }
        .emit(client);
    }
}

/// The fields of one line, however they were gathered.
struct Line<'a> {
    endpoint: &'a Endpoint,
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
    body_len: usize,
    body_sha256: Option<&'a str>,
}

impl Line<'_> {
    fn emit(&self, client: &Client) {
        let endpoint = self.endpoint;
        let policy = client.shared.policy;
        let fields = policy.log.path_fields.len().min(MAX_PATH_FIELDS);
        policy.log_lines.attempt(&AttemptLine {
            request_id: self.request_id,
            echoed_request_id: self.echoed_id,
            tenant: client.tenant().as_str(),
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
            circuit_state: client.breaker().state().as_str(),
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

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write;
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest {
        let _ = write!(out, "{b:02x}");
    }
    out
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

    #[test]
    fn large_bodies_are_not_hashed() {
        assert_eq!(super::body_digest(b"{}").map(|d| d.len()), Some(64));
        assert_eq!(
            super::body_digest(&vec![b'x'; super::MAX_HASHED_BODY + 1]),
            None
        );
    }
}
