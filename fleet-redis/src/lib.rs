//! Several replicas, one tenant: the throttle's promises kept by the whole
//! fleet through a shared store (Redis), behind the runtime's `Fleet` trait.
//!
//! The local [`Throttle`](sdk_runtime::throttle::Throttle) still runs first
//! in every replica; the fleet stage comes after it and asks the store, in
//! one round trip, for the fleet's share of the rate budgets and in-flight
//! caps. When the store is away the replica is *degraded*: it runs the local
//! budgets at its share (limit ÷ live replicas, less a margin), or refuses
//! (`fail: closed`).
//!
//! The decisions here (the store's breaker, the shares) are pure; the I/O
//! is in `shared` (the fleet) and `store` (Redis).

use std::sync::Arc;
use std::time::Duration;

use sdk_runtime::fleet::{Fleet, FleetBackend, FleetSetup};
use tokio::time::Instant;

#[cfg(any(test, feature = "redis-server"))]
pub mod redis_server;
mod shared;
mod store;

pub use shared::RedisFleet;

/// The Redis backend a client's configuration names: a client given a
/// Redis URL connects its fleet through it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Redis;

impl FleetBackend for Redis {
    fn connect(&self, setup: FleetSetup) -> Result<Arc<dyn Fleet>, String> {
        Ok(Arc::new(RedisFleet::new(setup)?))
    }
}

/// The store's own breaker: `threshold` failed calls in a row open it; after
/// `retry` the next call tries again (and one more failure reopens it): the
/// fleet makes that call from its heartbeat, never from an admission.
/// Open means degraded.
///
/// "In a row" is in time: a failed call counts only if it started after the
/// last counted failure ended, and the streak opens the breaker only once
/// its first and last failures are `over` apart. Calls in flight together
/// fail together when one moment goes wrong (a stall of this process or of
/// Redis on a loaded machine, a lost packet): eight concurrent admissions
/// timing out at once are one failure, and a stall shorter than `over` is
/// no outage. A dead store fails every call, one after another, for good.
#[derive(Debug, Clone)]
pub struct StoreBreaker {
    threshold: u32,
    over: Duration,
    retry: Duration,
    failures: u32,
    first_failure: Option<Instant>,
    last_failure: Option<Instant>,
    open_until: Option<Instant>,
}

/// A change of the fleet's mode, for metrics and the alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    /// The store stopped answering: degraded from now on.
    Degraded,
    /// The store answered again: shared from now on.
    Shared,
}

impl StoreBreaker {
    pub fn new(threshold: u32, over: Duration, retry: Duration) -> Self {
        Self {
            threshold: threshold.max(1),
            over,
            retry,
            failures: 0,
            first_failure: None,
            last_failure: None,
            open_until: None,
        }
    }

    /// Whether a call may go to the store at `now`.
    pub fn allows(&self, now: Instant) -> bool {
        self.open_until.is_none_or(|until| now >= until)
    }

    /// Degraded: the breaker is open (or trying again after `retry`).
    pub fn degraded(&self) -> bool {
        self.open_until.is_some()
    }

    pub fn success(&mut self) -> Option<Switch> {
        self.failures = 0;
        self.first_failure = None;
        self.open_until.take().map(|_| Switch::Shared)
    }

    /// A call started at `started` failed at `now`.
    pub fn failure(&mut self, started: Instant, now: Instant) -> Option<Switch> {
        if self.last_failure.is_some_and(|last| started < last) {
            return None; // in flight with the last counted failure
        }
        self.last_failure = Some(now);
        self.failures = self.failures.saturating_add(1);
        let first = *self.first_failure.get_or_insert(now);
        let open = self.open_until.is_some();
        if !open && (self.failures < self.threshold || now.duration_since(first) < self.over) {
            return None;
        }
        let was_open = self.open_until.is_some();
        self.open_until = Some(sdk_runtime::clock::after(now, self.retry));
        (!was_open).then_some(Switch::Degraded)
    }
}

/// A rate limit's share for one of `live` replicas, `margin_percent` under
/// an even split and never below 1: the replicas together stay under the
/// limit even when the live count is a heartbeat stale.
pub fn rate_share(limit: u32, live: usize, margin_percent: u32) -> u32 {
    let kept = u64::from(limit) * u64::from(100 - margin_percent.min(99)) / 100;
    let share = kept / live.max(1) as u64;
    u32::try_from(share).unwrap_or(u32::MAX).max(1)
}

