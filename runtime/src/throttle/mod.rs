//! Client-side admission (GRAG §8): be a polite tenant of a single-box backend.
//!
//! Every request passes [`Throttle::admit`] before it is sent, through four
//! stages in this order: its budgets' rolling windows (retrieval: 100/min,
//! backfill: 30/min), its budgets' semaphores (ingest: 2, retrieval: 4), the
//! global token bucket (50 req/s) with its rolling second, and the global
//! semaphore (8). Every stage is a FIFO queue, so callers are admitted in
//! the order they arrived; the budget stages queue per budget, so one
//! budget's backlog waits in its own lane. All waiting uses tokio time, so
//! tests run under paused time.

use std::num::NonZeroU32;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use sdk_policy::policy::{BudgetIx, ThrottlePolicy};

mod admit;
mod bucket;
mod leave;
mod local;
mod queue;
mod semaphore;
mod slots;
mod tick;
mod window;

pub use crate::fleet::MAX_BUDGETS;
pub use leave::WindowsLeft;
pub use slots::{HeldSlots, Permit};

use bucket::{Second, TokenBucket};
use queue::Queue;
use semaphore::Semaphore;
use slots::slot;
use tick::Clock;
use window::RollingWindow;

/// Every rolling window of a throttle under one lock: the rolling second
/// and the budgets' windows. An admission decides all of them at one
/// instant and a release ends its request in all of them, each under one
/// lock taken once; the queues in front of them stay one per window
/// ([`Queue`]), so a backlog of one budget still waits in its own lane.
///
/// On cache lines of its own (the lock's word is beside it): every
/// admission and release writes it, and the read-only fields of the
/// throttle around it would otherwise move between cores with it.
#[derive(Debug)]
#[repr(align(128))]
struct Windows {
    second: Second,
    /// The budgets' windows, at the positions their lanes name.
    budgets: Box<[RollingWindow]>,
}

/// The extra limits of one budget.
#[derive(Debug)]
struct Lane {
    semaphore: Option<Semaphore>,
    window: Option<LaneWindow>,
}

/// A budget's rolling window: its queue, and where the window is in
/// [`Windows::budgets`].
#[derive(Debug)]
struct LaneWindow {
    queue: Queue,
    at: u8,
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
    global: Semaphore,
    lanes: Vec<Lane>,
    clock: Clock,
    /// Every rolling window, the bucket's with it.
    windows: Mutex<Windows>,
    /// The queue for a token and a slot of the rolling second, the one
    /// every request passes, in arrival order.
    per_period: Queue,
    burst: u32,
}

impl Throttle {
    /// Zero limits would block every call forever; they are treated as 1.
    pub fn new(policy: &'static ThrottlePolicy) -> Self {
        let max_in_flight = policy.max_in_flight.max(1) as usize;
        let per_second = NonZeroU32::new(policy.per_second).unwrap_or(NonZeroU32::MIN);
        let burst =
            NonZeroU32::new(policy.max_in_flight.min(per_second.get())).unwrap_or(NonZeroU32::MIN);
        let period = (policy.rate_period / per_second.get()).max(Duration::from_nanos(1));
        let mut budget_windows = Vec::new();
        let lanes = policy
            .budgets
            .iter()
            .map(|budget| Lane {
                semaphore: budget
                    .max_in_flight
                    .map(|n| Semaphore::new(n.max(1) as usize)),
                window: budget.per_minute.map(|n| {
                    budget_windows.push(RollingWindow::new(n, policy.budget_period));
                    LaneWindow {
                        queue: Queue::new(),
                        at: slot(budget_windows.len() - 1),
                    }
                }),
            })
            .collect();
        let second = Second {
            bucket: TokenBucket::new(period, burst.get()),
            // What the bucket admits in any rolling second, held as the platform counts.
            window: RollingWindow::new(
                burst.get().saturating_add(per_second.get() - 1),
                policy.rate_period,
            ),
        };
        Self {
            policy,
            max_in_flight,
            global: Semaphore::new(max_in_flight),
            lanes,
            clock: Clock {
                origin: Instant::now(),
            },
            windows: Mutex::new(Windows {
                second,
                budgets: budget_windows.into_boxed_slice(),
            }),
            per_period: Queue::new(),
            burst: burst.get(),
        }
    }

