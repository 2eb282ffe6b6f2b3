//! Client-side throttling: in-flight cap, rate, budgets and polling cadence.

use std::time::Duration;

/// Client-side throttling.
#[derive(Debug, Clone, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct ThrottlePolicy {
    pub max_in_flight: u32,
    pub per_second: u32,
    /// The period `per_second` counts in: one second (compressed only by
    /// [`Policy::scaled`](super::Policy::scaled), for tests).
    pub rate_period: Duration,
    /// The rolling window budgets' `per_minute` counts in: one minute.
    pub budget_period: Duration,
    #[bake(part = Budgets)]
    pub budgets: &'static [BudgetPolicy],
    pub polling: PollingPolicy,
}

/// A named budget a route draws from on top of the global limits.
#[derive(Debug, Clone, PartialEq, Eq, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct BudgetPolicy {
    pub name: &'static str,
    pub max_in_flight: Option<u32>,
    /// Requests in any rolling 60 s window.
    pub per_minute: Option<u32>,
}

/// Polling cadence of status routes.
#[derive(Debug, Clone, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct PollingPolicy {
    pub interval: Duration,
    pub floor: Duration,
    /// Interval multiplier while a 429 is hot.
    pub hot_factor: u32,
}
