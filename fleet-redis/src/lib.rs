//! Several replicas, one tenant: the throttle's promises kept by the whole
//! fleet through a shared store (Redis), behind the runtime's `Fleet` trait.
//!
//! The replica's own throttle ([`LocalWindows`](sdk_runtime::fleet::LocalWindows)) still runs first
//! in every replica; the fleet stage comes after it and asks the store, in
//! one round trip, for the fleet's share of the rate budgets and in-flight
//! caps. When the store is away the replica is *degraded*: it runs the local
//! budgets at its share (limit ÷ live replicas, less a margin), or refuses
//! (`fail: closed`).
//!
//! The decisions here (the store's breaker, the shares) are pure; the I/O
//! is in `shared` (the fleet) and `store` (Redis).
//!
#![doc = include_str!("protocol.md")]

use std::sync::Arc;
use std::time::Duration;

use sdk_runtime::fleet::{Fleet, FleetBackend, FleetSetup};
use tokio::time::Instant;

mod error;
mod primary;
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
/// no outage. A dead store fails every call, one after another, for good;
/// one that refuses the connection (nothing listens) is not stalled but
/// gone, and its failures in a row open the breaker at once.
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

    /// When the failures in a row that opened (or may open) it began.
    pub fn failing_since(&self) -> Option<Instant> {
        self.first_failure
    }

    pub fn success(&mut self) -> Option<Switch> {
        self.failures = 0;
        self.first_failure = None;
        self.open_until.take().map(|_| Switch::Shared)
    }

    /// A call started at `started` failed at `now`; `gone`: nothing listens
    /// at the address (refused), which is no stall to wait out, so
    /// `threshold` such failures in a row open it however close together.
    pub fn failure(&mut self, started: Instant, now: Instant, gone: bool) -> Option<Switch> {
        if self.last_failure.is_some_and(|last| started < last) {
            return None; // in flight with the last counted failure
        }
        self.last_failure = Some(now);
        self.failures = self.failures.saturating_add(1);
        let first = *self.first_failure.get_or_insert(now);
        let open = self.open_until.is_some();
        let waited_out = !gone && now.duration_since(first) < self.over;
        if !open && (self.failures < self.threshold || waited_out) {
            return None;
        }
        let was_open = self.open_until.is_some();
        self.open_until = Some(after(now, self.retry));
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

/// The fleet's token bucket and rolling windows, for [`unseen_share`].
#[derive(Debug, Clone, Copy)]
pub struct Rates {
    /// One token every `interval`, up to `burst` at once...
    pub interval: Duration,
    pub burst: u32,
    /// ...so at most `per_period` sends in any rolling `period`.
    pub period: Duration,
    pub per_period: u32,
    /// The budgets' rolling windows' width.
    pub window: Duration,
}

/// What a heartbeat saw of the fleet's sends, Redis's view at a local
/// instant between `asked` and `answered`.
#[derive(Debug, Clone)]
pub struct Glimpse {
    pub asked: Instant,
    pub answered: Instant,
    /// The token bucket's theoretical arrival time less Redis's now (µs).
    pub tat_ahead: i64,
    /// By budget: its window's limit and the fleet's slots in it by age
    /// (µs; negative: reserved ahead).
    pub windows: Vec<(usize, u32, Vec<i64>)>,
}

/// About 30 years: later than any lease, window or pause.
const FAR: Duration = Duration::from_secs(86_400 * 365 * 30);

/// `at + wait`, saturating far in the future instead of overflowing (a
/// wait may come from Redis or a server).
pub(crate) fn after(at: Instant, wait: Duration) -> Instant {
    at.checked_add(wait.min(FAR))
        .unwrap_or_else(|| at.checked_add(Duration::from_secs(86_400)).unwrap_or(at))
}

/// What a replica going local counts at least in its rolling windows, its
/// own sends included: a `live`-th of what the fleet may have sent by
/// `lost` (when the store stopped answering), as `glimpse` saw it and as
/// the bucket allowed after it. Every suffix of the fleet's sends is
/// covered: the rolling second by the sends the bucket's state allowed, as
/// late as it allowed them, the windows by the fleet's slots; after the
/// glimpse, the most the bucket allowed by `lost`, as late as possible.
/// Each replica counting every `live`-th of them, newest first (or its own
/// sends, where they are more), keeps the fleet's windows straddling the
/// switch within the limits its shares add up to.
pub fn unseen_share(
    glimpse: &Glimpse,
    lost: Instant,
    rates: Rates,
    live: usize,
) -> (Vec<Instant>, Vec<(usize, Vec<Instant>)>) {
    let interval = rates.interval.max(Duration::from_nanos(1));
    let burst = rates.burst.max(1) as usize;
    let most = rates.per_period.max(1) as usize;
    let at = |base: Instant, micros: i64| {
        let d = Duration::from_micros(micros.unsigned_abs());
        if micros >= 0 {
            after(base, d)
        } else {
            base.checked_sub(d).unwrap_or(base)
        }
    };
    let tat = at(glimpse.answered, glimpse.tat_ahead);
    // After the glimpse: the n-th send needs the bucket's tat (at least
    // `from` + (n - 1) intervals) within its tolerance of `lost`.
    let tolerance = interval * (rates.burst.max(1) - 1);
    let from = tat.max(glimpse.asked);
    let reach = after(lost, tolerance);
    let after = match reach.checked_duration_since(from) {
        Some(d) => (d.as_nanos() / interval.as_nanos()) as usize + 1,
        None => 0,
    };
    let latest = |n: usize| -> Vec<Instant> {
        (0..n.min(most))
            .map(|j| {
                let back =
                    interval * u32::try_from(j.saturating_sub(burst - 1)).unwrap_or(u32::MAX);
                lost.checked_sub(back).unwrap_or(lost)
            })
            .collect()
    };
    // Before it: a send for every interval the tat is ahead of an instant.
    let known = (1..=most).filter_map(|k| {
        let back = interval.checked_mul(u32::try_from(k).ok()?)?;
        Some(tat.checked_sub(back)?.min(glimpse.asked))
    });
    let since = |width: Duration| lost.checked_sub(width);
    let recent = |t: &Instant, width: Duration| since(width).is_none_or(|s| *t > s);
    let mut second = latest(after);
    second.extend(known.filter(|t| recent(t, rates.period)));
    let windows = (glimpse.windows.iter())
        .map(|(budget, limit, ages)| {
            let slots: Vec<Instant> = (ages.iter())
                .map(|&age| at(glimpse.answered, -age))
                .filter(|t| recent(t, rates.window))
                .collect();
            let room = (*limit as usize).saturating_sub(slots.len());
            let mut sends = latest(after.min(room));
            sends.extend(slots);
            (*budget, share(sends, live))
        })
        .collect();
    (share(second, live), windows)
}

/// Every `live`-th of `sends`, newest first: each suffix's count over `live`,
/// rounded up.
fn share(mut sends: Vec<Instant>, live: usize) -> Vec<Instant> {
    sends.sort_unstable_by(|a, b| b.cmp(a));
    sends.into_iter().step_by(live.max(1)).collect()
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
        assert_eq!(breaker.failure(t0, t0 + ms(5), false), None);
        assert_eq!(breaker.failure(t0 + ms(5), t0 + ms(10), false), None);
        assert!(!breaker.degraded());
        let t1 = t0 + ms(15);
        assert_eq!(
            breaker.failure(t0 + ms(10), t1, false),
            Some(Switch::Degraded)
        );
        assert!(breaker.degraded());
        assert!(!breaker.allows(t1 + ms(999)));
        assert!(breaker.allows(t1 + Duration::from_secs(1)));
        // The retry fails: open again, no second alert.
        let t2 = t1 + Duration::from_secs(1);
        assert_eq!(breaker.failure(t2, t2 + ms(5), false), None);
        assert!(!breaker.allows(t2 + ms(500)));
        assert_eq!(breaker.success(), Some(Switch::Shared));
        assert!(!breaker.degraded());
        assert_eq!(breaker.success(), None);
        // A success in between resets the count.
        let t3 = t2 + Duration::from_secs(5);
        breaker.failure(t3, t3 + ms(5), false);
        breaker.failure(t3 + ms(5), t3 + ms(10), false);
        breaker.success();
        assert_eq!(breaker.failure(t3 + ms(10), t3 + ms(15), false), None);
    }

    #[tokio::test(start_paused = true)]
    async fn calls_that_fail_together_count_as_one_failure() {
        let mut breaker = StoreBreaker::new(3, Duration::ZERO, Duration::from_secs(1));
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        // Eight admissions in flight over one bad moment.
        let us = Duration::from_micros;
        for i in 0..8 {
            assert_eq!(breaker.failure(t0 + us(i), t0 + ms(5) + us(i), false), None);
        }
        assert!(!breaker.degraded());
        // Two more, each started after the last failed: three in a row.
        assert_eq!(breaker.failure(t0 + ms(6), t0 + ms(11), false), None);
        let open = breaker.failure(t0 + ms(11), t0 + ms(16), false);
        assert_eq!(open, Some(Switch::Degraded));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_shorter_than_over_is_waited_out_a_longer_one_opens() {
        let ms = Duration::from_millis;
        let mut breaker = StoreBreaker::new(3, ms(250), Duration::from_secs(1));
        let t0 = Instant::now();
        // Ten calls in a row fail over 50 ms: a stall, not an outage.
        for i in 0..10 {
            assert_eq!(
                breaker.failure(t0 + ms(5 * i), t0 + ms(5 * i + 5), false),
                None
            );
        }
        assert!(!breaker.degraded());
        breaker.success();
        // Failing on for 250 ms from the first failure: an outage.
        let t1 = t0 + Duration::from_secs(10);
        let mut opened = None;
        for i in 0..60 {
            if let Some(switch) = breaker.failure(t1 + ms(5 * i), t1 + ms(5 * i + 5), false) {
                opened = Some((i, switch));
                break;
            }
        }
        // The first failure at 5 ms, the one 250 ms after it at 255 ms.
        assert_eq!(opened, Some((50, Switch::Degraded)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_store_that_is_gone_opens_it_without_waiting_out_a_stall() {
        let ms = Duration::from_millis;
        let mut breaker = StoreBreaker::new(3, ms(250), Duration::from_secs(1));
        let t0 = Instant::now();
        // Three refused calls in a row, 1 ms apart: gone, not stalled.
        assert_eq!(breaker.failure(t0, t0 + ms(1), true), None);
        assert_eq!(breaker.failure(t0 + ms(1), t0 + ms(2), true), None);
        assert_eq!(
            breaker.failure(t0 + ms(2), t0 + ms(3), true),
            Some(Switch::Degraded)
        );
        // Refused calls in flight together still count once.
        breaker.success();
        for _ in 0..5 {
            assert_eq!(breaker.failure(t0 + ms(10), t0 + ms(11), true), None);
        }
        assert!(!breaker.degraded());
    }

    /// A fleet's sends as its shared bucket (50/s, a burst of 8) lets them
    /// through, for demand that comes in bursts with gaps between.
    fn bucket_sends(from: Instant, until: Instant, seed: u64) -> (Vec<Instant>, Instant) {
        let interval = Duration::from_millis(20);
        let tolerance = interval * 7;
        let (mut tat, mut now, mut sends, mut x) = (from, from, Vec::new(), seed);
        while now < until {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Now and then a quiet spell, else as fast as the bucket allows.
            if x >> 60 == 0 {
                now += Duration::from_millis((x >> 40) % 400);
                continue;
            }
            now = now.max(tat.checked_sub(tolerance).unwrap_or(now));
            if now >= until {
                break;
            }
            sends.push(now);
            tat = tat.max(now) + interval;
        }
        (sends, tat)
    }

    #[tokio::test(start_paused = true)]
    async fn what_a_replica_going_local_counts_covers_every_second_the_fleet_sent() {
        let ms = Duration::from_millis;
        let rates = Rates {
            interval: ms(20),
            burst: 8,
            period: Duration::from_secs(1),
            per_period: 57,
            window: Duration::from_secs(60),
        };
        let start = Instant::now();
        for seed in 0..200 {
            let lost = start + ms(3000 + seed * 7);
            let asked = lost - ms(seed * 5 % 600);
            let (sends, _) = bucket_sends(start, lost, seed);
            let (_, tat) = bucket_sends(start, asked, seed);
            let micros = |d: Duration| i64::try_from(d.as_micros()).unwrap();
            let glimpse = Glimpse {
                asked,
                answered: asked,
                tat_ahead: micros(tat.saturating_duration_since(asked))
                    - micros(asked.saturating_duration_since(tat)),
                windows: Vec::new(),
            };
            for live in [1, 3] {
                let (counted, _) = unseen_share(&glimpse, lost, rates, live);
                // Every rolling second ending after the switch holds the
                // fleet's sends since its start: a live-th of them, each
                // replica counts.
                for back in (0..1000).step_by(5) {
                    let since = lost - ms(back);
                    let sent = sends.iter().filter(|t| **t > since).count();
                    let seen = counted.iter().filter(|t| **t > since).count();
                    assert!(
                        seen * live >= sent,
                        "seed {seed}, {live} live: {seen} of {sent} since {back} ms before"
                    );
                }
                // Never more than the second's limit in all.
                assert!(counted.len() * live <= 57 + live, "{}", counted.len());
            }
        }
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
