//! The fleet: several replicas keeping one tenant's budgets, and the durable replay queue.

use std::time::Duration;

use crate::index::BudgetIx;

/// How several replicas of one client keep the throttle's promises as one
/// tenant, through a shared store (Redis).
///
/// Its timers keep their values in a scaled policy (`#[scale(skip)]`): they
/// bound round trips to a real Redis server (a store call's deadline, the
/// lease a heartbeat renews), which dividing them cannot make faster.
#[derive(Debug, Clone, PartialEq, Eq, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct FleetPolicy {
    /// The spec asks for the shared backend: a client without a store URL
    /// is refused. `false`: shared only when a URL is configured.
    pub shared: bool,
    /// The environment variable the store URL is read from.
    pub url_env: &'static str,
    /// Every call to the store ends within this, answered or not.
    #[scale(skip)]
    pub deadline: Duration,
    /// Failed store calls in a row that open the store's breaker...
    pub breaker_failures: u32,
    /// ...the first and the last at least this far apart: a stall shorter
    /// than this (a loaded machine, a slow fork) is not an outage.
    #[scale(skip)]
    pub breaker_over: Duration,
    /// How long the store's breaker stays open before one call tries again.
    #[scale(skip)]
    pub breaker_retry: Duration,
    /// How long an in-flight slot (a lease) lives without renewal.
    #[scale(skip)]
    pub lease: Duration,
    /// How often a replica renews its leases and says it is live.
    #[scale(skip)]
    pub heartbeat: Duration,
    /// Percent kept below `limit ÷ live replicas` while degraded.
    pub margin_percent: u32,
    /// What a replica does while the store is away.
    pub degraded: Degraded,
    /// Indices of the budgets each replica keeps on its own.
    pub per_replica: &'static [BudgetIx],
    pub metrics: FleetMetricNames,
    /// Raised when a replica goes degraded.
    pub alert: &'static str,
}

impl FleetPolicy {
    /// A fleet of ordinary values (a 250 ms store deadline, 30 s leases
    /// renewed every 10 s), for tests that start from it with `..`: a new
    /// field gets its value here, beside its declaration. Behind the
    /// `testing` feature.
    #[cfg(any(test, feature = "testing"))]
    pub const fn example() -> FleetPolicy {
        FleetPolicy {
            shared: true,
            url_env: "REDIS_URL",
            deadline: Duration::from_millis(250),
            breaker_failures: 3,
            breaker_over: Duration::from_millis(250),
            breaker_retry: Duration::from_secs(1),
            lease: Duration::from_secs(30),
            heartbeat: Duration::from_secs(10),
            margin_percent: 10,
            degraded: Degraded::Open,
            per_replica: &[],
            metrics: FleetMetricNames {
                admission: "admission",
                decisions: "decisions",
                degraded: "degraded",
                share: "share",
            },
            alert: "fleet_degraded",
        }
    }
}

/// What a replica does while the shared store is unreachable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub enum Degraded {
    /// Go on at this replica's share of the local budgets.
    Open,
    /// Refuse every call until the store is back.
    Closed,
}

/// What the fleet's metrics are called.
#[derive(Debug, Clone, PartialEq, Eq, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct FleetMetricNames {
    /// Histogram of admission time, by backend.
    pub admission: &'static str,
    /// Counter of admission decisions, by backend and outcome.
    pub decisions: &'static str,
    /// Gauge: 1 while degraded.
    pub degraded: &'static str,
    /// Gauge: this replica's share of the fleet's limits (1 when shared).
    pub share: &'static str,
}

/// How queued writes are replayed (GRAG §5.3): the numbers a job queue reads.
#[derive(Debug, Clone, PartialEq, Eq, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct ReplayPolicy {
    /// The throttle budget replays run in; its `max_in_flight` is how many
    /// jobs a worker runs at once.
    pub budget: BudgetIx,
    /// How long a claimed job stays its worker's without a checkpoint;
    /// after it, another worker (a replica) takes the job over.
    pub lease: Duration,
    /// How long a job interrupted by an outage waits before its replay,
    /// unless the platform named a wait (`Retry-After`).
    pub pause: Duration,
    /// Most items of one batch after a 413 split it.
    pub split: usize,
    /// The job kinds: the `kind` label of the depth gauge.
    pub kinds: &'static [&'static str],
    /// Tries of a store write that meets "database is locked", in all.
    pub lock_attempts: u32,
    /// The delay before try n+1 is `lock_step` × n.
    pub lock_step: Duration,
    /// Gauge of jobs not done, by kind.
    pub depth_metric: &'static str,
    /// Counter of jobs that ended failed (without `_total`).
    pub failures_metric: &'static str,
    /// Gauge of the store's rows, by state.
    pub store_rows_metric: &'static str,
    /// Gauge of the bytes of the store's payloads, by state: what a done job's content would
    /// cost if it were kept.
    pub store_bytes_metric: &'static str,
    /// Raised when a job ends failed.
    pub failure_alert: &'static str,
    /// A done job's row is deleted this long after it ended.
    pub keep_done: Duration,
    /// A failed job, its content kept for the UI's re-upload, is deleted this long after.
    pub keep_failed: Duration,
    /// Most rows one delete of a retention pass removes: short statements, no long lock.
    pub prune_batch: usize,
    /// How often a replica runs a retention pass.
    pub prune_every: Duration,
    /// Payload bytes in the store (every state) past which Prometheus raises `store_alert`.
    pub store_bound: u64,
    /// The alert of a store grown past `store_bound`; only its Prometheus rule raises it.
    pub store_alert: &'static str,
}
