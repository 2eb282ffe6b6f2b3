//! The embedded store: one SQLite file in WAL mode, the default (nothing to install).

use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use rusqlite::limits::Limit;
use rusqlite::types::FromSql;
use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};
use tokio::runtime::RuntimeFlavor;

use crate::row::{
    COLUMNS, Columns, RawRow, duplicate_yet_absent, expiry_ms, finish_columns, inserted,
    payload_text, to_ms,
};
use crate::{
    Claim, Erasure, Finish, Footprint, Job, JobState, JobStore, LockRetry, NewJob, StoreError,
    lock_retry_delay,
};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS jobs (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    key         TEXT NOT NULL UNIQUE,
    kind        TEXT NOT NULL,
    payload     TEXT NOT NULL,
    state       TEXT NOT NULL,
    attempts    INTEGER NOT NULL,
    progress    TEXT NOT NULL,
    last_error  TEXT,
    not_before  INTEGER,
    lease_owner TEXT,
    lease_until INTEGER,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_state_seq ON jobs (state, seq);
";

/// Eligible to claim at `?3` (now, ms): see [`JobStore`].
const ELIGIBLE: &str = "((state IN ('pending', 'pending_replay') AND (not_before IS NULL OR not_before <= ?3)) \
     OR (state = 'in_flight' AND lease_until < ?3))";

/// The statements that splice [`COLUMNS`] or [`ELIGIBLE`] in, spliced once:
/// each is prepared once per connection (`prepare_cached`) and found again
/// by its text, never parsed again per call.
struct Sql {
    select: String,
    claim: String,
    claim_key: String,
    list: String,
}

static SQL: LazyLock<Sql> = LazyLock::new(|| Sql {
    select: format!("SELECT {COLUMNS} FROM jobs WHERE key = ?1"),
    claim: format!(
        "UPDATE jobs SET state = 'in_flight', lease_owner = ?1, lease_until = ?2, \
         attempts = attempts + 1, updated_at = ?3 \
         WHERE seq IN (SELECT seq FROM jobs WHERE kind IN (SELECT value FROM json_each(?4)) \
         AND {ELIGIBLE} ORDER BY seq LIMIT ?5) RETURNING {COLUMNS}"
    ),
    claim_key: format!(
        "UPDATE jobs SET state = 'in_flight', lease_owner = ?1, lease_until = ?2, \
         attempts = attempts + 1, updated_at = ?3 WHERE key = ?4 AND {ELIGIBLE} RETURNING {COLUMNS}"
    ),
    list: format!("SELECT {COLUMNS} FROM jobs WHERE state = ?1 ORDER BY seq LIMIT ?2"),
});

/// A job store in one SQLite file. Operations run one at a time on the store's connection, never
/// on an async worker (see `off_worker`); several stores (or processes) may share the file.
///
/// Not a thread of the store's own fed by a channel: an operation would still wait for that
/// thread to be scheduled and for its answer to wake the caller, two wake-ups as with a blocking
/// task, and under paused time (the tests) the clock would jump ahead while the runtime only
/// awaited the channel.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Mutex<Connection>,
    path: PathBuf,
    retry: LockRetry,
}

/// An operation's failure before the retry rule looks at it.
enum Fail {
    Sql(rusqlite::Error),
    Store(StoreError),
}

impl From<rusqlite::Error> for Fail {
    fn from(e: rusqlite::Error) -> Self {
        Fail::Sql(e)
    }
}

impl From<StoreError> for Fail {
    fn from(e: StoreError) -> Self {
        Fail::Store(e)
    }
}

impl SqliteStore {
    /// How long SQLite itself waits for another connection's lock before it reports "database
    /// is locked": 5 s, the default of Python's `sqlite3` under which the Core policy's rule was
    /// written. Our write transactions last milliseconds, so this absorbs any ordinary overlap
    /// of workers sharing the file without an error; a lock error that reaches the policy's 3
    /// attempts means a writer held the lock for seconds, which is worth a log line.
    pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

    /// The largest value (a payload, a checkpoint) the store writes or reads: 64 MiB. The file
    /// is input others can write; past this SQLite refuses the value (`string or blob too big`)
    /// instead of handing it over, so one row never costs more memory than that.
    pub const VALUE_MAX: usize = 64 << 20;

    /// Opens (creating if absent) the store at `path`, with the policy's lock `retry` rule.
    pub fn open(path: impl AsRef<Path>, retry: LockRetry) -> Result<Self, StoreError> {
        Self::open_with(path, retry, Self::DEFAULT_BUSY_TIMEOUT)
    }

