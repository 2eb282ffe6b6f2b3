//! The store's health as this replica sees it: each store call booked with
//! the store's breaker, the switch between shared and degraded mode (with
//! its alert and metrics), and the throttle's windows following the mode.

use std::sync::atomic::Ordering;
use std::sync::{MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use sdk_policy::policy::{BudgetIx, Degraded};
use sdk_runtime::alerts::Alert;
use sdk_runtime::fleet::LocalWindows;

use super::Inner;
use crate::store::StoreError;
use crate::{Glimpse, Switch, cap_share, rate_share, unseen_share};

impl Inner {
    /// Whether a call may go to the store now (its breaker is not open).
    pub(super) fn store_allowed(&self) -> bool {
        self.lock_state().breaker.allows(Instant::now())
    }

    pub(super) fn decision(&self, backend: &'static str, outcome: &'static str) {
        if let Some(m) = &self.metrics {
            m.decision(backend, outcome);
        }
    }

    pub(super) fn observe(&self, backend: &'static str, started: Instant) {
        if let Some(m) = &self.metrics {
            m.admission(backend, started.elapsed());
        }
    }

    /// Runs a store call in the background, unless the store's breaker is open.
    pub(super) fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        if !self.lock_state().breaker.allows(Instant::now()) {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(work);
        }
    }

    /// Books the outcome of a store call made at `called` with the breaker.
    pub(super) fn account<T>(&self, result: Result<T, StoreError>, called: Instant) -> Option<T> {
        match result {
            Ok(value) => {
                self.succeeded(None);
                Some(value)
            }
            Err(e) => {
                self.failed(&e, called);
                None
            }
        }
    }

    pub(super) fn succeeded(&self, live: Option<Vec<String>>) {
        let mut state = self.lock_state();
        if let Some(live) = live {
            state.live = live;
        }
        if state.breaker.success() != Some(Switch::Shared) {
            return;
        }
        if let Some(m) = &self.metrics {
            m.mode(false, 1.0);
        }
        // What this replica sent on its share in the last rate period is
        // booked as it goes from now on: one period more on the share and
        // the shared bucket holds it, so sharing again sends no burst.
        if self.policy.degraded == Degraded::Open {
            state.local_until_at_least(crate::after(Instant::now(), self.throttle.rate_period));
        }
        drop(state);
        self.epoch.fetch_add(1, Ordering::Release);
    }

    /// Whether admissions go on this replica's shares now: the store is
    /// away, or back and not caught up yet (see `State::local_until`).
    /// The first admission after that sends waiters on the shares back to
    /// the store, and the throttle's windows follow.
    pub(super) fn local(&self) -> bool {
        let mut state = self.lock_state();
        if state.breaker.degraded() {
            return true;
        }
        match state.local_until {
            None => false,
            Some(until) if Instant::now() < until => true,
            Some(_) => {
                state.local_until = None;
                let calm = crate::after(Instant::now(), self.throttle.rate_period);
                state.calm_until = Some(calm);
                let gates = state.gates.take();
                drop(state);
                for (_, gate) in gates.into_iter().flatten() {
                    gate.close();
                }
                self.epoch.fetch_add(1, Ordering::Release);
                false
            }
        }
    }

    /// For an admission's question, under one lock: Redis's instant after
    /// which its caller no longer waits (0: unknown), and whether this
    /// replica came back from its share within a rate period.
    pub(super) fn ask_times(&self) -> (i64, bool) {
        let now = Instant::now();
        let state = self.lock_state();
        let until = match state.redis_at(now) {
            0 => 0,
            redis => redis.saturating_add(super::STALE_AFTER_US),
        };
        (until, state.calm_until.is_some_and(|calm| now < calm))
    }

    /// The fleet settles for `for_` (the store said so): admissions go on
    /// the shares meanwhile, those sleeping for a reserved slot at once.
    pub(super) fn stay_local(&self, for_: Duration) {
        let until = crate::after(Instant::now(), for_);
        let mut state = self.lock_state();
        let was_local = state.on_shares();
        state.local_until_at_least(until);
        drop(state);
        if !was_local {
            self.epoch.fetch_add(1, Ordering::Release);
            self.switched.notify_waiters();
        }
    }

    /// Redis's clock now as this replica reckons it (µs; 0: unknown), from
    /// the last heartbeat's reading.
    pub(super) fn redis_now(&self) -> i64 {
        self.lock_state().redis_at(Instant::now())
    }

    /// A store call made at `called` failed. One whose deadline this
    /// process saw late says nothing about the store: not counted.
    pub(super) fn failed(&self, error: &StoreError, called: Instant) {
        let now = Instant::now();
        let switched = {
            let mut state = self.lock_state();
            let took = now.duration_since(called);
            state.slowest_failure = state.slowest_failure.max(took);
            if matches!(error, StoreError::Late(..)) {
                return;
            }
            let gone = matches!(error, StoreError::Gone(_));
            let switched = state.breaker.failure(called, now, gone);
            if switched == Some(Switch::Degraded) {
                state.lost = state.breaker.failing_since();
            }
            switched
        };
        if switched == Some(Switch::Degraded) {
            self.epoch.fetch_add(1, Ordering::Release);
            self.switched.notify_waiters();
            let live = self.lock_state().live.len().max(1);
            if let Some(m) = &self.metrics {
                m.mode(true, 1.0 / live as f64);
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
                    "the fleet's Redis is unreachable ({error}); {rule}"
                )),
                request_id: None,
            });
        }
    }

    /// Sets the throttle's rolling windows to this replica's share while
    /// degraded, back to the policy's limits when shared.
    pub(super) fn follow_mode(&self, throttle: &dyn LocalWindows) {
        let epoch = self.epoch.load(Ordering::Acquire);
        if self.applied.swap(epoch, Ordering::AcqRel) == epoch {
            return;
        }
        let mut state = self.lock_state();
        let away = state.breaker.degraded();
        let local = state.on_shares();
        let live = state.live.len().max(1);
        state.local_live = local.then(|| state.local_live.unwrap_or(live).max(live));
        let live = state.local_live.unwrap_or(live);
        let lost = state.lost;
        let alone = state.live.iter().all(|id| *id == self.replica);
        let was_local = state.went_local.is_some();
        state.went_local = match (local, state.went_local) {
            (false, _) => None,
            (true, Some(at)) => Some(at),
            (true, None) => Some(Instant::now()),
        };
        let (count, rank) = self.rank(&state.live, state.local_live);
        drop(state);
        let margin = self.policy.margin_percent;
        throttle.set_window_limits(&|budget, limit| {
            let fleet_wide = budget.is_none_or(|b| !self.policy.per_replica.contains(&b));
            if local && fleet_wide {
                rate_share(limit, live, margin)
            } else {
                limit
            }
        });
        // On its share the replica is paced at a share of the bucket's rate
        // and burst, spread evenly: within its share of the rolling second,
        // it sends no burst and then a wait each second, and the fleet stays
        // under the rate the shared bucket keeps, so taking the store back
        // owes it no wait and sends no burst on top of the last second.
        if local {
            let per_second = rate_share(self.throttle.per_second, live, margin);
            throttle.set_rate(per_second, cap_share(throttle.burst(), count, rank).max(1));
        } else {
            throttle.reset_rate();
        }
        // Going local as the store goes away, this replica's windows start
        // from what the fleet sent, not from its own sends alone: the others
        // may have used the window it now takes a share of. Alone, its own
        // sends are all.
        if !away || was_local || alone {
            return;
        }
        let glimpse = self.lock_glimpse().take();
        if let (Some(lost), Some(glimpse)) = (lost, glimpse) {
            let (second, windows) = unseen_share(&glimpse, lost, self.rates, live);
            let windows: Vec<_> = (windows.into_iter())
                .map(|(b, sends)| (BudgetIx::of_position(b), sends))
                .collect();
            throttle.seed_windows(&second, &windows);
        }
    }

    pub(super) fn lock_glimpse(&self) -> MutexGuard<'_, Option<Glimpse>> {
        self.glimpse.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
