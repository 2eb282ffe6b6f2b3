//! The queue's metrics (§10.3): its depth by job kind, the jobs that ended
//! failed, and what the store holds by state (rows, payload bytes). Named in
//! `policy.yaml replay`.

use std::sync::Mutex;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use sdk_queue::{Footprint, JobState};
use sdk_runtime::policy::ReplayPolicy;

pub(crate) struct Metrics {
    registry: Registry,
    depth: Family<Vec<(String, String)>, Gauge>,
    failures: Counter,
    rows: Family<Vec<(String, String)>, Gauge>,
    bytes: Family<Vec<(String, String)>, Gauge>,
    kinds: &'static [&'static str],
    /// Serializes depth updates so the gauge shows one store read whole.
    lock: Mutex<()>,
}

impl Metrics {
    pub fn new(policy: &'static ReplayPolicy) -> Self {
        let mut registry = Registry::default();
        let depth = Family::<Vec<(String, String)>, Gauge>::default();
        let failures = Counter::default();
        registry.register(
            policy.depth_metric,
            "Jobs not done yet (pending, in flight, pending replay), by kind",
            depth.clone(),
        );
        registry.register(
            policy.failures_metric,
            "Jobs that ended failed",
            failures.clone(),
        );
        let (rows, bytes) = (Family::default(), Family::default());
        registry.register(
            policy.store_rows_metric,
            "Rows of the job store, by state",
            rows.clone(),
        );
        registry.register(
            policy.store_bytes_metric,
            "Bytes of the job store's payloads, by state",
            bytes.clone(),
        );
        let metrics = Metrics {
            registry,
            depth,
            failures,
            rows,
            bytes,
            kinds: policy.kinds,
            lock: Mutex::new(()),
        };
        metrics.set_depth(&[]);
        metrics.set_footprint(&[]);
        metrics
    }

    /// Sets the depth of every kind from the store's counts (a kind without
    /// jobs is 0, not absent). Failed jobs wait for a person, not the queue.
    pub fn set_depth(&self, counts: &[(String, JobState, u64)]) {
        let _one_at_a_time = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        for kind in self.kinds {
            let n: u64 = counts
                .iter()
                .filter(|(k, state, _)| {
                    k == kind && !matches!(state, JobState::Done | JobState::Failed)
                })
                .map(|(_, _, n)| n)
                .sum();
            self.depth
                .get_or_create(&vec![("kind".to_owned(), (*kind).to_owned())])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Sets rows and payload bytes of every state from the store's counts
    /// (a state without rows is 0, not absent).
    pub fn set_footprint(&self, footprint: &[Footprint]) {
        let _one_at_a_time = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        for state in JobState::ALL {
            let of = footprint.iter().find(|f| f.state == state);
            let label = vec![("state".to_owned(), state.as_str().to_owned())];
            let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
            self.rows
                .get_or_create(&label)
                .set(gauge(of.map_or(0, |f| f.rows)));
            self.bytes
                .get_or_create(&label)
                .set(gauge(of.map_or(0, |f| f.payload_bytes)));
        }
    }

    pub fn failed(&self) {
        self.failures.inc();
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = encode(&mut out, &self.registry);
        out
    }
}