/// An in-flight cap's share for the replica of `rank` among `live`: the cap
/// split exactly, the remainder to the first ranks, so the shares add up to
/// the cap (a replica may get 0 of a cap smaller than the fleet: it waits
/// for the store to come back for that budget).
pub fn cap_share(cap: u32, live: usize, rank: usize) -> u32 {
    let live = live.max(1) as u64;
    let (even, rest) = (u64::from(cap) / live, u64::from(cap) % live);
    let share = even + u64::from((rank as u64) < rest);
    u32::try_from(share).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_store_breaker_opens_after_threshold_failures_and_retries_after_its_pause() {
        let mut breaker = StoreBreaker::new(3, Duration::ZERO, Duration::from_secs(1));
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        // Each call starts as the one before failed: in a row.
        assert_eq!(breaker.failure(t0, t0 + ms(5)), None);
        assert_eq!(breaker.failure(t0 + ms(5), t0 + ms(10)), None);
        assert!(!breaker.degraded());
        let t1 = t0 + ms(15);
        assert_eq!(breaker.failure(t0 + ms(10), t1), Some(Switch::Degraded));
        assert!(breaker.degraded());
        assert!(!breaker.allows(t1 + ms(999)));
        assert!(breaker.allows(t1 + Duration::from_secs(1)));
        // The retry fails: open again, no second alert.
        let t2 = t1 + Duration::from_secs(1);
        assert_eq!(breaker.failure(t2, t2 + ms(5)), None);
        assert!(!breaker.allows(t2 + ms(500)));
        assert_eq!(breaker.success(), Some(Switch::Shared));
        assert!(!breaker.degraded());
        assert_eq!(breaker.success(), None);
        // A success in between resets the count.
        let t3 = t2 + Duration::from_secs(5);
        breaker.failure(t3, t3 + ms(5));
        breaker.failure(t3 + ms(5), t3 + ms(10));
        breaker.success();
        assert_eq!(breaker.failure(t3 + ms(10), t3 + ms(15)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn calls_that_fail_together_count_as_one_failure() {
        let mut breaker = StoreBreaker::new(3, Duration::ZERO, Duration::from_secs(1));
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        // Eight admissions in flight over one bad moment.
        let us = Duration::from_micros;
        for i in 0..8 {
            assert_eq!(breaker.failure(t0 + us(i), t0 + ms(5) + us(i)), None);
        }
        assert!(!breaker.degraded());
        // Two more, each started after the last failed: three in a row.
        assert_eq!(breaker.failure(t0 + ms(6), t0 + ms(11)), None);
        let open = breaker.failure(t0 + ms(11), t0 + ms(16));
        assert_eq!(open, Some(Switch::Degraded));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_shorter_than_over_is_waited_out_a_longer_one_opens() {
        let ms = Duration::from_millis;
        let mut breaker = StoreBreaker::new(3, ms(250), Duration::from_secs(1));
        let t0 = Instant::now();
        // Ten calls in a row fail over 50 ms: a stall, not an outage.
        for i in 0..10 {
            assert_eq!(breaker.failure(t0 + ms(5 * i), t0 + ms(5 * i + 5)), None);
        }
        assert!(!breaker.degraded());
        breaker.success();
        // Failing on for 250 ms from the first failure: an outage.
        let t1 = t0 + Duration::from_secs(10);
        let mut opened = None;
        for i in 0..60 {
            if let Some(switch) = breaker.failure(t1 + ms(5 * i), t1 + ms(5 * i + 5)) {
                opened = Some((i, switch));
                break;
            }
        }
        // The first failure at 5 ms, the one 250 ms after it at 255 ms.
        assert_eq!(opened, Some((50, Switch::Degraded)));
    }

    #[test]
    fn rate_shares_stay_under_the_limit_with_the_margin() {
        // 57 per rolling second (50/s, burst 8), three replicas: 18 each, 54 in all.
        assert_eq!(rate_share(57, 3, 5), 18);
        assert_eq!(rate_share(100, 3, 5), 31);
        assert_eq!(rate_share(30, 3, 5), 9);
        assert_eq!(rate_share(100, 1, 5), 95);
        for live in 1..=20 {
            for limit in [1, 2, 8, 30, 57, 100] {
                let share = rate_share(limit, live, 5);
                assert!(share >= 1);
                if limit as usize >= live {
                    assert!(share as usize * live <= limit as usize, "{limit} {live}");
                }
            }
        }
        // Nobody heard from yet (no heartbeat): counted as alone.
        assert_eq!(rate_share(57, 0, 5), 54);
    }

    #[test]
    fn cap_shares_add_up_to_the_cap() {
        for cap in [1, 2, 4, 8] {
            for live in 1..=10 {
                let total: u32 = (0..live).map(|rank| cap_share(cap, live, rank)).sum();
                assert_eq!(total, cap, "cap {cap}, {live} replicas");
            }
        }
        assert_eq!(
            (0..3).map(|r| cap_share(8, 3, r)).collect::<Vec<_>>(),
            [3, 3, 2]
        );
        assert_eq!(
            (0..3).map(|r| cap_share(2, 3, r)).collect::<Vec<_>>(),
            [1, 1, 0]
        );
    }
}