    /// [`SqliteStore::open`] with SQLite's own busy wait set to `busy_timeout` (zero: every
    /// lock error goes straight to the retry rule, as the contention tests need).
    pub fn open_with(
        path: impl AsRef<Path>,
        retry: LockRetry,
        busy_timeout: Duration,
    ) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let refused = |e: rusqlite::Error| StoreError::Open {
            what: path.display().to_string(),
            reason: e.to_string(),
        };
        let mut conn = Connection::open(&path).map_err(refused)?;
        conn.busy_timeout(busy_timeout).map_err(refused)?;
        conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, Self::VALUE_MAX as i32)
            .map_err(refused)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(refused)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Open {
                what: path.display().to_string(),
                reason: format!("WAL mode refused, journal mode is {mode}"),
            });
        }
        // A forgotten job's bytes, and the content a done job drops, are overwritten with zeros
        // instead of lingering in free pages of the file.
        conn.pragma_update(None, "secure_delete", "ON")
            .map_err(refused)?;
        conn.execute_batch(SCHEMA).map_err(refused)?;
        migrate(&mut conn).map_err(|reason| StoreError::Open {
            what: path.display().to_string(),
            reason,
        })?;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                conn: Mutex::new(conn),
                path,
                retry,
            }),
        })
    }

    /// Runs `work` off the async workers, again after the rule's delay while the database is locked.
    /// `key`: the job the operation is about, for the lock lines (none for a claim or a listing).
    async fn run<T, F>(&self, op: &'static str, key: Option<&str>, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Fn(&mut Connection) -> Result<T, Fail> + Send + Sync + 'static,
    {
        let work = Arc::new(work);
        let mut attempt = 1;
        loop {
            let outcome = self.off_worker(op, &work).await?;
            let error = match outcome {
                Ok(value) => return Ok(value),
                Err(Fail::Store(e)) => return Err(e),
                Err(Fail::Sql(e)) => e,
            };
            let locked = is_locked(&error);
            let path = self.inner.path.display();
            match lock_retry_delay(&self.inner.retry, attempt, locked) {
                Some(delay) => {
                    tracing::warn!(target: "sdk_queue", op, key, attempt, delay_ms = delay.as_millis() as u64, path = %path, error = %error, "database is locked, retrying");
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                None if locked => {
                    tracing::error!(target: "sdk_queue", op, key, attempts = attempt, path = %path, error = %error, "database is locked, retries exhausted");
                    return Err(StoreError::Locked {
                        op,
                        attempts: attempt,
                    });
                }
                None => return Err(StoreError::database(op, error)),
            }
        }
    }
}

impl SqliteStore {
    /// Runs `work` once on the store's connection where it does not block an async worker. On a
    /// multi-thread runtime in place: `block_in_place` first hands this worker's other tasks to
    /// another thread (without waiting for it), so an operation costs no thread hop. A
    /// current-thread runtime refuses that (it has no other thread), so there it runs on a
    /// blocking thread; tokio counts that as work in progress, so under paused time (the tests)
    /// the clock does not jump ahead while an operation runs.
    async fn off_worker<T, F>(
        &self,
        op: &'static str,
        work: &Arc<F>,
    ) -> Result<Result<T, Fail>, StoreError>
    where
        T: Send + 'static,
        F: Fn(&mut Connection) -> Result<T, Fail> + Send + Sync + 'static,
    {
        let flavor = tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor());
        if matches!(flavor, Ok(RuntimeFlavor::MultiThread) | Err(_)) {
            return Ok(tokio::task::block_in_place(|| work(&mut self.inner.conn())));
        }
        let (inner, work) = (self.inner.clone(), work.clone());
        tokio::task::spawn_blocking(move || work(&mut inner.conn()))
            .await
            .map_err(|e| StoreError::database(op, e))
    }
}

