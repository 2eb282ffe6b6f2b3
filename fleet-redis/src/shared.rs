//! The fleet stage of admission: the store's answer, the leases a replica
//! holds (renewed with its heartbeat), and degraded mode. Here the asking;
//! beside it the store's health and the mode switch (`store_health`), the
//! shares while degraded (`degraded`), the leases' return and rebooking
//! (`leases`) and the background task (`heartbeat`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use sdk_policy::Endpoint;
use sdk_policy::RowIx;
use sdk_policy::policy::{BudgetIx, Degraded, FleetPolicy, Policy, ThrottlePolicy};
use sdk_runtime::alerts::{AlertSink, LogAlerts};
use sdk_runtime::fleet::{
    DarkMark, Fleet, FleetAsk, FleetFuture, FleetMetrics, FleetSetup, FleetSlots, FleetStatus,
    LocalWindows, MAX_BUDGETS, Positions, Refusal, Turn, TurnTimes,
};

use crate::store::{Answer, Ask, Keys, LeaseSet, Shape, Store};
use crate::{Glimpse, Rates, StoreBreaker};

mod degraded;
mod heartbeat;
mod leases;
mod store_health;

use leases::Sent;

/// The fleet's side of one admitted request: its leases in the store, or
/// its slots of the degraded share. Dropping it (the request ended, or its
/// caller gave up) gives them back.
#[derive(Debug)]
struct Slots {
    held: Held,
}

#[derive(Debug)]
enum Held {
    Leases {
        fleet: Arc<Inner>,
        number: u64,
        sets: Vec<Option<usize>>,
    },
    Local(#[allow(dead_code)] Vec<OwnedSemaphorePermit>),
    /// The degraded share's permits, and the booking of the same request in
    /// the store, whose leases are given back (in the background, outside
    /// the breaker) once this is dropped.
    Booked {
        _ended: tokio::sync::oneshot::Sender<()>,
        _permits: Vec<OwnedSemaphorePermit>,
    },
}

impl Drop for Slots {
    fn drop(&mut self) {
        match &mut self.held {
            Held::Leases {
                fleet,
                number,
                sets,
            } => {
                fleet.lock_held().remove(number);
                fleet.lock_adopted().remove(number);
                // The next admission takes the member again (which ends
                // this lease), or the background task gives it back; if it
                // is gone, it expires within one lease.
                fleet.end(*number, std::mem::take(sets));
            }
            Held::Booked { .. } | Held::Local(_) => {}
        }
    }
}

/// Leases to give back: the admission's number and its lease sets.
type Release = (u64, Vec<LeaseSet>);

/// What one admission asks the store for: its lease sets (in-flight caps)
/// and its rolling windows, the fleet's budgets among its `budgets`.
struct Question {
    sets: [LeaseSet; MAX_BUDGETS + 1],
    n_sets: usize,
    windows: [usize; MAX_BUDGETS],
    n_windows: usize,
}

impl Question {
    fn of(inner: &Inner, budgets: &[usize]) -> Question {
        let mut question = Question {
            sets: [None; MAX_BUDGETS + 1],
            n_sets: 0,
            windows: [0; MAX_BUDGETS],
            n_windows: 0,
        };
        for &b in budgets {
            if inner.policy.per_replica.iter().any(|r| r.get() == b) {
                continue;
            }
            let budget = &inner.throttle.budgets[b];
            if budget.max_in_flight.is_some() {
                question.sets[question.n_sets] = Some(b);
                question.n_sets += 1;
            }
            if budget.per_minute.is_some() {
                question.windows[question.n_windows] = b;
                question.n_windows += 1;
            }
        }
        question.sets[question.n_sets] = None;
        question.n_sets += 1;
        question
    }

    fn sets(&self) -> &[LeaseSet] {
        &self.sets[..self.n_sets]
    }

    fn windows(&self) -> &[usize] {
        &self.windows[..self.n_windows]
    }

    /// The budgets of [`windows`](Self::windows) as the throttle names them.
    fn window_budgets(&self) -> Vec<BudgetIx> {
        self.windows()
            .iter()
            .map(|&b| BudgetIx::of_position(b))
            .collect()
    }
}

/// What an admission still has to reserve: its windows (one member, `slot`,
/// kept across its round trips) and its token, until an answer reserved
/// them for it.
struct Left<'a> {
    windows: &'a [usize],
    slot: String,
    reserved: bool,
    token: bool,
}

