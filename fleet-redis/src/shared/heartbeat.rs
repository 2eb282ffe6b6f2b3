//! The background task: a heartbeat that renews the held leases and says
//! the replica is live, and the give-back of ended leases.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use tokio::time::Instant;

use sdk_policy::policy::Degraded;

use super::Inner;
use crate::Glimpse;
use crate::store::Beat;

impl Inner {
    /// Starts the background task (heartbeat, renewals, give-backs) once,
    /// on the runtime of the first admission.
    pub(super) fn start(self: &Arc<Self>) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak: Weak<Inner> = Arc::downgrade(self);
        let heartbeat = self.policy.heartbeat;
        let ending = Arc::clone(&self.ending);
        tokio::spawn(async move {
            if let Some(inner) = weak.upgrade() {
                // Bounded: an unreachable Redis is found by the calls themselves.
                inner.store.ready().await;
            }
            let mut tick = tokio::time::interval(heartbeat);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        let Some(inner) = weak.upgrade() else { break };
                        if inner.left.load(Ordering::Acquire) {
                            break;
                        }
                        inner.beat().await;
                    }
                    () = ending.notified() => {
                        // A caller that ends a request and admits the next
                        // one at once takes the member again first.
                        tokio::task::yield_now().await;
                        let Some(inner) = weak.upgrade() else { break };
                        inner.give_back().await;
                        if inner.left.load(Ordering::Acquire) {
                            break;
                        }
                    }
                }
            }
        });
    }

    /// One heartbeat: renews the held leases and says this replica is live;
    /// a failed beat is tried again, so a dead store is seen within one
    /// heartbeat even without traffic. Every lease set and window of the
    /// fleet is named, for the trimming.
    pub(super) async fn beat(&self) {
        let _beating = self.beating.lock().await;
        if self.left.load(Ordering::Acquire) {
            return;
        }
        let grouped = self.held_by_set();
        // A failed beat is tried again, `failures` times over the breaker's
        // `over`: a dead store opens the breaker within this one heartbeat.
        let tries = self.policy.breaker_failures.max(1);
        let pause = self.policy.breaker_over / tries;
        for _ in 0..=tries {
            if !self.store_allowed() {
                return;
            }
            // The heartbeat is the first call to a primary the Sentinels
            // named after a failover (admissions do not ask a store that is
            // away): the state it finds may lack the last writes.
            let moves = self.store.moves();
            if moves != self.claimed.load(Ordering::Acquire) {
                let called = Instant::now();
                let claimed = self.store.claim(&self.keys).await;
                if self.account(claimed, called).is_none() {
                    tokio::time::sleep(pause).await;
                    continue;
                }
                self.claimed.store(moves, Ordering::Release);
            }
            let called = Instant::now();
            let known = self.run.load(Ordering::Acquire);
            let renewed = (self.store)
                .renew(&self.keys, &self.replica, known, &grouped, &self.windows)
                .await;
            match renewed {
                Ok(Beat {
                    run,
                    now,
                    settle,
                    recent,
                    live,
                }) => {
                    let answered = Instant::now();
                    let midway = called + answered.duration_since(called) / 2;
                    self.lock_state().clock = Some((midway, now));
                    if let Some(m) = &self.metrics
                        && !self.lock_state().breaker.degraded()
                    {
                        m.mode(false, 1.0);
                    }
                    let limit = |b: usize| self.throttle.budgets[b].per_minute.unwrap_or(u32::MAX);
                    *self.lock_glimpse() = Some(Glimpse {
                        asked: called,
                        answered,
                        tat_ahead: recent.tat_ahead,
                        windows: (recent.windows.into_iter())
                            .map(|(b, ages)| (b, limit(b), ages))
                            .collect(),
                    });
                    self.succeeded(Some(live));
                    // Told here, the replica settles on its shares at once,
                    // not after an admission found out.
                    if !settle.is_zero() && self.policy.degraded == Degraded::Open {
                        self.stay_local(settle);
                    }
                    if run != known {
                        self.rebook(run).await;
                    }
                    return;
                }
                Err(e) => self.failed(&e, called),
            }
            tokio::time::sleep(pause).await;
        }
    }
}
