//! Instants plus durations that may come from a server or an override:
//! never an overflow panic.

use std::time::Duration;

use tokio::time::Instant;

/// About 30 years: later than any call, any window, any remembered answer.
const FAR: Duration = Duration::from_secs(86_400 * 365 * 30);

/// `now + wait`, saturating at "far in the future" instead of panicking.
pub fn after(now: Instant, wait: Duration) -> Instant {
    now.checked_add(wait.min(FAR))
        .unwrap_or_else(|| now.checked_add(Duration::from_secs(86_400)).unwrap_or(now))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_wait_saturates() {
        let now = Instant::now();
        assert!(after(now, Duration::MAX) > after(now, Duration::from_secs(86_400 * 365)));
        assert_eq!(
            after(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
    }
}
