//! What only the PostgreSQL store has: input it refuses before anything runs (these need no
//! server: the refusals come before, a bad name or URL, or from the connection itself, a port
//! nobody listens on); and its indexes, on a table of its own or of an earlier version.

use std::time::Duration;

use crate::kit::stores;

use sdk_queue::{Claim, JobState, JobStore, PgStore, StoreError};

async fn refusal(url: &str, schema: &str) -> String {
    match PgStore::connect(url, schema).await {
        Err(StoreError::Open { what, reason }) => format!("{what}: {reason}"),
        Err(other) => panic!("expected Open, got {other:?}"),
        Ok(_) => panic!("{url} {schema} was accepted"),
    }
}

#[tokio::test]
async fn a_schema_name_that_is_not_a_plain_identifier_is_refused() {
    for schema in [
        "",
        "Jobs",
        "a-b",
        "q\"; DROP SCHEMA public CASCADE; --",
        &"a".repeat(64),
    ] {
        let refused = refusal("postgres://postgres@127.0.0.1:1/test", schema).await;
        assert!(refused.contains("lower-case letters"), "{refused}");
    }
}

#[tokio::test]
async fn a_malformed_url_is_refused() {
    let refused = refusal("postgres://postgres@127.0.0.1:notaport/test", "jobs").await;
    assert!(refused.contains("invalid"), "{refused}");
}

#[tokio::test]
async fn a_server_that_does_not_answer_is_refused_at_connect() {
    // A loopback port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let refused = refusal(
        &format!("postgres://postgres@127.0.0.1:{port}/test"),
        "jobs",
    )
    .await;
    assert!(
        refused.starts_with("PostgreSQL schema \"jobs\""),
        "{refused}"
    );
}

/// A table made before the `live` column, with its `(state, seq)` index and a job waiting.
const EARLIER: &str = "
    CREATE TABLE jobs (
        seq BIGSERIAL PRIMARY KEY, key TEXT NOT NULL UNIQUE, kind TEXT NOT NULL, payload TEXT NOT NULL,
        state TEXT NOT NULL, attempts BIGINT NOT NULL, progress TEXT NOT NULL, last_error TEXT,
        not_before BIGINT, lease_owner TEXT, lease_until BIGINT, created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL);
    CREATE INDEX jobs_state_seq ON jobs (state, seq);
    INSERT INTO jobs (key, kind, payload, state, attempts, progress, created_at, updated_at)
        VALUES ('waiting', 'ingest', '{}', 'pending', 0, 'null', 1, 1);";

/// No index holds `state`, so a claim's and a replay's updates can be HOT; an earlier table
/// is brought to the same indexes, its jobs kept and claimable.
#[tokio::test]
async fn no_index_holds_the_state_and_an_earlier_table_is_brought_to_the_same() {
    let Some(url) = stores::pg_url() else { return };
    let (fresh, earlier) = (
        stores::fresh_schema("sdk_queue_fresh"),
        stores::fresh_schema("sdk_queue_earlier"),
    );
    let raw = stores::pg_raw(&url, &earlier).await;
    raw.batch_execute(&format!(
        "CREATE SCHEMA \"{earlier}\"; SET search_path TO \"{earlier}\"; {EARLIER}"
    ))
    .await
    .unwrap();
    for schema in [&fresh, &earlier] {
        let store = PgStore::connect(&url, schema).await.unwrap();
        let indexes = raw
            .query(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY indexname",
                &[schema],
            )
            .await
            .unwrap();
        let names: Vec<String> = indexes.iter().map(|r| r.get(0)).collect();
        assert_eq!(
            names,
            ["jobs_key_key", "jobs_live_seq", "jobs_pkey"],
            "{schema}"
        );
        for r in &indexes {
            let def: String = r.get(1);
            assert!(!def.contains("state"), "{def}");
        }
        if schema == &earlier {
            let claimed = store
                .claim(Claim {
                    owner: "w",
                    kinds: &["ingest"],
                    limit: 5,
                    lease: Duration::from_secs(30),
                    now: stores::at(0),
                })
                .await
                .unwrap();
            assert_eq!(claimed.len(), 1);
            assert_eq!(
                (claimed[0].key.as_str(), claimed[0].state),
                ("waiting", JobState::InFlight)
            );
        }
    }
    for schema in [&fresh, &earlier] {
        raw.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
            .await
            .unwrap();
    }
}

