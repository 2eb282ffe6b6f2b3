//! The shared store: one PostgreSQL table that several backend replicas claim from.
//!
//! Claims take rows with `FOR UPDATE SKIP LOCKED` inside one `UPDATE`, so concurrent claimers
//! never wait on each other and never take the same row; a lease that expired makes a crashed
//! replica's job eligible again, and the row lock plus the re-checked condition let exactly one
//! claimer take it over.

use std::time::{Duration, SystemTime};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;
use tokio_postgres::types::ToSql;

use crate::row::{
    COLUMNS, Columns, RawRow, duplicate_yet_absent, expiry_ms, finish_columns, inserted,
    payload_text, to_ms,
};
use crate::{Claim, Erasure, Finish, Footprint, Job, JobState, JobStore, NewJob, StoreError};

/// Eligible to claim at `$3` (now, ms): see [`JobStore`].
const ELIGIBLE: &str = "((state IN ('pending', 'pending_replay') AND (not_before IS NULL OR not_before <= $3)) \
     OR (state = 'in_flight' AND lease_until < $3))";

/// A job store in the table `jobs` of one PostgreSQL schema.
#[derive(Clone)]
pub struct PgStore {
    pool: Pool,
    sql: Sql,
}

/// Every statement, with the schema filled in once.
#[derive(Clone)]
struct Sql {
    insert: String,
    select: String,
    claim: String,
    claim_key: String,
    /// Fails a claimed row that does not decode.
    quarantine: String,
    checkpoint: String,
    finish: String,
    list: String,
    depth: String,
    requeue: String,
    rerun: String,
    holder: String,
    forget: String,
    prune: String,
    /// The advisory lock key of this schema's retention pass.
    pruner: String,
    footprint: String,
}

impl Sql {
    fn new(schema: &str) -> Sql {
        let t = format!("\"{schema}\".jobs");
        let claimed = "state = 'in_flight', lease_owner = $1, lease_until = $2, attempts = attempts + 1, updated_at = $3";
        Sql {
            insert: format!(
                "INSERT INTO {t} (key, kind, payload, state, attempts, progress, created_at, updated_at) \
                 VALUES ($1, $2, $3, 'pending', 0, 'null', $4, $4) ON CONFLICT (key) DO NOTHING RETURNING seq"
            ),
            select: format!("SELECT {COLUMNS} FROM {t} WHERE key = $1"),
            claim: format!(
                "UPDATE {t} SET {claimed} WHERE seq IN (SELECT seq FROM {t} WHERE live AND kind = ANY($4) AND {ELIGIBLE} \
                 ORDER BY seq LIMIT $5 FOR UPDATE SKIP LOCKED) RETURNING {COLUMNS}"
            ),
            claim_key: format!(
                "UPDATE {t} SET {claimed} WHERE key = $4 AND {ELIGIBLE} RETURNING {COLUMNS}"
            ),
            quarantine: format!(
                "UPDATE {t} SET state = 'failed', last_error = $1, lease_owner = NULL, lease_until = NULL, \
                 updated_at = $2 WHERE seq = $3 AND state = 'in_flight' AND lease_owner = $4 AND lease_until = $5"
            ),
            checkpoint: format!(
                "UPDATE {t} SET progress = $1, lease_until = $2, updated_at = $3 \
                 WHERE key = $4 AND state = 'in_flight' AND lease_owner = $5"
            ),
            finish: format!(
                "UPDATE {t} SET state = $1, last_error = COALESCE($2, last_error), not_before = $3, \
                 lease_owner = NULL, lease_until = NULL, updated_at = $4, payload = COALESCE($7, payload) \
                 WHERE key = $5 AND state = 'in_flight' AND lease_owner = $6"
            ),
            list: format!("SELECT {COLUMNS} FROM {t} WHERE state = $1 ORDER BY seq LIMIT $2"),
            requeue: format!(
                "UPDATE {t} SET state = 'pending', not_before = NULL, updated_at = $1 \
                 WHERE key = $2 AND state = 'failed'"
            ),
            rerun: format!(
                "UPDATE {t} SET state = 'pending', payload = $4, progress = $1, not_before = NULL, updated_at = $2 \
                 WHERE key = $3 AND state = 'done'"
            ),
            // The row locked, so a claim cannot take it between the look and the delete.
            holder: format!("SELECT lease_owner, lease_until FROM {t} WHERE key = $1 FOR UPDATE"),
            forget: format!("DELETE FROM {t} WHERE key = $1"),
            prune: format!(
                "DELETE FROM {t} WHERE seq IN (SELECT seq FROM {t} \
                 WHERE (state = 'done' AND updated_at < $1) OR (state = 'failed' AND updated_at < $2) \
                 ORDER BY seq LIMIT $3 FOR UPDATE SKIP LOCKED)"
            ),
            pruner: format!("{schema}.jobs prune"),
            footprint: format!(
                "SELECT state, COUNT(*), COALESCE(SUM(octet_length(payload)), 0)::BIGINT FROM {t} \
                 GROUP BY state ORDER BY state"
            ),
            depth: format!(
                "SELECT kind, state, COUNT(*) FROM {t} WHERE state <> 'done' GROUP BY kind, state ORDER BY kind, state"
            ),
        }
    }
}

