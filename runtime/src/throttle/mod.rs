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

use std::collections::VecDeque;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use sdk_policy::policy::ThrottlePolicy;

mod semaphore;

use semaphore::Semaphore;

/// Nanoseconds since a throttle was built, on tokio time (so paused-time
/// tests drive every stage). Each stage keeps its instants as these plain
/// integers: a check is a comparison and a release an addition, where an
/// `Instant` costs a carry-checked seconds-and-nanoseconds pair per step.
type Tick = u64;

fn ticks(d: Duration) -> Tick {
    d.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(d.subsec_nanos()))
}

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
/// hold against a gateway that counts per rolling minute.
///
/// Expiries are rounded up to the millisecond, the resolution of tokio's
/// timers (a slot counts a little longer, never shorter), so requests that
/// end in the same millisecond share one log entry: the log holds at most
/// `limit` entries and at most one per millisecond of `window`, however
/// large an override makes the limit.
#[derive(Debug)]
struct RollingWindow {
    limit: usize,
    window: Tick,
    /// Until when released requests count (their end + `window`) and how
    /// many, oldest first: expiry is a comparison, not a subtraction per
    /// check.
    log: VecDeque<Expiry>,
    /// Released requests in `log`.
    logged: usize,
    /// Admitted requests that have not ended yet.
    open: usize,
    /// The last instant a release joins the last entry of `log` at (its
    /// `until` less `window`), when there is one: such a release
    /// ([`release_at`](Self::release_at)) compares instants and needs no tick.
    joins_until: Option<Instant>,
}

/// Requests that stop counting against a window at `until`.
#[derive(Debug, Clone, Copy)]
struct Expiry {
    until: Tick,
    count: usize,
}

/// The grid expiries are rounded up to: a millisecond.
const EXPIRY_GRID: Tick = 1_000_000;

impl RollingWindow {
    /// A zero `limit` would block forever; it is treated as 1.
    fn new(limit: u32, window: Duration) -> Self {
        let limit = limit.max(1) as usize;
        Self {
            limit,
            window: ticks(window),
            // A huge limit (an override that means "unpaced") must not reserve it all.
            log: VecDeque::with_capacity(limit.min(1024)),
            logged: 0,
            open: 0,
            joins_until: None,
        }
    }

    /// An instantaneous request at `now` (admitted and ended at once), or how
    /// long until the next slot frees.
    #[cfg(test)]
    fn try_acquire(&mut self, now: Tick) -> Result<(), Duration> {
        self.acquire(now)?;
        self.release(now);
        Ok(())
    }

    /// Admits a request at `now`; [`release`](Self::release) it when it ends.
    fn acquire(&mut self, now: Tick) -> Result<(), Duration> {
        self.check(now)?;
        self.hold();
        Ok(())
    }

    /// Takes a slot a [`check`](Self::check) just found free.
    fn hold(&mut self) {
        self.open += 1;
    }

    /// Gives back the slot of an admitted request without counting it: it
    /// waits elsewhere before it is sent, and [`hold`](Self::hold)s again.
    fn unhold(&mut self) {
        self.open = self.open.saturating_sub(1);
    }

    /// The request admitted earlier ended at `now`.
    fn release(&mut self, now: Tick) {
        self.open = self.open.saturating_sub(1);
        // A window too long to add counts for as good as ever.
        let until = now.saturating_add(self.window);
        self.logged += 1;
        match self.log.back_mut() {
            // Within the millisecond the last entry was rounded up to.
            Some(last) if last.until >= until => last.count += 1,
            _ => self.log.push_back(Expiry {
                until: until.div_ceil(EXPIRY_GRID).saturating_mul(EXPIRY_GRID),
                count: 1,
            }),
        }
    }

    /// [`release`](Self::release) at `now`, an instant of `clock`: a release
    /// that joins the last entry (most do: they share its millisecond) only
    /// compares `now`, and `tick`, `now` in ticks, is computed at most once
    /// for all the windows a request ends in.
    #[inline]
    fn release_at(&mut self, now: Instant, tick: &mut Option<Tick>, clock: Clock) {
        if self.joins_until.is_some_and(|last| now <= last)
            && let Some(last) = self.log.back_mut()
        {
            last.count += 1;
            self.open = self.open.saturating_sub(1);
            self.logged += 1;
            return;
        }
        self.release_in_new_entry(now, tick, clock);
    }

    /// [`release_at`](Self::release_at) that needs the tick: out of line,
    /// so the common case stays small enough to inline.
    #[cold]
    #[inline(never)]
    fn release_in_new_entry(&mut self, now: Instant, tick: &mut Option<Tick>, clock: Clock) {
        self.release(*tick.get_or_insert_with(|| clock.tick_of(now)));
        self.joins_until = (self.log.back())
            .and_then(|last| clock.instant_of(last.until.checked_sub(self.window)?));
    }