/// A slot at most this far ahead is taken with its leases, and the caller
/// sleeps the rest holding them: a caller back for its reserved slot finds
/// Redis's clock a little behind its own sleep, and one more round trip for
/// a few microseconds would cost more than it keeps.
const GRACE: Duration = Duration::from_millis(1);

/// An admission Redis runs this long (µs) after it was sent takes nothing:
/// its caller gave up at the store's deadline, and a frozen Redis must not
/// hand the slots of every call sent into it to callers long gone. Far
/// above a deadline and the error of the replica's reading of Redis's clock.
const STALE_AFTER_US: i64 = 100_000;

/// One API client's membership of the fleet. A client given a store URL
/// makes its own; [`RedisFleet::alone`](Self::alone) makes one without a client (the bench
/// measures the fleet stage by itself).
#[derive(Debug, Clone)]
pub struct RedisFleet {
    inner: Arc<Inner>,
}

struct Inner {
    policy: &'static FleetPolicy,
    /// The API's routes, by the positions the pipeline asks with.
    routes: &'static [&'static Endpoint],
    throttle: &'static ThrottlePolicy,
    store: Store,
    keys: Keys,
    /// This replica's id in the store (leases, heartbeat).
    replica: String,
    /// Every lease set and window of the fleet (the heartbeat's).
    sets: Vec<LeaseSet>,
    windows: Vec<usize>,
    next: AtomicU64,
    state: Mutex<State>,
    /// Leases taken and not given back: renewed with every heartbeat.
    held: Mutex<HashMap<u64, Vec<LeaseSet>>>,
    /// Leases whose request ended, not given back yet: the next admission
    /// takes one's member again (which ends it in Redis), the background
    /// task gives back the rest.
    ended: Mutex<Vec<Release>>,
    /// Wakes the background task when a lease ends.
    ending: Arc<Notify>,
    /// Wakes admissions sleeping for a slot Redis reserved when the
    /// replica goes local: what only Redis could release is not waited for.
    switched: Notify,
    /// The degraded shares' permits of requests sent under shared leases
    /// before the switch, by admission number: what the replica holds
    /// counts in its share, and comes back to it as each ends.
    adopted: Mutex<HashMap<u64, Vec<OwnedSemaphorePermit>>>,
    started: AtomicBool,
    /// The replica left the fleet ([`Fleet::leave`]): no heartbeat, and
    /// every lease that ends is given back at once.
    left: AtomicBool,
    /// Held by a heartbeat while it runs: a replica leaving waits for it,
    /// so no beat says it is live after it left.
    beating: tokio::sync::Mutex<()>,
    /// Bumped on every switch; the throttle's windows follow it.
    epoch: AtomicU64,
    /// The store's run this replica booked into (0: none yet).
    run: AtomicU64,
    /// The primary's moves this replica has claimed the state through.
    claimed: AtomicU64,
    /// One booking again at a time (see [`Inner::rebook`]).
    rebooking: tokio::sync::Mutex<()>,
    /// What this replica sent lately, for a Redis that lost it.
    sent: Mutex<Sent>,
    /// What the last heartbeat saw the fleet send, for this replica's
    /// windows when it goes local.
    glimpse: Mutex<Option<Glimpse>>,
    /// The fleet's bucket and windows (what a glimpse is read against).
    rates: Rates,
    applied: AtomicU64,
    metrics: Option<FleetMetrics>,
    alerts: Arc<dyn AlertSink>,
    /// The degraded alert's severity, from the policy's alert list.
    severity: &'static str,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("replica", &self.replica)
            .field("keys", &self.keys)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct State {
    breaker: StoreBreaker,
    /// The live replicas the last heartbeat saw.
    live: Vec<String>,
    /// The in-flight shares while degraded, by lease set.
    gates: Option<Vec<(Option<usize>, Arc<Semaphore>)>>,
    /// The longest a failed store call took.
    slowest_failure: Duration,
    /// When the store stopped answering, at the last switch to degraded.
    lost: Option<Instant>,
    /// When this replica last set its throttle to its degraded shares.
    went_local: Option<Instant>,
    /// The store answers, and admissions stay on the shares until then:
    /// the fleet settles after a lost state, or this replica's bookings
    /// bring the shared bucket up to its last rate period.
    local_until: Option<Instant>,
    /// Redis's clock (µs) at a local instant, read at the last heartbeat:
    /// what a booking says it was sent at.
    clock: Option<(Instant, i64)>,
    /// Admissions until then find no burst of the shared bucket free: the
    /// replica just came back from its share.
    calm_until: Option<Instant>,
    /// The live count when the replica went local: its shares are of at
    /// least as many until it shares again. A Redis that restarted empty
    /// (or a promoted replica) knows only the replicas that beat since, and
    /// the first one back would take the whole rate as its share.
    local_live: Option<usize>,
}