    fn lock_windows(&self) -> MutexGuard<'_, Windows> {
        self.windows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets every rolling window's limit to `limit_of(budget, policy limit)`:
    /// a budget's window (`Some(index)`) and the rolling second (`None`).
    /// The fleet runs them at a replica's share while its store is away.
    pub fn set_window_limits(&self, limit_of: &dyn Fn(Option<usize>, u32) -> u32) {
        let mut windows = self.lock_windows();
        for (b, lane) in self.lanes.iter().enumerate() {
            if let (Some(window), Some(limit)) = (&lane.window, self.policy.budgets[b].per_minute) {
                windows.budgets[usize::from(window.at)].set_limit(limit_of(Some(b), limit));
            }
        }
        let per_second = self.policy.per_second.max(1);
        let per_period = self.burst.saturating_add(per_second - 1);
        (windows.second.window).set_limit(limit_of(None, per_period));
    }

    /// Paces the token bucket at `per_second` tokens a rate period, up to
    /// `burst` at once (both at least 1): a fleet's degraded share of the
    /// rate, spread evenly rather than a burst and a wait each second.
    /// [`reset_rate`](Self::reset_rate) goes back to the policy's.
    pub fn set_rate(&self, per_second: u32, burst: u32) {
        let period = (self.policy.rate_period / per_second.max(1)).max(Duration::from_nanos(1));
        (self.lock_windows().second.bucket).set_rate(period, burst.max(1));
    }

    /// The policy's rate and burst again (see [`set_rate`](Self::set_rate)).
    pub fn reset_rate(&self) {
        self.set_rate(self.policy.per_second, self.burst);
    }

    /// Makes this throttle's rolling windows count at least `second`'s
    /// sends after every instant (the rolling second), and each budget's
    /// its window, their own slots included: a replica going local counts
    /// its share of what the fleet sent, not its own sends alone.
    pub fn seed_windows(&self, second: &[Instant], budgets: &[(BudgetIx, Vec<Instant>)]) {
        let clock = self.clock;
        let ticks = |sends: &[Instant]| -> Vec<tick::Tick> {
            sends.iter().map(|&at| clock.tick_of(at)).collect()
        };
        let mut windows = self.lock_windows();
        windows.second.window.seed(&ticks(second));
        for (budget, sends) in budgets {
            let lane = self.lanes.get(budget.get()).and_then(|l| l.window.as_ref());
            if let Some(window) = lane {
                windows.budgets[usize::from(window.at)].seed(&ticks(sends));
            }
        }
    }

    /// Requests admitted and not yet finished, over all budgets.
    pub fn in_flight(&self) -> usize {
        self.max_in_flight - self.global.available()
    }

    /// Requests of `budget` holding its semaphore; `None` without one.
    pub fn budget_in_flight(&self, budget: usize) -> Option<usize> {
        let lane = self.lanes.get(budget)?;
        let semaphore = lane.semaphore.as_ref()?;
        let max = self.policy.budgets[budget].max_in_flight?.max(1) as usize;
        Some(max - semaphore.available())
    }

