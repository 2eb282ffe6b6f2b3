//! The job model: what a store keeps per job, and what a worker asks of it.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::StoreError;

/// Where a job is in its life (policy §5.3.1). Serialized as its stored name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Persisted, never claimed yet.
    Pending,
    /// Claimed by a worker under a lease.
    InFlight,
    /// Finished: it took effect.
    Done,
    /// Given up; the error stays for the UI's re-upload path.
    Failed,
    /// Interrupted by an outage; to be run again once `not_before` has passed.
    PendingReplay,
}

impl JobState {
    /// Every state, in life order.
    pub const ALL: [JobState; 5] = [
        JobState::Pending,
        JobState::InFlight,
        JobState::Done,
        JobState::Failed,
        JobState::PendingReplay,
    ];

    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::InFlight => "in_flight",
            JobState::Done => "done",
            JobState::Failed => "failed",
            JobState::PendingReplay => "pending_replay",
        }
    }

    /// Reads a stored name; anything else is a corrupt row of job `key`.
    pub fn parse(key: &str, stored: &str) -> Result<JobState, StoreError> {
        JobState::ALL
            .into_iter()
            .find(|s| s.as_str() == stored)
            .ok_or_else(|| StoreError::Corrupt {
                key: key.to_owned(),
                field: "state",
                reason: format!("unknown state {:?}", crate::row::clip(stored, 64)),
            })
    }
}

/// A stored name without a job to blame: unknown names are `Corrupt` with an empty key.
impl std::str::FromStr for JobState {
    type Err = StoreError;

    fn from_str(stored: &str) -> Result<Self, StoreError> {
        JobState::parse("", stored)
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A job as submitted. The flow fixes every deterministic id it needs in `payload` here, once.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    /// Caller-chosen, deterministic and unique (e.g. `upload:kb-1:doc-7`): submit is idempotent on it.
    pub key: String,
    /// What the job does; workers claim by kind.
    pub kind: String,
    pub payload: serde_json::Value,
}

/// Who holds an in-flight job, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub owner: String,
    pub until: SystemTime,
}

/// The last error a job met, with the context the UI and the logs need (§10.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobError {
    /// The taxonomy class, e.g. `circuit_open`.
    pub class: String,
    /// The taxonomy row, e.g. `T12`.
    pub row: Option<String>,
    pub status: Option<u16>,
    pub request_id: Option<String>,
    /// Free text; stores keep at most [`JobError::DETAIL_MAX`] bytes of it.
    pub detail: String,
}

impl JobError {
    /// Bytes of `detail` a store keeps (1 KiB): a server's error body is hostile input.
    pub const DETAIL_MAX: usize = 1024;
    /// Bytes a store keeps of `class`, `row` and `request_id`.
    pub const FIELD_MAX: usize = 256;

    /// The same error cut to the sizes a store keeps, each cut on a character boundary.
    pub fn bounded(&self) -> JobError {
        use crate::row::clip;
        JobError {
            class: clip(&self.class, Self::FIELD_MAX).to_owned(),
            row: self
                .row
                .as_deref()
                .map(|r| clip(r, Self::FIELD_MAX).to_owned()),
            status: self.status,
            request_id: self
                .request_id
                .as_deref()
                .map(|r| clip(r, Self::FIELD_MAX).to_owned()),
            detail: clip(&self.detail, Self::DETAIL_MAX).to_owned(),
        }
    }
}

/// A stored job.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub key: String,
    /// Submission order: claims take the oldest first.
    pub seq: i64,
    pub kind: String,
    pub payload: serde_json::Value,
    pub state: JobState,
    /// Claims so far (a takeover after a crash counts as one).
    pub attempts: u32,
    /// The flow's checkpoint, `Null` until the first [`JobStore::checkpoint`](crate::JobStore::checkpoint).
    pub progress: serde_json::Value,
    pub last_error: Option<JobError>,
    /// A replay waits until then (e.g. a 503's `Retry-After`).
    pub not_before: Option<SystemTime>,
    /// Set while in flight.
    pub lease: Option<Lease>,
    pub created_at: SystemTime,
    pub updated_at: SystemTime,
}

/// How a claim ends.
#[derive(Debug, Clone, PartialEq)]
pub enum Finish {
    /// It took effect: the payload is replaced by this one, what identifies the job without its
    /// content (the caller's source of truth holds that; a rerun brings it back).
    Done(serde_json::Value),
    /// Given up: the error stays on the job.
    Failed(JobError),
    /// Run again later, not before `not_before` (at once when `None`).
    Replay {
        error: JobError,
        not_before: Option<SystemTime>,
    },
}

impl Finish {
    /// The state a job ends in.
    pub fn state(&self) -> JobState {
        match self {
            Finish::Done(_) => JobState::Done,
            Finish::Failed(_) => JobState::Failed,
            Finish::Replay { .. } => JobState::PendingReplay,
        }
    }
}

/// What [`JobStore::forget`](crate::JobStore::forget) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Erasure {
    /// The row and its content are gone.
    Erased,
    /// No job has the key.
    Absent,
    /// Another owner holds it under a lease that has not run out: nothing was deleted, since
    /// that worker would write its checkpoint to a row that no longer exists. Stop it, or
    /// forget again once the lease ends.
    Held(Lease),
}

/// Rows and stored payload bytes of the jobs in one state: what the store costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    pub state: JobState,
    pub rows: u64,
    pub payload_bytes: u64,
}

/// A worker's request for work.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    /// Unique per worker incarnation (a restarted process takes a new one), so a stale worker
    /// cannot mistake a taken-over job for its own.
    pub owner: &'a str,
    /// Kinds to claim; none claims nothing.
    pub kinds: &'a [&'a str],
    pub limit: usize,
    pub lease: Duration,
    /// The injected clock: the store never reads its own for eligibility or leases.
    pub now: SystemTime,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_and_unknown_is_corrupt() {
        for s in JobState::ALL {
            assert_eq!(JobState::parse("k", s.as_str()).unwrap(), s);
        }
        match JobState::parse("k", "running") {
            Err(StoreError::Corrupt { key, field, .. }) => {
                assert_eq!((key.as_str(), field), ("k", "state"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn serde_and_from_str_use_the_stored_names() {
        for s in JobState::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
            assert_eq!(s.as_str().parse::<JobState>().unwrap(), s);
        }
        assert!(matches!(
            "done ".parse::<JobState>(),
            Err(StoreError::Corrupt { field: "state", .. })
        ));
    }

    #[test]
    fn bounded_cuts_detail_on_a_char_boundary() {
        let e = JobError {
            class: "c".repeat(300),
            row: None,
            status: Some(503),
            request_id: Some("r".into()),
            detail: "ä".repeat(1000), // 2000 bytes
        };
        let b = e.bounded();
        assert_eq!(b.detail.len(), 1024);
        assert_eq!(b.class.len(), 256);
        assert_eq!(b.request_id.as_deref(), Some("r"));
        let odd = JobError {
            detail: format!("x{}", "ä".repeat(1000)),
            ..e
        };
        assert_eq!(odd.bounded().detail.len(), 1023);
    }
}