/// A replica's connect to a table that is already current changes nothing, so it takes no
/// lock that waits for another replica's open transaction (an `ALTER TABLE` would, even one
/// with nothing to do, and every query behind it would queue).
#[tokio::test]
async fn a_connect_to_a_current_table_waits_for_no_reader() {
    let Some(url) = stores::pg_url() else { return };
    let schema = stores::fresh_schema("sdk_queue_reconnect");
    drop(PgStore::connect(&url, &schema).await.unwrap());
    let mut reader = stores::pg_raw(&url, &schema).await;
    let tx = reader.transaction().await.unwrap();
    tx.batch_execute(&format!(
        "LOCK TABLE \"{schema}\".jobs IN ACCESS SHARE MODE"
    ))
    .await
    .unwrap();
    // Far longer than a connect takes; a connect that waits for the reader never ends.
    let again =
        tokio::time::timeout(Duration::from_secs(30), PgStore::connect(&url, &schema)).await;
    assert!(
        matches!(again, Ok(Ok(_))),
        "a second connect waited for the reader"
    );
    tx.rollback().await.unwrap();
    reader
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

/// One replica prunes a schema at a time: while another holds the pass's advisory lock, a
/// prune deletes nothing, and once it is released the same call does its batch.
#[tokio::test]
async fn one_replica_prunes_at_a_time() {
    let Some(url) = stores::pg_url() else { return };
    let schema = stores::fresh_schema("sdk_queue_prune");
    let store = PgStore::connect(&url, &schema).await.unwrap();
    for key in ["a", "b"] {
        let job = sdk_queue::NewJob {
            key: key.into(),
            kind: "ingest".into(),
            payload: serde_json::json!({}),
        };
        store.submit(job, stores::at(0)).await.unwrap();
        let lease = Duration::from_secs(30);
        store
            .claim_key(key, "w", lease, stores::at(0))
            .await
            .unwrap()
            .unwrap();
        let kept = sdk_queue::Finish::Done(serde_json::json!({}));
        store.finish(key, "w", kept, stores::at(1)).await.unwrap();
    }
    let mut other = stores::pg_raw(&url, &schema).await;
    let tx = other.transaction().await.unwrap();
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext($1))",
        &[&format!("{schema}.jobs prune")],
    )
    .await
    .unwrap();
    let later = stores::at(10_000);
    assert_eq!(
        store.prune(later, later, 10).await.unwrap(),
        0,
        "another prunes"
    );
    assert!(store.get("a").await.unwrap().is_some());
    tx.rollback().await.unwrap();
    assert_eq!(store.prune(later, later, 10).await.unwrap(), 2);
    other
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

/// A schema an earlier release made is stamped with the schema version at connect, its job
/// kept and claimable while a replica of that release (which reads only `jobs`, the same
/// table) works beside; a schema of a later version is refused.
#[tokio::test]
async fn an_unversioned_schema_is_stamped_and_a_later_one_is_refused() {
    let Some(url) = stores::pg_url() else { return };
    let schema = stores::fresh_schema("sdk_queue_version");
    let raw = stores::pg_raw(&url, &schema).await;
    raw.batch_execute(&format!(
        "CREATE SCHEMA \"{schema}\"; SET search_path TO \"{schema}\"; {EARLIER}"
    ))
    .await
    .unwrap();
    let version = || async {
        let row = raw
            .query_one(
                &format!("SELECT version FROM \"{schema}\".schema_version"),
                &[],
            )
            .await
            .unwrap();
        row.get::<_, i64>(0)
    };
    let store = PgStore::connect(&url, &schema).await.unwrap();
    assert_eq!(version().await, sdk_queue::SCHEMA_VERSION);
    drop(PgStore::connect(&url, &schema).await.unwrap());
    let rows = raw
        .query_one(
            &format!("SELECT COUNT(*) FROM \"{schema}\".schema_version"),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.get::<_, i64>(0), 1, "one row, however many connects");
    let job = store
        .claim_key("waiting", "w", Duration::from_secs(30), stores::at(0))
        .await
        .unwrap()
        .expect("the earlier release's job is claimable");
    assert_eq!(job.state, JobState::InFlight);

    raw.batch_execute(&format!(
        "UPDATE \"{schema}\".schema_version SET version = 99"
    ))
    .await
    .unwrap();
    match PgStore::connect(&url, &schema).await {
        Err(StoreError::Open { reason, .. }) => {
            assert!(reason.contains("schema version 99"), "{reason}")
        }
        other => panic!("a later version is refused: {:?}", other.err()),
    }
    raw.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}
