//! The fleet stage of admission: the store's answer, the leases a replica
//! holds (renewed with its heartbeat), and degraded mode.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::Instant;

use super::store::{Answer, Ask, Keys, Shape, Store};
use super::{StoreBreaker, Switch, cap_share, rate_share};
use crate::alerts::{Alert, AlertSink};
use crate::metrics::FleetMetrics;
use crate::policy::{Degraded, FleetPolicy, Policy, ThrottlePolicy};
use crate::throttle::{MAX_BUDGETS, Throttle};

/// Why the fleet stage sent nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The store is away and the policy fails closed.
    Closed,
    /// Another replica saw the route dark: `mark` is what it saw
    /// ([`Fleet::share_dark`]), for `left` more.
    Dark { left: Duration, mark: String },
}

/// The fleet's side of one admitted request: its leases in the store, or
/// its slots of the degraded share. Dropping it (the request ended, or its
/// caller gave up) gives them back.
#[derive(Debug)]
pub(crate) struct FleetSlots {
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
}

impl Drop for FleetSlots {
    fn drop(&mut self) {
        if let Held::Leases {
            fleet,
            number,
            sets,
        } = &mut self.held
        {
            fleet.lock_held().remove(number);
            // The background task gives them back; if it is gone, they
            // expire within one lease.
            let _ = fleet.releases.send((*number, std::mem::take(sets)));
        }
    }
}

/// A lease set: a budget's in-flight cap, or `None`: every request's.
type LeaseSet = Option<usize>;

/// Leases to give back: the admission's number and its lease sets.
type Release = (u64, Vec<LeaseSet>);

/// One API client's membership of the fleet.
#[derive(Debug, Clone)]
pub(crate) struct Fleet {
    inner: Arc<Inner>,
}

struct Inner {
    policy: &'static FleetPolicy,
    throttle: &'static ThrottlePolicy,
    store: Store,
    keys: Keys,
    /// This replica's id in the store (leases, heartbeat).
    replica: String,
    shape: Shape,
    next: AtomicU64,
    state: Mutex<State>,
    /// Leases taken and not given back: renewed with every heartbeat.
    held: Mutex<HashMap<u64, Vec<LeaseSet>>>,
    releases: mpsc::UnboundedSender<Release>,
    /// Taken by the background task when it starts (on the first admission).
    receiver: Mutex<Option<mpsc::UnboundedReceiver<Release>>>,
    started: AtomicBool,
    /// Bumped on every switch; the throttle's windows follow it.
    epoch: AtomicU64,
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
}

