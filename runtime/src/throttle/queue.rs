//! The FIFO queues in front of the paced stages.

use std::time::Duration;

use super::semaphore::Semaphore;
use super::tick::{Clock, Tick};

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
pub(super) struct Queue {
    turn: Semaphore,
}

impl Queue {
    pub(super) fn new() -> Self {
        Self {
            turn: Semaphore::new(1),
        }
    }

    /// Nobody holds or waits for the turn (waiters are handed the permit
    /// directly, so it is never free while anyone waits).
    pub(super) fn is_empty(&self) -> bool {
        self.turn.available() > 0
    }

    /// Waits for the turn.
    pub(super) async fn turn(&self) -> Turn<'_> {
        self.turn.acquire().await;
        Turn(&self.turn)
    }
}

/// The turn of a [`Queue`], passed on to the next in line on drop.
pub(super) struct Turn<'a>(&'a Semaphore);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// Waits at the head of the queue(s) until `attempt` passes at the current
/// instant, sleeping as long as it says; `attempt` takes what it needs only
/// when everything it needs is free.
pub(super) async fn when_paced(
    clock: Clock,
    mut attempt: impl FnMut(Tick) -> Result<(), Duration>,
) {
    loop {
        match attempt(clock.now()) {
            Ok(()) => return,
            Err(wait) => tokio::time::sleep(wait).await,
        }
    }
}
