//! One job row as both databases store it (text and integer milliseconds), and its decoding.
//! A row comes from a file or a server others can write: every field is checked, none panics.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::{Finish, Job, JobError, JobState, Lease, NewJob, StoreError};

/// The columns every `SELECT` and `RETURNING` lists, in [`RawRow`] order.
pub(crate) const COLUMNS: &str = "key, seq, kind, payload, state, attempts, progress, last_error, \
     not_before, lease_owner, lease_until, created_at, updated_at";

/// A row as read, before decoding.
#[derive(Debug)]
pub(crate) struct RawRow {
    pub key: String,
    pub seq: i64,
    pub kind: String,
    pub payload: String,
    pub state: String,
    pub attempts: i64,
    pub progress: String,
    pub last_error: Option<String>,
    pub not_before: Option<i64>,
    pub lease_owner: Option<String>,
    pub lease_until: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A result row of either driver, one column at a time, in [`COLUMNS`] order.
/// `Err` is the driver's reason a column did not read as asked.
pub(crate) trait Columns {
    fn text(&self, i: usize) -> Result<String, String>;
    fn opt_text(&self, i: usize) -> Result<Option<String>, String>;
    fn int(&self, i: usize) -> Result<i64, String>;
    fn opt_int(&self, i: usize) -> Result<Option<i64>, String>;
}

impl RawRow {
    /// Reads one row; a column of the wrong type is a corrupt field, not an
    /// error of the database.
    pub fn read(r: &impl Columns) -> Result<RawRow, StoreError> {
        let key = r.text(0).map_err(|reason| StoreError::Corrupt {
            key: String::new(),
            field: "key",
            reason,
        })?;
        let corrupt = |field: &'static str| {
            let key = clip(&key, 128).to_owned();
            move |reason| StoreError::Corrupt { key, field, reason }
        };
        Ok(RawRow {
            seq: r.int(1).map_err(corrupt("seq"))?,
            kind: r.text(2).map_err(corrupt("kind"))?,
            payload: r.text(3).map_err(corrupt("payload"))?,
            state: r.text(4).map_err(corrupt("state"))?,
            attempts: r.int(5).map_err(corrupt("attempts"))?,
            progress: r.text(6).map_err(corrupt("progress"))?,
            last_error: r.opt_text(7).map_err(corrupt("last_error"))?,
            not_before: r.opt_int(8).map_err(corrupt("not_before"))?,
            lease_owner: r.opt_text(9).map_err(corrupt("lease_owner"))?,
            lease_until: r.opt_int(10).map_err(corrupt("lease_until"))?,
            created_at: r.int(11).map_err(corrupt("created_at"))?,
            updated_at: r.int(12).map_err(corrupt("updated_at"))?,
            key,
        })
    }

    pub fn decode(self) -> Result<Job, StoreError> {
        let key = self.key;
        let corrupt = |field: &'static str, reason: String| StoreError::Corrupt {
            key: clip(&key, 128).to_owned(),
            field,
            reason,
        };
        let json = |field: &'static str, text: &str| {
            serde_json::from_str::<serde_json::Value>(text)
                .map_err(|e| corrupt(field, e.to_string()))
        };
        let time = |field: &'static str, ms: i64| {
            from_ms(ms).ok_or_else(|| corrupt(field, format!("{ms} ms is out of range")))
        };

        let state = JobState::parse(&key, &self.state)?;
        let attempts = u32::try_from(self.attempts)
            .map_err(|_| corrupt("attempts", format!("{} is out of range", self.attempts)))?;
        let payload = json("payload", &self.payload)?;
        let progress = json("progress", &self.progress)?;
        let last_error = match self.last_error.as_deref() {
            None => None,
            Some(text) => Some(
                serde_json::from_str::<JobError>(text)
                    .map_err(|e| corrupt("last_error", e.to_string()))?,
            ),
        };
        let not_before = self
            .not_before
            .map(|ms| time("not_before", ms))
            .transpose()?;
        let lease = match (self.lease_owner, self.lease_until) {
            (Some(owner), Some(until)) => Some(Lease {
                owner,
                until: time("lease_until", until)?,
            }),
            (None, None) => None,
            _ => {
                return Err(corrupt(
                    "lease",
                    "owner and expiry must be set together".into(),
                ));
            }
        };
        if lease.is_some() != (state == JobState::InFlight) {
            return Err(corrupt(
                "lease",
                format!("a lease must be held exactly while in flight, state is {state}"),
            ));
        }
        Ok(Job {
            seq: self.seq,
            kind: self.kind,
            payload,
            state,
            attempts,
            progress,
            last_error,
            not_before,
            lease,
            created_at: time("created_at", self.created_at)?,
            updated_at: time("updated_at", self.updated_at)?,
            key,
        })
    }
}