/// The table, and the one index a claim needs beside the keys: `seq` of the jobs still live
/// (pending, in flight or waiting to replay), through a stored column that stays `true` while a
/// claim takes a job and a replay puts it back. No index holds `state` itself, so those updates
/// are HOT (PostgreSQL rewrites no index entry): only ending a job done or failed touches an index.
/// A table made with the earlier `(state, seq)` index gains the column and loses that index,
/// once: each step runs only when the catalog says it is missing, because `ALTER TABLE` locks
/// the table against every reader even when `IF NOT EXISTS` finds nothing to do, and every
/// replica runs this at connect.
fn schema_ddl(schema: &str) -> String {
    format!(
        "CREATE SCHEMA IF NOT EXISTS \"{schema}\";
         CREATE TABLE IF NOT EXISTS \"{schema}\".jobs (
             seq         BIGSERIAL PRIMARY KEY,
             key         TEXT NOT NULL UNIQUE,
             kind        TEXT NOT NULL,
             payload     TEXT NOT NULL,
             state       TEXT NOT NULL,
             attempts    BIGINT NOT NULL,
             progress    TEXT NOT NULL,
             last_error  TEXT,
             not_before  BIGINT,
             lease_owner TEXT,
             lease_until BIGINT,
             created_at  BIGINT NOT NULL,
             updated_at  BIGINT NOT NULL
         );
         DO $$ BEGIN
             IF NOT EXISTS (SELECT 1 FROM pg_attribute
                            WHERE attrelid = '\"{schema}\".jobs'::regclass
                              AND attname = 'live' AND NOT attisdropped) THEN
                 ALTER TABLE \"{schema}\".jobs ADD COLUMN live BOOLEAN
                     GENERATED ALWAYS AS (state IN ('pending', 'pending_replay', 'in_flight')) STORED;
             END IF;
             IF to_regclass('\"{schema}\".jobs_live_seq') IS NULL THEN
                 CREATE INDEX jobs_live_seq ON \"{schema}\".jobs (seq) WHERE live;
             END IF;
             IF to_regclass('\"{schema}\".jobs_state_seq') IS NOT NULL THEN
                 DROP INDEX \"{schema}\".jobs_state_seq;
             END IF;
         END $$;
         CREATE TABLE IF NOT EXISTS \"{schema}\".schema_version (version BIGINT NOT NULL);
         INSERT INTO \"{schema}\".schema_version (version)
             SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM \"{schema}\".schema_version);"
    )
}

/// Brings the schema to [`SCHEMA_VERSION`](crate::SCHEMA_VERSION), inside the connect's
/// transaction and advisory lock: an unversioned schema (an earlier release's, version 0) is
/// stamped, its jobs as they are; a later one refused. The `jobs` table is the same in both, so
/// replicas of the earlier release go on working beside this one: they never read the version.
async fn migrate(tx: &deadpool_postgres::Transaction<'_>, schema: &str) -> Result<(), String> {
    let t = format!("\"{schema}\".schema_version");
    let row = tx
        .query_one(&format!("SELECT MAX(version) FROM {t}"), &[])
        .await
        .map_err(|e| e.to_string())?;
    let version: Option<i64> = row.try_get(0).map_err(|e| e.to_string())?;
    match version.unwrap_or(0) {
        v if v == crate::SCHEMA_VERSION => Ok(()),
        0 => tx
            .execute(
                &format!("UPDATE {t} SET version = $1"),
                &[&crate::SCHEMA_VERSION],
            )
            .await
            .map(drop)
            .map_err(|e| e.to_string()),
        v => Err(format!(
            "schema version {v} is not one this release knows (it writes {}): written by a later release",
            crate::SCHEMA_VERSION
        )),
    }
}

