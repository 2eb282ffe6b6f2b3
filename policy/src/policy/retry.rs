//! Timeout and retry classes.

use std::time::Duration;

/// Per-attempt time budget of a route.
#[derive(Debug, Clone, PartialEq, Eq, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct TimeoutClass {
    pub name: &'static str,
    pub per_attempt: Duration,
    /// Longer budget while the origin is deploy-suspected (cold starts).
    pub deploy_suspected: Option<Duration>,
}

impl TimeoutClass {
    /// The budget of one attempt, given whether a deploy is suspected.
    pub fn budget(&self, deploy_suspected: bool) -> Duration {
        match (deploy_suspected, self.deploy_suspected) {
            (true, Some(longer)) => longer,
            _ => self.per_attempt,
        }
    }
}

/// A named retry class (R0–R5 for GRAG).
#[derive(Debug, Clone, PartialEq, Eq, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct RetryClass {
    pub name: &'static str,
    pub schedule: RetrySchedule,
    /// Set when the client's configuration may change the attempts and the
    /// step of this (linear) class: the range it accepts.
    pub configurable: Option<RetryBounds>,
}

/// What a configured linear retry may ask for: fewer attempts than
/// `min_attempts`, more than `max_attempts` or a shorter step is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct RetryBounds {
    pub min_attempts: u32,
    pub max_attempts: u32,
    pub min_step: Duration,
}

/// How a retry class spaces its attempts. `attempts` counts the first one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub enum RetrySchedule {
    /// Never retried.
    Never,
    /// Exponential backoff with full jitter: a random wait in
    /// `[0, min(cap, base * factor^(n-1))]` before retry `n`.
    Exponential {
        attempts: u32,
        base: Duration,
        factor: u32,
        cap: Duration,
    },
    /// Extra attempts only for GET while the origin is deploy-suspected.
    DeployWindow { attempts: u32 },
    /// Wait what `Retry-After` says (seconds or HTTP date), `floor` when the
    /// header is absent, plus a random extra wait up to `jitter`.
    RetryAfter {
        attempts: u32,
        floor: Duration,
        jitter: Duration,
    },
    /// Retried immediately, `attempts - 1` times.
    Once { attempts: u32 },
    /// A wait growing linearly, without jitter: `step * n` before retry `n`
    /// (the Core client's `retry_backoff_seconds * attempt`).
    Linear { attempts: u32, step: Duration },
}

impl RetrySchedule {
    /// Attempts in all, the first one included.
    pub fn attempts(&self) -> u32 {
        match *self {
            RetrySchedule::Never => 1,
            RetrySchedule::Exponential { attempts, .. }
            | RetrySchedule::DeployWindow { attempts }
            | RetrySchedule::RetryAfter { attempts, .. }
            | RetrySchedule::Once { attempts }
            | RetrySchedule::Linear { attempts, .. } => attempts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_budget_grows_only_where_the_class_says() {
        let search = TimeoutClass {
            name: "search",
            per_attempt: Duration::from_secs(30),
            deploy_suspected: Some(Duration::from_secs(60)),
        };
        assert_eq!(search.budget(false), Duration::from_secs(30));
        assert_eq!(search.budget(true), Duration::from_secs(60));
        let default = TimeoutClass {
            deploy_suspected: None,
            ..search
        };
        assert_eq!(default.budget(true), Duration::from_secs(30));
    }
}
