//! When a stream of events counts as "elevated": at least `at_least` of them
//! inside a rolling `within`. A pure decision; the caller passes the clock.

use std::collections::VecDeque;

use tokio::time::Instant;

use sdk_policy::policy::AlertRate;

/// Counts events in a rolling window and says when to raise the alert: once
/// the rate is reached, then not again until a whole window has passed, so
/// a sustained outage raises one alert per window, not one per call.
#[derive(Debug)]
pub(crate) struct RateAlarm {
    rate: AlertRate,
    /// Events inside the window, oldest first (never more than `at_least`).
    seen: VecDeque<Instant>,
    raised_at: Option<Instant>,
}

impl RateAlarm {
    pub(crate) fn new(rate: AlertRate) -> Self {
        RateAlarm {
            rate,
            seen: VecDeque::new(),
            raised_at: None,
        }
    }

    /// Records one event at `now`; `true` when the alert is to be raised now.
    pub(crate) fn record(&mut self, now: Instant) -> bool {
        let within = self.rate.within;
        while self
            .seen
            .front()
            .is_some_and(|&at| now.saturating_duration_since(at) >= within)
        {
            self.seen.pop_front();
        }
        self.seen.push_back(now);
        while self.seen.len() > self.rate.at_least as usize {
            self.seen.pop_front();
        }
        let elevated = self.seen.len() >= self.rate.at_least as usize;
        let quiet = self
            .raised_at
            .is_none_or(|at| now.saturating_duration_since(at) >= within);
        if elevated && quiet {
            self.raised_at = Some(now);
            true
        } else {
            false
        }
    }

    /// The rate this alarm watches for.
    pub(crate) fn rate(&self) -> AlertRate {
        self.rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn alarm() -> (RateAlarm, Instant) {
        let rate = AlertRate {
            at_least: 3,
            within: Duration::from_secs(60),
        };
        (RateAlarm::new(rate), Instant::now())
    }

    #[test]
    fn fires_when_the_rate_is_reached_inside_the_window() {
        let (mut a, t) = alarm();
        assert!(!a.record(t));
        assert!(!a.record(t + Duration::from_secs(10)));
        assert!(a.record(t + Duration::from_secs(59)), "3 within 60 s");
    }

    #[test]
    fn events_spread_wider_than_the_window_never_fire() {
        let (mut a, t) = alarm();
        for i in 0..10 {
            assert!(!a.record(t + Duration::from_secs(31 * i)), "event {i}");
        }
    }

    #[test]
    fn a_sustained_rate_fires_once_per_window() {
        let (mut a, t) = alarm();
        let fired: Vec<u64> = (0..30)
            .filter(|i| a.record(t + Duration::from_secs(5 * i)))
            .collect();
        assert_eq!(fired, [2, 14, 26], "every 60 s while it lasts");
    }

    #[test]
    fn memory_stays_bounded_by_the_rate() {
        let (mut a, t) = alarm();
        for i in 0..10_000 {
            a.record(t + Duration::from_millis(i));
        }
        assert!(a.seen.len() <= 3);
    }
}