/// A plain identifier, so it can be spliced into SQL: lower-case letters, digits, `_`, at most 63 bytes.
fn valid_schema(schema: &str) -> bool {
    let mut chars = schema.chars();
    matches!(chars.next(), Some('a'..='z' | '_'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
        && schema.len() <= 63
}

impl PgStore {
    /// Connections per store: a replica's workers (the ingest limit is 2) and its reads, with room.
    pub const POOL_SIZE: usize = 8;
    /// How long a new connection may take when the URL does not say (`connect_timeout`).
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

    /// Connects to `url` and creates `schema` and its `jobs` table if absent (several replicas
    /// may do so at once: an advisory lock orders them).
    pub async fn connect(url: &str, schema: &str) -> Result<Self, StoreError> {
        let what = format!("PostgreSQL schema {schema:?}");
        let refused = |reason: String| StoreError::Open {
            what: what.clone(),
            reason,
        };
        if !valid_schema(schema) {
            return Err(refused(
                "a schema name is lower-case letters, digits and `_`, at most 63 bytes".into(),
            ));
        }
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|e: tokio_postgres::Error| refused(e.to_string()))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Self::CONNECT_TIMEOUT);
        }
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(Self::POOL_SIZE)
            .build()
            .map_err(|e| refused(e.to_string()))?;

        let mut client = pool.get().await.map_err(|e| refused(e.to_string()))?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| refused(e.to_string()))?;
        tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&schema])
            .await
            .map_err(|e| refused(e.to_string()))?;
        tx.batch_execute(&schema_ddl(schema))
            .await
            .map_err(|e| refused(e.to_string()))?;
        migrate(&tx, schema).await.map_err(refused)?;
        tx.commit().await.map_err(|e| refused(e.to_string()))?;
        drop(client);
        Ok(PgStore {
            pool,
            sql: Sql::new(schema),
        })
    }

    async fn client(&self, op: &'static str) -> Result<deadpool_postgres::Client, StoreError> {
        self.pool
            .get()
            .await
            .map_err(|e| StoreError::database(op, e))
    }

    /// Runs one statement and decodes the rows it returns.
    async fn query(
        &self,
        op: &'static str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Job>, StoreError> {
        let client = self.client(op).await?;
        let stmt = client
            .prepare_cached(sql)
            .await
            .map_err(|e| StoreError::database(op, e))?;
        let rows = client
            .query(&stmt, params)
            .await
            .map_err(|e| StoreError::database(op, e))?;
        rows.iter().map(|r| RawRow::read(r)?.decode()).collect()
    }

    /// Runs a claiming `UPDATE ... RETURNING` (one statement, one round trip: no transaction
    /// around it): a row that does not decode is then failed (`corrupt_row`) and left out, by an
    /// update that holds only while the row is still under this claim's lease (`owner`,
    /// `until`). A crash in between leaves it claimed; its lease expires and the next claim
    /// fails it the same way.
    async fn claiming(
        &self,
        op: &'static str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        (owner, until, now): (&str, i64, i64),
    ) -> Result<Vec<Job>, StoreError> {
        let db = |e| StoreError::database(op, e);
        let client = self.client(op).await?;
        let stmt = client.prepare_cached(sql).await.map_err(db)?;
        let rows = client.query(&stmt, params).await.map_err(db)?;
        // One damaged row cannot stop the queue.
        let mut jobs = Vec::with_capacity(rows.len());
        for r in &rows {
            let seq: i64 = r.try_get(1).map_err(db)?;
            match RawRow::read(r).and_then(RawRow::decode) {
                Ok(job) => jobs.push(job),
                Err(e) => {
                    tracing::warn!(target: "sdk_queue", seq, error = %e, "a claimed job row does not decode: failed as corrupt_row");
                    let quarantine = client
                        .prepare_cached(&self.sql.quarantine)
                        .await
                        .map_err(db)?;
                    let reason = crate::row::corrupt_error(&e);
                    client
                        .execute(&quarantine, &[&reason, &now, &seq, &owner, &until])
                        .await
                        .map_err(db)?;
                }
            }
        }
        jobs.sort_by_key(|j| j.seq);
        Ok(jobs)
    }

    /// Runs an owner-guarded `UPDATE`: one row changed means the owner held the lease.
    async fn guarded(
        &self,
        op: &'static str,
        key: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<(), StoreError> {
        let client = self.client(op).await?;
        let stmt = client
            .prepare_cached(sql)
            .await
            .map_err(|e| StoreError::database(op, e))?;
        match client
            .execute(&stmt, params)
            .await
            .map_err(|e| StoreError::database(op, e))?
        {
            1 => Ok(()),
            _ => Err(StoreError::LeaseLost {
                key: key.to_owned(),
            }),
        }
    }
}

