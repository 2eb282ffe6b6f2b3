//! The state every clone of a [`Jobs`](crate::Jobs) shares: the client, the
//! store, this worker's name, the policy and the clock.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use grag_client::Grag;
use sdk_queue::{JobStore, StoreError};
use sdk_runtime::alerts::Alert;
use sdk_runtime::policy::ReplayPolicy;
use tokio::sync::Notify;

use crate::metrics::Metrics;

/// The wall clock the store's leases and `not_before` are read against.
pub(crate) type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

pub(crate) struct Inner {
    /// Defers server waits: a `Retry-After` re-queues the job.
    pub grag: Grag,
    pub store: Arc<dyn JobStore>,
    /// This worker's name on its leases; unique per live process.
    pub owner: String,
    pub policy: &'static ReplayPolicy,
    pub clock: Clock,
    pub metrics: Metrics,
    /// A job became eligible (submitted for replay, finished): look again.
    pub wake: Notify,
    /// When a job last met an outage (see [`Jobs::in_outage`](crate::Jobs::in_outage)).
    pub last_outage: Mutex<Option<SystemTime>>,
    /// The process is stopping ([`Jobs::shutdown`](crate::Jobs::shutdown)): nothing more is
    /// claimed, and a job at its next checkpoint is handed back.
    pub stopping: AtomicBool,
    /// The jobs the worker runs now, by key: aborted and handed back when
    /// the shutdown's grace ends first.
    pub running: Mutex<HashMap<String, tokio::task::AbortHandle>>,
    /// A worker's job ended (the shutdown waits for the last).
    pub ended: Notify,
}

impl Inner {
    pub(crate) fn now(&self) -> SystemTime {
        (self.clock)()
    }

    /// A store error on its way up, looked at: a store that stayed locked
    /// through its lock retries (the Core policy: "log ... lock-contention
    /// events"; "alert on elevated retry-exhaustion rates ... DB pressure")
    /// is logged with the job's key and raises the retry-exhaustion alert.
    /// The job itself stays as the store has it: its lease brings it back.
    pub(crate) fn watch(&self, key: &str, e: StoreError) -> StoreError {
        if let StoreError::Locked { op, attempts } = &e {
            tracing::error!(
                target: "grag_jobs::store",
                job_key = key,
                op = *op,
                attempts = *attempts,
                "job store locked, retries exhausted"
            );
            let runtime = self.grag.runtime();
            runtime.alert(Alert {
                detail: Some(format!("job {key}: {e}")),
                ..runtime.alert_of(runtime.policy().alerts.retry_exhausted)
            });
        }
        e
    }
}
