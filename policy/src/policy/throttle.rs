//! Client-side throttling: in-flight cap, rate, budgets and polling cadence.

use std::time::Duration;

#[cfg(feature = "bake")]
use crate::bake::{Bake, Names, Part, bake_struct, part_or};
#[cfg(feature = "bake")]
use proc_macro2::TokenStream;

/// Client-side throttling.
#[derive(Debug, Clone)]
pub struct ThrottlePolicy {
    pub max_in_flight: u32,
    pub per_second: u32,
    /// The period `per_second` counts in: one second (compressed only by
    /// [`Policy::scaled`](super::Policy::scaled), for tests).
    pub rate_period: Duration,
    /// The rolling window budgets' `per_minute` counts in: one minute.
    pub budget_period: Duration,
    pub budgets: &'static [BudgetPolicy],
    pub polling: PollingPolicy,
}

#[cfg(feature = "bake")]
impl Bake for ThrottlePolicy {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            ThrottlePolicy {
                max_in_flight,
                per_second,
                rate_period,
                budget_period,
                budgets = part_or(n, Part::Budgets, || budgets.bake(n)),
                polling,
            }
        )
    }
}

/// A named budget a route draws from on top of the global limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetPolicy {
    pub name: &'static str,
    pub max_in_flight: Option<u32>,
    /// Requests in any rolling 60 s window.
    pub per_minute: Option<u32>,
}

#[cfg(feature = "bake")]
impl Bake for BudgetPolicy {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            BudgetPolicy {
                name,
                max_in_flight,
                per_minute,
            }
        )
    }
}

/// Polling cadence of status routes.
#[derive(Debug, Clone)]
pub struct PollingPolicy {
    pub interval: Duration,
    pub floor: Duration,
    /// Interval multiplier while a 429 is hot.
    pub hot_factor: u32,
}

#[cfg(feature = "bake")]
impl Bake for PollingPolicy {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            PollingPolicy {
                interval,
                floor,
                hot_factor,
            }
        )
    }
}
