//! The GRAG writes the backend must never lose or apply twice (policy §5.3):
//! an upload (upload → convert → ingest of its points) and a KG write batch
//! are durable jobs. A job is persisted before its first request, checkpointed
//! after every step, and replayed idempotently when an outage (an open
//! breaker, a terminal connection failure, WAL backpressure) interrupted it.
//!
//! ```no_run
//! # async fn demo(grag: grag_client::Grag, upload: grag_jobs::Upload) -> Result<(), grag_jobs::JobsError> {
//! use std::sync::Arc;
//! use grag_jobs::Jobs;
//! use sdk_queue::SqliteStore;
//!
//! let store = SqliteStore::open("knoll-jobs.sqlite", grag_jobs::lock_retry())?;
//! let jobs = Jobs::new(grag, Arc::new(store), "replica-1")?;
//! let job = jobs.submit_upload(upload).await?; // done, or pending_replay: never lost
//! tokio::spawn(jobs.clone().work()); // replays pending jobs once the breaker closes
//! # let _ = job; Ok(()) }
//! ```
//!
//! Hand-written on top of the generated client: the steps of a job are a
//! workflow of several routes, not one route, so they are not in the spec;
//! the numbers they run by (budget, lease, split, lock retry, metric and alert
//! names) are, in `policy.yaml replay`, and which failures a job waits out
//! is the `replay` column of `taxonomy.yaml` ([`settle`]).

mod job;
mod kept;
mod kg;
mod metrics;
mod retention;
mod run;
mod settle;
mod shared;
mod step;
mod stop;
mod upload;
mod worker;

pub use job::{JobsError, KgBatch, Upload, document_key, kg_key, upload_key};
pub use kept::Content;
pub use run::{Jobs, lock_retry};
pub use sdk_queue::{Erasure, Job, JobState, JobStore};
pub use settle::{Settle, settle};
pub use stop::Stopped;
