//! The client-side metrics of policy §10.3, in Prometheus text format.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::alerts::AlertSink;
use sdk_policy::policy::FleetMetricNames;
use sdk_policy::policy::{MetricNames, RouteIx};

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
struct BackendLabels {
    backend: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    backend: &'static str,
    outcome: &'static str,
}

/// The fleet's metrics, registered with the client's: clones
/// share the same series.
#[derive(Clone, Debug)]
pub struct FleetMetrics {
    admission: Family<BackendLabels, Histogram, fn() -> Histogram>,
    decisions: Family<DecisionLabels, Counter>,
    /// 1 while degraded.
    degraded: Gauge,
    /// This replica's share of the fleet's limits (1 when shared).
    share: Gauge<f64, std::sync::atomic::AtomicU64>,
}

impl FleetMetrics {
    fn register(registry: &mut Registry, names: &FleetMetricNames) -> Self {
        let metrics = Self {
            admission: Family::new_with_constructor(admission_histogram),
            decisions: Family::default(),
            degraded: Gauge::default(),
            share: Gauge::default(),
        };
        registry.register(
            names.admission,
            "Time of the fleet stage of admission, by backend",
            metrics.admission.clone(),
        );
        registry.register(
            names.decisions,
            "Fleet admission decisions, by backend and outcome",
            metrics.decisions.clone(),
        );
        registry.register(
            names.degraded,
            "1 while the fleet's store is unreachable",
            metrics.degraded.clone(),
        );
        registry.register(
            names.share,
            "This replica's share of the fleet's limits",
            metrics.share.clone(),
        );
        metrics
    }

    pub fn admission(&self, backend: &'static str, took: Duration) {
        self.admission
            .get_or_create(&BackendLabels { backend })
            .observe(took.as_secs_f64());
    }

    pub fn decision(&self, backend: &'static str, outcome: &'static str) {
        self.decisions
            .get_or_create(&DecisionLabels { backend, outcome })
            .inc();
    }

    /// Degraded (the store is away) or shared, at this replica's `share`
    /// of the fleet's limits (1 when shared).
    pub fn mode(&self, degraded: bool, share: f64) {
        self.degraded.set(i64::from(degraded));
        self.share.set(share);
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StreamLabels {
    stream: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AlertLabels {
    alert: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RetryAfterLabels {
    retry_after: &'static str,
}

/// A call's labels by the addresses of their `&'static str`s: comparing and
/// hashing two pointers is what makes the per-call lookup cheap. Two equal
/// strings at different addresses get two cache entries that share one
/// labelled series, so the exposition is the same either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CallKey {
    service: (usize, usize),
    error_class: (usize, usize),
    retried: bool,
}

impl CallKey {
    fn new(service: &'static str, error_class: &'static str, retried: bool) -> Self {
        let at = |s: &'static str| (s.as_ptr() as usize, s.len());
        Self {
            service: at(service),
            error_class: at(error_class),
            retried,
        }
    }

    /// The first cache slot to probe.
    fn slot(&self) -> usize {
        const MIX: u64 = 0x9E37_79B9_7F4A_7C15;
        let words = [
            self.service.0,
            self.service.1,
            self.error_class.0,
            self.error_class.1,
            usize::from(self.retried),
        ];
        let hash = words.iter().fold(0u64, |h, &w| {
            (h.rotate_left(5) ^ w as u64).wrapping_mul(MIX)
        });
        (hash >> (64 - CACHE_BITS)) as usize
    }
}

/// The series one call updates, resolved from the families once.
#[derive(Debug)]
struct CallSeries {
    key: CallKey,
    requests: Counter,
    duration: Histogram,
}

/// 256 slots: services × classes × retried that one client meets stay far
/// below; a combination that finds no slot is counted through the families.
const CACHE_BITS: u32 = 8;
const PROBES: usize = 8;

fn admission_histogram() -> Histogram {
    // 50 µs .. ~0.4 s: a loopback EVALSHA up to a queued admission.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 14))
}

fn duration_histogram() -> Histogram {
    // 5 ms .. ~160 s: covers loopback answers up to the llm timeout class.
    Histogram::new(exponential_buckets(0.005, 2.0, 16))
}

/// An alert sink that counts before it passes an alert on ([`Metrics::counting`]).
struct Counting {
    alerts: Family<AlertLabels, Counter>,
    sink: std::sync::Arc<dyn AlertSink>,
}

impl AlertSink for Counting {
    fn alert(&self, alert: crate::alerts::Alert) {
        self.alerts
            .get_or_create(&AlertLabels { alert: alert.name })
            .inc();
        self.sink.alert(alert);
    }
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
    sse_buffered: Family<StreamLabels, Counter>,
    alerts: Family<AlertLabels, Counter>,
    rate_limited: Family<RetryAfterLabels, Counter>,
    /// Open addressing over write-once slots: a hit is a few atomic loads,
    /// no lock and no string hashing.
    calls: Box<[OnceLock<CallSeries>]>,
    /// The counter of calls the open breaker refused at once, by route
    /// (`Endpoint::route`): a refusal is one atomic add.
    refusals: Box<[OnceLock<Counter>]>,
}

/// The label values a policy's alert rules read, each exported at 0 from
/// the client's start: a series whose first sample is already 1 shows no
/// `increase()`, so its first alert would never fire.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Known<'p> {
    /// Every alert name of the policy.
    pub alerts: &'p [sdk_policy::policy::AlertSeverity],
    /// Every stream of the policy.
    pub streams: &'p [sdk_policy::policy::StreamPolicy],
}

impl Known<'static> {
    /// The alert names and streams of `policy`.
    pub fn of(policy: &'static sdk_policy::policy::Policy) -> Self {
        Known {
            alerts: policy.alerts.severities,
            streams: policy.streams,
        }
    }
}

impl Metrics {
    /// The metrics `names` names, for a policy of `routes` routes, with the
    /// `known` label values' series at 0.
    pub fn new(names: &MetricNames, routes: usize, known: Known<'static>) -> Self {
        let mut metrics = Metrics {
            registry: Registry::default(),
            requests: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            circuit_state: Gauge::default(),
            circuit_open_seconds: Counter::default(),
            open_seconds_counted: Mutex::new(Duration::ZERO),
            sse_fallbacks: Family::default(),
            sse_buffered: Family::default(),
            alerts: Family::default(),
            rate_limited: Family::default(),
            calls: (0..1 << CACHE_BITS).map(|_| OnceLock::new()).collect(),
            refusals: (0..routes).map(|_| OnceLock::new()).collect(),
        };
        metrics.register(names);
        metrics.start_at_zero(known);
        metrics
    }

