//! What an admitted request holds, and how it is given back.

use tokio::time::Instant;

use super::{MAX_BUDGETS, Throttle};

/// Admission to send one request; dropping it (the request ended) frees the
/// concurrency slots and starts the end of its rolling-window slots.
///
/// A request cancelled while it waits (a deadline) drops what it has taken
/// so far the same way.
#[derive(Debug)]
pub struct Permit<'a> {
    pub(super) throttle: &'a Throttle,
    pub(super) slots: Slots,
}

/// The slots one request holds, as flags and budget indices: a permit is a
/// few words, moved without a copy of a semaphore permit per stage, and its
/// drop and [`Throttle::give_back`] free them the same way.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Slots {
    /// The windows (positions in [`Windows::budgets`](super::Windows::budgets))
    /// whose slot is held.
    pub(super) windows: [Option<u8>; MAX_BUDGETS],
    pub(super) per_period: bool,
    /// The budgets whose semaphore permit is held.
    pub(super) semaphores: [Option<u8>; MAX_BUDGETS],
    pub(super) global: bool,
}

/// A budget index as [`Slots`] keeps it (the policy has far fewer than 256).
pub(super) fn slot(budget: usize) -> u8 {
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
        self.throttle.release(&self.slots);
    }
}

impl Throttle {
    /// Frees what a detached permit held, as dropping the permit would have.
    pub fn give_back(&self, held: HeldSlots) {
        self.release(&held.slots);
    }

    /// Frees `slots`: the windows' (ending their requests now, under one
    /// lock), then the semaphores'. Borrowed, so a dropped permit's slots
    /// are read in place, not copied for the call.
    fn release(&self, slots: &Slots) {
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
}
