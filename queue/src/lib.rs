//! The storage layer of a durable job queue: jobs are persisted before they run, claimed under
//! leases that expire (a crashed worker's jobs are taken over, no job is held twice at once),
//! checkpointed, and finished `done`, `failed` or `pending_replay`.
//!
//! Two stores implement [`JobStore`]: [`SqliteStore`], embedded, one file, the default; and
//! [`PgStore`], one queue shared by several replicas. Time is always passed in (`now`), so
//! leases and replay delays are tested on an injected clock.

mod error;
mod job;
mod lock_retry;
mod postgres;
mod row;
mod sqlite;
mod store;

pub use error::StoreError;
pub use job::{Claim, Erasure, Finish, Footprint, Job, JobError, JobState, Lease, NewJob};
pub use lock_retry::{LockRetry, lock_retry_delay};
pub use postgres::PgStore;
pub use sqlite::SqliteStore;
pub use store::JobStore;