    /// Whether a slot is free at `now`, without taking it. When every slot is
    /// held by an open request, none can free before a full `window`.
    fn check(&mut self, now: Tick) -> Result<(), Duration> {
        while let Some(&Expiry { until, count }) = self.log.front() {
            if until > now {
                break;
            }
            self.log.pop_front();
            self.logged -= count;
            if self.log.is_empty() {
                self.joins_until = None;
            }
        }
        if self.used() < self.limit {
            return Ok(());
        }
        Err(Duration::from_nanos(
            self.log
                .front()
                .map_or(self.window, |first| first.until - now),
        ))
    }

    /// Slots held at the last check: open requests and recent ones.
    fn used(&self) -> usize {
        self.open + self.logged
    }

    /// Counts at least `share`'s sends after every instant, its own slots
    /// included: where its own slots fall short, slots sent at `share`'s
    /// instants are added (each counted until a window after it). Rare (a
    /// replica going local counts its share of what the fleet sent), so the
    /// log is made again in order.
    fn seed(&mut self, share: &[Tick]) {
        let mut share = share.to_vec();
        share.sort_unstable_by(|a, b| b.cmp(a));
        // Its own slots, newest first, by the instant they count from (an
        // open request's from now on: newer than any of `share`).
        let mut own = (self.log.iter().rev())
            .map(|e| (e.until.saturating_sub(self.window), e.count))
            .peekable();
        let mut own_count = self.open;
        let mut added: Vec<Tick> = Vec::new();
        let mut i = 0;
        while let Some(&at) = share.get(i) {
            while share.get(i) == Some(&at) {
                i += 1;
            }
            while let Some((_, n)) = own.next_if(|&(from, _)| from >= at) {
                own_count += n;
            }
            let short = i.saturating_sub(own_count);
            added.resize(short.max(added.len()), at);
        }
        if added.is_empty() {
            return;
        }
        let mut log: Vec<Expiry> = self.log.drain(..).collect();
        log.extend(added.iter().map(|&at| {
            Expiry {
                until: (at.saturating_add(self.window))
                    .div_ceil(EXPIRY_GRID)
                    .saturating_mul(EXPIRY_GRID),
                count: 1,
            }
        }));
        log.sort_by_key(|e| e.until);
        for entry in log {
            match self.log.back_mut() {
                Some(last) if last.until == entry.until => last.count += entry.count,
                _ => self.log.push_back(entry),
            }
        }
        self.logged += added.len();
        self.joins_until = None;
    }

    /// A new limit (a replica's share while the fleet is degraded); slots
    /// already held count against it.
    fn set_limit(&mut self, limit: u32) {
        self.limit = limit.max(1) as usize;
    }
}

/// The token bucket as a GCRA, the algorithm governor implements: one
/// token every `interval`, up to `burst` at once. It lives under the rolling
/// second's lock, so both decide at the same instant and neither is taken
/// unless both are free; a bucket of its own (an atomic, a clock of its own)
/// would only repeat what that lock already gives.
#[derive(Debug)]
struct TokenBucket {
    interval: Tick,
    /// How far ahead of now the next token may be promised: `burst - 1`
    /// intervals.
    tolerance: Tick,
    /// The theoretical arrival time of the next token.
    tat: Tick,
}

impl TokenBucket {
    fn new(period: Duration, burst: u32) -> Self {
        let interval = ticks(period).max(1);
        Self {
            interval,
            tolerance: interval.saturating_mul(u64::from(burst.max(1) - 1)),
            tat: 0,
        }
    }

    /// Whether a token is free at `now`, or how long until one is.
    fn check(&self, now: Tick) -> Result<(), Duration> {
        let earliest = self.tat.saturating_sub(self.tolerance);
        if now < earliest {
            return Err(Duration::from_nanos(earliest - now));
        }
        Ok(())
    }

    /// Takes the token a [`check`](Self::check) at `now` just found free.
    fn take(&mut self, now: Tick) {
        self.tat = self.tat.max(now).saturating_add(self.interval);
    }
}

/// The rolling second and the token bucket every request passes.
#[derive(Debug)]
struct Second {
    window: RollingWindow,
    bucket: TokenBucket,
}

impl Second {
    /// A token and a slot of the rolling second, both at `now`: neither is
    /// taken unless both are free.
    #[inline]
    fn try_token(&mut self, now: Tick) -> Result<(), Duration> {
        self.window.check(now)?;
        self.bucket.check(now)?;
        self.bucket.take(now);
        self.window.hold();
        Ok(())
    }
}

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

