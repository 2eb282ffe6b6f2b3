//! One `tracing` span per call (a stream's opening included) and one per
//! attempt inside it, named as OpenTelemetry's HTTP client semantic
//! conventions name them (`http.request.method`, `url.template`,
//! `server.address`, `http.response.status_code`, `error.type`,
//! `http.request.resend_count`), plus the policy's own fields under `sdk.`.
//! A backend that installs `tracing-opentelemetry` gets a trace per call
//! with its attempts; without a subscriber that wants them, no field is
//! computed: [`recorded`] is asked before a span is built.

use tracing::field::Empty;
use tracing::{Span, info_span};

use sdk_policy::policy::{Policy, TaxonomyRow};

use crate::call::Call;
use crate::error::Error;

/// Whether anything would record a span at INFO: a `tracing` subscriber
/// that wants INFO, or, with no subscriber set at all, a `log` logger at
/// INFO (`tracing`'s `log` bridge, which axum in a build turns on, writes
/// a disabled span's fields to `log` then). Two loads: without it the
/// bridge evaluates every field of a span nobody records.
pub(crate) fn recorded() -> bool {
    if tracing::dispatcher::has_been_set() {
        tracing::level_enabled!(tracing::Level::INFO)
    } else {
        ::log::max_level() >= ::log::LevelFilter::Info
    }
}

/// The span of one call: open until its answer (or its stream's head).
/// `base`: the origin the request goes to.
pub(crate) fn call(policy: &Policy, base: &reqwest::Url, call: &Call<'_>) -> Span {
    if !recorded() {
        return Span::none();
    }
    let e = call.endpoint;
    let span = info_span!(
        "call",
        otel.name = %format_args!("{} {}", e.method.as_str(), e.path),
        otel.kind = "client",
        otel.status_code = Empty,
        http.request.method = e.method.as_str(),
        url.template = e.path,
        server.address = Empty,
        server.port = Empty,
        http.response.status_code = Empty,
        error.type = Empty,
        http.request.resend_count = Empty,
        sdk.service = e.service,
        sdk.operation = e.operation,
        sdk.timeout_class = name(policy.timeouts.get(call.timeout.unwrap_or(e.timeout).get()).map(|t| t.name)),
        sdk.retry_class = name(policy.retries.get(e.retry.get()).map(|r| r.name)),
        sdk.budget = name(policy.throttle.budgets.get(e.budget.get()).map(|b| b.name)),
        sdk.idempotent = e.idempotent,
        sdk.stream = Empty,
        sdk.taxonomy_row = Empty,
        sdk.attempts = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    if let Some(stream) = e.stream.and_then(|i| policy.streams.get(i.get())) {
        span.record("sdk.stream", stream.name);
    }
    if let Some(host) = base.host_str() {
        span.record("server.address", host);
    }
    if let Some(port) = base.port_or_known_default() {
        span.record("server.port", port);
    }
    span
}

/// A class or budget name; an endpoint made by hand outside the policy
/// (refused by the scope check right after) has none.
fn name(name: Option<&'static str>) -> &'static str {
    name.unwrap_or("-")
}

/// The span of attempt `n` (1 for the first), a child of the call's.
pub(crate) fn attempt(n: u32) -> Span {
    if !recorded() {
        return Span::none();
    }
    info_span!(
        "attempt",
        http.request.resend_count = n.saturating_sub(1),
        http.response.status_code = Empty,
        error.type = Empty,
        sdk.taxonomy_row = Empty,
    )
}

/// What attempt `span` got: a status, and the row unless it succeeded.
pub(crate) fn attempt_done(span: &Span, status: Option<u16>, row: Option<&TaxonomyRow>) {
    if span.is_disabled() {
        return;
    }
    if let Some(status) = status {
        span.record("http.response.status_code", status);
    }
    if let Some(row) = row.filter(|r| !r.is_success()) {
        span.record("error.type", row.class);
        span.record("sdk.taxonomy_row", row.row);
    }
}

/// Attempt `n` starts: the call has been re-sent `n - 1` times.
pub(crate) fn resent(n: u32) {
    let span = Span::current();
    if span.is_disabled() {
        return;
    }
    span.record("http.request.resend_count", n.saturating_sub(1));
    span.record("sdk.attempts", n);
}

/// How the call ended.
pub(crate) fn finished(span: &Span, result: Result<u16, &Error>) {
    match result {
        // Nobody wants the fields: not even the records are built.
        Ok(_) if span.is_disabled() => {}
        Ok(status) => {
            span.record("http.response.status_code", status);
        }
        Err(e) => failed(span, e),
    }
}

/// How a call that failed ended.
pub(crate) fn failed(span: &Span, e: &Error) {
    if span.is_disabled() {
        return;
    }
    span.record("otel.status_code", "ERROR");
    span.record("error.type", e.class_name());
    span.record("sdk.taxonomy_row", e.row());
    span.record("sdk.attempts", e.attempts());
    span.record("http.request.resend_count", e.attempts().saturating_sub(1));
    if let Some(status) = e.status() {
        span.record("http.response.status_code", status);
    }
}
