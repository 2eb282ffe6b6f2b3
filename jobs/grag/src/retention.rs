//! The retention pass: jobs that ended are deleted once the spec's
//! `replay.retention` says they are no longer needed (Knoll's database and
//! file store are the source of truth, §1.4), a small batch a statement so a
//! claim never waits behind it.

use std::time::SystemTime;

use crate::JobsError;
use crate::run::Jobs;

impl Jobs {
    /// One retention pass: deletes done jobs older than `keep_done` and
    /// failed ones older than `keep_failed`, `prune_batch` rows a statement,
    /// until none is left. How many it deleted (none while another replica
    /// of a shared store runs its pass).
    pub async fn prune(&self) -> Result<u64, JobsError> {
        let policy = self.inner.policy;
        let now = self.now();
        let before = |age| now.checked_sub(age).unwrap_or(SystemTime::UNIX_EPOCH);
        let (done, failed) = (before(policy.keep_done), before(policy.keep_failed));
        let mut deleted = 0;
        loop {
            let batch = self
                .inner
                .store
                .prune(done, failed, policy.prune_batch)
                .await;
            let batch = batch.map_err(|e| self.watch("(prune)", e))?;
            deleted += batch;
            if batch < policy.prune_batch as u64 {
                return Ok(deleted);
            }
            // Between batches, the claims and checkpoints waiting go first.
            tokio::task::yield_now().await;
        }
    }

    /// Runs a retention pass every `prune_every`, for as long as the
    /// worker runs; a failed pass is logged and tried again next time.
    pub(crate) async fn retain(&self) {
        loop {
            match self.prune().await {
                Ok(deleted) if deleted > 0 => {
                    tracing::debug!(target: "grag_jobs::retention", deleted, "ended jobs deleted");
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(target: "grag_jobs::retention", error = %e, "retention pass failed");
                }
            }
            tokio::time::sleep(self.inner.policy.prune_every).await;
        }
    }
}
