//! The storage contract a worker relies on, the same for every database.

use std::time::{Duration, SystemTime};

use crate::{Claim, Erasure, Finish, Footprint, Job, JobState, NewJob, StoreError};

/// A durable job store. Eligibility to claim: state `pending` or `pending_replay` with
/// `not_before` unset or `<= now`, or `in_flight` with a lease that expired (`until < now`: a
/// crashed worker's job). No job is ever held by two owners at once. Every time decision uses
/// the `now` passed in, never the store's own clock.
///
/// A worker renews its lease by checkpointing well within it: past its expiry another worker
/// may take the job over, and the first learns so by `LeaseLost` at its next checkpoint or
/// finish. A row that does not decode is `Corrupt` to `get` and `depth`; `list` leaves it out
/// (logged), and a claim fails that job (`corrupt_row`, the reason kept) and takes the others,
/// so one damaged row never stops the queue or hides the rest, and stays for an operator.
#[async_trait::async_trait]
pub trait JobStore: Send + Sync + 'static {
    /// Persist a new job as `pending`; if the key exists, return the stored job unchanged.
    async fn submit(&self, job: NewJob, now: SystemTime) -> Result<Job, StoreError>;
    /// Claim up to `limit` eligible jobs of `kinds`, oldest `seq` first. Claimed jobs become
    /// `in_flight` with lease `{owner, now + lease}` and `attempts += 1`.
    async fn claim(&self, claim: Claim<'_>) -> Result<Vec<Job>, StoreError>;
    /// Claim one job by key if it is eligible (same rule); `None` otherwise.
    async fn claim_key(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
        now: SystemTime,
    ) -> Result<Option<Job>, StoreError>;
    /// Save the flow's checkpoint and renew the lease to `now + lease`; `LeaseLost` if `owner`
    /// no longer holds the job.
    async fn checkpoint(
        &self,
        key: &str,
        owner: &str,
        progress: &serde_json::Value,
        lease: Duration,
        now: SystemTime,
    ) -> Result<(), StoreError>;
    /// End the claim: `done` (the payload replaced by the one it keeps), `failed` (keeps the
    /// error) or `pending_replay` (keeps the error, sets `not_before`); the lease is cleared. `LeaseLost` if `owner` does not hold the job.
    async fn finish(
        &self,
        key: &str,
        owner: &str,
        finish: Finish,
        now: SystemTime,
    ) -> Result<(), StoreError>;
    async fn get(&self, key: &str) -> Result<Option<Job>, StoreError>;
    /// Jobs in `state`, oldest first, at most `limit` (the UI lists failed ones for re-upload).
    async fn list(&self, state: JobState, limit: usize) -> Result<Vec<Job>, StoreError>;
    /// Count per (kind, state) of every job not done: the queue depth metric.
    async fn depth(&self) -> Result<Vec<(String, JobState, u64)>, StoreError>;
    /// Make a `failed` job `pending` again, a person's decision (the UI's re-upload): its
    /// attempts, checkpoint and last error stay. `false` if the job is not failed.
    async fn requeue(&self, key: &str, now: SystemTime) -> Result<bool, StoreError>;
    /// Make a `done` job `pending` again with `payload` (its content, from the caller's own
    /// state: a done job no longer has it) and `progress` as its checkpoint, a person's request
    /// to run it again (the platform lost what it made): its attempts and last error stay.
    /// `false` if the job is not done.
    async fn rerun(
        &self,
        key: &str,
        payload: &serde_json::Value,
        progress: &serde_json::Value,
        now: SystemTime,
    ) -> Result<bool, StoreError>;
    /// Delete the job and its content, whatever its state, unless an owner other than `owner`
    /// holds it under a lease still running at `now` (see [`Erasure::Held`]).
    async fn forget(
        &self,
        key: &str,
        owner: Option<&str>,
        now: SystemTime,
    ) -> Result<Erasure, StoreError>;
    /// Delete at most `limit` jobs that ended long enough ago: `done` ones last updated before
    /// `done_before`, `failed` ones before `failed_before` (their content kept for the UI's
    /// re-upload until then). One short statement that skips any row a claim holds, so a
    /// retention pass calls it in a loop of small batches and never holds a claim back. On a
    /// shared store one replica prunes at a time: another's call deletes nothing. The number deleted.
    async fn prune(
        &self,
        done_before: SystemTime,
        failed_before: SystemTime,
        limit: usize,
    ) -> Result<u64, StoreError>;
    /// Rows and payload bytes per state, every state with a row.
    async fn footprint(&self) -> Result<Vec<Footprint>, StoreError>;
}
