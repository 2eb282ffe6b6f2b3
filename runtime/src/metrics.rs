//! The client-side metrics of policy §10.3, in Prometheus text format.

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    service: &'static str,
    error_class: &'static str,
    retried: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServiceLabels {
    service: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StreamLabels {
    stream: &'static str,
}

fn duration_histogram() -> Histogram {
    // 5 ms .. ~160 s: covers loopback answers up to the llm timeout class.
    Histogram::new(exponential_buckets(0.005, 2.0, 16))
}

/// Every metric of one client (shared by its clones).
pub(crate) struct Metrics {
    registry: Registry,
    requests: Family<CallLabels, Counter>,
    duration: Family<ServiceLabels, Histogram, fn() -> Histogram>,
    circuit_state: Gauge,
    circuit_open_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
    open_seconds_counted: Mutex<Duration>,
    sse_fallbacks: Family<StreamLabels, Counter>,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<CallLabels, Counter>::default();
        registry.register(
            "grag_client_requests",
            "Calls by service, final error class and whether they were retried",
            requests.clone(),
        );
        let duration = Family::<ServiceLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            duration_histogram,
        );
        registry.register(
            "grag_client_request_duration_seconds",
            "Call duration, retries included",
            duration.clone(),
        );
        let circuit_state = Gauge::default();
        registry.register(
            "grag_client_circuit_state",
            "Origin breaker: 0 closed, 1 half-open, 2 open",
            circuit_state.clone(),
        );
        let circuit_open_seconds = Counter::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "grag_client_circuit_open_seconds",
            "Time the origin breaker spent open",
            circuit_open_seconds.clone(),
        );
        let sse_fallbacks = Family::<StreamLabels, Counter>::default();
        registry.register(
            "knoll_sse_fallback",
            "Streams that ended in a fallback (stall, error or timeout event)",
            sse_fallbacks.clone(),
        );
        Metrics {
            registry,
            requests,
            duration,
            circuit_state,
            circuit_open_seconds,
            open_seconds_counted: Mutex::new(Duration::ZERO),
            sse_fallbacks,
        }
    }

    /// One finished call.
    pub fn call(
        &self,
        service: &'static str,
        error_class: &'static str,
        retried: bool,
        took: Duration,
    ) {
        let retried = if retried { "true" } else { "false" };
        self.requests
            .get_or_create(&CallLabels {
                service,
                error_class,
                retried,
            })
            .inc();
        self.duration
            .get_or_create(&ServiceLabels { service })
            .observe(took.as_secs_f64());
    }

    pub fn circuit_state(&self, metric: u8) {
        self.circuit_state.set(i64::from(metric));
    }

    /// Brings the open-seconds counter up to the breaker's own total.
    pub fn circuit_open_total(&self, total: Duration) {
        let mut counted = self
            .open_seconds_counted
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if total > *counted {
            self.circuit_open_seconds
                .inc_by((total - *counted).as_secs_f64());
            *counted = total;
        }
    }

    pub fn sse_fallback(&self, stream: &'static str) {
        self.sse_fallbacks
            .get_or_create(&StreamLabels { stream })
            .inc();
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}