    /// Registers every metric under its name; those the policy names none
    /// for are kept but not exported.
    fn register(&mut self, names: &MetricNames) {
        let registry = &mut self.registry;
        registry.register(
            names.requests,
            "Calls by service, final error class and whether they were retried",
            self.requests.clone(),
        );
        registry.register(
            names.duration,
            "Call duration, retries included",
            self.duration.clone(),
        );
        if let Some(name) = names.circuit_state {
            registry.register(
                name,
                "Origin breaker: 0 closed, 1 half-open, 2 open",
                self.circuit_state.clone(),
            );
        }
        if let Some(name) = names.circuit_open_seconds {
            registry.register(
                name,
                "Time the origin breaker spent open",
                self.circuit_open_seconds.clone(),
            );
        }
        if let Some(name) = names.sse_fallback {
            registry.register(
                name,
                "Streams given up for polling (a stall, an `error` or `timeout` event, a drop)",
                self.sse_fallbacks.clone(),
            );
        }
        if let Some(name) = names.sse_buffered {
            registry.register(
                name,
                "Streams a proxy held back and delivered in one burst",
                self.sse_buffered.clone(),
            );
        }
        registry.register(
            names.alerts,
            "Alerts the client raised, by name, whatever sink they went to",
            self.alerts.clone(),
        );
        registry.register(
            names.rate_limited,
            "429 answers, by whether they carried a usable Retry-After",
            self.rate_limited.clone(),
        );
    }

