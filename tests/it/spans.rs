//! Every call is a `tracing` span with OpenTelemetry's HTTP client field
//! names and the policy's own, every attempt a span inside it: read here by
//! a subscriber layer of our own against the simulator, on a call retried
//! after a 502 and on one that fails for good.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};

use grag_sim::embedded;
use grag_sim::{Fault, Rule};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// One span as the layer saw it: name, fields in the order they were
/// first recorded (the span's own order), parent.
#[derive(Debug, Clone, Default)]
struct Seen {
    name: String,
    fields: Vec<(String, String)>,
    parent: Option<u64>,
}

/// Keeps every span and every field recorded on it.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<BTreeMap<u64, Seen>>>);

struct Fields<'a>(&'a mut Vec<(String, String)>);

impl Fields<'_> {
    fn set(&mut self, name: &str, value: String) {
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => *v = value,
            None => self.0.push((name.to_owned(), value)),
        }
    }
}

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.set(field.name(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field.name(), value.to_owned());
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut seen = Seen {
            name: attrs.metadata().name().to_owned(),
            parent: ctx
                .span(id)
                .and_then(|s| s.parent())
                .map(|p| p.id().into_u64()),
            ..Seen::default()
        };
        attrs.record(&mut Fields(&mut seen.fields));
        self.0.lock().unwrap().insert(id.into_u64(), seen);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some(seen) = self.0.lock().unwrap().get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut seen.fields));
        }
    }
}

impl Spans {
    /// The call spans, in the order they were made, each with its attempts.
    fn calls(&self) -> Vec<(Seen, Vec<Seen>)> {
        let all = self.0.lock().unwrap().clone();
        all.iter()
            .filter(|(_, s)| s.name == "call")
            .map(|(id, call)| {
                let attempts = all
                    .values()
                    .filter(|s| s.name == "attempt" && s.parent == Some(*id))
                    .cloned()
                    .collect();
                (call.clone(), attempts)
            })
            .collect()
    }
}

fn field<'a>(span: &'a Seen, name: &str) -> Option<&'a str> {
    let (_, value) = span.fields.iter().find(|(n, _)| n == name)?;
    Some(value)
}

/// A call and its attempts as the book draws them: a line of `field=value`
/// per span, the attempts as branches below the call.
fn tree(call: &Seen, attempts: &[Seen]) -> String {
    let fields = |span: &Seen| {
        let words: Vec<String> = (span.fields.iter())
            .map(|(n, v)| match v.contains(' ') {
                true => format!("{n}=\"{v}\""),
                false => format!("{n}={v}"),
            })
            .collect();
        words.join(" ")
    };
    let mut out = format!("call  {}\n", fields(call));
    for (i, attempt) in attempts.iter().enumerate() {
        let branch = if i + 1 == attempts.len() {
            "└─"
        } else {
            "├─"
        };
        writeln!(out, "{branch} attempt  {}", fields(attempt)).expect("a String");
    }
    out
}

#[tokio::test]
async fn a_retried_call_is_one_span_with_an_attempt_span_per_try() {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    let _guard = crate::kit::capture::set_default(subscriber);
    let sim = embedded::start(embedded::sim_config(100)).await;
    let grag = embedded::client(&sim, embedded::TENANT, embedded::policy(100));
    // One 502 (T12, bad_gateway, R1): retried, then answered.
    sim.faults()
        .push(Rule::new(Fault::BadGateway).on("list_kbs").once());
    grag.workspaces().list_kbs().await.unwrap();

    let calls = spans.calls();
    assert_eq!(calls.len(), 1, "{calls:#?}");
    let (call, attempts) = &calls[0];
    let port = sim.url().rsplit(':').next().unwrap().to_owned();
    for (name, want) in [
        ("otel.name", "GET /workspaces/api/v1/kbs"),
        ("otel.kind", "client"),
        ("http.request.method", "GET"),
        ("url.template", "/workspaces/api/v1/kbs"),
        ("server.address", "127.0.0.1"),
        ("server.port", port.as_str()),
        ("http.response.status_code", "200"),
        ("http.request.resend_count", "1"),
        ("sdk.service", "workspaces"),
        ("sdk.operation", "list_kbs"),
        ("sdk.timeout_class", "default"),
        ("sdk.retry_class", "R1"),
        ("sdk.budget", "global"),
        ("sdk.idempotent", "true"),
        ("sdk.attempts", "2"),
    ] {
        assert_eq!(field(call, name), Some(want), "{name}: {call:#?}");
    }
    assert_eq!(field(call, "error.type"), None, "it succeeded: {call:#?}");
    assert_eq!(attempts.len(), 2, "{attempts:#?}");
    let first = &attempts[0];
    assert_eq!(field(first, "http.request.resend_count"), Some("0"));
    assert_eq!(field(first, "http.response.status_code"), Some("502"));
    assert_eq!(field(first, "error.type"), Some("bad_gateway"));
    assert_eq!(field(first, "sdk.taxonomy_row"), Some("T12"));
    let second = &attempts[1];
    assert_eq!(field(second, "http.request.resend_count"), Some("1"));
    assert_eq!(field(second, "http.response.status_code"), Some("200"));
    assert_eq!(field(second, "error.type"), None);
    crate::book_output::shown("retried-call-spans", &tree(call, attempts));
    sim.stop().await;
}

#[tokio::test]
async fn a_failed_call_names_its_taxonomy_class_as_error_type() {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    let _guard = crate::kit::capture::set_default(subscriber);
    let sim = embedded::start(embedded::sim_config(100)).await;
    let grag = embedded::client(&sim, embedded::TENANT, embedded::policy(100));
    // A 402 (T5): never retried.
    sim.faults()
        .push(Rule::new(Fault::Budget).on("get_settings"));
    let error = grag.workspaces().get_settings().await.unwrap_err();
    assert_eq!(error.class_name(), "budget_exhausted");

    let calls = spans.calls();
    let (call, attempts) = &calls[0];
    for (name, want) in [
        ("otel.status_code", "ERROR"),
        ("error.type", "budget_exhausted"),
        ("sdk.taxonomy_row", "T5"),
        ("http.response.status_code", "402"),
        ("http.request.resend_count", "0"),
        ("sdk.attempts", "1"),
        ("sdk.retry_class", "R1"),
    ] {
        assert_eq!(field(call, name), Some(want), "{name}: {call:#?}");
    }
    assert_eq!(attempts.len(), 1);
    assert_eq!(field(&attempts[0], "error.type"), Some("budget_exhausted"));
    sim.stop().await;
}
