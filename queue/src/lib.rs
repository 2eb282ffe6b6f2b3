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

/// The version of the stores' schema this release writes, stamped in each database (SQLite's
/// `user_version`, PostgreSQL's `schema_version` table). 1: the first stamped; its tables are
/// those of the releases before, which carried no version, so opening one of theirs stamps it
/// and changes nothing else. A database of a later version is refused, never written.
pub const SCHEMA_VERSION: i64 = 1;