impl Inner {
    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Brings the file to [`SCHEMA_VERSION`](crate::SCHEMA_VERSION): an unversioned file (an
/// earlier release's) is stamped in one write transaction, its jobs as they are; a later one is
/// refused. A current file is only read, so opening it waits for no other writer.
fn migrate(conn: &mut Connection) -> Result<(), String> {
    let version = |c: &Connection| -> Result<i64, String> {
        c.query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| e.to_string())
    };
    if version(conn)? == crate::SCHEMA_VERSION {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| e.to_string())?;
    match version(&tx)? {
        v if v == crate::SCHEMA_VERSION => return Ok(()),
        0 => tx
            .pragma_update(None, "user_version", crate::SCHEMA_VERSION)
            .map_err(|e| e.to_string())?,
        v => {
            return Err(format!(
                "schema version {v} is not one this release knows (it writes {}): written by a later release",
                crate::SCHEMA_VERSION
            ));
        }
    }
    tx.commit().map_err(|e| e.to_string())
}

fn is_locked(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

impl Columns for rusqlite::Row<'_> {
    fn text(&self, i: usize) -> Result<String, String> {
        self.get(i).map_err(|e| e.to_string())
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, String> {
        self.get(i).map_err(|e| e.to_string())
    }
    fn int(&self, i: usize) -> Result<i64, String> {
        self.get(i).map_err(|e| e.to_string())
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>, String> {
        self.get(i).map_err(|e| e.to_string())
    }
}

/// Runs a claim's `UPDATE … RETURNING` and decodes the rows it claimed. A
/// row that does not decode is failed in the same transaction (`corrupt_row`)
/// and left out, so one damaged row cannot stop the queue.
fn claimed(
    tx: &rusqlite::Transaction<'_>,
    sql: &str,
    params: impl rusqlite::Params,
    now: i64,
) -> Result<Vec<Job>, Fail> {
    let mut good = Vec::new();
    let mut bad = Vec::new();
    {
        let mut stmt = tx.prepare_cached(sql)?;
        let mut rows = stmt.query(params)?;
        while let Some(r) = rows.next()? {
            let seq: i64 = r.get(1)?;
            match RawRow::read(r).and_then(RawRow::decode) {
                Ok(job) => good.push(job),
                Err(e) => bad.push((seq, e)),
            }
        }
    }
    for (seq, e) in bad {
        tracing::warn!(target: "sdk_queue", seq, error = %e, "a claimed job row does not decode: failed as corrupt_row");
        tx.prepare_cached(
            "UPDATE jobs SET state = 'failed', last_error = ?1, lease_owner = NULL, lease_until = NULL, \
             updated_at = ?2 WHERE seq = ?3",
        )?
        .execute(params![crate::row::corrupt_error(&e), now, seq])?;
    }
    good.sort_by_key(|j| j.seq);
    Ok(good)
}

/// Runs a query and decodes every row it returns.
fn jobs(
    stmt: &mut rusqlite::Statement<'_>,
    params: impl rusqlite::Params,
) -> Result<Vec<Job>, Fail> {
    let mut rows = stmt.query(params)?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(RawRow::read(r)?.decode()?);
    }
    Ok(out)
}

fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[async_trait::async_trait]
impl JobStore for SqliteStore {
    async fn submit(&self, job: NewJob, now: SystemTime) -> Result<Job, StoreError> {
        let (payload, now) = (payload_text(&job.key, &job.payload)?, to_ms(now));
        let (key, kind) = (job.key.clone(), job.kind.clone());
        let known = self
            .run("submit", Some(&job.key), move |conn| {
                // One statement is one transaction: a new key gets its seq back, a known key
                // nothing, and then the stored job is the answer.
                let mut insert = conn.prepare_cached(
                    "INSERT INTO jobs (key, kind, payload, state, attempts, progress, created_at, updated_at) \
                     VALUES (?1, ?2, ?3, 'pending', 0, 'null', ?4, ?4) ON CONFLICT (key) DO NOTHING RETURNING seq",
                )?;
                let mut rows = insert.query(params![key, kind, payload, now])?;
                let seq: Option<i64> = rows.next()?.map(|r| r.get(0)).transpose()?;
                // The statement's last step commits: a failure there is this submit's.
                while rows.next()?.is_some() {}
                drop(rows);
                let Some(seq) = seq else {
                    let mut stmt = conn.prepare_cached(&SQL.select)?;
                    return Ok(Err(jobs(&mut stmt, [&key])?.pop()));
                };
                Ok(Ok(seq))
            })
            .await?;
        match known {
            Ok(seq) => Ok(inserted(seq, job, now)),
            Err(Some(stored)) => Ok(stored),
            Err(None) => Err(duplicate_yet_absent(job.key)),
        }
    }

    async fn claim(&self, claim: Claim<'_>) -> Result<Vec<Job>, StoreError> {
        if claim.limit == 0 || claim.kinds.is_empty() {
            return Ok(Vec::new());
        }
        let kinds = serde_json::to_string(claim.kinds).expect("strings serialize");
        let (owner, until, now, limit) = (
            claim.owner.to_owned(),
            expiry_ms(claim.now, claim.lease),
            to_ms(claim.now),
            to_i64(claim.limit),
        );
        self.run("claim", None, move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let jobs = claimed(
                &tx,
                &SQL.claim,
                params![owner, until, now, kinds, limit],
                now,
            )?;
            tx.commit()?;
            Ok(jobs)
        })
        .await
    }

    async fn claim_key(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
        now: SystemTime,
    ) -> Result<Option<Job>, StoreError> {
        let job_key = key;
        let (key, owner, until, now) = (
            key.to_owned(),
            owner.to_owned(),
            expiry_ms(now, lease),
            to_ms(now),
        );
        self.run("claim_key", Some(job_key), move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let job = claimed(&tx, &SQL.claim_key, params![owner, until, now, key], now)?.pop();
            tx.commit()?;
            Ok(job)
        })
        .await
    }