impl State {
    /// Admissions go on this replica's shares: the store is away, or back
    /// and not caught up yet.
    fn on_shares(&self) -> bool {
        self.breaker.degraded() || self.local_until.is_some()
    }

    /// On the shares until `until` at least.
    fn local_until_at_least(&mut self, until: Instant) {
        self.local_until = Some(self.local_until.map_or(until, |u| u.max(until)));
    }

    /// Redis's clock at `now` as this replica reckons it (µs; 0: unknown),
    /// from the last heartbeat's reading.
    fn redis_at(&self, now: Instant) -> i64 {
        self.clock.map_or(0, |(at, redis)| {
            let since = now.saturating_duration_since(at).as_micros();
            redis.saturating_add(i64::try_from(since).unwrap_or(i64::MAX))
        })
    }
}

/// What the store keeps of the fleet: its lease, the token bucket's pace
/// and burst, the fleet-wide caps and per-minute limits (the budgets the
/// policy keeps per replica left out), and how long its keys live.
fn shape(policy: &FleetPolicy, throttle: &ThrottlePolicy) -> Shape {
    let per_second = throttle.per_second.max(1);
    let burst = throttle.max_in_flight.min(per_second).max(1);
    let interval = throttle.rate_period / per_second;
    let fleet_wide = |b: usize| !policy.per_replica.iter().any(|r| r.get() == b);
    let mut caps = vec![(None, throttle.max_in_flight.max(1))];
    let mut limits = Vec::new();
    for (b, budget) in throttle.budgets.iter().enumerate() {
        if !fleet_wide(b) {
            continue;
        }
        if let Some(cap) = budget.max_in_flight {
            caps.push((Some(b), cap.max(1)));
        }
        if let Some(limit) = budget.per_minute {
            limits.push((b, limit.max(1)));
        }
    }
    Shape {
        lease: policy.lease,
        interval,
        burst,
        window: throttle.budget_period,
        period: throttle.rate_period,
        horizon: (interval * burst).max(policy.deadline * 4),
        grace: GRACE,
        caps,
        limits,
        // Every replica hears of a lost state (its breaker's retry and a
        // heartbeat), and the bucket fills with a rate period of sends.
        settle: (policy.breaker_retry + policy.heartbeat).max(throttle.rate_period),
    }
}

impl RedisFleet {
    /// A fleet member of the API's `tenant` under `whole` (its fleet section,
    /// throttle and alert severities), sharing through the Redis at `url`.
    /// A URL redis-rs cannot use is refused here; an unreachable Redis is
    /// found on the first call (degraded mode, with the alert).
    pub fn new(setup: FleetSetup) -> Result<RedisFleet, String> {
        let FleetSetup {
            tenant,
            url,
            policy: whole,
            metrics,
            alerts,
        } = setup;
        let policy: &'static FleetPolicy = whole
            .fleet
            .as_ref()
            .ok_or("the policy has no fleet section")?;
        let throttle = &whole.throttle;
        let severity = whole.severity(policy.alert).unwrap_or_default();
        let shape = shape(policy, throttle);
        let (interval, burst) = (shape.interval, shape.burst);
        let per_second = throttle.per_second.max(1);
        let sent = Sent::new(throttle.budget_period, &shape.limits);
        let store = Store::open(&url, policy.deadline, &shape)?;
        let fleet = RedisFleet {
            inner: Arc::new(Inner {
                policy,
                routes: whole.routes,
                throttle,
                store,
                keys: Keys::new(whole.api, &tenant),
                replica: uuid::Uuid::new_v4().simple().to_string(),
                sets: shape.caps.iter().map(|&(set, _)| set).collect(),
                windows: shape.limits.iter().map(|&(b, _)| b).collect(),
                next: AtomicU64::new(0),
                state: Mutex::new(State {
                    breaker: StoreBreaker::new(
                        policy.breaker_failures,
                        policy.breaker_over,
                        policy.breaker_retry,
                    ),
                    live: Vec::new(),
                    gates: None,
                    slowest_failure: Duration::ZERO,
                    lost: None,
                    went_local: None,
                    local_until: None,
                    clock: None,
                    calm_until: None,
                    local_live: None,
                }),
                held: Mutex::new(HashMap::new()),
                ended: Mutex::new(Vec::new()),
                ending: Arc::new(Notify::new()),
                switched: Notify::new(),
                adopted: Mutex::new(HashMap::new()),
                started: AtomicBool::new(false),
                left: AtomicBool::new(false),
                beating: tokio::sync::Mutex::new(()),
                epoch: AtomicU64::new(0),
                run: AtomicU64::new(0),
                claimed: AtomicU64::new(0),
                rebooking: tokio::sync::Mutex::new(()),
                sent: Mutex::new(sent),
                glimpse: Mutex::new(None),
                rates: Rates {
                    interval,
                    burst,
                    period: throttle.rate_period,
                    per_period: burst + per_second - 1,
                    window: throttle.budget_period,
                },
                applied: AtomicU64::new(0),
                metrics,
                alerts,
                severity,
            }),
        };
        if let Some(m) = &fleet.inner.metrics {
            m.mode(false, 1.0);
        }
        Ok(fleet)
    }