impl Fleet {
    /// A fleet member of the API's `tenant` under `whole` (its fleet section,
    /// throttle and alert severities), sharing through the Redis at `url`.
    /// A URL redis-rs cannot use is refused here; an unreachable Redis is
    /// found on the first call (degraded mode, with the alert).
    pub fn new(
        tenant: &str,
        url: &str,
        whole: &'static Policy,
        metrics: Option<FleetMetrics>,
        alerts: Arc<dyn AlertSink>,
    ) -> Result<Fleet, String> {
        let policy: &'static FleetPolicy = whole
            .fleet
            .as_ref()
            .ok_or("the policy has no fleet section")?;
        let throttle = &whole.throttle;
        let severity = whole.severity(policy.alert).unwrap_or_default();
        let store = Store::open(url, policy.deadline)?;
        let per_second = throttle.per_second.max(1);
        let burst = throttle.max_in_flight.min(per_second).max(1);
        let interval = throttle.rate_period / per_second;
        let shape = Shape {
            lease: policy.lease,
            interval,
            burst,
            window: throttle.budget_period,
            horizon: (interval * burst).max(policy.deadline * 4),
        };
        let (releases, receiver) = mpsc::unbounded_channel();
        let fleet = Fleet {
            inner: Arc::new(Inner {
                policy,
                throttle,
                store,
                keys: Keys::new(whole.api, tenant),
                replica: uuid::Uuid::new_v4().simple().to_string(),
                shape,
                next: AtomicU64::new(0),
                state: Mutex::new(State {
                    breaker: StoreBreaker::new(policy.breaker_failures, policy.breaker_retry),
                    live: Vec::new(),
                    gates: None,
                }),
                held: Mutex::new(HashMap::new()),
                releases,
                receiver: Mutex::new(Some(receiver)),
                started: AtomicBool::new(false),
                epoch: AtomicU64::new(0),
                applied: AtomicU64::new(0),
                metrics,
                alerts,
                severity,
            }),
        };
        if let Some(m) = &fleet.inner.metrics {
            m.share.set(1.0);
        }
        Ok(fleet)
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

    /// The fleet stage of one request of `route` drawing from `budgets`
    /// (after the local throttle admitted it): one store round trip in the
    /// common case.
    pub async fn admit(
        &self,
        throttle: &Throttle,
        route: &str,
        budgets: &[usize],
    ) -> Result<FleetSlots, Refusal> {
        let inner = &self.inner;
        inner.start();
        let mut sets: [(Option<usize>, u32); MAX_BUDGETS + 1] = [(None, 0); MAX_BUDGETS + 1];
        let mut windows: [(usize, u32); MAX_BUDGETS] = [(0, 0); MAX_BUDGETS];
        let (mut n_sets, mut n_windows) = (0, 0);
        for &b in budgets {
            if inner.policy.per_replica.iter().any(|r| r.get() == b) {
                continue;
            }
            let budget = &inner.throttle.budgets[b];
            if let Some(cap) = budget.max_in_flight {
                sets[n_sets] = (Some(b), cap.max(1));
                n_sets += 1;
            }
            if let Some(limit) = budget.per_minute {
                windows[n_windows] = (b, limit.max(1));
                n_windows += 1;
            }
        }
        sets[n_sets] = (None, inner.throttle.max_in_flight.max(1));
        n_sets += 1;
        let sets = &sets[..n_sets];
        let number = inner.next.fetch_add(1, Ordering::Relaxed);
        let member = format!("{}:{number}", inner.replica);
        let mut windows_left = &windows[..n_windows];
        let mut token = true;
        let started = Instant::now();
        loop {
            inner.follow_mode(throttle);
            let now = Instant::now();
            let allowed = inner.lock_state().breaker.allows(now);
            if !allowed {
                match inner.admit_degraded(sets, started).await? {
                    Some(slots) => return Ok(slots),
                    None => continue,
                }
            }
            // Registered before the call: a caller cancelled mid-call still
            // gives back what the script may have taken.
            let mut slots = FleetSlots {
                held: Held::Leases {
                    fleet: Arc::clone(inner),
                    number,
                    sets: sets.iter().map(|&(set, _)| set).collect(),
                },
            };
            inner
                .lock_held()
                .insert(number, sets.iter().map(|&(s, _)| s).collect());
            let ask = Ask {
                route,
                member: &member,
                leases: sets,
                windows: windows_left,
                token,
            };
            let answer = inner.store.admit(&inner.keys, &inner.shape, &ask).await;
            let answer = match answer {
                Ok(answer) => {
                    inner.succeeded(None);
                    answer
                }
                Err(e) => {
                    inner.failed(&e.to_string());
                    inner.decision("redis", "error");
                    continue;
                }
            };
            match answer {
                Answer::Go(wait) => {
                    inner.decision("redis", if wait.is_zero() { "go" } else { "go_later" });
                    inner.observe("redis", started);
                    if !wait.is_zero() {
                        tokio::time::sleep(wait).await;
                    }
                    return Ok(slots);
                }
                Answer::Reserved(wait) => {
                    slots.forget_leases();
                    inner.decision("redis", "window");
                    windows_left = &[];
                    tokio::time::sleep(wait).await;
                }
                Answer::Queued(wait) => {
                    slots.forget_leases();
                    inner.decision("redis", "queued");
                    windows_left = &[];
                    token = false;
                    tokio::time::sleep(wait).await;
                }
                Answer::Busy(wait) => {
                    slots.forget_leases();
                    inner.decision("redis", "busy");
                    tokio::time::sleep(
                        wait.min(inner.policy.deadline)
                            .max(Duration::from_millis(1)),
                    )
                    .await;
                }
                Answer::Dark { left, mark } => {
                    slots.forget_leases();
                    inner.decision("redis", "dark");
                    return Err(Refusal::Dark { left, mark });
                }
            }
        }
    }

    /// A `Retry-After` of `wait` this replica was told: every replica pauses
    /// until then (the longest pause wins). Sent in the background.
    pub fn pause(&self, wait: Duration) {
        let inner = Arc::clone(&self.inner);
        self.inner.spawn(async move {
            let result = inner.store.pause(&inner.keys, wait).await;
            inner.account(result);
        });
    }

    /// A route answered dark (a stable answer remembered for `for_`): every
    /// replica fails fast on it for as long. `mark` is what they fail with.
    pub fn share_dark(&self, route: &'static str, mark: String, for_: Duration) {
        let inner = Arc::clone(&self.inner);
        self.inner.spawn(async move {
            let result = inner.store.set_dark(&inner.keys, route, &mark, for_).await;
            inner.account(result);
        });
    }

    /// Whether this replica runs the breaker's probe now: one replica at a
    /// time holds it, for `for_` (one probe interval). Without the store
    /// every replica probes for itself.
    pub async fn own_probe(&self, for_: Duration) -> bool {
        let inner = &self.inner;
        if !inner.lock_state().breaker.allows(Instant::now()) {
            return true;
        }
        let result = inner
            .store
            .own_probe(&inner.keys, &inner.replica, for_)
            .await;
        inner.account(result).unwrap_or(true)
    }

    /// The last shared probe result (`true`: healthy), if one is fresh.
    pub async fn probe_result(&self) -> Option<bool> {
        let inner = &self.inner;
        if !inner.lock_state().breaker.allows(Instant::now()) {
            return None;
        }
        let result = inner.store.probe_result(&inner.keys).await;
        inner.account(result).flatten()
    }

    /// Shares what this replica's probe saw, for `for_`.
    pub async fn share_probe_result(&self, healthy: bool, for_: Duration) {
        let inner = &self.inner;
        if !inner.lock_state().breaker.allows(Instant::now()) {
            return;
        }
        let result = inner
            .store
            .set_probe_result(&inner.keys, healthy, for_)
            .await;
        inner.account(result);
    }
}

impl FleetSlots {
    /// The script took nothing (or will not be asked again with these
    /// leases): no release to send.
    fn forget_leases(&mut self) {
        if let Held::Leases { fleet, number, .. } = &self.held {
            fleet.lock_held().remove(number);
        }
        self.held = Held::Local(Vec::new());
    }
}

impl Inner {
    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_held(&self) -> MutexGuard<'_, HashMap<u64, Vec<LeaseSet>>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn decision(&self, backend: &'static str, outcome: &'static str) {
        if let Some(m) = &self.metrics {
            m.decision(backend, outcome);
        }
    }

