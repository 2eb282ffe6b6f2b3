//! Client-side admission (GRAG §8): be a polite tenant of a single-box backend.
//!
//! Every request passes [`Throttle::admit`] before it is sent: its budget's
//! semaphore (ingest: 2), the global semaphore (8), its budget's rolling
//! window (retrieval: 100/min, backfill: 30/min) and the global token bucket
//! (50 req/s). All waiting uses tokio time, so tests run under paused time.

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::ops::Add;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use governor::clock::{Clock, Reference};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::policy::ThrottlePolicy;

/// At most `limit` requests in any rolling `window`, as the platform counts
/// them: a slot is taken at admission and held until one `window` after the
/// request *ended* ([`release`](Self::release)). A request reaches the
/// platform somewhere between the two, so any window the platform measures
/// holds at most `limit` arrivals, however the network delays them; counting
/// from admission alone lets a delayed burst and a prompt refill meet in one
/// platform window.
///
/// A sliding log, not a GCRA: a GCRA quota of 100/min still lets a full burst
/// through on top of the steady rate, so "≤ 100 per rolling minute" would not
/// hold against a gateway that counts per rolling minute. The log holds at
/// most `limit` instants.
#[derive(Debug)]
pub struct RollingWindow {
    limit: usize,
    window: Duration,
    /// When released requests ended; each counts until `end + window`.
    log: VecDeque<Instant>,
    /// Admitted requests that have not ended yet.
    open: usize,
}

impl RollingWindow {
    /// A zero `limit` would block forever; it is treated as 1.
    pub fn new(limit: u32, window: Duration) -> Self {
        let limit = limit.max(1) as usize;
        Self {
            limit,
            window,
            // A huge limit (an override that means "unpaced") must not reserve it all.
            log: VecDeque::with_capacity(limit.min(1024)),
            open: 0,
        }
    }

    /// An instantaneous request at `now` (admitted and ended at once), or how
    /// long until the next slot frees.
    pub fn try_acquire(&mut self, now: Instant) -> Result<(), Duration> {
        self.acquire(now)?;
        self.release(now);
        Ok(())
    }

    /// Admits a request at `now`; [`release`](Self::release) it when it ends.
    pub fn acquire(&mut self, now: Instant) -> Result<(), Duration> {
        self.check(now)?;
        self.open += 1;
        Ok(())
    }

    /// The request admitted earlier ended at `now`.
    pub fn release(&mut self, now: Instant) {
        self.open = self.open.saturating_sub(1);
        let at = self.log.back().map_or(now, |&last| last.max(now));
        self.log.push_back(at);
    }

    /// Whether a slot is free at `now`, without taking it. When every slot is
    /// held by an open request, none can free before a full `window`.
    pub fn check(&mut self, now: Instant) -> Result<(), Duration> {
        while let Some(&oldest) = self.log.front() {
            if now.saturating_duration_since(oldest) >= self.window {
                self.log.pop_front();
            } else {
                break;
            }
        }
        if self.used() < self.limit {
            return Ok(());
        }
        match self.log.front() {
            Some(&oldest) => Err(self.window - now.saturating_duration_since(oldest)),
            None => Err(self.window),
        }
    }

    /// Slots held at the last check: open requests and recent ones.
    pub fn used(&self) -> usize {
        self.open + self.log.len()
    }

    pub fn limit(&self) -> usize {
        self.limit
    }
}

/// A tokio instant for governor (newtype: `Add<Nanos>` on a foreign type is
/// not allowed). Following tokio time lets paused-time tests drive the bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct TokioInstant(Instant);

impl Add<Nanos> for TokioInstant {
    type Output = Self;

    fn add(self, other: Nanos) -> Self {
        Self(self.0 + Duration::from(other))
    }
}

impl Reference for TokioInstant {
    fn duration_since(&self, earlier: Self) -> Nanos {
        self.0.saturating_duration_since(earlier.0).into()
    }

    fn saturating_sub(&self, duration: Nanos) -> Self {
        Self(self.0.checked_sub(duration.into()).unwrap_or(self.0))
    }
}

/// governor's clock over `tokio::time::Instant::now()`. Only `check` is used:
/// governor's `until_ready` sleeps on real time (futures-timer), so waiting
/// is done here with `tokio::time::sleep`.
#[derive(Debug, Clone, Copy, Default)]
struct TokioClock;