    /// A fleet member of `policy`'s API for `tenant` on the Redis at `url`,
    /// outside any client: no metrics, alerts logged.
    pub fn alone(tenant: &str, url: &str, policy: &'static Policy) -> Result<RedisFleet, String> {
        RedisFleet::new(FleetSetup {
            tenant: tenant.to_owned(),
            url: url.to_owned(),
            policy,
            metrics: None,
            alerts: Arc::new(LogAlerts::new(policy.log_lines)),
        })
    }

    /// Degraded: the store is away (its breaker is open).
    pub fn degraded(&self) -> bool {
        self.inner.lock_state().breaker.degraded()
    }

    /// The live replicas the last heartbeat counted (this one included once
    /// it has beaten).
    pub fn live_replicas(&self) -> usize {
        self.inner.lock_state().live.len()
    }

    /// Leases this replica holds in the store.
    pub fn leases_held(&self) -> usize {
        self.inner.lock_held().len()
    }

    /// The longest a failed store call took, from its start to its error.
    pub fn slowest_failed_call(&self) -> Duration {
        self.inner.lock_state().slowest_failure
    }

    /// The fleet stage of one request of `route` drawing from `budgets`
    /// (after the local throttle admitted it): one store round trip when
    /// its slot is free, two when it waits for it (the slot reserved in the
    /// first, the leases taken in the second).
    pub async fn admit(
        &self,
        throttle: &dyn LocalWindows,
        route: &str,
        budgets: &[usize],
    ) -> Result<FleetSlots, Refusal> {
        self.admit_slots(throttle, route, budgets)
            .await
            .map(FleetSlots::new)
    }

    async fn admit_slots(
        &self,
        throttle: &dyn LocalWindows,
        route: &str,
        budgets: &[usize],
    ) -> Result<Slots, Refusal> {
        let inner = &self.inner;
        inner.start();
        inner.store.ready().await;
        let question = Question::of(inner, budgets);
        let windows = question.windows();
        let mut left = Left {
            windows,
            slot: if windows.is_empty() {
                String::new()
            } else {
                inner.member(inner.next.fetch_add(1, Ordering::Relaxed))
            },
            reserved: false,
            token: true,
        };
        let started = Instant::now();
        let epoch = inner.epoch.load(Ordering::Acquire);
        loop {
            let local = inner.local();
            inner.follow_mode(throttle);
            // Degraded, no admission asks the store: the heartbeat tries it
            // again after the breaker's retry, so a Redis that refuses
            // connections costs no admission a wait.
            if local {
                let stale = inner.epoch.load(Ordering::Acquire) != epoch;
                match inner
                    .admit_degraded(throttle, &question, started, stale)
                    .await?
                {
                    Some(slots) => return Ok(slots),
                    None => continue,
                }
            }
            let asked = inner.ask(route, question.sets(), &mut left, started);
            if let Some(slots) = asked.await? {
                return Ok(slots);
            }
        }
    }