    fn observe(&self, backend: &'static str, started: Instant) {
        if let Some(m) = &self.metrics {
            m.admission(backend, started.elapsed());
        }
    }

    /// Runs a store call in the background, unless the store's breaker is open.
    fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        if !self.lock_state().breaker.allows(Instant::now()) {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(work);
        }
    }

    /// Books a store call's outcome with the breaker.
    fn account<T, E: std::fmt::Display>(&self, result: Result<T, E>) -> Option<T> {
        match result {
            Ok(value) => {
                self.succeeded(None);
                Some(value)
            }
            Err(e) => {
                self.failed(&e.to_string());
                None
            }
        }
    }

    fn succeeded(&self, live: Option<Vec<String>>) {
        let mut state = self.lock_state();
        if let Some(live) = live {
            state.live = live;
        }
        if state.breaker.success() == Some(Switch::Shared) {
            // Waiters on the degraded share go back to the store.
            for (_, gate) in state.gates.take().into_iter().flatten() {
                gate.close();
            }
            drop(state);
            self.epoch.fetch_add(1, Ordering::Release);
            if let Some(m) = &self.metrics {
                m.degraded.set(0);
                m.share.set(1.0);
            }
        }
    }

    fn failed(&self, reason: &str) {
        let switched = self.lock_state().breaker.failure(Instant::now());
        if switched == Some(Switch::Degraded) {
            self.epoch.fetch_add(1, Ordering::Release);
            let live = self.lock_state().live.len().max(1);
            if let Some(m) = &self.metrics {
                m.degraded.set(1);
                m.share.set(1.0 / live as f64);
            }
            let rule = match self.policy.degraded {
                Degraded::Open => format!("each of {live} replicas runs at its share"),
                Degraded::Closed => "every call is refused (fail: closed)".to_string(),
            };
            self.alerts.alert(Alert {
                name: self.policy.alert,
                severity: self.severity,
                endpoint: None,
                row: None,
                detail: Some(format!(
                    "the fleet's Redis is unreachable ({reason}); {rule}"
                )),
                request_id: None,
            });
        }
    }

    /// Sets the throttle's rolling windows to this replica's share while
    /// degraded, back to the policy's limits when shared.
    fn follow_mode(&self, throttle: &Throttle) {
        let epoch = self.epoch.load(Ordering::Acquire);
        if self.applied.swap(epoch, Ordering::AcqRel) == epoch {
            return;
        }
        let state = self.lock_state();
        let live = state.live.len().max(1);
        let degraded = state.breaker.degraded();
        drop(state);
        let margin = self.policy.margin_percent;
        throttle.set_window_limits(&|budget, limit| {
            let fleet_wide =
                budget.is_none_or(|b| !self.policy.per_replica.iter().any(|r| r.get() == b));
            if degraded && fleet_wide {
                rate_share(limit, live, margin)
            } else {
                limit
            }
        });
    }

    /// The in-flight caps while the store is away: this replica's share of
    /// each, or a refusal (`fail: closed`). `None`: the store came back
    /// meanwhile.
    async fn admit_degraded(
        self: &Arc<Self>,
        sets: &[(Option<usize>, u32)],
        started: Instant,
    ) -> Result<Option<FleetSlots>, Refusal> {
        if self.policy.degraded == Degraded::Closed {
            self.decision("local", "refused");
            return Err(Refusal::Closed);
        }
        let gates: Vec<Arc<Semaphore>> = {
            let mut state = self.lock_state();
            let live = state.live.clone();
            let gates = state.gates.get_or_insert_with(|| self.gates(&live));
            sets.iter()
                .filter_map(|(set, _)| {
                    gates
                        .iter()
                        .find(|(s, _)| s == set)
                        .map(|(_, g)| Arc::clone(g))
                })
                .collect()
        };
        let mut permits = Vec::with_capacity(gates.len());
        for gate in gates {
            match gate.acquire_owned().await {
                Ok(permit) => permits.push(permit),
                // The store came back while this call waited: ask it.
                Err(_) => return Ok(None),
            }
        }
        self.decision("local", "go");
        self.observe("local", started);
        Ok(Some(FleetSlots {
            held: Held::Local(permits),
        }))
    }

    /// This replica's share of every in-flight cap, from the last live list.
    fn gates(&self, live: &[String]) -> Vec<(Option<usize>, Arc<Semaphore>)> {
        let count = if live.contains(&self.replica) {
            live.len()
        } else {
            live.len() + 1
        };
        let rank = live
            .iter()
            .position(|id| *id == self.replica)
            .unwrap_or(live.len());
        let mut gates = vec![(
            None,
            Arc::new(Semaphore::new(
                cap_share(self.throttle.max_in_flight.max(1), count, rank) as usize,
            )),
        )];
        for (b, budget) in self.throttle.budgets.iter().enumerate() {
            if let Some(cap) = budget.max_in_flight
                && !self.policy.per_replica.iter().any(|r| r.get() == b)
            {
                let share = cap_share(cap.max(1), count, rank) as usize;
                gates.push((Some(b), Arc::new(Semaphore::new(share))));
            }
        }
        gates
    }

    /// Starts the background task (heartbeat, renewals, releases) once, on
    /// the runtime of the first admission.
    fn start(self: &Arc<Self>) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(mut receiver) = self
            .receiver
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return;
        };
        let weak: Weak<Inner> = Arc::downgrade(self);
        let heartbeat = self.policy.heartbeat;
        tokio::spawn(async move {
            if let Some(inner) = weak.upgrade() {
                // Bounded: an unreachable Redis is found by the calls themselves.
                let loading = inner.store.load_scripts();
                let _ = tokio::time::timeout(Duration::from_secs(1), loading).await;
            }
            let mut tick = tokio::time::interval(heartbeat);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        let Some(inner) = weak.upgrade() else { break };
                        inner.beat().await;
                    }
                    released = receiver.recv() => {
                        let Some((number, sets)) = released else { break };
                        let Some(inner) = weak.upgrade() else { break };
                        if inner.lock_state().breaker.allows(Instant::now()) {
                            let member = format!("{}:{number}", inner.replica);
                            let result = inner.store.release(&inner.keys, &member, &sets).await;
                            inner.account(result);
                        }
                    }
                }
            }
        });
    }

    /// One heartbeat: renews the held leases and says this replica is live;
    /// a failed beat is tried again at once, so a dead store is seen within
    /// one heartbeat even without traffic.
    async fn beat(&self) {
        let mut grouped: Vec<(Option<usize>, Vec<String>)> = Vec::new();
        for (number, sets) in self.lock_held().iter() {
            for set in sets {
                let member = format!("{}:{number}", self.replica);
                match grouped.iter_mut().find(|(s, _)| s == set) {
                    Some((_, members)) => members.push(member),
                    None => grouped.push((*set, vec![member])),
                }
            }
        }
        for _ in 0..self.policy.breaker_failures.max(1) {
            if !self.lock_state().breaker.allows(Instant::now()) {
                return;
            }
            let renewed = self
                .store
                .renew(&self.keys, &self.replica, self.policy.lease, &grouped)
                .await;
            match renewed {
                Ok(live) => {
                    if let Some(m) = &self.metrics
                        && !self.lock_state().breaker.degraded()
                    {
                        m.share.set(1.0);
                    }
                    self.succeeded(Some(live));
                    return;
                }
                Err(e) => self.failed(&e.to_string()),
            }
        }
    }
}