/// The stored text of a new job's payload. A value nested deeper than the JSON reader
/// accepts would be stored yet never read back, so it is refused (`Corrupt`, field
/// `payload`) before anything is written.
pub(crate) fn payload_text(key: &str, payload: &serde_json::Value) -> Result<String, StoreError> {
    // Straight into a buffer: `Value`'s `Display` goes through `fmt` one piece at a time.
    let text = serde_json::to_string(payload).map_err(|e| StoreError::Corrupt {
        key: clip(key, 128).to_owned(),
        field: "payload",
        reason: e.to_string(),
    })?;
    if nested_deeper_than(payload, 64) {
        serde_json::from_str::<serde_json::Value>(&text).map_err(|e| StoreError::Corrupt {
            key: clip(key, 128).to_owned(),
            field: "payload",
            reason: e.to_string(),
        })?;
    }
    Ok(text)
}

/// Whether `v` has arrays or objects nested more than `levels` deep (walks at most that far).
fn nested_deeper_than(v: &serde_json::Value, levels: usize) -> bool {
    let deeper = |c: &serde_json::Value| nested_deeper_than(c, levels - 1);
    match v {
        serde_json::Value::Array(a) => levels == 0 || a.iter().any(deeper),
        serde_json::Value::Object(o) => levels == 0 || o.values().any(deeper),
        _ => false,
    }
}

/// The job a submit just inserted, from what it wrote and the `seq` the database gave it:
/// the job a `get` would read back, without reading and decoding it again.
pub(crate) fn inserted(seq: i64, job: NewJob, now_ms: i64) -> Job {
    let at = from_ms(now_ms).unwrap_or(UNIX_EPOCH);
    Job {
        key: job.key,
        seq,
        kind: job.kind,
        payload: job.payload,
        state: JobState::Pending,
        attempts: 0,
        progress: serde_json::Value::Null,
        last_error: None,
        not_before: None,
        lease: None,
        created_at: at,
        updated_at: at,
    }
}

/// A submit the key's uniqueness refused, yet no job has that key: the store contradicts
/// itself.
pub(crate) fn duplicate_yet_absent(key: String) -> StoreError {
    StoreError::Corrupt {
        key,
        field: "key",
        reason: "refused as a duplicate, yet absent".into(),
    }
}

/// The columns a finish writes beside its state: the error, `not_before`, and the payload a
/// done job keeps in place of its content.
pub(crate) fn finish_columns(finish: &Finish) -> (Option<String>, Option<i64>, Option<String>) {
    match finish {
        Finish::Done(kept) => (None, None, Some(kept.to_string())),
        Finish::Failed(e) => (Some(encode_error(e)), None, None),
        Finish::Replay { error, not_before } => {
            (Some(encode_error(error)), not_before.map(to_ms), None)
        }
    }
}

/// Milliseconds since the epoch, saturating (times before 1970 are 0).
/// The lease a job's row names, when it is live at `now_ms` and not
/// `asking`'s own: a job another holds is not erased under it.
pub(crate) fn foreign_lease(
    holder: Option<String>,
    until: Option<i64>,
    asking: Option<&str>,
    now_ms: i64,
) -> Option<Lease> {
    let (Some(holder), Some(until)) = (holder, until) else {
        return None;
    };
    (until >= now_ms && asking != Some(holder.as_str())).then(|| Lease {
        owner: holder,
        until: from_ms(until).unwrap_or(UNIX_EPOCH),
    })
}

pub(crate) fn to_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// `now + lease` in milliseconds, saturating.
pub(crate) fn expiry_ms(now: SystemTime, lease: Duration) -> i64 {
    to_ms(now).saturating_add(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX))
}

pub(crate) fn from_ms(ms: i64) -> Option<SystemTime> {
    let ms = u64::try_from(ms).ok()?;
    UNIX_EPOCH.checked_add(Duration::from_millis(ms))
}

/// The rows of a listing that decode; one that does not is logged and left
/// out, so a single damaged row does not hide every other job from the UI
/// (`get` on its key still says `Corrupt`).
pub(crate) fn readable(rows: impl Iterator<Item = Result<Job, StoreError>>) -> Vec<Job> {
    rows.filter_map(|row| {
        row.map_err(|e| {
            tracing::warn!(target: "sdk_queue", error = %e, "a listed job row does not decode: left out");
        })
        .ok()
    })
    .collect()
}

/// The error a claimed row that does not decode is failed with: it can never
/// run, and left eligible it would stop every claim of its kind.
pub(crate) fn corrupt_error(e: &StoreError) -> String {
    encode_error(&JobError {
        class: "corrupt_row".into(),
        row: None,
        status: None,
        request_id: None,
        detail: e.to_string(),
    })
}