    /// Leaves the fleet, as a replica that stops does: its heartbeat ends,
    /// it is no longer counted live (the others' shares and caps adjust at
    /// once, not after a lease), and the leases it holds are given back
    /// now, those of calls still open as each ends. Without the store it
    /// just stops: its membership and leases expire within one lease.
    pub async fn leave(&self) {
        let inner = &self.inner;
        inner.left.store(true, Ordering::Release);
        inner.ending.notify_one();
        let _no_beat = inner.beating.lock().await;
        if !inner.store_allowed() {
            return;
        }
        inner.give_back().await;
        let called = Instant::now();
        let left = inner.store.leave(&inner.keys, &inner.replica).await;
        if inner.account(left, called).is_some() {
            inner.lock_state().live.retain(|id| *id != inner.replica);
        }
    }

    /// A `Retry-After` of `wait` this replica was told: every replica pauses
    /// until then (the longest pause wins). Sent in the background.
    pub fn pause(&self, wait: Duration) {
        let inner = Arc::clone(&self.inner);
        self.inner.spawn(async move {
            let called = Instant::now();
            let result = inner.store.pause(&inner.keys, wait).await;
            inner.account(result, called);
        });
    }

    /// A route answered dark (a stable answer remembered for `for_`): every
    /// replica fails fast on it for as long. `mark` is what they fail with.
    pub fn share_dark(&self, route: &'static str, mark: DarkMark, for_: Duration) {
        let inner = Arc::clone(&self.inner);
        let status = mark.status.map_or("-".to_string(), |s| s.to_string());
        let mark = format!("{} {status}", mark.row.get());
        self.inner.spawn(async move {
            let called = Instant::now();
            let result = inner.store.set_dark(&inner.keys, route, &mark, for_).await;
            inner.account(result, called);
        });
    }

    /// The breaker's probe or canary (`turn`), run by one replica at a time
    /// for the whole fleet. The replica holding the turn (for `times.hold`)
    /// runs `check` and shares what it saw for `times.fresh`; the others
    /// take that result, waiting for it up to `times.wait` (none by then:
    /// not healthy this round). Without the store every replica runs its own.
    pub async fn one_at_a_time(
        &self,
        turn: Turn,
        times: TurnTimes,
        check: impl Future<Output = bool>,
    ) -> bool {
        let TurnTimes { hold, fresh, wait } = times;
        let inner = &self.inner;
        if !inner.store_allowed() {
            return check.await;
        }
        let called = Instant::now();
        let owned = inner
            .store
            .own(&inner.keys, turn, &inner.replica, hold)
            .await;
        if inner.account(owned, called).unwrap_or(true) {
            let healthy = check.await;
            if inner.store_allowed() {
                let called = Instant::now();
                let shared = inner
                    .store
                    .set_result(&inner.keys, turn, healthy, fresh)
                    .await;
                inner.account(shared, called);
            }
            return healthy;
        }
        let until = crate::after(called, wait);
        loop {
            let called = Instant::now();
            let seen = inner.store.result(&inner.keys, turn).await;
            if let Some(seen) = inner.account(seen, called).flatten() {
                return seen.healthy;
            }
            if Instant::now() >= until || !inner.store_allowed() {
                return false;
            }
            tokio::time::sleep(inner.policy.deadline * RESULT_POLL_DEADLINES).await;
        }
    }

    /// How long ago (Redis time) a replica last saw `turn` healthy, while
    /// that is still fresh; `None` without the store.
    pub async fn healthy_since(&self, turn: Turn) -> Option<Duration> {
        let inner = &self.inner;
        if !inner.store_allowed() {
            return None;
        }
        let called = Instant::now();
        let seen = inner.store.result(&inner.keys, turn).await;
        let seen = inner.account(seen, called).flatten()?;
        seen.healthy.then_some(seen.age)
    }
}

/// A replica waiting for another's canary looks for its result every this
/// many store deadlines (50 ms at 5 ms): one GET each, while half-open only.
const RESULT_POLL_DEADLINES: u32 = 10;

impl Slots {
    /// The script took nothing (or will not be asked again with these
    /// leases): no release to send.
    fn forget_leases(&mut self) {
        if let Held::Leases { fleet, number, .. } = &self.held {
            fleet.lock_held().remove(number);
            fleet.lock_adopted().remove(number);
        }
        self.held = Held::Local(Vec::new());
    }
}

