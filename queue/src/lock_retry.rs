//! The Core policy's rule for transient "database is locked" errors, as data and a pure decision.

use std::time::Duration;

/// Bounded retries of a lock error: `attempts` in all, the delay before attempt n+1 is `step × n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockRetry {
    pub attempts: u32,
    pub step: Duration,
}

impl LockRetry {
    /// The Core reliability policy: 3 attempts, 0.02 s × attempt.
    pub const CORE_POLICY: LockRetry = LockRetry {
        attempts: 3,
        step: Duration::from_millis(20),
    };
}

/// After attempt `attempt` (1-based) failed: `Some(delay)` to try again, `None` to give up.
/// Only a lock error (`locked`) is retried; any other error fails at once.
pub fn lock_retry_delay(rule: &LockRetry, attempt: u32, locked: bool) -> Option<Duration> {
    (locked && attempt < rule.attempts).then(|| rule.step.saturating_mul(attempt))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn core_policy_waits_20_then_40_ms_and_gives_up_after_the_third_attempt() {
        let rule = LockRetry::CORE_POLICY;
        assert_eq!(lock_retry_delay(&rule, 1, true), Some(MS(20)));
        assert_eq!(lock_retry_delay(&rule, 2, true), Some(MS(40)));
        assert_eq!(lock_retry_delay(&rule, 3, true), None);
        assert_eq!(lock_retry_delay(&rule, 4, true), None);
    }

    #[test]
    fn other_errors_are_never_retried() {
        let rule = LockRetry::CORE_POLICY;
        for attempt in 1..=3 {
            assert_eq!(lock_retry_delay(&rule, attempt, false), None);
        }
    }

    #[test]
    fn the_rule_is_data() {
        let rule = LockRetry {
            attempts: 5,
            step: MS(7),
        };
        let delays: Vec<_> = (1..=5).map(|a| lock_retry_delay(&rule, a, true)).collect();
        assert_eq!(
            delays,
            [Some(MS(7)), Some(MS(14)), Some(MS(21)), Some(MS(28)), None]
        );
        let once = LockRetry {
            attempts: 1,
            step: MS(7),
        };
        assert_eq!(lock_retry_delay(&once, 1, true), None);
        let zero = LockRetry {
            attempts: 0,
            step: MS(7),
        };
        assert_eq!(lock_retry_delay(&zero, 1, true), None);
    }
}