/// A FIFO queue in front of a paced window (a budget's, or the rolling
/// second with the bucket): only the caller holding the turn tests the
/// window, sleeping until the pace allows, and everyone behind it keeps
/// their place. Without it every waiter slept on its own and retried: they
/// woke together and raced (on two worker threads, in any order), and a
/// timer fires on the millisecond tick after the slot frees, so a newcomer
/// in that gap took the slot first. The semaphore is fair, so its single
/// permit is the queue. A caller who finds nobody queued tests the window at
/// once without taking the turn.
#[derive(Debug)]
struct Queue {
    turn: Semaphore,
}

impl Queue {
    fn new() -> Self {
        Self {
            turn: Semaphore::new(1),
        }
    }

    /// Nobody holds or waits for the turn (waiters are handed the permit
    /// directly, so it is never free while anyone waits).
    fn is_empty(&self) -> bool {
        self.turn.available() > 0
    }

    /// Waits for the turn.
    async fn turn(&self) -> Turn<'_> {
        self.turn.acquire().await;
        Turn(&self.turn)
    }
}

/// The turn of a [`Queue`], passed on to the next in line on drop.
struct Turn<'a>(&'a Semaphore);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// Waits at the head of the queue(s) until `attempt` passes at the current
/// instant, sleeping as long as it says; `attempt` takes what it needs only
/// when everything it needs is free.
async fn when_paced(clock: Clock, mut attempt: impl FnMut(Tick) -> Result<(), Duration>) {
    loop {
        match attempt(clock.now()) {
            Ok(()) => return,
            Err(wait) => tokio::time::sleep(wait).await,
        }
    }
}

/// The throttle's time: [`Tick`]s from the instant it was built.
#[derive(Debug, Clone, Copy)]
struct Clock {
    origin: Instant,
}

impl Clock {
    fn now(self) -> Tick {
        self.tick_of(Instant::now())
    }

    fn tick_of(self, at: Instant) -> Tick {
        ticks(at.saturating_duration_since(self.origin))
    }

    /// The instant of `tick`, if it is one.
    fn instant_of(self, tick: Tick) -> Option<Instant> {
        self.origin.checked_add(Duration::from_nanos(tick))
    }
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

/// At most this many distinct budgets per request: the route's and a
/// caller's mode (a backfill).
pub const MAX_BUDGETS: usize = 2;

/// The distinct budgets of one request, without an allocation: in index
/// order (semaphores) and tightest window first (windows).
#[derive(Debug, Clone, Copy)]
struct BudgetSet {
    ids: [usize; MAX_BUDGETS],
    by_tightness: [usize; MAX_BUDGETS],
    len: usize,
}

impl BudgetSet {
    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.ids[..self.len].iter().copied()
    }

    fn by_tightness(&self) -> impl Iterator<Item = usize> + '_ {
        self.by_tightness[..self.len].iter().copied()
    }
}

/// The first admission stage a request could not pass at once.
#[derive(Debug, Clone, Copy)]
enum Stage {
    /// The window of the n-th budget, tightest first.
    Window(usize),
    /// The semaphore of the n-th budget, in index order.
    Budget(usize),
    Token,
    Global,
    Done,
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

/// Admission to send one request; dropping it (the request ended) frees the
/// concurrency slots and starts the end of its rolling-window slots.
///
/// A request cancelled while it waits (a deadline) drops what it has taken
/// so far the same way.
#[derive(Debug)]
pub struct Permit<'a> {
    throttle: &'a Throttle,
    slots: Slots,
}

/// The slots one request holds, as flags and budget indices: a permit is a
/// few words, moved without a copy of a semaphore permit per stage, and its
/// drop and [`Throttle::give_back`] free them the same way.
#[derive(Debug, Clone, Copy, Default)]
struct Slots {
    /// The windows (positions in [`Windows::budgets`]) whose slot is held.
    windows: [Option<u8>; MAX_BUDGETS],
    per_period: bool,
    /// The budgets whose semaphore permit is held.
    semaphores: [Option<u8>; MAX_BUDGETS],
    global: bool,
}

/// A budget index as [`Slots`] keeps it (the policy has far fewer than 256).
fn slot(budget: usize) -> u8 {
    u8::try_from(budget).expect("fewer than 256 budgets")
}

/// What a [`Permit`] holds, detached from the borrow of its throttle, for a
/// request that outlives the call that admitted it (an open stream). Give it
/// back with [`Throttle::give_back`]; dropped without, its slots stay taken.
#[derive(Debug)]
#[must_use = "held slots are only freed by Throttle::give_back"]
pub struct HeldSlots {
    slots: Slots,
}