impl Inner {
    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One round trip: `Some` slots to send with, `None` to ask again
    /// (what is reserved already is struck from `left`). The lease member
    /// is that of a lease of this replica that ended, when one in no other
    /// sets is there: taking it again ends that lease in the same script.
    /// A round trip that fails leaves its member ended (it may have taken
    /// the lease before its answer was lost): given back later, never lost.
    async fn ask(
        self: &Arc<Self>,
        route: &str,
        leases: &[LeaseSet],
        left: &mut Left<'_>,
        started: Instant,
    ) -> Result<Option<Slots>, Refusal> {
        let number =
            (self.take_ended(leases)).unwrap_or_else(|| self.next.fetch_add(1, Ordering::Relaxed));
        let member = self.member(number);
        let (until, calm) = self.ask_times();
        let ask = Ask {
            route,
            member: &member,
            slot: &left.slot,
            leases,
            windows: left.windows,
            reserved: left.reserved,
            token: left.token,
            run: self.run.load(Ordering::Acquire),
            until,
            calm,
        };
        // Registered before the call: a caller cancelled mid-call still
        // gives back what the script may have taken.
        let sets = leases.to_vec();
        self.lock_held().insert(number, sets.clone());
        let mut slots = Slots {
            held: Held::Leases {
                fleet: Arc::clone(self),
                number,
                sets,
            },
        };
        let called = Instant::now();
        let answer = match self.store.admit(&self.keys, &ask).await {
            Ok(answer) => {
                self.succeeded(None);
                answer
            }
            Err(e) => {
                // `slots` dropped: what the call may have taken is given back.
                self.failed(&e, called);
                self.decision("redis", "error");
                return Ok(None);
            }
        };
        if let Answer::Go(wait) = answer {
            self.decision("redis", if wait.is_zero() { "go" } else { "go_later" });
            self.observe("redis", started);
            self.lock_sent()
                .record(left.windows, crate::after(Instant::now(), wait));
            // Not `sleep(0)`: a timer waits for the next tick of tokio's
            // 1 ms wheel, which would be most of an admission's cost.
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            return Ok(Some(slots));
        }
        // Nothing held (the script ended the member's lease): no release.
        slots.forget_leases();
        if let Answer::Run(run) = answer {
            self.decision("redis", "run");
            // Whatever this admission reserved was in the state now lost.
            (left.reserved, left.token) = (false, true);
            self.rebook(run).await;
            return Ok(None);
        }
        self.wait_for(answer, left).await.map(|()| None)
    }

    /// Follows an answer that sends nothing now: sleeps until the slot it
    /// reserved (or an in-flight slot may be free), or refuses (dark).
    async fn wait_for(&self, answer: Answer, left: &mut Left<'_>) -> Result<(), Refusal> {
        let wait = match answer {
            Answer::Go(_) => return Ok(()),
            // A token is used at its instant or not at all: one reserved
            // for an instant this request could not go at is taken again.
            Answer::Reserved(wait) => {
                self.decision("redis", "window");
                (left.reserved, left.token) = (!left.windows.is_empty(), true);
                wait
            }
            Answer::Queued(wait) => {
                self.decision("redis", "queued");
                (left.reserved, left.token) = (!left.windows.is_empty(), false);
                wait
            }
            Answer::Busy(wait) => {
                self.decision("redis", "busy");
                left.token = true;
                wait.min(self.policy.deadline).max(Duration::from_millis(1))
            }
            Answer::Dark { left, mark } => {
                self.decision("redis", "dark");
                let mark = mark_of(&mark);
                return Err(Refusal::Dark { left, mark });
            }
            Answer::Settle(left) => {
                self.decision("redis", "settle");
                if self.policy.degraded == Degraded::Open {
                    self.stay_local(left);
                    return Ok(());
                }
                left
            }
            Answer::Run(_) => return Ok(()),
        };
        // Going local ends the wait: the slot was Redis's to give.
        let switched = self.switched.notified();
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = switched => {}
        }
        Ok(())
    }

    /// Runs `work` on the current runtime, if there is one.
    fn background(&self, work: impl Future<Output = ()> + Send + 'static) {
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(work);
        }
    }
}

