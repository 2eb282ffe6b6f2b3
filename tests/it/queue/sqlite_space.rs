//! What a done job's dropped content costs the SQLite file afterwards: nothing lasting. Its
//! pages go to the free list and the next jobs' content is written into them, so a file that
//! has run many jobs is the size of the content still pending, not of every job it ever ran.

use std::path::Path;
use std::time::Duration;

use crate::kit::stores::at;
use sdk_queue::{Finish, JobStore, LockRetry, NewJob, SqliteStore};

const LEASE: Duration = Duration::from_secs(30);
/// Jobs per round, and each one's content: 64 KiB spans many overflow pages.
const ROUND: usize = 40;
const CONTENT: usize = 64 << 10;

/// Submits a round of jobs with real-sized content and runs each to done.
async fn round(store: &SqliteStore, n: usize) {
    for i in 0..ROUND {
        let key = format!("job-{n}-{i}");
        let job = NewJob {
            key: key.clone(),
            kind: "ingest".into(),
            payload: serde_json::json!({ "content": "x".repeat(CONTENT) }),
        };
        store.submit(job, at(0)).await.unwrap();
        store
            .claim_key(&key, "w", LEASE, at(0))
            .await
            .unwrap()
            .unwrap();
        let kept = Finish::Done(serde_json::json!({ "digest": "d" }));
        store.finish(&key, "w", kept, at(0)).await.unwrap();
    }
}

/// The main file's pages after a full checkpoint: (in use or free, free, bytes per page).
fn pages(path: &Path) -> (i64, i64, i64) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let busy: i64 = conn
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
        .unwrap();
    assert_eq!(busy, 0, "the checkpoint ran to its end");
    let count = |pragma: &str| -> i64 { conn.query_row(pragma, [], |r| r.get(0)).unwrap() };
    (
        count("PRAGMA page_count"),
        count("PRAGMA freelist_count"),
        count("PRAGMA page_size"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_a_done_job_frees_are_written_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.sqlite");
    let store = SqliteStore::open(&path, LockRetry::CORE_POLICY).unwrap();

    round(&store, 0).await;
    let (first, free, page) = pages(&path);
    assert!(
        free * page >= CONTENT as i64,
        "the dropped content freed pages: {free} of {first}"
    );
    for n in 1..5 {
        round(&store, n).await;
    }
    let (last, _, _) = pages(&path);
    // Four more rounds of the same content fit in what the first left free; only the rows
    // that stay (key, kept payload, index entries) may add a few pages.
    assert!(
        last <= first + 16,
        "the file grew from {first} to {last} pages over four rounds of done jobs"
    );
}
