//! `src/log.rs`: the API's log lines. `tracing` takes an event's target and
//! field names at compile time, so they are written here, from the spec, and
//! the runtime calls them through `LogLines`. Written as text: a `tracing`
//! macro's arguments are no expression, so neither prettyplease nor rustfmt
//! would lay them out one per line as a person does.

use std::fmt::Write;

use crate::model::Model;

/// `src/log.rs`: one `tracing` event per line the runtime writes, under the spec's targets.
pub fn log_rs(model: &Model) -> String {
    let targets = Targets::of(model);
    let module_doc = module_doc(model, &targets);
    let methods = [
        enabled(&targets),
        sent(&targets),
        attempt(model, &targets),
        alert(&targets),
        retry_exhausted(model, &targets),
        stream_failed(&targets),
        breaker_lines(&targets),
    ];
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
{}}}
"#,
        methods.join("\n")
    )
}

/// The target of each kind of line: the spec's, and one below it per kind.
struct Targets {
    target: &'static str,
    alert: String,
    breaker: String,
    retry: String,
    stream: String,
}

impl Targets {
    fn of(model: &Model) -> Self {
        let target = &model.log.target;
        Targets {
            target,
            alert: format!("{target}::alert"),
            breaker: format!("{target}::breaker"),
            retry: format!("{target}::retry"),
            stream: format!("{target}::stream"),
        }
    }
}

/// One field per path value the spec logs, the first as `first()`.
fn path_fields(model: &Model) -> String {
    let mut path_fields = String::new();
    for (i, (field, _)) in model.log.path_fields.iter().enumerate() {
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
    path_fields
}

/// Whether the attempt lines are on: the runtime skips building them otherwise.
fn enabled(t: &Targets) -> String {
    format!(
        r#"    fn enabled(&self) -> bool {{
        tracing::enabled!(target: "{}", tracing::Level::INFO)
    }}
"#,
        t.target
    )
}

/// The line of a request as it leaves.
fn sent(t: &Targets) -> String {
    format!(
        r#"    fn sent(&self, line: &SentLine<'_>) {{
        tracing::info!(
            target: "{}",
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
"#,
        t.target
    )
}

/// The line of an attempt's answer, with the spec's field names.
fn attempt(model: &Model, t: &Targets) -> String {
    let (service, workspace) = (&model.log_fields.service, &model.log_fields.workspace);
    format!(
        r#"    fn attempt(&self, line: &AttemptLine<'_>) {{
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
"#,
        target = t.target,
        path_fields = path_fields(model),
    )
}

/// The line of a raised alert: never its detail, only its length and hash.
fn alert(t: &Targets) -> String {
    format!(
        r#"    fn alert(&self, line: &AlertLine<'_>) {{
        tracing::warn!(
            target: "{}",
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
"#,
        t.alert
    )
}

/// The line of a call whose retries are spent, with the spec's field names.
fn retry_exhausted(model: &Model, t: &Targets) -> String {
    let workspace = &model.log_fields.workspace;
    format!(
        r#"    fn retry_exhausted(&self, line: &ExhaustedLine<'_>) {{
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
"#,
        retry = t.retry,
        path_fields = path_fields(model),
    )
}

/// The line of a stream that failed after its head.
fn stream_failed(t: &Targets) -> String {
    format!(
        r#"    fn stream_failed(&self, line: &StreamFailedLine<'_>) {{
        tracing::warn!(
            target: "{}",
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
"#,
        t.stream
    )
}

/// The breaker's lines: its transitions and the warm-up calls after a close.
fn breaker_lines(t: &Targets) -> String {
    format!(
        r#"    fn breaker(&self, transition: &str, state: &str) {{
        tracing::info!(target: "{breaker}", transition, circuit_state = state, "breaker");
    }}

    fn warm_up(&self, operation: &str, ok: bool) {{
        tracing::info!(target: "{breaker}", operation, ok, "warm-up");
    }}
"#,
        breaker = t.breaker
    )
}

/// The module's first lines: the targets of the lines this API can write
/// (no breaker line without a breaker, no stream line without streams).
fn module_doc(model: &Model, t: &Targets) -> String {
    let (alert, breaker, retry, stream) = (&t.alert, &t.breaker, &t.retry, &t.stream);
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