/// A dark mark as the store keeps it (`"{row} {status}"`); one this
/// replica cannot read (another version's) names no row of any policy, so
/// the call is sent.
fn mark_of(text: &str) -> DarkMark {
    let mut parts = text.split(' ');
    let row = parts.next().and_then(|i| i.parse::<u16>().ok());
    let status = parts.next().and_then(|s| s.parse::<u16>().ok());
    DarkMark {
        row: RowIx::new(row.unwrap_or(u16::MAX)),
        status,
    }
}

impl Fleet for RedisFleet {
    fn admit<'a>(
        &'a self,
        local: &'a dyn LocalWindows,
        ask: FleetAsk<'a>,
    ) -> FleetFuture<'a, Result<FleetSlots, Refusal>> {
        let route = self
            .inner
            .routes
            .get(ask.route.get())
            .map_or("", |e| e.path);
        let positions = Positions::of(ask.budgets);
        Box::pin(async move { RedisFleet::admit(self, local, route, positions.as_slice()).await })
    }

    fn pause(&self, wait: Duration) {
        RedisFleet::pause(self, wait);
    }

    fn share_dark(&self, route: &'static str, mark: DarkMark, for_: Duration) {
        RedisFleet::share_dark(self, route, mark, for_);
    }

    fn one_at_a_time<'a>(
        &'a self,
        turn: Turn,
        times: TurnTimes,
        check: FleetFuture<'a, bool>,
    ) -> FleetFuture<'a, bool> {
        Box::pin(RedisFleet::one_at_a_time(self, turn, times, check))
    }

    fn healthy_since(&self, turn: Turn) -> FleetFuture<'_, Option<Duration>> {
        Box::pin(RedisFleet::healthy_since(self, turn))
    }

    fn status(&self) -> FleetStatus {
        FleetStatus {
            degraded: self.degraded(),
            live_replicas: self.live_replicas(),
            leases_held: self.leases_held(),
            slowest_failed_call: self.slowest_failed_call(),
        }
    }

    fn leave(&self) -> FleetFuture<'_, ()> {
        Box::pin(RedisFleet::leave(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{rate_share, unseen_share};
    use sdk_policy::policy::{BudgetPolicy, PollingPolicy};
    use sdk_runtime::internals::Throttle;

    const RETRIEVAL: usize = 1;

    /// The spec's numbers that matter here: 8 in flight, 50/s (57 in any
    /// rolling second), 100 retrieval calls in any rolling minute.
    static THROTTLE: ThrottlePolicy = ThrottlePolicy {
        max_in_flight: 8,
        per_second: 50,
        rate_period: Duration::from_secs(1),
        budget_period: Duration::from_secs(60),
        budgets: &[
            BudgetPolicy {
                name: "global",
                max_in_flight: None,
                per_minute: None,
            },
            BudgetPolicy {
                name: "retrieval",
                max_in_flight: None,
                per_minute: Some(100),
            },
        ],
        polling: PollingPolicy {
            interval: Duration::from_secs(5),
            floor: Duration::from_secs(2),
            hot_factor: 2,
        },
    };

    /// One replica's requests: a retrieval loop and a plain one, each
    /// admitted by `throttle` and ended at once, until `end`.
    async fn run(throttle: Arc<Throttle>, end: Instant) -> (Vec<Instant>, Vec<Instant>) {
        let loops = [RETRIEVAL, 0].map(|budget| {
            let throttle = Arc::clone(&throttle);
            tokio::spawn(async move {
                let mut sent = Vec::new();
                while let Ok(permit) = tokio::time::timeout_at(end, throttle.admit(budget)).await {
                    drop(permit);
                    sent.push(Instant::now());
                    tokio::task::yield_now().await;
                }
                sent
            })
        });
        let [retrieval, plain] = loops;
        (retrieval.await.unwrap(), plain.await.unwrap())
    }

    /// The most of `times` in any rolling `width`.
    fn most_in(times: &mut [Instant], width: Duration) -> usize {
        times.sort();
        (0..times.len())
            .map(|i| {
                times[i..]
                    .iter()
                    .take_while(|t| **t < times[i] + width)
                    .count()
            })
            .max()
            .unwrap_or(0)
    }

    /// Three replicas: the first one fills the fleet's rolling minute of
    /// retrieval calls and runs at the bucket's rate, the other two are
    /// live and idle. The store stops answering; a breaker's `over` later
    /// all three go local at their shares (18 per second, 31 per minute)
    /// and send all they may. `seeded`: each starts its windows from the
    /// last heartbeat's glimpse of the fleet, 300 ms before. Answers the
    /// most in any rolling second and retrieval calls in any minute.
    async fn switch(seeded: bool) -> (usize, usize) {
        let ms = Duration::from_millis;
        let interval = ms(20);
        let rates = Rates {
            interval,
            burst: 8,
            period: THROTTLE.rate_period,
            per_period: 57,
            window: THROTTLE.budget_period,
        };
        let replicas: Vec<Arc<Throttle>> =
            (0..3).map(|_| Arc::new(Throttle::new(&THROTTLE))).collect();
        let start = Instant::now();
        let lost = start + ms(4000);
        let glimpse_at = lost - ms(300);
        let (mut retrieval, mut all) = run(Arc::clone(&replicas[0]), lost).await;
        all.extend(&retrieval);
        // Redis's bucket (a GCRA) and the first replica's window slots, as
        // the heartbeat read them.
        let mut tat = start;
        for &at in all.iter().filter(|t| **t <= glimpse_at) {
            tat = tat.max(at) + interval;
        }
        let micros = |d: Duration| i64::try_from(d.as_micros()).unwrap();
        let ages: Vec<i64> = (retrieval.iter())
            .filter(|t| **t <= glimpse_at)
            .map(|t| micros(glimpse_at - *t))
            .collect();
        let glimpse = Glimpse {
            asked: glimpse_at,
            answered: glimpse_at,
            tat_ahead: micros(tat - glimpse_at),
            windows: vec![(RETRIEVAL, 100, ages)],
        };
        tokio::time::sleep_until(lost + ms(250)).await;
        for throttle in &replicas {
            throttle.set_window_limits(&|_, limit| rate_share(limit, 3, 5));
            if seeded {
                let (second, windows) = unseen_share(&glimpse, lost, rates, 3);
                let windows: Vec<_> = (windows.into_iter())
                    .map(|(b, sends)| (BudgetIx::of_position(b), sends))
                    .collect();
                throttle.seed_windows(&second, &windows);
            }
        }
        let end = lost + ms(4000);
        let after: Vec<_> = (replicas.iter())
            .map(|throttle| tokio::spawn(run(Arc::clone(throttle), end)))
            .collect();
        for replica in after {
            let (r, plain) = replica.await.unwrap();
            all.extend(&r);
            all.extend(plain);
            retrieval.extend(r);
        }
        let second = most_in(&mut all, THROTTLE.rate_period);
        (second, most_in(&mut retrieval, THROTTLE.budget_period))
    }

    #[tokio::test(start_paused = true)]
    async fn replicas_going_local_start_their_windows_from_what_the_fleet_sent() {
        // From their own sends alone, the idle two add a full share each
        // to what the first one sent in the second and the minute.
        let (second, minute) = switch(false).await;
        eprintln!("own windows: {second} per rolling second, {minute} per rolling minute");
        assert!(second > 57 + 2 && minute > 100 + 2, "{second} {minute}");
        // From the fleet's: within the limits across the switch.
        let (second, minute) = switch(true).await;
        eprintln!("the fleet's: {second} per rolling second, {minute} per rolling minute");
        assert!(second <= 57, "{second} in one rolling second");
        assert!(
            minute <= 100,
            "{minute} retrieval calls in one rolling minute"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_sent_log_keeps_the_last_window_at_most_its_limit_and_ages_it() {
        let s = Duration::from_secs;
        // Budget 1: 2 per 60 s, budget 4: 5 per 60 s.
        let mut sent = Sent::new(s(60), &[(1, 2), (4, 5)]);
        let t0 = Instant::now();
        for i in 0..4 {
            sent.record(&[1], t0 + Duration::from_millis(100 * i));
        }
        sent.record(&[4], t0 + s(2));
        // Each window holds its newest sends, at most its limit.
        let windows = sent.ages(t0 + s(2));
        let ms = Duration::from_millis;
        assert_eq!(windows[0], (1, vec![ms(1800), ms(1700)]));
        assert_eq!(windows[1], (4, vec![Duration::ZERO]));
        // A window later, nothing of it is left.
        let windows = sent.ages(t0 + s(62));
        assert!(
            windows.iter().all(|(_, ages)| ages.is_empty()),
            "{windows:?}"
        );
    }
}