impl Clock for TokioClock {
    type Instant = TokioInstant;

    fn now(&self) -> TokioInstant {
        TokioInstant(Instant::now())
    }
}

type Bucket = RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<TokioInstant>>;

/// The extra limits of one budget.
#[derive(Debug)]
struct Lane {
    semaphore: Option<Arc<Semaphore>>,
    window: Option<Arc<Mutex<RollingWindow>>>,
}

/// Admission control of one API, built from its [`ThrottlePolicy`].
///
/// The token bucket's burst is `min(max_in_flight, per_second)` (8 for GRAG):
/// a full wave of concurrent requests may start at once, but any rolling
/// second admits at most `burst + per_second - 1` (57), well under the
/// gateway's 100 req/s ceiling. A burst of `per_second` (50) would allow 99,
/// defeating the "half the ceiling" headroom.
#[derive(Debug)]
pub struct Throttle {
    policy: &'static ThrottlePolicy,
    max_in_flight: usize,
    global: Arc<Semaphore>,
    lanes: Vec<Lane>,
    bucket: Bucket,
    /// The bucket's bound per rolling second, as the platform counts it.
    per_period: Arc<Mutex<RollingWindow>>,
    burst: u32,
}

/// Admission to send one request; dropping it (the request ended) frees the
/// concurrency slots and starts the end of its rolling-window slots.
#[derive(Debug)]
pub struct Permit {
    _global: OwnedSemaphorePermit,
    _budgets: Vec<OwnedSemaphorePermit>,
    windows: Vec<Arc<Mutex<RollingWindow>>>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let now = Instant::now();
        for window in &self.windows {
            window
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .release(now);
        }
    }
}

impl Throttle {
    /// Zero limits would block every call forever; they are treated as 1.
    pub fn new(policy: &'static ThrottlePolicy) -> Self {
        let max_in_flight = policy.max_in_flight.max(1) as usize;
        let per_second = NonZeroU32::new(policy.per_second).unwrap_or(NonZeroU32::MIN);
        let burst =
            NonZeroU32::new(policy.max_in_flight.min(per_second.get())).unwrap_or(NonZeroU32::MIN);
        let period = (policy.rate_period / per_second.get()).max(Duration::from_nanos(1));
        let quota = Quota::with_period(period)
            .expect("a non-zero period")
            .allow_burst(burst);
        let lanes = policy
            .budgets
            .iter()
            .map(|budget| Lane {
                semaphore: budget
                    .max_in_flight
                    .map(|n| Arc::new(Semaphore::new(n.max(1) as usize))),
                window: budget
                    .per_minute
                    .map(|n| Arc::new(Mutex::new(RollingWindow::new(n, policy.budget_period)))),
            })
            .collect();
        Self {
            policy,
            max_in_flight,
            global: Arc::new(Semaphore::new(max_in_flight)),
            lanes,
            bucket: RateLimiter::direct_with_clock(quota, TokioClock),
            // What the bucket admits in any rolling second, held as the platform counts.
            per_period: Arc::new(Mutex::new(RollingWindow::new(
                burst.get().saturating_add(per_second.get() - 1),
                policy.rate_period,
            ))),
            burst: burst.get(),
        }
    }

    /// Waits until a request of `budget` (an index into `policy.budgets`) may
    /// be sent. See [`admit_all`](Self::admit_all).
    pub async fn admit(&self, budget: usize) -> Permit {
        self.admit_all(&[budget]).await
    }

