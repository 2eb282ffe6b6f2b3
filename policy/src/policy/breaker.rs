//! The origin circuit breaker and the warm-up calls fired after it closes.

use std::time::Duration;

use crate::endpoint::Endpoint;
use crate::index::TimeoutIx;

/// One warm-up call of §7.
#[derive(Debug, Clone, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct WarmUpCall {
    pub endpoint: &'static Endpoint,
    pub path: &'static [&'static str],
    /// JSON text.
    pub body: Option<&'static str>,
    /// A timeout class instead of the route's own (§7.3: `-m 150` for the pair).
    pub timeout: Option<TimeoutIx>,
    /// The pipeline header's value, on a route that carries one: the warm-up's
    /// own, so its cost is booked apart from every run's.
    pub pipeline_id: Option<&'static str>,
}

/// The origin circuit breaker.
#[derive(Debug, Clone, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct BreakerPolicy {
    /// Failures that open the breaker within `window`.
    pub threshold: u32,
    pub window: Duration,
    /// Count failures of distinct endpoints only.
    pub distinct_endpoints: bool,
    /// The public liveness route the open breaker probes.
    #[bake(part = Probe)]
    pub probe: &'static Endpoint,
    /// The authenticated read sent alone while the breaker is half-open.
    #[bake(part = Canary)]
    pub canary: &'static Endpoint,
    pub probe_interval: Duration,
    pub probe_timeout: Duration,
    pub healthy_probes: u32,
    pub canary_timeout: Duration,
    /// How long the origin stays deploy-suspected after a close.
    pub deploy_suspected: Duration,
    /// Alert when open longer than this.
    pub alert_after: Duration,
    /// The alert raised then.
    pub open_alert: &'static str,
}

impl BreakerPolicy {
    /// A breaker of ordinary values (3 failures of distinct endpoints in
    /// 30 s; probes every 5 s, two healthy ones to half-open) probing
    /// [`HEALTH`](crate::testing::HEALTH), which is its canary too. Tests
    /// start from it and change what they need with `..`, so a new field
    /// gets its value here, beside its declaration. Its durations are whole
    /// seconds: the scaling test reads them so. Behind the `testing` feature.
    #[cfg(any(test, feature = "testing"))]
    pub const fn example() -> BreakerPolicy {
        use crate::testing::HEALTH;
        BreakerPolicy {
            threshold: 3,
            window: Duration::from_secs(30),
            distinct_endpoints: true,
            probe: &HEALTH,
            canary: &HEALTH,
            probe_interval: Duration::from_secs(5),
            probe_timeout: Duration::from_secs(3),
            healthy_probes: 2,
            canary_timeout: Duration::from_secs(5),
            deploy_suspected: Duration::from_secs(120),
            alert_after: Duration::from_secs(300),
            open_alert: "breaker_open_long",
        }
    }
}
