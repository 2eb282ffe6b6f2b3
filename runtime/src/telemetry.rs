//! One structured log line per attempt (policy §10.2), never a body.

use std::time::Duration;

use crate::call::Call;
use crate::client::Client;
use crate::policy::TaxonomyRow;

/// Everything one attempt's log line says.
pub(crate) struct AttemptLog<'a> {
    pub client: &'a Client,
    pub call: &'a Call<'a>,
    pub request_id: &'a str,
    pub status: Option<u16>,
    pub row: Option<&'static TaxonomyRow>,
    pub attempt: u32,
    pub retry_after: Option<&'a str>,
    pub latency: Duration,
}

/// Emits the attempt's line as a `tracing` event (target `grag_client`).
/// Only the body's length and sha256 are logged, never its content.
pub(crate) fn attempt(log: &AttemptLog<'_>) {
    let endpoint = log.call.endpoint;
    let (body_len, body_sha256) = match &log.call.body {
        Some(body) => (body.len(), sha256_hex(body)),
        None => (0, String::new()),
    };
    let error_class = log.row.map(|r| r.class).unwrap_or("ok");
    let row = log.row.map(|r| r.row).unwrap_or("-");
    let circuit_state = log.client.breaker().state().as_str();
    let kb_id = path_value(endpoint.path, &log.call.path, &["kb", "kb_id"]);
    tracing::info!(
        target: "grag_client",
        request_id = log.request_id,
        tenant = log.client.tenant().as_str(),
        workspace_id = log.call.workspace.map(|w| w.as_str()),
        kb_id,
        pipeline_id = log.client.pipeline_id.as_deref().filter(|_| endpoint.pipeline_id),
        grag_service = endpoint.service,
        operation = endpoint.operation,
        method = endpoint.method.as_str(),
        path = endpoint.path,
        status = log.status,
        error_class,
        row,
        attempt = log.attempt,
        retry_after_s = log.retry_after,
        latency_ms = log.latency.as_millis() as u64,
        circuit_state,
        body_len,
        body_sha256 = body_sha256.as_str(),
        "attempt"
    );
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
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::path_value;

    #[test]
    fn path_value_finds_the_named_placeholder() {
        let template = "/ai-gateway/api/v1/retrieval/collections/{kb}/search/rerank";
        assert_eq!(
            path_value(template, &["kb-1"], &["kb", "kb_id"]),
            Some("kb-1")
        );
        let template = "/x/{job_id}/y/{kb_id}";
        assert_eq!(
            path_value(template, &["j", "k"], &["kb", "kb_id"]),
            Some("k")
        );
        assert_eq!(path_value("/x/{job_id}", &["j"], &["kb"]), None);
    }
}