    /// Waits until a request drawing from every one of `budgets` may be sent
    /// (a route's own budget, and a caller's mode such as a bulk backfill).
    /// Budget slots are taken before the global one, so a saturated budget
    /// (ingest) queues without occupying global slots.
    ///
    /// # Panics
    /// If a budget is out of range: the pipeline checks descriptors against
    /// the policy before it gets here.
    pub async fn admit_all(&self, budgets: &[usize]) -> Permit {
        // Sorted and unique: every caller locks the windows in one order.
        let mut budgets = budgets.to_vec();
        budgets.sort_unstable();
        budgets.dedup();
        let lanes: Vec<&Lane> = budgets
            .iter()
            .map(|&budget| {
                self.lanes.get(budget).unwrap_or_else(|| {
                    panic!(
                        "budget index {budget} out of range ({} budgets)",
                        self.lanes.len()
                    )
                })
            })
            .collect();
        let mut budget_permits = Vec::new();
        for semaphore in lanes.iter().filter_map(|lane| lane.semaphore.as_ref()) {
            budget_permits.push(acquire(semaphore).await);
        }
        // A global slot is held only while the request may go: a request that
        // must wait for its window or the bucket gives its slot back meanwhile,
        // so a retrieval backlog never starves the other routes.
        loop {
            let global = acquire(&self.global).await;
            match self.pace(&lanes) {
                Ok(()) => {
                    let mut windows = vec![self.per_period.clone()];
                    windows.extend(lanes.iter().filter_map(|lane| lane.window.clone()));
                    return Permit {
                        _global: global,
                        _budgets: budget_permits,
                        windows,
                    };
                }
                Err(wait) => {
                    drop(global);
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// Takes a bucket token and the rolling-window slots (the budgets', and
    /// the per-second one), or says how long to wait. All are decided at one
    /// instant under the windows' locks: nothing is taken unless all are free.
    fn pace(&self, lanes: &[&Lane]) -> Result<(), Duration> {
        let now = Instant::now();
        let mut per_period = self
            .per_period
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        per_period.check(now)?;
        let mut windows: Vec<_> = lanes
            .iter()
            .filter_map(|lane| lane.window.as_ref())
            .map(|w| w.lock().unwrap_or_else(PoisonError::into_inner))
            .collect();
        for window in &mut windows {
            window.check(now)?;
        }
        self.take_token()?;
        per_period.acquire(now)?;
        for window in &mut windows {
            window.acquire(now)?;
        }
        Ok(())
    }

    fn take_token(&self) -> Result<(), Duration> {
        self.bucket
            .check()
            .map_err(|not_until| not_until.wait_time_from(TokioClock.now()))
    }

    /// Requests admitted and not yet finished, over all budgets.
    pub fn in_flight(&self) -> usize {
        self.max_in_flight - self.global.available_permits()
    }

    /// Requests of `budget` holding its semaphore; `None` without one.
    pub fn budget_in_flight(&self, budget: usize) -> Option<usize> {
        let lane = self.lanes.get(budget)?;
        let semaphore = lane.semaphore.as_ref()?;
        let max = self.policy.budgets[budget].max_in_flight?.max(1) as usize;
        Some(max - semaphore.available_permits())
    }

    /// Admissions of `budget` in its current rolling window; `None` without one.
    pub fn budget_window_used(&self, budget: usize) -> Option<usize> {
        let window = self.lanes.get(budget)?.window.as_ref()?;
        let mut window = window.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = window.check(Instant::now());
        Some(window.used())
    }

    /// The token bucket's burst (see the type's docs).
    pub fn burst(&self) -> u32 {
        self.burst
    }

    pub fn policy(&self) -> &'static ThrottlePolicy {
        self.policy
    }
}

/// The semaphores are never closed, so acquiring cannot fail.
async fn acquire(semaphore: &Arc<Semaphore>) -> OwnedSemaphorePermit {
    Arc::clone(semaphore)
        .acquire_owned()
        .await
        .expect("throttle semaphores are never closed")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{BudgetPolicy, PollingPolicy};
    use std::sync::atomic::{AtomicUsize, Ordering};

    const GLOBAL: usize = 0;
    const INGEST: usize = 1;
    const RETRIEVAL: usize = 2;
    const MINUTE: Duration = Duration::from_secs(60);

    static POLICY: ThrottlePolicy = ThrottlePolicy {
        max_in_flight: 8,
        per_second: 50,
        rate_period: Duration::from_secs(1),
        budget_period: MINUTE,
        budgets: &[
            BudgetPolicy {
                name: "global",
                max_in_flight: None,
                per_minute: None,
            },
            BudgetPolicy {
                name: "ingest",
                max_in_flight: Some(2),
                per_minute: None,
            },
            BudgetPolicy {
                name: "retrieval",
                max_in_flight: None,
                per_minute: Some(100),
            },
            BudgetPolicy {
                name: "backfill",
                max_in_flight: None,
                per_minute: Some(30),
            },
        ],
        polling: PollingPolicy {
            interval: Duration::from_secs(5),
            floor: Duration::from_secs(2),
            hot_factor: 2,
        },
    };

    /// Current and peak number of holders.
    #[derive(Default)]
    struct Gauge {
        now: AtomicUsize,
        max: AtomicUsize,
    }

    impl Gauge {
        fn enter(&self) {
            let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.max.fetch_max(now, Ordering::SeqCst);
        }
        fn leave(&self) {
            self.now.fetch_sub(1, Ordering::SeqCst);
        }
        fn max(&self) -> usize {
            self.max.load(Ordering::SeqCst)
        }
    }

    /// Spawns `n` tasks that each admit on `budget` and hold the permit 100 ms.
    fn spawn_holders(
        throttle: &Arc<Throttle>,
        budget: usize,
        n: usize,
        gauges: &[Arc<Gauge>],
    ) -> Vec<tokio::task::JoinHandle<()>> {
        (0..n)
            .map(|_| {
                let throttle = Arc::clone(throttle);
                let gauges = gauges.to_vec();
                tokio::spawn(async move {
                    let permit = throttle.admit(budget).await;
                    gauges.iter().for_each(|g| g.enter());
                    assert!(throttle.in_flight() <= 8);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    gauges.iter().for_each(|g| g.leave());
                    drop(permit);
                })
            })
            .collect()
    }

    /// Admits `n` requests on `budget` (permit dropped at once) and returns
    /// the sorted admission instants.
    async fn admission_times(throttle: &Arc<Throttle>, budget: usize, n: usize) -> Vec<Instant> {
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                let throttle = Arc::clone(throttle);
                tokio::spawn(async move {
                    drop(throttle.admit(budget).await);
                    Instant::now()
                })
            })
            .collect();
        let mut times = Vec::with_capacity(n);
        for task in tasks {
            times.push(task.await.unwrap());
        }
        times.sort();
        times
    }

    /// The most admissions in any half-open window `[t, t + width)`; windows
    /// starting at an admission are the only ones that can hold a maximum.
    fn max_in_any_window(times: &[Instant], width: Duration) -> usize {
        times
            .iter()
            .enumerate()
            .map(|(i, &start)| {
                times[i..]
                    .iter()
                    .take_while(|&&t| t.duration_since(start) < width)
                    .count()
            })
            .max()
            .unwrap_or(0)
    }

    #[tokio::test(start_paused = true)]
    async fn global_concurrency_is_capped_at_8() {
        let throttle = Arc::new(Throttle::new(&POLICY));
        let all = Arc::new(Gauge::default());
        for task in spawn_holders(&throttle, GLOBAL, 40, &[Arc::clone(&all)]) {
            task.await.unwrap();
        }
        assert_eq!(all.max(), 8);
        assert_eq!(throttle.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn ingest_budget_is_capped_at_2_inside_the_global_cap() {
        let throttle = Arc::new(Throttle::new(&POLICY));
        let all = Arc::new(Gauge::default());
        let ingest = Arc::new(Gauge::default());
        let mut tasks = spawn_holders(
            &throttle,
            INGEST,
            40,
            &[Arc::clone(&all), Arc::clone(&ingest)],
        );
        tasks.extend(spawn_holders(&throttle, GLOBAL, 40, &[Arc::clone(&all)]));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(throttle.budget_in_flight(INGEST), Some(2));
        assert_eq!(throttle.budget_in_flight(GLOBAL), None);
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(ingest.max(), 2);
        assert!(all.max() <= 8, "global peak {}", all.max());
        assert_eq!(throttle.budget_in_flight(INGEST), Some(0));
    }

    #[tokio::test(start_paused = true)]
    async fn retrieval_admits_at_most_100_per_rolling_minute() {
        let throttle = Arc::new(Throttle::new(&POLICY));
        let times = admission_times(&throttle, RETRIEVAL, 200).await;
        assert_eq!(max_in_any_window(&times, MINUTE), 100);
        let gap = times[100].duration_since(times[0]);
        assert!(gap >= MINUTE, "101st after {gap:?}");
        // The slot frees as the window slides, not much later.
        assert!(
            gap < MINUTE + Duration::from_millis(100),
            "101st after {gap:?}"
        );
        assert!(times[99].duration_since(times[0]) < Duration::from_secs(3));
        // The window comes on top of the global bucket, not instead of it.
        assert_eq!(max_in_any_window(&times, Duration::from_secs(1)), 57);
        assert_eq!(throttle.budget_window_used(RETRIEVAL), Some(100));
    }

    #[tokio::test(start_paused = true)]
    async fn token_bucket_admits_at_most_57_per_rolling_second() {
        let throttle = Arc::new(Throttle::new(&POLICY));
        assert_eq!(throttle.burst(), 8);
        let times = admission_times(&throttle, GLOBAL, 200).await;
        // burst + per_second - 1: 8 at once, then one every 20 ms.
        assert_eq!(max_in_any_window(&times, Duration::from_secs(1)), 57);
        // Sustained: 192 paced admissions after the burst take 3.84 s.
        let span = times[199].duration_since(times[0]);
        assert_eq!(span, Duration::from_millis(192 * 20));
    }

    #[test]
    fn an_open_request_holds_its_slot_until_a_window_after_it_ends() {
        let s = Duration::from_secs;
        let t0 = Instant::now();
        let mut window = RollingWindow::new(2, MINUTE);
        window.acquire(t0).unwrap();
        window.acquire(t0).unwrap();
        // Both still open: no slot can free before a full window.
        assert_eq!(window.check(t0 + s(90)), Err(MINUTE));
        window.release(t0 + s(100));
        assert_eq!(window.check(t0 + s(130)), Err(s(30)));
        assert_eq!(window.acquire(t0 + s(160)), Ok(()));
        assert_eq!(window.used(), 2);
    }

    #[test]
    fn rolling_window_admits_exactly_limit() {
        let t0 = Instant::now();
        let mut window = RollingWindow::new(3, MINUTE);
        for _ in 0..3 {
            assert_eq!(window.try_acquire(t0), Ok(()));
        }
        assert_eq!(window.try_acquire(t0), Err(MINUTE));
        assert_eq!(window.used(), 3);
    }

    #[test]
    fn rolling_window_reports_exact_wait() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut window = RollingWindow::new(3, MINUTE);
        for at in [0, 10, 20] {
            assert_eq!(window.try_acquire(t0 + s(at)), Ok(()));
        }
        assert_eq!(window.try_acquire(t0 + s(30)), Err(s(30)));
        let almost = t0 + MINUTE - Duration::from_millis(1);
        assert_eq!(window.try_acquire(almost), Err(Duration::from_millis(1)));
        assert_eq!(window.check(t0 + s(59)), Err(s(1)));
    }

    #[test]
    fn rolling_window_frees_slots_as_time_slides() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut window = RollingWindow::new(3, MINUTE);
        for at in [0, 10, 20] {
            window.try_acquire(t0 + s(at)).unwrap();
        }
        // The first slot frees at exactly t0 + 60 s (half-open window).
        assert_eq!(window.try_acquire(t0 + s(60)), Ok(()));
        assert_eq!(window.try_acquire(t0 + s(60)), Err(s(10)));
        assert_eq!(window.try_acquire(t0 + s(70)), Ok(()));
        assert_eq!(window.try_acquire(t0 + s(80)), Ok(()));
        assert_eq!(window.try_acquire(t0 + s(80)), Err(s(40)));
        // A long pause frees everything.
        for _ in 0..3 {
            assert_eq!(window.try_acquire(t0 + s(500)), Ok(()));
        }
        assert_eq!(window.try_acquire(t0 + s(500)), Err(MINUTE));
    }

    #[test]
    fn a_limit_near_u32_max_neither_overflows_nor_reserves_it() {
        let unpaced: &'static ThrottlePolicy = Box::leak(Box::new(ThrottlePolicy {
            per_second: u32::MAX,
            ..POLICY.clone()
        }));
        let throttle = Throttle::new(unpaced);
        let window = throttle.per_period.lock().unwrap();
        // burst (8) + u32::MAX - 1 saturates instead of wrapping to 6.
        assert_eq!(window.limit(), u32::MAX as usize);
        assert!(window.log.capacity() <= 1024);
    }

    #[test]
    fn zero_limit_is_treated_as_one() {
        let t0 = Instant::now();
        let mut window = RollingWindow::new(0, MINUTE);
        assert_eq!(window.try_acquire(t0), Ok(()));
        assert_eq!(window.try_acquire(t0), Err(MINUTE));
        assert_eq!(window.limit(), 1);
    }
}