    async fn checkpoint(
        &self,
        key: &str,
        owner: &str,
        progress: &serde_json::Value,
        lease: Duration,
        now: SystemTime,
    ) -> Result<(), StoreError> {
        let job_key = key;
        let (key, owner, progress) = (key.to_owned(), owner.to_owned(), progress.to_string());
        let (until, now) = (expiry_ms(now, lease), to_ms(now));
        self.run("checkpoint", Some(job_key), move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let changed = tx
                .prepare_cached(
                    "UPDATE jobs SET progress = ?1, lease_until = ?2, updated_at = ?3 \
                 WHERE key = ?4 AND state = 'in_flight' AND lease_owner = ?5",
                )?
                .execute(params![progress, until, now, key, owner])?;
            tx.commit()?;
            held(changed, &key)
        })
        .await
    }

    async fn finish(
        &self,
        key: &str,
        owner: &str,
        finish: Finish,
        now: SystemTime,
    ) -> Result<(), StoreError> {
        let job_key = key;
        let (key, owner, state) = (key.to_owned(), owner.to_owned(), finish.state().as_str());
        let (error, not_before, kept) = finish_columns(&finish);
        let now = to_ms(now);
        self.run("finish", Some(job_key), move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let changed = tx.prepare_cached(
                "UPDATE jobs SET state = ?1, last_error = COALESCE(?2, last_error), not_before = ?3, \
                 lease_owner = NULL, lease_until = NULL, updated_at = ?4, payload = COALESCE(?7, payload) \
                 WHERE key = ?5 AND state = 'in_flight' AND lease_owner = ?6",
            )?
            .execute(params![state, error, not_before, now, key, owner, kept])?;
            tx.commit()?;
            held(changed, &key)
        })
        .await
    }

    async fn get(&self, key: &str) -> Result<Option<Job>, StoreError> {
        let job_key = key;
        let key = key.to_owned();
        self.run("get", Some(job_key), move |conn| {
            let mut stmt = conn.prepare_cached(&SQL.select)?;
            Ok(jobs(&mut stmt, [&key])?.pop())
        })
        .await
    }

    async fn list(&self, state: JobState, limit: usize) -> Result<Vec<Job>, StoreError> {
        let limit = to_i64(limit);
        self.run("list", None, move |conn| {
            let mut stmt = conn.prepare_cached(&SQL.list)?;
            let mut rows = stmt.query(params![state.as_str(), limit])?;
            let mut decoded = Vec::new();
            while let Some(r) = rows.next()? {
                decoded.push(RawRow::read(r).and_then(RawRow::decode));
            }
            Ok(crate::row::readable(decoded.into_iter()))
        })
        .await
    }

    async fn depth(&self) -> Result<Vec<(String, JobState, u64)>, StoreError> {
        self.run("depth", None, |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT kind, state, COUNT(*) FROM jobs WHERE state <> 'done' GROUP BY kind, state ORDER BY kind, state",
            )?;
            let mut rows = stmt.query([])?;
            let mut out = Vec::new();
            while let Some(r) = rows.next()? {
                let (kind, state, count) = (depth_col::<String>(r, 0, "kind")?, depth_col::<String>(r, 1, "state")?, r.get::<_, i64>(2)?);
                let state = JobState::parse(&format!("(a job of kind {})", crate::row::clip(&kind, 64)), &state)?;
                out.push((kind, state, u64::try_from(count).unwrap_or(0)));
            }
            Ok(out)
        })
        .await
    }

    async fn requeue(&self, key: &str, now: SystemTime) -> Result<bool, StoreError> {
        let job_key = key;
        let (key, now) = (key.to_owned(), to_ms(now));
        self.run("requeue", Some(job_key), move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let changed = tx
                .prepare_cached(
                    "UPDATE jobs SET state = 'pending', not_before = NULL, updated_at = ?1 \
                 WHERE key = ?2 AND state = 'failed'",
                )?
                .execute(params![now, key])?;
            tx.commit()?;
            Ok(changed == 1)
        })
        .await
    }

    async fn rerun(
        &self,
        key: &str,
        payload: &serde_json::Value,
        progress: &serde_json::Value,
        now: SystemTime,
    ) -> Result<bool, StoreError> {
        let job_key = key;
        let payload = payload_text(key, payload)?;
        let (key, now, progress) = (key.to_owned(), to_ms(now), progress.to_string());
        self.run("rerun", Some(job_key), move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let changed = tx.prepare_cached(
                "UPDATE jobs SET state = 'pending', payload = ?4, progress = ?1, not_before = NULL, updated_at = ?2 \
                 WHERE key = ?3 AND state = 'done'",
            )?
            .execute(params![progress, now, key, payload])?;
            tx.commit()?;
            Ok(changed == 1)
        })
        .await
    }

    async fn forget(
        &self,
        key: &str,
        owner: Option<&str>,
        now: SystemTime,
    ) -> Result<Erasure, StoreError> {
        let job_key = key;
        let (key, owner, now) = (key.to_owned(), owner.map(str::to_owned), to_ms(now));
        self.run("forget", Some(job_key), move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let holder: Option<(Option<String>, Option<i64>)> = tx
                .prepare_cached("SELECT lease_owner, lease_until FROM jobs WHERE key = ?1")?
                .query_row([&key], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            let erasure = match holder.map(|(holder, until)| {
                crate::row::foreign_lease(holder, until, owner.as_deref(), now)
            }) {
                None => Erasure::Absent,
                Some(Some(lease)) => Erasure::Held(lease),
                Some(None) => {
                    tx.prepare_cached("DELETE FROM jobs WHERE key = ?1")?
                        .execute([&key])?;
                    Erasure::Erased
                }
            };
            tx.commit()?;
            Ok(erasure)
        })
        .await
    }

    async fn prune(
        &self,
        done_before: SystemTime,
        failed_before: SystemTime,
        limit: usize,
    ) -> Result<u64, StoreError> {
        let (done, failed, limit) = (to_ms(done_before), to_ms(failed_before), to_i64(limit));
        self.run("prune", None, move |conn| {
            let deleted = conn
                .prepare_cached(
                    "DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs \
                     WHERE (state = 'done' AND updated_at < ?1) OR (state = 'failed' AND updated_at < ?2) \
                     ORDER BY seq LIMIT ?3)",
                )?
                .execute(params![done, failed, limit])?;
            Ok(deleted as u64)
        })
        .await
    }

    async fn footprint(&self) -> Result<Vec<Footprint>, StoreError> {
        self.run("footprint", None, |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT state, COUNT(*), COALESCE(SUM(LENGTH(CAST(payload AS BLOB))), 0) FROM jobs \
                 GROUP BY state ORDER BY state",
            )?;
            let mut rows = stmt.query([])?;
            let mut out = Vec::new();
            while let Some(r) = rows.next()? {
                let state = JobState::parse("(footprint)", &depth_col::<String>(r, 0, "state")?)?;
                let (rows, bytes): (i64, i64) = (r.get(1)?, r.get(2)?);
                out.push(Footprint {
                    state,
                    rows: u64::try_from(rows).unwrap_or(0),
                    payload_bytes: u64::try_from(bytes).unwrap_or(0),
                });
            }
            Ok(out)
        })
        .await
    }
}

fn depth_col<T: FromSql>(
    r: &rusqlite::Row<'_>,
    i: usize,
    field: &'static str,
) -> Result<T, StoreError> {
    r.get(i).map_err(|e| StoreError::Corrupt {
        key: "(depth)".into(),
        field,
        reason: e.to_string(),
    })
}

/// One row changed: the owner held the lease.
fn held(changed: usize, key: &str) -> Result<(), Fail> {
    if changed == 1 {
        Ok(())
    } else {
        Err(StoreError::LeaseLost {
            key: key.to_owned(),
        }
        .into())
    }
}