impl Columns for tokio_postgres::Row {
    fn text(&self, i: usize) -> Result<String, String> {
        self.try_get(i).map_err(|e| e.to_string())
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, String> {
        self.try_get(i).map_err(|e| e.to_string())
    }
    fn int(&self, i: usize) -> Result<i64, String> {
        self.try_get(i).map_err(|e| e.to_string())
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>, String> {
        self.try_get(i).map_err(|e| e.to_string())
    }
}

fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[async_trait::async_trait]
impl JobStore for PgStore {
    async fn submit(&self, job: NewJob, now: SystemTime) -> Result<Job, StoreError> {
        let db = |e| StoreError::database("submit", e);
        let (payload, now) = (payload_text(&job.key, &job.payload)?, to_ms(now));
        let client = self.client("submit").await?;
        let stmt = client.prepare_cached(&self.sql.insert).await.map_err(db)?;
        let row = client
            .query_opt(&stmt, &[&job.key, &job.kind, &payload, &now])
            .await
            .map_err(db)?;
        drop(client);
        if let Some(row) = row {
            return Ok(inserted(row.try_get(0).map_err(db)?, job, now));
        }
        // An existing key inserts nothing: the stored job is the answer.
        let stored = self.get(&job.key).await?;
        stored.ok_or_else(|| duplicate_yet_absent(job.key))
    }

    async fn claim(&self, claim: Claim<'_>) -> Result<Vec<Job>, StoreError> {
        if claim.limit == 0 || claim.kinds.is_empty() {
            return Ok(Vec::new());
        }
        let (until, now, limit) = (
            expiry_ms(claim.now, claim.lease),
            to_ms(claim.now),
            to_i64(claim.limit),
        );
        self.claiming(
            "claim",
            &self.sql.claim,
            &[&claim.owner, &until, &now, &claim.kinds, &limit],
            (claim.owner, until, now),
        )
        .await
    }

    async fn claim_key(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
        now: SystemTime,
    ) -> Result<Option<Job>, StoreError> {
        let (until, now) = (expiry_ms(now, lease), to_ms(now));
        let claimed = self
            .claiming(
                "claim_key",
                &self.sql.claim_key,
                &[&owner, &until, &now, &key],
                (owner, until, now),
            )
            .await?;
        Ok(claimed.into_iter().next())
    }

    async fn checkpoint(
        &self,
        key: &str,
        owner: &str,
        progress: &serde_json::Value,
        lease: Duration,
        now: SystemTime,
    ) -> Result<(), StoreError> {
        let (progress, until, now) = (progress.to_string(), expiry_ms(now, lease), to_ms(now));
        self.guarded(
            "checkpoint",
            key,
            &self.sql.checkpoint,
            &[&progress, &until, &now, &key, &owner],
        )
        .await
    }

    async fn finish(
        &self,
        key: &str,
        owner: &str,
        finish: Finish,
        now: SystemTime,
    ) -> Result<(), StoreError> {
        let state = finish.state().as_str();
        let (error, not_before, kept) = finish_columns(&finish);
        let now = to_ms(now);
        self.guarded(
            "finish",
            key,
            &self.sql.finish,
            &[&state, &error, &not_before, &now, &key, &owner, &kept],
        )
        .await
    }

    async fn get(&self, key: &str) -> Result<Option<Job>, StoreError> {
        Ok(self
            .query("get", &self.sql.select, &[&key])
            .await?
            .into_iter()
            .next())
    }

    async fn list(&self, state: JobState, limit: usize) -> Result<Vec<Job>, StoreError> {
        let db = |e| StoreError::database("list", e);
        let client = self.client("list").await?;
        let stmt = client.prepare_cached(&self.sql.list).await.map_err(db)?;
        let rows = client
            .query(&stmt, &[&state.as_str(), &to_i64(limit)])
            .await
            .map_err(db)?;
        Ok(crate::row::readable(
            rows.iter()
                .map(|r| RawRow::read(r).and_then(RawRow::decode)),
        ))
    }

    async fn depth(&self) -> Result<Vec<(String, JobState, u64)>, StoreError> {
        let db = |e| StoreError::database("depth", e);
        let client = self.client("depth").await?;
        let stmt = client.prepare_cached(&self.sql.depth).await.map_err(db)?;
        let mut out = Vec::new();
        for r in client.query(&stmt, &[]).await.map_err(db)? {
            let (kind, state, count): (String, String, i64) = (
                r.try_get(0).map_err(db)?,
                r.try_get(1).map_err(db)?,
                r.try_get(2).map_err(db)?,
            );
            let state = JobState::parse(
                &format!("(a job of kind {})", crate::row::clip(&kind, 64)),
                &state,
            )?;
            out.push((kind, state, u64::try_from(count).unwrap_or(0)));
        }
        Ok(out)
    }

    async fn requeue(&self, key: &str, now: SystemTime) -> Result<bool, StoreError> {
        let db = |e| StoreError::database("requeue", e);
        let client = self.client("requeue").await?;
        let stmt = client.prepare_cached(&self.sql.requeue).await.map_err(db)?;
        let changed = client
            .execute(&stmt, &[&to_ms(now), &key])
            .await
            .map_err(db)?;
        Ok(changed == 1)
    }

    async fn rerun(
        &self,
        key: &str,
        payload: &serde_json::Value,
        progress: &serde_json::Value,
        now: SystemTime,
    ) -> Result<bool, StoreError> {
        let db = |e| StoreError::database("rerun", e);
        let payload = payload_text(key, payload)?;
        let client = self.client("rerun").await?;
        let stmt = client.prepare_cached(&self.sql.rerun).await.map_err(db)?;
        let progress = progress.to_string();
        let changed = client
            .execute(&stmt, &[&progress, &to_ms(now), &key, &payload])
            .await
            .map_err(db)?;
        Ok(changed == 1)
    }

    async fn forget(
        &self,
        key: &str,
        owner: Option<&str>,
        now: SystemTime,
    ) -> Result<Erasure, StoreError> {
        let db = |e| StoreError::database("forget", e);
        let mut client = self.client("forget").await?;
        let tx = client.transaction().await.map_err(db)?;
        let holder = tx.prepare_cached(&self.sql.holder).await.map_err(db)?;
        let row = tx.query_opt(&holder, &[&key]).await.map_err(db)?;
        let Some(row) = row else {
            return Ok(Erasure::Absent);
        };
        let (holder, until) = (row.try_get(0).map_err(db)?, row.try_get(1).map_err(db)?);
        if let Some(lease) = crate::row::foreign_lease(holder, until, owner, to_ms(now)) {
            return Ok(Erasure::Held(lease));
        }
        let forget = tx.prepare_cached(&self.sql.forget).await.map_err(db)?;
        tx.execute(&forget, &[&key]).await.map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(Erasure::Erased)
    }

    async fn prune(
        &self,
        done_before: SystemTime,
        failed_before: SystemTime,
        limit: usize,
    ) -> Result<u64, StoreError> {
        let db = |e| StoreError::database("prune", e);
        let mut client = self.client("prune").await?;
        let tx = client.transaction().await.map_err(db)?;
        // Held to the transaction's end: at most one replica prunes a schema at a time.
        let lock = tx
            .query_one(
                "SELECT pg_try_advisory_xact_lock(hashtext($1))",
                &[&self.sql.pruner],
            )
            .await
            .map_err(db)?;
        if !lock.try_get::<_, bool>(0).map_err(db)? {
            return Ok(0);
        }
        let prune = tx.prepare_cached(&self.sql.prune).await.map_err(db)?;
        let deleted = tx
            .execute(
                &prune,
                &[&to_ms(done_before), &to_ms(failed_before), &to_i64(limit)],
            )
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(deleted)
    }

    async fn footprint(&self) -> Result<Vec<Footprint>, StoreError> {
        let db = |e| StoreError::database("footprint", e);
        let client = self.client("footprint").await?;
        let stmt = client
            .prepare_cached(&self.sql.footprint)
            .await
            .map_err(db)?;
        let mut out = Vec::new();
        for r in client.query(&stmt, &[]).await.map_err(db)? {
            let (state, rows, bytes): (String, i64, i64) = (
                r.try_get(0).map_err(db)?,
                r.try_get(1).map_err(db)?,
                r.try_get(2).map_err(db)?,
            );
            out.push(Footprint {
                state: JobState::parse("(footprint)", &state)?,
                rows: u64::try_from(rows).unwrap_or(0),
                payload_bytes: u64::try_from(bytes).unwrap_or(0),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::valid_schema;

    #[test]
    fn only_plain_identifiers_are_spliced_into_sql() {
        for ok in ["jobs", "_q", "sdk_queue_test_12_3", &"a".repeat(63)] {
            assert!(valid_schema(ok), "{ok}");
        }
        for bad in [
            "",
            "1jobs",
            "Jobs",
            "a-b",
            "a\"; DROP TABLE x; --",
            "ä",
            &"a".repeat(64),
        ] {
            assert!(!valid_schema(bad), "{bad}");
        }
    }
}