    /// Admissions of `budget` in its current rolling window; `None` without one.
    pub fn budget_window_used(&self, budget: usize) -> Option<usize> {
        let at = usize::from(self.lanes.get(budget)?.window.as_ref()?.at);
        let window = &mut self.lock_windows().budgets[at];
        let _ = window.check(self.clock.now());
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

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;
    use sdk_policy::policy::{BudgetPolicy, PollingPolicy};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const GLOBAL: usize = 0;
    const INGEST: usize = 1;
    const RETRIEVAL: usize = 2;
    const BACKFILL: usize = 3;
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

    impl Throttle {
        /// `f` of `budget`'s rolling window.
        fn window_of<R>(&self, budget: usize, f: impl FnOnce(&mut RollingWindow) -> R) -> R {
            let at = usize::from(self.lanes[budget].window.as_ref().unwrap().at);
            f(&mut self.lock_windows().budgets[at])
        }
    }

    #[tokio::test(start_paused = true)]
    async fn detached_slots_stay_taken_until_given_back() {
        let throttle = Throttle::new(&POLICY);
        let held = throttle.admit_all(&[INGEST, RETRIEVAL]).await.detach();
        assert_eq!(
            throttle.in_flight(),
            1,
            "a detached permit still holds its global slot"
        );
        assert_eq!(throttle.budget_in_flight(INGEST), Some(1));
        let windows_used = |t: &Throttle| t.window_of(RETRIEVAL, |w| w.used());
        assert_eq!(windows_used(&throttle), 1);
        throttle.give_back(held);
        assert_eq!(throttle.in_flight(), 0);
        assert_eq!(throttle.budget_in_flight(INGEST), Some(0));
        // The window slot now counts from the end of the request, as on drop.
        assert_eq!(windows_used(&throttle), 1);
        tokio::time::advance(MINUTE).await;
        let now = throttle.clock.now();
        assert!(throttle.window_of(RETRIEVAL, |w| w.check(now)).is_ok());
        assert_eq!(
            windows_used(&throttle),
            0,
            "one window after the end it expired"
        );
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

    #[tokio::test(start_paused = true)]
    async fn a_rate_set_lower_paces_evenly_and_the_policy_s_comes_back() {
        let throttle = Arc::new(Throttle::new(&POLICY));
        // 15 a second, 3 at once: the burst, then one every 66.7 ms, at
        // most 17 in any rolling second.
        throttle.set_rate(15, 3);
        let times = admission_times(&throttle, GLOBAL, 48).await;
        assert_eq!(max_in_any_window(&times, Duration::from_secs(1)), 17);
        let gaps: Vec<Duration> = times[3..].windows(2).map(|w| w[1] - w[0]).collect();
        let even = Duration::from_secs(1) / 15;
        assert!(
            gaps.iter().all(|g| *g <= even + Duration::from_millis(1)),
            "{gaps:?}"
        );
        // The policy's again: after the promised tokens, one every 20 ms.
        throttle.reset_rate();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let times = admission_times(&throttle, GLOBAL, 200).await;
        assert_eq!(max_in_any_window(&times, Duration::from_secs(1)), 57);
    }

    /// Pairs admitted in the other order than they arrived, of `order`: the
    /// arrival numbers in admission order.
    fn out_of_order_pairs(order: &[usize]) -> usize {
        order
            .iter()
            .enumerate()
            .map(|(i, &a)| order[i + 1..].iter().filter(|&&b| b < a).count())
            .sum()
    }

    /// Spawns one caller per entry of `budgets`, in order, `every` apart;
    /// each takes an arrival number right before it asks, holds its permit
    /// `hold` and returns. The result lists the arrival numbers in admission
    /// order, and the admission instants.
    async fn admission_order(
        throttle: &Arc<Throttle>,
        budgets: &[&'static [usize]],
        every: Duration,
        hold: Duration,
    ) -> (Vec<usize>, Vec<Instant>) {
        let arrived = Arc::new(AtomicUsize::new(0));
        let admitted = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::with_capacity(budgets.len());
        for &budgets in budgets {
            let (throttle, arrived, admitted) = (
                Arc::clone(throttle),
                Arc::clone(&arrived),
                Arc::clone(&admitted),
            );
            tasks.push(tokio::spawn(async move {
                let me = arrived.fetch_add(1, Ordering::SeqCst);
                let permit = throttle.admit_all(budgets).await;
                admitted.lock().unwrap().push((me, Instant::now()));
                tokio::time::sleep(hold).await;
                drop(permit);
            }));
            // Exactly `every`, not rounded up to the timer's millisecond ticks.
            tokio::time::advance(every).await;
        }
        for task in tasks {
            task.await.unwrap();
        }
        let admitted = admitted.lock().unwrap();
        admitted.iter().copied().unzip()
    }

    #[tokio::test(start_paused = true)]
    async fn callers_paced_by_the_bucket_are_admitted_in_arrival_order() {
        let throttle = Arc::new(Throttle::new(&POLICY));
        // 64 callers arrive 1.3 ms apart, a burst of 8 passes, then one per
        // 20 ms. A sleeper's timer fires on the next millisecond tick, up to
        // 1 ms after its token is due: a newcomer in that gap must not take it.
        let budgets = [&[GLOBAL][..]; 64];
        let every = Duration::from_micros(1300);
        let (order, times) =
            admission_order(&throttle, &budgets, every, Duration::from_millis(10)).await;
        assert_eq!(order.len(), 64);
        assert_eq!(out_of_order_pairs(&order), 0, "admission order {order:?}");
        // Still paced: 56 tokens after the burst, each taken on the first
        // timer tick after it is due.
        let span = times[63].duration_since(times[0]);
        let paced = 56 * Duration::from_millis(20);
        assert!(
            span >= paced && span <= paced + Duration::from_millis(1),
            "{span:?}"
        );
        assert!(max_in_any_window(&times, Duration::from_secs(1)) <= 57);
    }

    #[tokio::test(start_paused = true)]
    async fn callers_waiting_for_a_window_keep_their_place() {
        let throttle = Arc::new(Throttle::new(&POLICY));
        // 140 callers 12 ms apart: the first 100 fill the rolling minute;
        // the other 40 wait for it to slide, joined by newcomers that arrive
        // while it does, and leave in the order they came.
        let budgets = [&[RETRIEVAL][..]; 140];
        let every = Duration::from_millis(12);
        let (order, times) =
            admission_order(&throttle, &budgets, every, Duration::from_millis(10)).await;
        assert_eq!(out_of_order_pairs(&order), 0, "admission order {order:?}");
        assert_eq!(max_in_any_window(&times, MINUTE), 100);
        assert_eq!(max_in_any_window(&times, Duration::from_secs(1)), 57);
    }

    #[tokio::test(start_paused = true)]
    async fn a_backfill_mode_search_waits_in_the_backfill_lane_only() {
        let throttle = Arc::new(Throttle::new(&POLICY));
        // Searches in backfill mode (more than the backfill window holds)
        // interleaved with plain searches and plain backfill calls.
        let kinds: [&'static [usize]; 3] = [&[RETRIEVAL, BACKFILL], &[RETRIEVAL], &[BACKFILL]];
        let budgets: Vec<&'static [usize]> = (0..120).map(|i| kinds[i % 3]).collect();
        let (order, times) = admission_order(
            &throttle,
            &budgets,
            Duration::from_micros(1300),
            Duration::from_millis(10),
        )
        .await;
        assert_eq!(order.len(), 120);
        let of = |kind: &[usize]| -> Vec<usize> {
            order
                .iter()
                .copied()
                .filter(|&me| budgets[me] == kind)
                .collect()
        };
        let backfill_lane: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&me| budgets[me].contains(&BACKFILL))
            .collect();
        assert_eq!(out_of_order_pairs(&backfill_lane), 0, "{backfill_lane:?}");
        assert_eq!(out_of_order_pairs(&of(&[RETRIEVAL])), 0);
        // The 40 plain searches do not wait behind the 50 backfill-mode
        // searches the backfill window holds back: all go in the first wave.
        let first_minute = times.iter().filter(|&&t| t < times[0] + MINUTE).count();
        let plain_searches_late = order[first_minute..]
            .iter()
            .filter(|&&me| budgets[me] == [RETRIEVAL])
            .count();
        assert_eq!(plain_searches_late, 0);
        let backfill_times: Vec<Instant> = order
            .iter()
            .zip(&times)
            .filter(|(me, _)| budgets[**me].contains(&BACKFILL))
            .map(|(_, &t)| t)
            .collect();
        assert_eq!(max_in_any_window(&backfill_times, MINUTE), 30);
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_backlog_holds_no_global_slot_and_does_not_queue_other_lanes() {
        let throttle = Arc::new(Throttle::new(&POLICY));
        for _ in 0..100 {
            drop(throttle.admit(RETRIEVAL).await);
        }
        let backlog: Vec<_> = (0..130)
            .map(|_| {
                let throttle = Arc::clone(&throttle);
                tokio::spawn(async move { drop(throttle.admit(RETRIEVAL).await) })
            })
            .collect();
        // Long enough for the bucket to refill, far from the window sliding.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(backlog.iter().all(|task| !task.is_finished()));
        assert_eq!(throttle.in_flight(), 0, "the backlog holds global slots");
        // A global call and a backfill call pass at once, ahead of all 130.
        let global = throttle.admit(GLOBAL).now_or_never();
        assert!(global.is_some(), "a global call queued behind the backlog");
        let backfill = throttle.admit(BACKFILL).now_or_never();
        assert!(
            backfill.is_some(),
            "a backfill call queued behind the backlog"
        );
        assert_eq!(throttle.in_flight(), 2);
        for task in backlog {
            task.abort();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_waiter_gives_its_place_to_the_next() {
        let throttle = Arc::new(Throttle::new(&POLICY));
        let started = Instant::now();
        for _ in 0..30 {
            drop(throttle.admit(BACKFILL).await);
        }
        // Two wait for the window; the head gives up before it slides.
        let head = tokio::spawn({
            let throttle = Arc::clone(&throttle);
            async move { drop(throttle.admit(BACKFILL).await) }
        });
        let next = tokio::spawn({
            let throttle = Arc::clone(&throttle);
            async move {
                drop(throttle.admit(BACKFILL).await);
                Instant::now()
            }
        });
        tokio::time::sleep(MINUTE / 2).await;
        head.abort();
        assert!(head.await.unwrap_err().is_cancelled());
        assert_eq!(throttle.budget_window_used(BACKFILL), Some(30));
        // The next one in line is admitted as soon as the first slot frees.
        assert_eq!(next.await.unwrap().duration_since(started), MINUTE);
        // The burst of 8 left together at `started`: 22 remain, and the new one.
        assert_eq!(throttle.budget_window_used(BACKFILL), Some(23));
        assert_eq!(throttle.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn admissions_that_give_up_return_their_window_and_second_slots() {
        let throttle = Arc::new(Throttle::new(&POLICY));
        let permits: Vec<_> = (0..8).map(|_| throttle.admit(GLOBAL)).collect();
        let mut held = Vec::new();
        for permit in permits {
            held.push(permit.await);
        }
        // A retrieval call takes its window slot and a token, then waits for
        // a global slot and gives up: the slots it took end with it.
        let waiting = tokio::time::timeout(Duration::from_millis(100), throttle.admit(RETRIEVAL));
        assert!(waiting.await.is_err());
        assert_eq!(throttle.budget_window_used(RETRIEVAL), Some(1));
        assert_eq!(throttle.lock_windows().second.window.open(), 8);
        drop(held);
        assert_eq!(throttle.lock_windows().second.window.open(), 0);
        assert_eq!(throttle.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_left_the_rolling_second_takes_a_slot_again_before_it_goes() {
        let throttle = Throttle::new(&POLICY);
        // One request per rolling second (a degraded share of one).
        throttle.set_window_limits(&|budget, limit| if budget.is_none() { 1 } else { limit });
        let first = throttle.admit(GLOBAL).await;
        assert!(
            throttle.admit(GLOBAL).now_or_never().is_none(),
            "the second is full"
        );
        // The first waits elsewhere: its slot is free for another meanwhile.
        let left = throttle.leave_windows(&[GLOBAL]);
        let second = throttle
            .admit(GLOBAL)
            .now_or_never()
            .expect("its slot is free");
        // Back, it waits for a slot of its own: one second after the other ended.
        drop(second);
        let ended = Instant::now();
        left.retake().await;
        assert!(ended.elapsed() >= Duration::from_secs(1) - Duration::from_millis(1));
        drop(first);
        assert_eq!(throttle.lock_windows().second.window.open(), 0);
        // A wait cancelled after leaving holds the slot again, for its
        // permit to give back.
        let third = throttle.admit(GLOBAL).await;
        drop(throttle.leave_windows(&[GLOBAL]));
        assert_eq!(throttle.lock_windows().second.window.open(), 1);
        drop(third);
        assert_eq!(throttle.lock_windows().second.window.open(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_seeded_window_counts_the_share_where_its_own_slots_fall_short() {
        let throttle = Throttle::new(&POLICY);
        let s = Duration::from_secs;
        let t0 = Instant::now();
        // Its own: one request 30 s ago, one 10 s ago.
        for at in [t0, t0 + s(20)] {
            tokio::time::sleep_until(at).await;
            drop(throttle.admit(RETRIEVAL).await);
        }
        tokio::time::sleep_until(t0 + s(30)).await;
        // Its share of the fleet's: three 25 s ago, one 5 s ago.
        let share = [t0 + s(5), t0 + s(5), t0 + s(5), t0 + s(25)];
        throttle.seed_windows(&[], &[(BudgetIx::new(RETRIEVAL as u16), share.to_vec())]);
        // Since 6 s ago: the share's one (its own none: one added). Since
        // 11 s ago: its own one and that. Since 26 s ago: the share's four
        // (its own one, three added). In all, its own two and three added.
        let used = |at: Instant| {
            let tick = throttle.clock.tick_of(at) + tick::ticks(MINUTE);
            throttle.window_of(RETRIEVAL, |w| w.logged_after(tick))
        };
        assert_eq!(used(t0 + s(24)), 1);
        assert_eq!(used(t0 + s(19)), 2);
        assert_eq!(used(t0 + s(4)), 4);
        assert_eq!(throttle.window_of(RETRIEVAL, |w| w.used()), 5);
    }
    #[tokio::test(start_paused = true)]
    async fn a_request_that_left_its_windows_takes_their_slots_again_within_their_limits() {
        let throttle = Throttle::new(&POLICY);
        let slow = throttle.admit(RETRIEVAL).await;
        // A share of one retrieval call a minute, and two the fleet sent:
        // its own open one counts for one of them.
        throttle.set_window_limits(&|budget, limit| if budget.is_some() { 1 } else { limit });
        let now = Instant::now();
        throttle.seed_windows(&[], &[(BudgetIx::new(RETRIEVAL as u16), vec![now, now])]);
        assert_eq!(throttle.window_of(RETRIEVAL, |w| w.used()), 2);
        let left = throttle.leave_windows(&[RETRIEVAL]);
        assert_eq!(throttle.window_of(RETRIEVAL, |w| w.open()), 0);
        let started = Instant::now();
        left.retake().await;
        // It goes once the fleet's call leaves the minute.
        assert!(started.elapsed() >= MINUTE - Duration::from_millis(1));
        drop(slow);
        assert_eq!(throttle.window_of(RETRIEVAL, |w| w.open()), 0);
        assert_eq!(throttle.lock_windows().second.window.open(), 0);
        // Cancelled while it waits: its slots are held again, for its permit.
        let other = throttle.admit(RETRIEVAL).await;
        let now = Instant::now();
        throttle.seed_windows(&[], &[(BudgetIx::new(RETRIEVAL as u16), vec![now, now])]);
        {
            let left = throttle.leave_windows(&[RETRIEVAL]);
            assert!(left.retake().now_or_never().is_none(), "the minute is full");
        }
        assert_eq!(throttle.window_of(RETRIEVAL, |w| w.open()), 1);
        assert_eq!(throttle.lock_windows().second.window.open(), 1);
        drop(other);
        assert_eq!(throttle.window_of(RETRIEVAL, |w| w.open()), 0);
    }

    #[test]
    #[should_panic(expected = "more than 2 budgets")]
    fn three_budgets_are_refused() {
        let throttle = Throttle::new(&POLICY);
        drop(throttle.admit_all(&[GLOBAL, INGEST, RETRIEVAL]));
    }

    #[test]
    fn none_and_duplicate_budgets_are_skipped() {
        let throttle = Throttle::new(&POLICY);
        let set = throttle.budget_set(&[Some(RETRIEVAL), None, Some(INGEST), Some(RETRIEVAL)]);
        assert_eq!(set.iter().collect::<Vec<_>>(), [INGEST, RETRIEVAL]);
    }

    #[test]
    fn a_limit_near_u32_max_neither_overflows_nor_reserves_it() {
        let unpaced: &'static ThrottlePolicy = Box::leak(Box::new(ThrottlePolicy {
            per_second: u32::MAX,
            ..POLICY.clone()
        }));
        let throttle = Throttle::new(unpaced);
        let windows = throttle.lock_windows();
        let window = &windows.second.window;
        // burst (8) + u32::MAX - 1 saturates instead of wrapping to 6.
        assert_eq!(window.limit(), u32::MAX as usize);
        assert!(window.log_capacity() <= 1024);
    }
}