    /// The series of the `known` label values, at 0 from the start.
    fn start_at_zero(&self, known: Known<'static>) {
        // Both at 0: "no 429 yet" reads apart from "no such counter".
        for retry_after in ["present", "absent"] {
            let _ = self
                .rate_limited
                .get_or_create(&RetryAfterLabels { retry_after });
        }
        for a in known.alerts {
            let _ = self.alerts.get_or_create(&AlertLabels { alert: a.alert });
        }
        for s in known.streams {
            let stream = StreamLabels { stream: s.name };
            let _ = self.sse_fallbacks.get_or_create(&stream);
            let _ = self.sse_buffered.get_or_create(&stream);
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
        let key = CallKey::new(service, error_class, retried);
        let first = key.slot();
        let cached = (0..PROBES)
            .map(|i| {
                self.calls[(first + i) % self.calls.len()]
                    .get_or_init(|| self.series(key, service, error_class, retried))
            })
            .find(|series| series.key == key);
        let uncached;
        let series = match cached {
            Some(series) => series,
            None => {
                uncached = self.series(key, service, error_class, retried);
                &uncached
            }
        };
        series.requests.inc();
        series.duration.observe(took.as_secs_f64());
    }

    /// A call of route `route` the open breaker refused before its attempt
    /// loop: counted like every call, by its service and class, not retried.
    /// It sent nothing and ended within the microsecond it began, so it has
    /// no duration to observe: the histogram holds the calls that ran.
    pub fn refused(&self, route: RouteIx, service: &'static str, error_class: &'static str) {
        let series = || {
            self.requests.get_or_create_owned(&CallLabels {
                service,
                error_class,
                retried: "false",
            })
        };
        match self.refusals.get(route.get()) {
            Some(slot) => slot.get_or_init(series).inc(),
            None => series().inc(),
        };
    }

    /// The labelled series of one call, created in the families on first use.
    fn series(
        &self,
        key: CallKey,
        service: &'static str,
        error_class: &'static str,
        retried: bool,
    ) -> CallSeries {
        let retried = if retried { "true" } else { "false" };
        CallSeries {
            key,
            requests: self.requests.get_or_create_owned(&CallLabels {
                service,
                error_class,
                retried,
            }),
            duration: self
                .duration
                .get_or_create_owned(&ServiceLabels { service }),
        }
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

    pub fn sse_buffered(&self, stream: &'static str) {
        self.sse_buffered
            .get_or_create(&StreamLabels { stream })
            .inc();
    }

    /// Registers the fleet's metrics with this client's.
    pub fn register_fleet(&mut self, names: &FleetMetricNames) -> FleetMetrics {
        FleetMetrics::register(&mut self.registry, names)
    }

    /// One 429 answer; `retry_after` when it carried a wait the client
    /// could read (seconds or an HTTP date), so production answers whether
    /// the rate limiter sends one.
    pub fn rate_limited(&self, retry_after: bool) {
        let retry_after = if retry_after { "present" } else { "absent" };
        self.rate_limited
            .get_or_create(&RetryAfterLabels { retry_after })
            .inc();
    }

    /// One alert raised.
    pub fn alert(&self, alert: &'static str) {
        self.alerts.get_or_create(&AlertLabels { alert }).inc();
    }

    /// `sink`, counting each alert in the raised-alerts metric first: for a
    /// part that raises alerts before its client exists (the fleet), so the
    /// generated alert rules see its alerts too.
    pub fn counting(&self, sink: std::sync::Arc<dyn AlertSink>) -> std::sync::Arc<dyn AlertSink> {
        std::sync::Arc::new(Counting {
            alerts: self.alerts.clone(),
            sink,
        })
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAMES: MetricNames = MetricNames {
        requests: "api_requests",
        duration: "api_request_duration_seconds",
        circuit_state: Some("api_circuit_state"),
        circuit_open_seconds: Some("api_circuit_open_seconds"),
        sse_fallback: Some("api_sse_fallback"),
        sse_buffered: Some("api_sse_buffered"),
        alerts: "api_alerts",
        rate_limited: "api_rate_limited",
    };

    fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
        text.lines().find(|l| l.starts_with(prefix))
    }

    #[test]
    fn calls_are_counted_per_label_set_whatever_the_string_addresses() {
        let metrics = Metrics::new(&NAMES, 1, Known::default());
        let ms = Duration::from_millis(7);
        // The same labels, once from a leaked copy at another address.
        let copy: &'static str = String::from("workspaces").leak();
        metrics.call("workspaces", "ok", false, ms);
        metrics.call(copy, "ok", false, ms);
        metrics.call("workspaces", "ok", true, ms);
        metrics.call("ai-gateway", "feature_dark", false, ms);
        let text = metrics.encode();
        let requests = |labels: &str| line(&text, &format!("api_requests_total{{{labels}}}"));
        assert_eq!(
            requests(r#"service="workspaces",error_class="ok",retried="false""#),
            Some(r#"api_requests_total{service="workspaces",error_class="ok",retried="false"} 2"#)
        );
        assert!(
            requests(r#"service="workspaces",error_class="ok",retried="true""#)
                .is_some_and(|l| l.ends_with(" 1"))
        );
        assert!(
            requests(r#"service="ai-gateway",error_class="feature_dark",retried="false""#)
                .is_some_and(|l| l.ends_with(" 1"))
        );
        assert_eq!(
            line(
                &text,
                r#"api_request_duration_seconds_count{service="workspaces"}"#
            ),
            Some(r#"api_request_duration_seconds_count{service="workspaces"} 3"#)
        );
    }

    #[test]
    fn a_refusal_is_counted_with_the_calls_of_its_class_and_has_no_duration() {
        let metrics = Metrics::new(&NAMES, 2, Known::default());
        let route = RouteIx::new(1);
        metrics.refused(route, "workspaces", "circuit_open");
        metrics.refused(route, "workspaces", "circuit_open");
        // A position outside the cache (a hand-made descriptor) still counts.
        metrics.refused(RouteIx::new(7), "workspaces", "circuit_open");
        metrics.call(
            "workspaces",
            "circuit_open",
            false,
            Duration::from_millis(3),
        );
        let text = metrics.encode();
        assert_eq!(
            line(
                &text,
                r#"api_requests_total{service="workspaces",error_class="circuit_open",retried="false"}"#
            ),
            Some(
                r#"api_requests_total{service="workspaces",error_class="circuit_open",retried="false"} 4"#
            ),
            "{text}"
        );
        assert_eq!(
            line(
                &text,
                r#"api_request_duration_seconds_count{service="workspaces"}"#
            ),
            Some(r#"api_request_duration_seconds_count{service="workspaces"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn raised_alerts_are_counted_by_name() {
        let metrics = Metrics::new(&NAMES, 1, Known::default());
        metrics.alert("budget_exhausted");
        metrics.alert("budget_exhausted");
        metrics.alert("contract_drift");
        let text = metrics.encode();
        assert_eq!(
            line(&text, r#"api_alerts_total{alert="budget_exhausted"}"#),
            Some(r#"api_alerts_total{alert="budget_exhausted"} 2"#)
        );
        assert_eq!(
            line(&text, r#"api_alerts_total{alert="contract_drift"}"#),
            Some(r#"api_alerts_total{alert="contract_drift"} 1"#)
        );
    }

    #[test]
    fn every_known_alert_and_stream_is_exported_at_zero_before_its_first_event() {
        use sdk_policy::policy::AlertSeverity;
        static ALERTS: [AlertSeverity; 2] = [
            AlertSeverity {
                alert: "budget_exhausted",
                severity: "page",
            },
            AlertSeverity {
                alert: "contract_drift",
                severity: "page",
            },
        ];
        let known = Known {
            alerts: &ALERTS,
            streams: &[],
        };
        let metrics = Metrics::new(&NAMES, 1, known);
        let text = metrics.encode();
        for alert in ["budget_exhausted", "contract_drift"] {
            assert_eq!(
                line(&text, &format!(r#"api_alerts_total{{alert="{alert}"}}"#)),
                Some(format!(r#"api_alerts_total{{alert="{alert}"}} 0"#).as_str()),
                "{text}"
            );
        }
        metrics.alert("contract_drift");
        assert_eq!(
            line(
                &metrics.encode(),
                r#"api_alerts_total{alert="contract_drift"}"#
            ),
            Some(r#"api_alerts_total{alert="contract_drift"} 1"#)
        );
    }

    #[test]
    fn each_429_is_counted_by_whether_it_carried_retry_after() {
        let metrics = Metrics::new(&NAMES, 1, Known::default());
        assert!(
            metrics
                .encode()
                .contains("api_rate_limited_total{retry_after=\"absent\"} 0\n"),
            "exported at 0 before the first 429"
        );
        metrics.rate_limited(true);
        metrics.rate_limited(false);
        metrics.rate_limited(false);
        let text = metrics.encode();
        assert_eq!(
            line(&text, r#"api_rate_limited_total{retry_after="present"}"#),
            Some(r#"api_rate_limited_total{retry_after="present"} 1"#)
        );
        assert_eq!(
            line(&text, r#"api_rate_limited_total{retry_after="absent"}"#),
            Some(r#"api_rate_limited_total{retry_after="absent"} 2"#)
        );
    }

    #[test]
    fn combinations_beyond_the_cache_are_still_counted() {
        let metrics = Metrics::new(&NAMES, 1, Known::default());
        let classes: Vec<&'static str> = (0..600)
            .map(|i| format!("class_{i}").leak() as &'static str)
            .collect();
        for _ in 0..2 {
            for class in &classes {
                metrics.call("ledger", class, false, Duration::from_millis(1));
            }
        }
        let text = metrics.encode();
        for class in &classes {
            let prefix = format!(
                r#"api_requests_total{{service="ledger",error_class="{class}",retried="false"}}"#
            );
            assert_eq!(
                line(&text, &prefix).and_then(|l| l.rsplit(' ').next()),
                Some("2"),
                "{class}"
            );
        }
        assert!(
            line(
                &text,
                r#"api_request_duration_seconds_count{service="ledger"} 1200"#
            )
            .is_some()
        );
    }
}