/// The stored form of an error: bounded, as JSON text.
pub(crate) fn encode_error(e: &JobError) -> String {
    serde_json::to_string(&e.bounded()).expect("a JobError always serializes")
}

/// `s` cut to at most `max` bytes, on a character boundary.
pub(crate) fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw() -> RawRow {
        RawRow {
            key: "k".into(),
            seq: 1,
            kind: "upload".into(),
            payload: r#"{"doc":"d-1"}"#.into(),
            state: "pending".into(),
            attempts: 0,
            progress: "null".into(),
            last_error: None,
            not_before: None,
            lease_owner: None,
            lease_until: None,
            created_at: 1_000,
            updated_at: 2_000,
        }
    }

    fn field_of(r: RawRow) -> &'static str {
        match r.decode() {
            Err(StoreError::Corrupt { field, .. }) => field,
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn a_good_row_decodes() {
        let job = raw().decode().unwrap();
        assert_eq!(job.payload["doc"], "d-1");
        assert_eq!(job.created_at, UNIX_EPOCH + Duration::from_secs(1));
        assert_eq!(job.progress, serde_json::Value::Null);
    }

    #[test]
    fn each_bad_field_is_named() {
        assert_eq!(
            field_of(RawRow {
                state: "x".into(),
                ..raw()
            }),
            "state"
        );
        assert_eq!(
            field_of(RawRow {
                attempts: -1,
                ..raw()
            }),
            "attempts"
        );
        assert_eq!(
            field_of(RawRow {
                attempts: i64::MAX,
                ..raw()
            }),
            "attempts"
        );
        assert_eq!(
            field_of(RawRow {
                payload: "{".into(),
                ..raw()
            }),
            "payload"
        );
        assert_eq!(
            field_of(RawRow {
                progress: "".into(),
                ..raw()
            }),
            "progress"
        );
        assert_eq!(
            field_of(RawRow {
                last_error: Some("[]".into()),
                ..raw()
            }),
            "last_error"
        );
        assert_eq!(
            field_of(RawRow {
                not_before: Some(-5),
                ..raw()
            }),
            "not_before"
        );
        assert_eq!(
            field_of(RawRow {
                created_at: -1,
                ..raw()
            }),
            "created_at"
        );
        assert_eq!(
            field_of(RawRow {
                lease_owner: Some("w".into()),
                ..raw()
            }),
            "lease"
        );
        let leased = RawRow {
            lease_owner: Some("w".into()),
            lease_until: Some(5),
            ..raw()
        };
        assert_eq!(field_of(leased), "lease");
        assert_eq!(
            field_of(RawRow {
                state: "in_flight".into(),
                ..raw()
            }),
            "lease"
        );
    }

    #[test]
    fn a_deeply_nested_payload_is_refused_not_a_stack_overflow() {
        let deep = "[".repeat(100_000);
        assert_eq!(
            field_of(RawRow {
                payload: deep,
                ..raw()
            }),
            "payload"
        );
    }

    #[test]
    fn a_payload_too_deep_to_read_back_is_refused_before_it_is_stored() {
        let nested = |depth: usize| NewJob {
            key: "k".into(),
            kind: "ingest".into(),
            payload: serde_json::from_str(&format!("{}{}", "[".repeat(depth), "]".repeat(depth)))
                .unwrap(),
        };
        for depth in [1, 64, 65, 127] {
            let job = nested(depth);
            let text = payload_text(&job.key, &job.payload).unwrap();
            assert_eq!(
                serde_json::from_str::<serde_json::Value>(&text).unwrap(),
                nested(depth).payload
            );
        }
        let mut deep = serde_json::Value::Null;
        for _ in 0..200 {
            deep = serde_json::json!({ "a": [deep] });
        }
        let job = NewJob {
            payload: deep,
            ..nested(1)
        };
        assert!(matches!(
            payload_text(&job.key, &job.payload),
            Err(StoreError::Corrupt {
                field: "payload",
                ..
            })
        ));
    }

    #[test]
    fn an_inserted_job_is_the_row_a_get_decodes() {
        let job = NewJob {
            key: "k".into(),
            kind: "upload".into(),
            payload: serde_json::json!({ "doc": "d-1" }),
        };
        let read = RawRow {
            created_at: 1_000,
            updated_at: 1_000,
            ..raw()
        };
        assert_eq!(inserted(1, job, 1_000), read.decode().unwrap());
    }

    #[test]
    fn times_saturate() {
        assert_eq!(to_ms(UNIX_EPOCH - Duration::from_secs(1)), 0);
        assert_eq!(expiry_ms(UNIX_EPOCH, Duration::MAX), i64::MAX);
        assert_eq!(from_ms(i64::MAX).map(to_ms), Some(i64::MAX));
    }
}
