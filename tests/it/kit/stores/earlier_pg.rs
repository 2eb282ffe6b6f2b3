//! A replica of the release before the schema version, on PostgreSQL: its connect and the
//! statements it runs on `jobs`, copied from that release's `postgres.rs`, so a test can run it
//! beside this release on one schema as a rolling upgrade does.

use std::time::SystemTime;

use tokio_postgres::Client;

fn ms(t: SystemTime) -> i64 {
    let since = t.duration_since(std::time::UNIX_EPOCH).unwrap();
    i64::try_from(since.as_millis()).unwrap()
}

/// The earlier release's `schema_ddl`, verbatim: the table, the `live` column and its index.
fn ddl(schema: &str) -> String {
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
         END $$;"
    )
}

const ELIGIBLE: &str = "((state IN ('pending', 'pending_replay') AND (not_before IS NULL OR not_before <= $3)) \
     OR (state = 'in_flight' AND lease_until < $3))";
const CLAIMED: &str = "state = 'in_flight', lease_owner = $1, lease_until = $2, attempts = attempts + 1, updated_at = $3";

/// One earlier replica: a connection and the schema it works in.
pub struct Earlier {
    client: Client,
    t: String,
}

impl Earlier {
    /// The earlier release's connect: its DDL under the same advisory lock this release takes.
    pub async fn connect(url: &str, schema: &str) -> Earlier {
        let (mut client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let tx = client.transaction().await.unwrap();
        tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&schema])
            .await
            .unwrap();
        tx.batch_execute(&ddl(schema)).await.unwrap();
        tx.commit().await.unwrap();
        Earlier {
            client,
            t: format!("\"{schema}\".jobs"),
        }
    }

    pub async fn submit(&self, key: &str, payload: &serde_json::Value, now: SystemTime) {
        let t = &self.t;
        let sql = format!(
            "INSERT INTO {t} (key, kind, payload, state, attempts, progress, created_at, updated_at) \
             VALUES ($1, $2, $3, 'pending', 0, 'null', $4, $4) ON CONFLICT (key) DO NOTHING RETURNING seq"
        );
        let row = self
            .client
            .query_opt(&sql, &[&key, &"ingest", &payload.to_string(), &ms(now)])
            .await
            .unwrap();
        assert!(row.is_some(), "{key} is new");
    }

    /// The earlier claim: the oldest eligible jobs through the `live` index; their keys.
    pub async fn claim(
        &self,
        owner: &str,
        lease_ms: i64,
        now: SystemTime,
        limit: i64,
    ) -> Vec<String> {
        let t = &self.t;
        let sql = format!(
            "UPDATE {t} SET {CLAIMED} WHERE seq IN (SELECT seq FROM {t} WHERE live AND kind = ANY($4) AND {ELIGIBLE} \
             ORDER BY seq LIMIT $5 FOR UPDATE SKIP LOCKED) RETURNING key"
        );
        let now = ms(now);
        let kinds = vec!["ingest".to_owned()];
        let rows = self
            .client
            .query(&sql, &[&owner, &(now + lease_ms), &now, &kinds, &limit])
            .await
            .unwrap();
        rows.iter().map(|r| r.get(0)).collect()
    }

    /// The earlier `claim_key`: whether it took the job.
    pub async fn claim_key(&self, key: &str, owner: &str, lease_ms: i64, now: SystemTime) -> bool {
        let t = &self.t;
        let sql = format!("UPDATE {t} SET {CLAIMED} WHERE key = $4 AND {ELIGIBLE} RETURNING key");
        let now = ms(now);
        let rows = self
            .client
            .query(&sql, &[&owner, &(now + lease_ms), &now, &key])
            .await
            .unwrap();
        rows.len() == 1
    }

    /// The earlier finish (done, or failed with its error): the payload stays as it was.
    pub async fn finish(
        &self,
        key: &str,
        owner: &str,
        error: Option<&sdk_queue::JobError>,
        now: SystemTime,
    ) {
        let t = &self.t;
        let sql = format!(
            "UPDATE {t} SET state = $1, last_error = COALESCE($2, last_error), not_before = $3, \
             lease_owner = NULL, lease_until = NULL, updated_at = $4 \
             WHERE key = $5 AND state = 'in_flight' AND lease_owner = $6"
        );
        let state = if error.is_some() { "failed" } else { "done" };
        let error = error.map(|e| serde_json::to_string(e).unwrap());
        let changed = self
            .client
            .execute(
                &sql,
                &[&state, &error, &None::<i64>, &ms(now), &key, &owner],
            )
            .await
            .unwrap();
        assert_eq!(changed, 1, "{owner} held {key}");
    }
}
