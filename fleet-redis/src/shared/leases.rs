//! The leases a replica holds: taken again by its next admission or given
//! back when their request ends, and booked again, with what it sent
//! lately, into a Redis that lost them.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::{Inner, Release};
use crate::store::{Again, LeaseSet};

impl Inner {
    /// The store's name of this replica's admission `number`: its lease
    /// member (and a window reservation's).
    pub(super) fn member(&self, number: u64) -> String {
        format!("{}:{number}", self.replica)
    }

    /// A lease of `sets` ended (its request did): the next admission may
    /// take its member again, else the background task gives it back.
    pub(super) fn end(self: &Arc<Self>, number: u64, sets: Vec<LeaseSet>) {
        self.lock_ended().push((number, sets));
        if self.left.load(Ordering::Acquire) {
            let inner = Arc::clone(self);
            self.background(async move { inner.give_back().await });
            return;
        }
        self.ending.notify_one();
    }

    /// The number of an ended lease whose sets are all among `sets` (the
    /// script takes it again in each, which ends it), if there is one.
    pub(super) fn take_ended(&self, sets: &[LeaseSet]) -> Option<u64> {
        let mut ended = self.lock_ended();
        let at = ended
            .iter()
            .position(|(_, of)| of.iter().all(|set| sets.contains(set)))?;
        Some(ended.swap_remove(at).0)
    }

    pub(super) fn lock_ended(&self) -> MutexGuard<'_, Vec<Release>> {
        self.ended.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Gives back the ended leases no admission took again, in one call.
    pub(super) async fn give_back(&self) {
        let ended = std::mem::take(&mut *self.lock_ended());
        if ended.is_empty() || !self.store_allowed() {
            return; // without the store they expire within one lease
        }
        let mut sets: Vec<LeaseSet> = Vec::new();
        let mut members = Vec::with_capacity(ended.len());
        for (number, of) in ended {
            members.push(self.member(number));
            for set in of {
                if !sets.contains(&set) {
                    sets.push(set);
                }
            }
        }
        let called = Instant::now();
        let result = self.store.release(&self.keys, &members, &sets).await;
        self.account(result, called);
    }

    /// Books again what this replica sent in the last window and the leases
    /// it holds into the store's `run` (a Redis that restarted empty, or a
    /// replica new to the fleet: nothing to book), and knows that run from
    /// then on. Once per run: callers beside it wait for the first.
    pub(super) async fn rebook(&self, run: u64) {
        let _one = self.rebooking.lock().await;
        if self.run.load(Ordering::Acquire) == run {
            return;
        }
        let now = Instant::now();
        let windows = self.lock_sent().ages(now);
        let leases = self.held_by_set();
        let again = Again {
            run,
            replica: &self.replica,
            leases: &leases,
            windows: &windows,
        };
        let booked = self.store.rebook(&self.keys, &again).await;
        if self.account(booked, now) == Some(run) {
            self.run.store(run, Ordering::Release);
        }
    }

    pub(super) fn lock_sent(&self) -> MutexGuard<'_, Sent> {
        self.sent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The members of the leases this replica holds, by lease set (every
    /// set of the fleet listed).
    pub(super) fn held_by_set(&self) -> Vec<(LeaseSet, Vec<String>)> {
        let mut grouped: Vec<(LeaseSet, Vec<String>)> =
            self.sets.iter().map(|&set| (set, Vec::new())).collect();
        for (number, sets) in self.lock_held().iter() {
            for set in sets {
                if let Some((_, members)) = grouped.iter_mut().find(|(s, _)| s == set) {
                    members.push(self.member(*number));
                }
            }
        }
        grouped
    }

    pub(super) fn lock_held(&self) -> MutexGuard<'_, HashMap<u64, Vec<LeaseSet>>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn lock_adopted(&self) -> MutexGuard<'_, HashMap<u64, Vec<OwnedSemaphorePermit>>> {
        self.adopted.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What one replica sent lately, on its own clock, within what can matter:
/// the sends of each fleet window's last window (at most its limit).
/// Booked again into a Redis that restarted empty.
#[derive(Debug)]
pub(super) struct Sent {
    window: Duration,
    /// By budget: its sends and its limit.
    windows: Vec<(usize, VecDeque<Instant>, usize)>,
}

impl Sent {
    pub(super) fn new(window: Duration, limits: &[(usize, u32)]) -> Sent {
        Sent {
            window,
            windows: (limits.iter())
                .map(|&(b, limit)| (b, VecDeque::new(), (limit as usize).max(1)))
                .collect(),
        }
    }

    /// A request of `windows` sent at `at`.
    pub(super) fn record(&mut self, windows: &[usize], at: Instant) {
        for (b, log, most) in &mut self.windows {
            if windows.contains(b) {
                while log.len() >= *most || log.front().is_some_and(|&t| t + self.window < at) {
                    log.pop_front();
                }
                log.push_back(at);
            }
        }
    }

    /// Each window's sends within its last window at `now`, by age.
    pub(super) fn ages(&self, now: Instant) -> Vec<(usize, Vec<Duration>)> {
        (self.windows.iter())
            .map(|(b, log, _)| {
                let ages = (log.iter())
                    .filter(|t| now.saturating_duration_since(**t) < self.window)
                    .map(|t| now.saturating_duration_since(*t))
                    .collect();
                (*b, ages)
            })
            .collect()
    }
}