impl Permit<'_> {
    /// The slots of this permit, to be given back later with
    /// [`Throttle::give_back`] on the same throttle.
    pub fn detach(mut self) -> HeldSlots {
        HeldSlots {
            slots: std::mem::take(&mut self.slots),
        }
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.throttle.release(self.slots);
    }
}

/// Rolling-window slots given back by [`Throttle::leave_windows`]. Dropped
/// before [`retake`](Self::retake) took them all again (the wait was
/// cancelled), those still left are held again, so the request's permit
/// gives back what it holds.
#[derive(Debug)]
pub struct WindowsLeft<'a> {
    throttle: &'a Throttle,
    set: BudgetSet,
    /// The budgets' windows left (positions in [`Windows::budgets`]), by
    /// the set's tightness order.
    windows: [Option<u8>; MAX_BUDGETS],
    second: bool,
}

impl WindowsLeft<'_> {
    /// Waits for a slot of each window again, in its queue, then for a
    /// token and a slot of the rolling second.
    pub async fn retake(mut self) {
        let throttle = self.throttle;
        for (i, budget) in self.set.by_tightness().enumerate() {
            let (Some(at), Some(window)) = (self.windows[i], &throttle.lanes[budget].window) else {
                continue;
            };
            let attempt = |now| throttle.lock_windows().budgets[usize::from(at)].acquire(now);
            if !(window.queue.is_empty() && attempt(throttle.clock.now()).is_ok()) {
                let _turn = window.queue.turn().await;
                when_paced(throttle.clock, attempt).await;
            }
            self.windows[i] = None;
        }
        throttle.take_token().await;
        self.second = false;
    }
}

impl Drop for WindowsLeft<'_> {
    fn drop(&mut self) {
        let mut windows = self.throttle.lock_windows();
        for &at in self.windows.iter().flatten() {
            windows.budgets[usize::from(at)].hold();
        }
        if self.second {
            windows.second.window.hold();
        }
    }
}

/// The wait for the stages an admission could not pass at once.
type Waiting<'a> = Pin<Box<dyn Future<Output = Permit<'a>> + Send + 'a>>;

/// The future of [`Throttle::admit_all`]: it passes the free stages when
/// first polled, and waits for the others only if one is not.
#[must_use = "a future does nothing unless polled"]
pub struct Admit<'a> {
    throttle: &'a Throttle,
    state: AdmitState<'a>,
}

enum AdmitState<'a> {
    Start(BudgetSet),
    Waiting(Waiting<'a>),
    Done,
}

impl std::fmt::Debug for Admit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let waiting = matches!(self.state, AdmitState::Waiting(_));
        f.debug_struct("Admit").field("waiting", &waiting).finish()
    }
}

