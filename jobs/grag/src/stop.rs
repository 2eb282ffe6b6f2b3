//! Stopping a replica cleanly (a rolling deploy's SIGTERM): no job is left
//! leased to a process that is gone, so another replica claims it at once,
//! not after the lease.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::JobsError;
use crate::run::{Jobs, handed_back};

/// What [`Jobs::shutdown`] did with the jobs this process held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stopped {
    /// Jobs that reached a checkpoint within the grace (done, or handed
    /// back there).
    pub settled: usize,
    /// Jobs still running when the grace ended: stopped, and handed back
    /// as their last checkpoint left them.
    pub cut: usize,
}

impl Jobs {
    /// Stops this process's share of the queue: nothing more is claimed,
    /// running jobs go on to their next checkpoint (a step done, a poll)
    /// and are handed back there, eligible for another replica at once;
    /// those still running after `grace` are stopped and handed back as
    /// their last checkpoint left them (a step sent and not settled is
    /// settled by a read, as after a crash). The [`work`](Self::work) loop
    /// ends. Then stop the client (`Grag::runtime().shutdown()`).
    pub async fn shutdown(&self, grace: Duration) -> Result<Stopped, JobsError> {
        self.inner.stopping.store(true, Ordering::Release);
        self.inner.wake.notify_waiters();
        let held = self.lock_running().len();
        let until = tokio::time::Instant::now() + grace;
        loop {
            let ended = self.inner.ended.notified();
            if self.lock_running().is_empty() {
                return Ok(Stopped {
                    settled: held,
                    cut: 0,
                });
            }
            if tokio::time::timeout_at(until, ended).await.is_err() {
                break;
            }
        }
        let cut: Vec<_> = self.lock_running().drain().collect();
        for (key, task) in &cut {
            task.abort();
            let now = self.now();
            let owner = &self.inner.owner;
            let handed = self
                .inner
                .store
                .finish(key, owner, handed_back(), now)
                .await;
            handed.map_err(|e| self.watch(key, e))?;
        }
        Ok(Stopped {
            settled: held.saturating_sub(cut.len()),
            cut: cut.len(),
        })
    }
}
