//! The replay worker: while the breaker is closed it claims eligible jobs,
//! oldest first, and runs at most the replay budget's `max_in_flight` of
//! them at once (the ingest limit of 2), so interactive calls keep their
//! slots. Several workers (replicas) may share one store: a claim is a lease.

use std::time::Duration;

use sdk_queue::Claim;
use sdk_runtime::CircuitState;
use tokio::task::JoinSet;

use crate::JobsError;
use crate::job::{INGEST, KG};
use crate::run::Jobs;

/// The longest a job a stopping replica handed back waits for a worker
/// with a free slot to look: one claim query this often per idle worker.
const HANDED_BACK: Duration = Duration::from_millis(500);

impl Jobs {
    /// Replays pending jobs for the life of the process, or until
    /// [`shutdown`](Self::shutdown), and meanwhile runs the retention pass
    /// (`replay.retention`). Store errors are waited out (the jobs stay in
    /// the store).
    pub async fn work(self) {
        let replay = async {
            while !self.stopping() {
                if self.work_once(true).await.is_err() {
                    tokio::time::sleep(self.idle()).await;
                }
            }
        };
        tokio::select! {
            () = replay => {}
            () = self.retain() => {}
        }
    }

    /// Runs eligible jobs until none is left, then returns how many ran. A
    /// job that is not eligible yet (a `Retry-After`, another worker's
    /// lease) or an open breaker ends the drain early.
    pub async fn drain(&self) -> Result<usize, JobsError> {
        self.work_once(false).await
    }

    /// Claims and runs jobs; `forever`: waits for more instead of returning.
    async fn work_once(&self, forever: bool) -> Result<usize, JobsError> {
        let inner = &self.inner;
        let limit = self.limit();
        let mut running = JoinSet::new();
        let mut ran = 0;
        loop {
            let free = limit - running.len().min(limit);
            let open = inner.grag.runtime().circuit_state() != CircuitState::Closed;
            let mut claimed = 0;
            if free > 0 && !open && !self.stopping() {
                let jobs = inner
                    .store
                    .claim(Claim {
                        owner: &inner.owner,
                        kinds: &[INGEST, KG],
                        limit: free,
                        lease: inner.policy.lease,
                        now: self.now(),
                    })
                    .await
                    .map_err(|e| self.watch("(claim)", e))?;
                claimed = jobs.len();
                for job in jobs {
                    let jobs = self.clone();
                    let key = job.key.clone();
                    let mut held = self.lock_running();
                    let handle = running.spawn(async move {
                        let key = job.key.clone();
                        let ran = jobs.run_claimed(job).await;
                        jobs.lock_running().remove(&key);
                        jobs.inner.ended.notify_waiters();
                        ran
                    });
                    held.insert(key, handle);
                }
            }
            if claimed > 0 && running.len() < limit {
                continue;
            }
            if running.is_empty() {
                if !forever || self.stopping() {
                    return Ok(ran);
                }
                // Nothing to do: a submit, a finish, the clock or another
                // replica's hand-back brings more.
                let wait = if open { self.gate() } else { self.look() };
                tokio::select! {
                    _ = inner.wake.notified() => {}
                    _ = tokio::time::sleep(wait) => {}
                }
                continue;
            }
            // A free slot looks again meanwhile: another replica may have
            // handed a job back.
            let look = forever && !open && running.len() < limit;
            let done = tokio::select! {
                done = running.join_next() => done,
                () = tokio::time::sleep(self.look()), if look => None,
            };
            if let Some(done) = done {
                ran += 1;
                // A store error leaves its job leased; the lease brings it back.
                if let Ok(Err(e)) = done
                    && !forever
                {
                    return Err(e);
                }
            }
        }
    }

    pub(crate) fn stopping(&self) -> bool {
        self.inner
            .stopping
            .load(std::sync::atomic::Ordering::Acquire)
    }

    pub(crate) fn lock_running(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, tokio::task::AbortHandle>>
    {
        self.inner.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Jobs run at once: the replay budget's `max_in_flight`.
    fn limit(&self) -> usize {
        let policy = self.inner.grag.runtime().policy();
        let budget = &policy.throttle.budgets[self.inner.policy.budget];
        budget.max_in_flight.map_or(1, |n| n.max(1) as usize)
    }

    /// How often a worker waits after a store error.
    fn idle(&self) -> Duration {
        self.inner.grag.runtime().policy().throttle.polling.interval
    }

    /// How often a worker with a free slot looks for jobs: those whose wait
    /// ran out, and those another replica handed back when it stopped (no
    /// replica tells another), which are taken on within a second.
    fn look(&self) -> Duration {
        self.idle().min(HANDED_BACK)
    }

    /// How often a worker checks whether the breaker closed.
    fn gate(&self) -> Duration {
        let policy = self.inner.grag.runtime().policy();
        policy
            .breaker
            .as_ref()
            .map_or_else(|| self.idle(), |b| b.probe_interval)
    }
}
