//! `src/log.rs`: the API's log lines. `tracing` takes an event's target and
//! field names at compile time, so they are written here, from the spec, and
//! the runtime calls them through `LogLines`. Written as text: a `tracing`
//! macro's arguments are no expression, so neither prettyplease nor rustfmt
//! would lay them out one per line as a person does.

use std::fmt::Write;

use crate::model::Model;

pub fn log_rs(model: &Model) -> String {
    let log = &model.log;
    let target = &log.target;
    let (alert, breaker, retry, stream) = (
        format!("{target}::alert"),
        format!("{target}::breaker"),
        format!("{target}::retry"),
        format!("{target}::stream"),
    );
    let mut path_fields = String::new();
    for (i, (field, _)) in log.path_fields.iter().enumerate() {
        let at = if i == 0 {
            "first()".to_string()
        } else {
            format!("get({i})")
        };
        let _ = writeln!(
            path_fields,
            "            {field} = line.path_values.{at}.copied().flatten(),"
        );
    }
    let (service, workspace) = (&model.log_fields.service, &model.log_fields.workspace);
    let module_doc = module_doc(model, [&alert, &breaker, &retry, &stream]);
    format!(
        r#"{module_doc}
//! Never a body: only its length and sha256.

use sdk_runtime::log::{{AlertLine, AttemptLine, ExhaustedLine, LogLines, SentLine, StreamFailedLine}};

/// The lines, as the policy's `log_lines`.
pub static LINES: Lines = Lines;

/// Writes the lines as `tracing` events.
#[derive(Debug)]
pub struct Lines;

impl LogLines for Lines {{
    fn enabled(&self) -> bool {{
        tracing::enabled!(target: "{target}", tracing::Level::INFO)
    }}

    fn sent(&self, line: &SentLine<'_>) {{
        tracing::info!(
            target: "{target}",
            request_id = line.request_id,
            tenant = line.tenant,
            pipeline_id = line.pipeline_id,
            operation = line.operation,
            method = line.method,
            path = line.path,
            attempt = line.attempt,
            "sent"
        );
    }}

    fn attempt(&self, line: &AttemptLine<'_>) {{
        tracing::info!(
            target: "{target}",
            request_id = line.request_id,
            echoed_request_id = line.echoed_request_id,
            tenant = line.tenant,
            {workspace} = line.workspace,
{path_fields}            pipeline_id = line.pipeline_id,
            {service} = line.service,
            operation = line.operation,
            method = line.method,
            path = line.path,
            status = line.status,
            error_class = line.error_class,
            row = line.row,
            attempt = line.attempt,
            retry_after_s = line.retry_after_s,
            latency_ms = line.latency_ms,
            circuit_state = line.circuit_state,
            body_len = line.body_len,
            body_sha256 = line.body_sha256,
            "attempt"
        );
    }}

    fn alert(&self, line: &AlertLine<'_>) {{
        tracing::warn!(
            target: "{alert}",
            alert = line.alert,
            severity = line.severity,
            endpoint = line.endpoint,
            row = line.row,
            detail_len = line.detail_len,
            detail_sha256 = line.detail_sha256,
            request_id = line.request_id,
            "alert"
        );
    }}

    fn retry_exhausted(&self, line: &ExhaustedLine<'_>) {{
        tracing::warn!(
            target: "{retry}",
            operation = line.operation,
            row = line.row,
            status = line.status,
            attempts = line.attempts,
            request_id = line.request_id,
            tenant = line.tenant,
            {workspace} = line.workspace,
{path_fields}            pipeline_id = line.pipeline_id,
            "retry exhausted"
        );
    }}

    fn stream_failed(&self, line: &StreamFailedLine<'_>) {{
        tracing::warn!(
            target: "{stream}",
            stream = line.stream,
            operation = line.operation,
            row = line.row,
            error_class = line.error_class,
            request_id = line.request_id,
            tenant = line.tenant,
            after_ms = line.after_ms,
            "stream failed"
        );
    }}

    fn breaker(&self, transition: &str, state: &str) {{
        tracing::info!(target: "{breaker}", transition, circuit_state = state, "breaker");
    }}

    fn warm_up(&self, operation: &str, ok: bool) {{
        tracing::info!(target: "{breaker}", operation, ok, "warm-up");
    }}
}}
"#,
    )
}

/// The module's first lines: the targets of the lines this API can write
/// (no breaker line without a breaker, no stream line without streams).
fn module_doc(model: &Model, [alert, breaker, retry, stream]: [&String; 4]) -> String {
    let mut lines = vec![
        format!("attempts on target `{}`", model.log.target),
        format!("alerts on `{alert}`"),
    ];
    if model.breaker.is_some() {
        let warm_ups = if model.warm_up.is_empty() {
            ""
        } else {
            " and warm-ups"
        };
        lines.push(format!("breaker transitions{warm_ups} on `{breaker}`"));
    }
    lines.push(format!("spent retries on `{retry}`"));
    if !model.streams.is_empty() {
        lines.push(format!(
            "streams that failed after their head on `{stream}`"
        ));
    }
    let text = format!(
        "The {} client's log lines: {}.",
        model.api.title,
        lines.join(", ")
    );
    // Wrapped as a person would, at about 100 columns.
    let mut out = String::new();
    let mut line = String::from("//!");
    for word in text.split(' ') {
        if line.len() + 1 + word.len() > 100 {
            out.push_str(&line);
            out.push('\n');
            line = String::from("//!");
        }
        line.push(' ');
        line.push_str(word);
    }
    out.push_str(&line);
    out
}
