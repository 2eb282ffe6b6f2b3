//! A rolling upgrade on PostgreSQL: replicas of the release before the schema version keep
//! running beside this release on one schema. The migration stamps a version and changes
//! nothing an earlier replica reads or writes, so jobs either submits are claimed and finished
//! by the other, an earlier replica that restarts connects as before, and no pending or failed
//! job is lost on the way.

use std::time::Duration;

use crate::kit::stores::earlier_pg::Earlier;
use crate::kit::stores::{self, at};
use sdk_queue::{Claim, Finish, JobError, JobState, JobStore, PgStore};
use serde_json::json;

const LEASE: Duration = Duration::from_secs(30);

fn content(key: &str) -> serde_json::Value {
    json!({ "content_base64": format!("content of {key}") })
}

fn refused() -> JobError {
    JobError {
        class: "bad_request".into(),
        row: Some("T27".into()),
        status: Some(400),
        request_id: None,
        detail: "refused".into(),
    }
}

async fn claim_one(store: &PgStore, owner: &str, now_ms: u64) -> Vec<String> {
    let claimed = store
        .claim(Claim {
            owner,
            kinds: &["ingest"],
            lease: LEASE,
            now: at(now_ms),
            limit: 1,
        })
        .await
        .unwrap();
    claimed.into_iter().map(|j| j.key).collect()
}

/// The columns and indexes of `jobs`: what an earlier replica's statements rely on.
async fn catalog(raw: &tokio_postgres::Client, schema: &str) -> Vec<String> {
    let rows = raw
        .query(
            "SELECT attname || ' ' || format_type(atttypid, atttypmod) FROM pg_attribute \
             WHERE attrelid = format('%I.jobs', $1::text)::regclass AND attnum > 0 AND NOT attisdropped \
             UNION ALL SELECT indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY 1",
            &[&schema],
        )
        .await
        .unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

#[tokio::test]
async fn an_earlier_replica_and_this_release_share_one_queue_across_the_migration() {
    let Some(url) = stores::pg_url() else { return };
    let schema = stores::fresh_schema("sdk_queue_mixed");
    let raw = stores::pg_raw(&url, &schema).await;

    // Before the upgrade: the earlier release alone leaves a job pending and one failed.
    let old = Earlier::connect(&url, &schema).await;
    old.submit("pending-before", &content("pending-before"), at(0))
        .await;
    old.submit("failed-before", &content("failed-before"), at(0))
        .await;
    assert!(old.claim_key("failed-before", "old", 30_000, at(1)).await);
    old.finish("failed-before", "old", Some(&refused()), at(2))
        .await;

    // The first replica of this release migrates while `old` runs on; another earlier
    // replica restarting beside them finds nothing to change.
    let new = PgStore::connect(&url, &schema).await.unwrap();
    let migrated = catalog(&raw, &schema).await;
    drop(Earlier::connect(&url, &schema).await);
    assert_eq!(catalog(&raw, &schema).await, migrated);
    let version = raw
        .query_one("SELECT version FROM schema_version", &[])
        .await
        .unwrap();
    assert_eq!(version.get::<_, i64>(0), sdk_queue::SCHEMA_VERSION);
    let failed = new.get("failed-before").await.unwrap();
    let failed = failed.expect("the failed job survives the migration");
    assert_eq!(failed.state, JobState::Failed);
    assert_eq!(failed.payload, content("failed-before"), "kept for the UI");
    assert_eq!(failed.last_error, Some(refused()));
    let pending = new.get("pending-before").await.unwrap();
    let pending = pending.expect("the pending job survives the migration");
    assert_eq!(
        (pending.state, &pending.payload),
        (JobState::Pending, &content("pending-before"))
    );

    // The earlier replica's claim (oldest first, through `live`) still finds the pending job
    // the migration kept; this release finishes what it submits and vice versa.
    assert_eq!(
        old.claim("old", 30_000, at(10), 1).await,
        ["pending-before"]
    );
    old.finish("pending-before", "old", None, at(11)).await;
    for n in 0..5 {
        old.submit(&format!("old-{n}"), &content(&format!("old-{n}")), at(20))
            .await;
        new.submit(
            sdk_queue::NewJob {
                key: format!("new-{n}"),
                kind: "ingest".into(),
                payload: content(&format!("new-{n}")),
            },
            at(20),
        )
        .await
        .unwrap();
    }
    for n in 0..5 {
        let (mine, theirs) = (format!("old-{n}"), format!("new-{n}"));
        let job = new
            .claim_key(&mine, "new", LEASE, at(30))
            .await
            .unwrap()
            .expect("this release claims what the earlier one submitted");
        assert_eq!(job.payload, content(&mine));
        new.finish(&mine, "new", Finish::Done(json!({"kept": n})), at(31))
            .await
            .unwrap();
        assert!(
            old.claim_key(&theirs, "old", 30_000, at(30)).await,
            "the earlier release claims what this one submitted"
        );
        old.finish(&theirs, "old", None, at(31)).await;
    }

    // A failed job of the earlier release is sent again by this one and run by the earlier.
    assert!(new.requeue("failed-before", at(40)).await.unwrap());
    assert_eq!(old.claim("old", 30_000, at(41), 1).await, ["failed-before"]);
    // The earlier replica dies holding it; this release takes it over once the lease is out.
    assert_eq!(
        claim_one(&new, "new", 41 + 29_000).await,
        Vec::<String>::new()
    );
    assert_eq!(claim_one(&new, "new", 41 + 30_001).await, ["failed-before"]);
    new.finish(
        "failed-before",
        "new",
        Finish::Done(json!({"kept": "f"})),
        at(30_100),
    )
    .await
    .unwrap();

    // Every job ended done, whoever ran it; what an earlier replica finished kept its content
    // (that release did not drop it), and this release's retention deletes those rows too.
    let done = new.list(JobState::Done, 100).await.unwrap();
    assert_eq!(done.len(), 12, "{done:?}");
    for job in &done {
        let by_old = job.key.starts_with("new-") || job.key == "pending-before";
        assert_eq!(job.payload == content(&job.key), by_old, "{job:?}");
    }
    let later = at(10_000_000);
    assert_eq!(new.prune(later, later, 5).await.unwrap(), 5);
    assert_eq!(new.prune(later, later, 500).await.unwrap(), 7);
    assert_eq!(new.footprint().await.unwrap(), []);
    raw.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}