impl<'a> Future for Admit<'a> {
    type Output = Permit<'a>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Permit<'a>> {
        let this = self.get_mut();
        if let AdmitState::Start(set) = this.state {
            match this.throttle.admit_now(set) {
                Ok(permit) => {
                    this.state = AdmitState::Done;
                    return Poll::Ready(permit);
                }
                Err(waiting) => this.state = AdmitState::Waiting(waiting),
            }
        }
        match &mut this.state {
            AdmitState::Waiting(waiting) => waiting.as_mut().poll(cx),
            AdmitState::Start(_) | AdmitState::Done => panic!("Admit polled after it was ready"),
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

    /// Frees what a detached permit held, as dropping the permit would have.
    pub fn give_back(&self, held: HeldSlots) {
        self.release(held.slots);
    }

    fn lock_windows(&self) -> MutexGuard<'_, Windows> {
        self.windows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Frees `slots`: the windows' (ending their requests now, under one
    /// lock), then the semaphores'.
    fn release(&self, slots: Slots) {
        if slots.per_period || slots.windows.iter().any(Option::is_some) {
            let now = Instant::now();
            let mut tick = None;
            let mut windows = self.lock_windows();
            for &at in slots.windows.iter().flatten() {
                windows.budgets[usize::from(at)].release_at(now, &mut tick, self.clock);
            }
            if slots.per_period {
                windows.second.window.release_at(now, &mut tick, self.clock);
            }
        }
        for &budget in slots.semaphores.iter().flatten() {
            if let Some(semaphore) = &self.lanes[usize::from(budget)].semaphore {
                semaphore.release();
            }
        }
        if slots.global {
            self.global.release();
        }
    }

    /// Waits until a request of `budget` (an index into `policy.budgets`) may
    /// be sent. See [`admit_all`](Self::admit_all).
    pub fn admit(&self, budget: usize) -> Admit<'_> {
        self.admit_all(&[budget])
    }

    /// Waits until a request drawing from every one of `budgets` may be sent
    /// (a route's own budget, and a caller's mode such as a bulk backfill).
    /// `None` entries are skipped, so `&[Some(route), mode]` needs no
    /// collecting; duplicates count once.
    ///
    /// The stages, each a FIFO queue: the budgets' rolling windows, then
    /// their semaphores (one queue per budget: a retrieval backlog waits
    /// without holding anything another route needs), then the token bucket
    /// and its rolling second (one queue for all, as every request needs a
    /// token), then the global semaphore. Budget slots come before the
    /// global one, so a saturated budget (ingest) queues without occupying
    /// global slots, and a request waiting for a window or a token holds no
    /// global slot; one waiting for a window holds no budget semaphore
    /// either. Window slots are taken when their stage passes: a request
    /// still waiting for a later stage already counts against its windows,
    /// which only makes the bound stricter.
    ///
    /// # Panics
    /// If a budget is out of range, or more than [`MAX_BUDGETS`] distinct
    /// budgets are given: the pipeline checks descriptors against the policy
    /// before it gets here.
    pub fn admit_all<B>(&self, budgets: &[B]) -> Admit<'_>
    where
        B: Into<Option<usize>> + Copy,
    {
        Admit {
            throttle: self,
            state: AdmitState::Start(self.budget_set(budgets)),
        }
    }

    /// [`admit_all`](Self::admit_all) at once: the permit when every stage
    /// is free and nobody queues for it, else the wait for the rest, holding
    /// what was free (as the future would, polled once).
    pub fn try_admit_all<B>(&self, budgets: &[B]) -> Result<Permit<'_>, Admit<'_>>
    where
        B: Into<Option<usize>> + Copy,
    {
        self.admit_now(self.budget_set(budgets))
            .map_err(|waiting| Admit {
                throttle: self,
                state: AdmitState::Waiting(waiting),
            })
    }

    /// The free stages now, and the wait for the others.
    fn admit_now(&self, set: BudgetSet) -> Result<Permit<'_>, Waiting<'_>> {
        let mut permit = Permit {
            throttle: self,
            slots: Slots::default(),
        };
        match self.pass_free_stages(set, &mut permit.slots) {
            Stage::Done => Ok(permit),
            stage => Err(self.waiting(set, permit, stage)),
        }
    }

    /// Waiting is the rare case: its larger state goes on the heap, so the
    /// uncontended future stays small, and out of line.
    #[cold]
    #[inline(never)]
    fn waiting<'a>(&'a self, set: BudgetSet, permit: Permit<'a>, from: Stage) -> Waiting<'a> {
        Box::pin(self.wait_stages(set, permit, from))
    }

    fn budget_set<B: Into<Option<usize>> + Copy>(&self, budgets: &[B]) -> BudgetSet {
        let in_range = |budget: usize| {
            assert!(
                budget < self.lanes.len(),
                "budget index {budget} out of range ({} budgets)",
                self.lanes.len()
            );
        };
        // One budget, the common case (a route with no caller's mode).
        if let [one] = budgets
            && let Some(budget) = (*one).into()
        {
            in_range(budget);
            return BudgetSet {
                ids: [budget; MAX_BUDGETS],
                by_tightness: [budget; MAX_BUDGETS],
                len: 1,
            };
        }
        let mut set = BudgetSet {
            ids: [0; MAX_BUDGETS],
            by_tightness: [0; MAX_BUDGETS],
            len: 0,
        };
        for budget in budgets.iter().filter_map(|&b| b.into()) {
            in_range(budget);
            if set.iter().any(|b| b == budget) {
                continue;
            }
            assert!(
                set.len < MAX_BUDGETS,
                "more than {MAX_BUDGETS} budgets for one request"
            );
            set.ids[set.len] = budget;
            set.len += 1;
        }
        // Index order: every caller takes the semaphores in one order.
        if set.len == 2 && set.ids[1] < set.ids[0] {
            set.ids.swap(0, 1);
        }
        set.by_tightness = set.ids;
        let tightness = |b: usize| (self.policy.budgets[b].per_minute, b);
        if set.len == 2 && tightness(set.ids[1]) < tightness(set.ids[0]) {
            set.by_tightness.swap(0, 1);
        }
        set
    }

    /// Takes every stage that is free now and nobody queues for, in order;
    /// returns the first one that is not.
    /// The stages decide at one instant, read once, and the windows under
    /// one lock, taken once.
    fn pass_free_stages(&self, set: BudgetSet, slots: &mut Slots) -> Stage {
        let now = self.clock.now();
        let mut windows = self.lock_windows();
        for (i, budget) in set.by_tightness().enumerate() {
            if let Some(window) = &self.lanes[budget].window {
                let at = usize::from(window.at);
                if !(window.queue.is_empty() && windows.budgets[at].acquire(now).is_ok()) {
                    return Stage::Window(i);
                }
                slots.windows[i] = Some(window.at);
            }
        }
        for (i, budget) in set.iter().enumerate() {
            if let Some(semaphore) = &self.lanes[budget].semaphore {
                // A free permit means nobody waits: waiters are handed theirs.
                if !semaphore.try_acquire() {
                    return Stage::Budget(i);
                }
                slots.semaphores[i] = Some(slot(budget));
            }
        }
        if !(self.per_period.is_empty() && windows.second.try_token(now).is_ok()) {
            return Stage::Token;
        }
        drop(windows);
        slots.per_period = true;
        if !self.global.try_acquire() {
            return Stage::Global;
        }
        slots.global = true;
        Stage::Done
    }

    /// Queues for the stages from `from` on.
    async fn wait_stages<'a>(
        &'a self,
        set: BudgetSet,
        mut permit: Permit<'a>,
        from: Stage,
    ) -> Permit<'a> {
        let (windows_from, budgets_from, token) = match from {
            Stage::Window(i) => (i, 0, true),
            Stage::Budget(i) => (MAX_BUDGETS, i, true),
            Stage::Token => (MAX_BUDGETS, MAX_BUDGETS, true),
            Stage::Global | Stage::Done => (MAX_BUDGETS, MAX_BUDGETS, false),
        };
        self.take_windows(set, windows_from, &mut permit.slots.windows)
            .await;
        // Each permit is counted in the slots as it is taken, with no await
        // between: a cancelled wait frees exactly what it held.
        for (i, budget) in set.iter().enumerate().skip(budgets_from) {
            if let Some(semaphore) = &self.lanes[budget].semaphore {
                semaphore.acquire().await;
                permit.slots.semaphores[i] = Some(slot(budget));
            }
        }
        if token {
            self.take_token().await;
            permit.slots.per_period = true;
        }
        if !permit.slots.global {
            self.global.acquire().await;
            permit.slots.global = true;
        }
        permit
    }

    /// The budgets' rolling-window slots from the `from`-th on, each in its
    /// budget's FIFO queue. With two windows the tighter one comes first,
    /// and each slot is taken and its queue left before the next is joined:
    /// a backfill-mode search waits for the backfill window holding nothing
    /// retrieval needs, and no request ever waits in one queue while
    /// heading another.
    async fn take_windows(
        &self,
        set: BudgetSet,
        from: usize,
        taken: &mut [Option<u8>; MAX_BUDGETS],
    ) {
        for (i, budget) in set.by_tightness().enumerate().skip(from) {
            let Some(window) = &self.lanes[budget].window else {
                continue;
            };
            let at = usize::from(window.at);
            let attempt = |now| self.lock_windows().budgets[at].acquire(now);
            if !(window.queue.is_empty() && attempt(self.clock.now()).is_ok()) {
                let _turn = window.queue.turn().await;
                when_paced(self.clock, attempt).await;
            }
            taken[i] = Some(window.at);
        }
    }

    /// A bucket token and a slot of the rolling second, in the one FIFO
    /// queue every request passes.
    async fn take_token(&self) {
        let attempt = |now| self.lock_windows().second.try_token(now);
        if self.per_period.is_empty() && attempt(self.clock.now()).is_ok() {
            return;
        }
        let _turn = self.per_period.turn().await;
        when_paced(self.clock, attempt).await;
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

    /// Makes this throttle's rolling windows count at least `second`'s
    /// sends after every instant (the rolling second), and each budget's
    /// its window, their own slots included: a replica going local counts
    /// its share of what the fleet sent, not its own sends alone.
    pub fn seed_windows(&self, second: &[Instant], budgets: &[(usize, Vec<Instant>)]) {
        let clock = self.clock;
        let ticks = |sends: &[Instant]| -> Vec<Tick> {
            sends.iter().map(|&at| clock.tick_of(at)).collect()
        };
        let mut windows = self.lock_windows();
        windows.second.window.seed(&ticks(second));
        for (budget, sends) in budgets {
            let lane = self.lanes.get(*budget).and_then(|l| l.window.as_ref());
            if let Some(window) = lane {
                windows.budgets[usize::from(window.at)].seed(&ticks(sends));
            }
        }
    }

    /// Lets a request admitted with `budgets` wait outside its rolling
    /// windows: its slots of the budgets' windows and of the rolling second
    /// are given back uncounted until [`WindowsLeft::retake`] takes them
    /// again, each in its queue. A request that waits for something else
    /// after this throttle (the fleet's degraded in-flight share) so holds
    /// no slot another could send in, and one admitted against other limits
    /// (before the switch to a degraded share) goes within the new ones.
    pub fn leave_windows(&self, budgets: &[usize]) -> WindowsLeft<'_> {
        let set = self.budget_set(budgets);
        let mut left = [None; MAX_BUDGETS];
        let mut windows = self.lock_windows();
        for (i, budget) in set.by_tightness().enumerate() {
            if let Some(window) = &self.lanes[budget].window {
                windows.budgets[usize::from(window.at)].unhold();
                left[i] = Some(window.at);
            }
        }
        windows.second.window.unhold();
        WindowsLeft {
            throttle: self,
            set,
            windows: left,
            second: true,
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
        assert_eq!(throttle.lock_windows().second.window.open, 8);
        drop(held);
        assert_eq!(throttle.lock_windows().second.window.open, 0);
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
        assert_eq!(throttle.lock_windows().second.window.open, 0);
        // A wait cancelled after leaving holds the slot again, for its
        // permit to give back.
        let third = throttle.admit(GLOBAL).await;
        drop(throttle.leave_windows(&[GLOBAL]));
        assert_eq!(throttle.lock_windows().second.window.open, 1);
        drop(third);
        assert_eq!(throttle.lock_windows().second.window.open, 0);
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
        throttle.seed_windows(&[], &[(RETRIEVAL, share.to_vec())]);
        // Since 6 s ago: the share's one (its own none: one added). Since
        // 11 s ago: its own one and that. Since 26 s ago: the share's four
        // (its own one, three added). In all, its own two and three added.
        let used = |at: Instant| {
            let tick = throttle.clock.tick_of(at) + ticks(MINUTE);
            throttle.window_of(RETRIEVAL, |w| {
                (w.log.iter())
                    .filter(|e| e.until > tick)
                    .map(|e| e.count)
                    .sum::<usize>()
            })
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
        throttle.seed_windows(&[], &[(RETRIEVAL, vec![now, now])]);
        assert_eq!(throttle.window_of(RETRIEVAL, |w| w.used()), 2);
        let left = throttle.leave_windows(&[RETRIEVAL]);
        assert_eq!(throttle.window_of(RETRIEVAL, |w| w.open), 0);
        let started = Instant::now();
        left.retake().await;
        // It goes once the fleet's call leaves the minute.
        assert!(started.elapsed() >= MINUTE - Duration::from_millis(1));
        drop(slow);
        assert_eq!(throttle.window_of(RETRIEVAL, |w| w.open), 0);
        assert_eq!(throttle.lock_windows().second.window.open, 0);
        // Cancelled while it waits: its slots are held again, for its permit.
        let other = throttle.admit(RETRIEVAL).await;
        let now = Instant::now();
        throttle.seed_windows(&[], &[(RETRIEVAL, vec![now, now])]);
        {
            let left = throttle.leave_windows(&[RETRIEVAL]);
            assert!(left.retake().now_or_never().is_none(), "the minute is full");
        }
        assert_eq!(throttle.window_of(RETRIEVAL, |w| w.open), 1);
        assert_eq!(throttle.lock_windows().second.window.open, 1);
        drop(other);
        assert_eq!(throttle.window_of(RETRIEVAL, |w| w.open), 0);
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
    fn an_open_request_holds_its_slot_until_a_window_after_it_ends() {
        let s = Duration::from_secs;
        let t0: Tick = 0;
        let mut window = RollingWindow::new(2, MINUTE);
        window.acquire(t0).unwrap();
        window.acquire(t0).unwrap();
        // Both still open: no slot can free before a full window.
        assert_eq!(window.check(ticks(s(90))), Err(MINUTE));
        window.release(ticks(s(100)));
        assert_eq!(window.check(ticks(s(130))), Err(s(30)));
        assert_eq!(window.acquire(ticks(s(160))), Ok(()));
        assert_eq!(window.used(), 2);
    }

    #[test]
    fn rolling_window_admits_exactly_limit() {
        let t0: Tick = 0;
        let mut window = RollingWindow::new(3, MINUTE);
        for _ in 0..3 {
            assert_eq!(window.try_acquire(t0), Ok(()));
        }
        assert_eq!(window.try_acquire(t0), Err(MINUTE));
        assert_eq!(window.used(), 3);
    }

    #[test]
    fn rolling_window_reports_exact_wait() {
        let t0: Tick = 0;
        let s = Duration::from_secs;
        let mut window = RollingWindow::new(3, MINUTE);
        for at in [0, 10, 20] {
            assert_eq!(window.try_acquire(t0 + ticks(s(at))), Ok(()));
        }
        assert_eq!(window.try_acquire(ticks(s(30))), Err(s(30)));
        let almost = ticks(MINUTE - Duration::from_millis(1));
        assert_eq!(window.try_acquire(almost), Err(Duration::from_millis(1)));
        assert_eq!(window.check(ticks(s(59))), Err(s(1)));
    }

    #[test]
    fn rolling_window_frees_slots_as_time_slides() {
        let t0: Tick = 0;
        let s = Duration::from_secs;
        let mut window = RollingWindow::new(3, MINUTE);
        for at in [0, 10, 20] {
            window.try_acquire(t0 + ticks(s(at))).unwrap();
        }
        // The first slot frees at exactly t0 + 60 s (half-open window).
        assert_eq!(window.try_acquire(ticks(s(60))), Ok(()));
        assert_eq!(window.try_acquire(ticks(s(60))), Err(s(10)));
        assert_eq!(window.try_acquire(ticks(s(70))), Ok(()));
        assert_eq!(window.try_acquire(ticks(s(80))), Ok(()));
        assert_eq!(window.try_acquire(ticks(s(80))), Err(s(40)));
        // A long pause frees everything.
        for _ in 0..3 {
            assert_eq!(window.try_acquire(ticks(s(500))), Ok(()));
        }
        assert_eq!(window.try_acquire(ticks(s(500))), Err(MINUTE));
    }

    #[test]
    fn requests_ending_in_one_millisecond_share_a_log_entry() {
        let mut window = RollingWindow::new(u32::MAX, MINUTE);
        let us = |n: u64| ticks(Duration::from_micros(n));
        // 10 000 requests over 5 ms: five entries, every request still counted.
        for i in 0..10_000 {
            window.try_acquire(us(1 + i / 2)).unwrap();
        }
        assert_eq!(window.used(), 10_000);
        assert_eq!(window.log.len(), 5);
        // The first millisecond's 2 000 expire together, a minute after it ends.
        assert_eq!(window.check(ticks(MINUTE) + us(999)), Ok(()));
        assert_eq!(window.used(), 10_000);
        assert_eq!(window.check(ticks(MINUTE) + us(1000)), Ok(()));
        assert_eq!(window.used(), 8_000);
    }

    #[test]
    fn a_release_by_instant_logs_what_one_by_tick_does() {
        let clock = Clock {
            origin: Instant::now(),
        };
        let mut by_tick = RollingWindow::new(u32::MAX, Duration::from_millis(1500));
        let mut by_instant = RollingWindow::new(u32::MAX, Duration::from_millis(1500));
        let ns = |n: u64| Duration::from_nanos(n);
        // Around millisecond edges: before, on and after them, and long gaps
        // that expire the whole log between two releases.
        let (mut at, mut longest) = (0, 0);
        for step in [
            1,
            999_998,
            1,
            1,
            1,
            500_000,
            499_999,
            1,
            3_000_000_001,
            7,
            1_000_000,
        ] {
            at += step;
            for window in [&mut by_tick, &mut by_instant] {
                window.acquire(at).unwrap();
            }
            by_tick.release(at);
            by_instant.release_at(clock.origin + ns(at), &mut None, clock);
            let log =
                |w: &RollingWindow| w.log.iter().map(|e| (e.until, e.count)).collect::<Vec<_>>();
            assert_eq!(log(&by_instant), log(&by_tick), "at {at} ns");
            assert_eq!(by_instant.used(), by_tick.used());
            longest = longest.max(by_tick.log.len());
        }
        assert!(longest >= 3, "the steps never left a millisecond");
    }

    #[test]
    fn an_expiry_is_rounded_up_to_the_millisecond_never_down() {
        let mut window = RollingWindow::new(1, MINUTE);
        let half = ticks(Duration::from_micros(500));
        window.try_acquire(half).unwrap();
        // Released at 0.5 ms, it counts until 60.001 s: half a millisecond longer.
        let at = ticks(MINUTE) + half;
        assert_eq!(window.check(at), Err(Duration::from_micros(500)));
        assert_eq!(window.check(at + half), Ok(()));
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
        assert_eq!(window.limit, u32::MAX as usize);
        assert!(window.log.capacity() <= 1024);
    }

    #[test]
    fn zero_limit_is_treated_as_one() {
        let t0: Tick = 0;
        let mut window = RollingWindow::new(0, MINUTE);
        assert_eq!(window.try_acquire(t0), Ok(()));
        assert_eq!(window.try_acquire(t0), Err(MINUTE));
        assert_eq!(window.limit, 1);
    }
}
