//! What erasure leaves in the SQLite file: nothing. The content of a forgotten job, and the
//! content a done job drops for the payload it keeps, are gone from the file's bytes once the
//! write-ahead log is checkpointed, not merely unreachable in free pages.

use std::path::Path;
use std::time::Duration;

use crate::kit::stores::at;
use sdk_queue::{Erasure, Finish, JobStore, LockRetry, NewJob, SqliteStore};

const LEASE: Duration = Duration::from_secs(30);

/// A job whose content carries `marker`, `repeat` times: many times spills it over several
/// overflow pages, once keeps it inside the table's own page.
fn job(key: &str, marker: &str, repeat: usize) -> NewJob {
    NewJob {
        key: key.into(),
        kind: "ingest".into(),
        payload: serde_json::json!({ "content": marker.repeat(repeat) }),
    }
}

/// Moves every page of the WAL into the main file and empties the log, from a connection of
/// its own, then gives both files' bytes.
fn checkpointed_bytes(path: &Path) -> Vec<u8> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let busy: i64 = conn
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
        .unwrap();
    assert_eq!(busy, 0, "the checkpoint ran to its end");
    let mut bytes = std::fs::read(path).unwrap();
    let wal = path.with_extension("sqlite-wal");
    bytes.extend(std::fs::read(wal).unwrap_or_default());
    bytes
}

fn holds(bytes: &[u8], marker: &str) -> bool {
    bytes.windows(marker.len()).any(|w| w == marker.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgotten_and_done_content_leaves_no_trace_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.sqlite");
    let store = SqliteStore::open(&path, LockRetry::CORE_POLICY).unwrap();
    // Distinct markers, none a substring of another or of a key.
    let jobs = [
        ("forgotten-large", "ZQXFORGOTLARGE", 10_000),
        ("forgotten-small", "ZQXFORGOTSMALL", 1),
        ("done-large", "ZQXDONELARGE", 10_000),
        ("done-small", "ZQXDONESMALL", 1),
        ("kept", "ZQXSTILLPENDING", 1),
    ];
    for (key, marker, repeat) in jobs {
        store.submit(job(key, marker, repeat), at(0)).await.unwrap();
    }
    let before = checkpointed_bytes(&path);
    for (_, marker, _) in jobs {
        assert!(holds(&before, marker), "{marker} is in the file before");
    }

    for key in ["forgotten-large", "done-large", "done-small"] {
        store
            .claim_key(key, "w", LEASE, at(0))
            .await
            .unwrap()
            .unwrap();
    }
    for key in ["done-large", "done-small"] {
        let kept = Finish::Done(serde_json::json!({ "digest": "d" }));
        store.finish(key, "w", kept, at(0)).await.unwrap();
    }
    for (key, owner) in [("forgotten-large", Some("w")), ("forgotten-small", None)] {
        assert_eq!(
            store.forget(key, owner, at(0)).await.unwrap(),
            Erasure::Erased
        );
    }

    let after = checkpointed_bytes(&path);
    for marker in [
        "ZQXFORGOTLARGE",
        "ZQXFORGOTSMALL",
        "ZQXDONELARGE",
        "ZQXDONESMALL",
    ] {
        assert!(!holds(&after, marker), "{marker} is still in the file");
    }
    assert!(
        holds(&after, "ZQXSTILLPENDING"),
        "a pending job keeps its content"
    );
    assert_eq!(store.get("forgotten-large").await.unwrap(), None);
}
