//! Degraded mode: while the store is away each replica admits within its
//! share of every in-flight cap, and books what it sent into the shared
//! budgets in the background, for a Redis only this replica cannot reach.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::{Semaphore, oneshot};
use tokio::time::Instant;

use sdk_policy::policy::Degraded;
use sdk_runtime::fleet::{HeldWindows, LocalWindows, Refusal};

use super::{Held, Inner, Question, Slots};
use crate::cap_share;
use crate::store::LeaseSet;

impl Inner {
    /// The in-flight caps while the store is away: this replica's share of
    /// each, or a refusal (`fail: closed`). `None`: the store came back
    /// meanwhile.
    pub(super) async fn admit_degraded(
        self: &Arc<Self>,
        throttle: &dyn LocalWindows,
        question: &Question,
        started: Instant,
        stale: bool,
    ) -> Result<Option<Slots>, Refusal> {
        if self.policy.degraded == Degraded::Closed {
            self.decision("local", "refused");
            return Err(Refusal::Closed);
        }
        let sets = question.sets();
        let (gates, settling) = self.shares_of(sets);
        // A request the throttle admitted before the switch, against the
        // shared limits, goes within this replica's share of its windows:
        // it takes its slots again first, holding no in-flight share.
        if stale {
            throttle
                .leave_windows(&question.window_budgets())
                .retake()
                .await;
        }
        let mut permits = Vec::with_capacity(gates.len());
        // A budget's share may keep a request waiting long (ingest's is
        // 1/1/0 of 2 over three): it waits without its slot of this
        // replica's rolling second, and takes one again before the global
        // share. The global share's wait is one request's flight: it waits
        // holding its slot, as the throttle's own global stage does, so no
        // holder of the share queues for a slot; only just after the switch
        // it takes its slot again within the share before it goes.
        let mut left: Option<Box<dyn HeldWindows + '_>> = None;
        for (set, gate) in gates {
            let holds_slots = set.is_none() && !settling;
            // What a budget's wait left is taken again before a wait that
            // holds its slots.
            if holds_slots && let Some(left) = left.take() {
                left.retake().await;
            }
            if let Ok(permit) = Arc::clone(&gate).try_acquire_owned() {
                permits.push(permit);
                continue;
            }
            if !holds_slots {
                left.get_or_insert_with(|| throttle.leave_windows(&[]));
            }
            match gate.acquire_owned().await {
                Ok(permit) => permits.push(permit),
                // The store came back while this call waited: ask it.
                Err(_) => return Ok(None),
            }
        }
        if let Some(left) = left {
            left.retake().await;
        }
        self.decision("local", "go");
        self.observe("local", started);
        self.lock_sent().record(question.windows(), Instant::now());
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let ended = self.book(number, sets, question.windows());
        Ok(Some(Slots {
            held: Held::Booked {
                _ended: ended,
                _permits: permits,
            },
        }))
    }

    /// The in-flight shares `sets` wait for while degraded, and whether this
    /// replica went local less than a rolling second ago (slots taken under
    /// the shared limits, or counted in the seed, may still be held).
    pub(super) fn shares_of(&self, sets: &[LeaseSet]) -> (Vec<(LeaseSet, Arc<Semaphore>)>, bool) {
        let mut state = self.lock_state();
        let live = state.live.clone();
        let settling =
            (state.went_local).is_some_and(|at| at.elapsed() < self.throttle.rate_period);
        let made = state.gates.is_none();
        let floor = state.local_live;
        let gates = state.gates.get_or_insert_with(|| self.gates(&live, floor));
        let shares = (sets.iter())
            .filter_map(|set| gates.iter().find(|(s, _)| s == set).cloned())
            .collect();
        let all = made.then(|| gates.clone());
        drop(state);
        if let Some(all) = all {
            self.adopt(&all);
        }
        (shares, settling)
    }

    /// New shares count what this replica already sends under shared
    /// leases: each such request holds a permit of its sets' shares (while
    /// there are any), given back when it ends.
    fn adopt(&self, gates: &[(LeaseSet, Arc<Semaphore>)]) {
        let held: Vec<(u64, Vec<LeaseSet>)> = (self.lock_held().iter())
            .map(|(n, sets)| (*n, sets.clone()))
            .collect();
        let mut adopted = self.lock_adopted();
        for (number, sets) in held {
            let permits = (sets.iter())
                .filter_map(|set| gates.iter().find(|(s, _)| s == set))
                .filter_map(|(_, gate)| Arc::clone(gate).try_acquire_owned().ok())
                .collect();
            adopted.insert(number, permits);
        }
    }

    /// How many replicas share (at least `floor`), and this one's rank among
    /// them (one that is not on the live list yet counts itself, last).
    pub(super) fn rank(&self, live: &[String], floor: Option<usize>) -> (usize, usize) {
        let count = live.len() + usize::from(!live.contains(&self.replica));
        let rank = (live.iter().position(|id| *id == self.replica)).unwrap_or(live.len());
        (count.max(floor.unwrap_or(0)), rank)
    }

    /// This replica's share of every in-flight cap, from the last live list
    /// (of at least `floor` replicas).
    pub(super) fn gates(
        &self,
        live: &[String],
        floor: Option<usize>,
    ) -> Vec<(Option<usize>, Arc<Semaphore>)> {
        let (count, rank) = self.rank(live, floor);
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

    /// Books a request sent on the degraded share in the shared budgets, in
    /// the background and outside the store's breaker: a Redis that is only
    /// slow for this replica (the others still reach it) takes it, so the
    /// others leave room for it and the fleet stays one tenant; a dead
    /// Redis loses nothing that counts. Its leases are given back when the
    /// request ends (`ended` is dropped), after the booking, never before
    /// it: a release that overtook its booking would leave the lease held
    /// for a whole lease.
    pub(super) fn book(
        self: &Arc<Self>,
        number: u64,
        sets: &[LeaseSet],
        windows: &[usize],
    ) -> oneshot::Sender<()> {
        let inner = Arc::clone(self);
        let (sets, windows) = (sets.to_vec(), windows.to_vec());
        let sent = self.redis_now();
        let (ended, request_ended) = oneshot::channel();
        self.background(async move {
            let member = inner.member(number);
            let keys = &inner.keys;
            let known = inner.run.load(Ordering::Acquire);
            let booked = inner
                .store
                .book(keys, &member, (known, sent), &sets, &windows)
                .await;
            let _ = request_ended.await;
            let _ = inner.store.release(keys, &[member], &sets).await;
            // Redis lost the state: what this replica sent goes back in.
            if let Ok(run) = booked
                && run != known
            {
                inner.rebook(run).await;
            }
        });
        ended
    }
}
