//! What only the SQLite store has. The Core policy's lock rule on a real file: another
//! connection holds the write lock, and paused tokio time shows each delay exactly (3 attempts,
//! 20 ms then 40 ms); other errors at once; files it refuses at open; the cap on a value; an
//! operation that waits never holds up its async worker.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::kit::stores::at;
use sdk_queue::{Claim, Finish, JobStore, LockRetry, NewJob, SqliteStore, StoreError};
use tokio::time::Instant;
use tracing_subscriber::layer::{Context, SubscriberExt};

const LEASE: Duration = Duration::from_secs(30);
const MS: fn(u64) -> Duration = Duration::from_millis;

fn job(key: &str) -> NewJob {
    NewJob {
        key: key.into(),
        kind: "ingest".into(),
        payload: serde_json::json!({}),
    }
}

/// A store whose every lock error goes straight to the rule (SQLite's own busy wait off).
fn store(path: &Path) -> SqliteStore {
    SqliteStore::open_with(path, LockRetry::CORE_POLICY, Duration::ZERO).unwrap()
}

/// Another connection inside `BEGIN IMMEDIATE`: it holds the file's write lock until dropped
/// or committed.
fn hold_write_lock(path: &Path) -> rusqlite::Connection {
    let holder = rusqlite::Connection::open(path).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    holder
}

/// The `sdk_queue` log events, each as its fields.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<BTreeMap<String, String>>>>);

impl Events {
    fn take(&self) -> Vec<BTreeMap<String, String>> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Events {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() == "sdk_queue" {
            let mut fields =
                BTreeMap::from([("level".to_owned(), event.metadata().level().to_string())]);
            event.record(&mut Fields(&mut fields));
            self.0.lock().unwrap().push(fields);
        }
    }
}

/// Captures this thread's `sdk_queue` events (a paused-time test runs on one thread).
fn capture() -> (Events, tracing::subscriber::DefaultGuard) {
    let events = Events::default();
    let guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(events.clone()));
    (events, guard)
}

fn retries(events: &[BTreeMap<String, String>]) -> Vec<(String, String)> {
    events
        .iter()
        .filter(|e| e["level"] == "WARN")
        .map(|e| (e["attempt"].clone(), e["delay_ms"].clone()))
        .collect()
}

fn temp() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queue.db");
    (dir, path)
}

#[tokio::test(start_paused = true)]
async fn a_held_lock_is_tried_three_times_20_then_40_ms_apart_then_reported() {
    let (_dir, path) = temp();
    let store = store(&path);
    let _holder = hold_write_lock(&path);
    let (events, _guard) = capture();

    let started = Instant::now();
    let result = store.submit(job("a"), at(0)).await;
    assert!(
        matches!(
            result,
            Err(StoreError::Locked {
                op: "submit",
                attempts: 3
            })
        ),
        "{result:?}"
    );
    assert_eq!(
        started.elapsed(),
        MS(60),
        "20 ms + 40 ms of waiting, nothing more"
    );

    let events = events.take();
    assert_eq!(
        retries(&events),
        [("1".into(), "20".into()), ("2".into(), "40".into())]
    );
    let last = events.last().unwrap();
    assert_eq!(
        (last["level"].as_str(), last["attempts"].as_str()),
        ("ERROR", "3"),
        "exhaustion is logged"
    );
    for e in &events {
        assert_eq!(
            (e["op"].as_str(), e["path"].as_str()),
            ("submit", path.display().to_string().as_str())
        );
        assert_eq!(
            e.get("key").map(String::as_str),
            Some("a"),
            "the job's key: {e:?}"
        );
        assert!(e["error"].contains("locked"), "{e:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_lock_released_between_attempts_is_ridden_out_on_the_next_attempt() {
    for (release_at, attempts, waited) in [(10, 2, 20), (30, 3, 60)] {
        let (_dir, path) = temp();
        let store = store(&path);
        let holder = hold_write_lock(&path);
        let (events, _guard) = capture();
        let release = tokio::spawn(async move {
            tokio::time::sleep(MS(release_at)).await;
            holder.execute_batch("COMMIT").unwrap();
        });

        let started = Instant::now();
        let stored = store.submit(job("a"), at(0)).await.unwrap();
        assert_eq!(started.elapsed(), MS(waited), "released at {release_at} ms");
        assert_eq!(stored.key, "a");
        let events = events.take();
        assert_eq!(retries(&events).len(), attempts - 1);
        assert!(
            events.iter().all(|e| e["level"] == "WARN"),
            "no exhaustion: {events:?}"
        );
        release.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn every_write_is_under_the_rule_and_its_lock_lines_name_the_job() {
    let (_dir, path) = temp();
    let store = store(&path);
    store.submit(job("a"), at(0)).await.unwrap();
    store
        .claim_key("a", "w", LEASE, at(0))
        .await
        .unwrap()
        .unwrap();
    let _holder = hold_write_lock(&path);
    let (events, _guard) = capture();

    let claim = Claim {
        owner: "w",
        kinds: &["ingest"],
        limit: 1,
        lease: LEASE,
        now: at(0),
    };
    let results = [
        ("claim", store.claim(claim).await.map(drop)),
        (
            "claim_key",
            store.claim_key("a", "v", LEASE, at(0)).await.map(drop),
        ),
        (
            "checkpoint",
            store
                .checkpoint("a", "w", &serde_json::json!(1), LEASE, at(0))
                .await,
        ),
        (
            "finish",
            store
                .finish(
                    "a",
                    "w",
                    Finish::Done(serde_json::json!({"kept": true})),
                    at(0),
                )
                .await,
        ),
    ];
    for (name, result) in results {
        assert!(
            matches!(result, Err(StoreError::Locked { op, attempts: 3 }) if op == name),
            "{name}: {result:?}"
        );
    }
    // Every lock line names the job it is about; a claim is about none yet.
    let keys: Vec<(String, Option<String>)> = events
        .take()
        .into_iter()
        .map(|e| (e["op"].clone(), e.get("key").cloned()))
        .collect();
    let expected: Vec<(String, Option<String>)> = [
        ("claim", None),
        ("claim_key", Some("a")),
        ("checkpoint", Some("a")),
        ("finish", Some("a")),
    ]
    .into_iter()
    .flat_map(|(op, key)| std::iter::repeat_n((op.to_owned(), key.map(str::to_owned)), 3))
    .collect();
    assert_eq!(
        keys, expected,
        "two retries and the exhaustion of each write"
    );
    // Readers are not blocked by a writer in WAL mode.
    assert_eq!(store.get("a").await.unwrap().unwrap().attempts, 1);
}

#[tokio::test(start_paused = true)]
async fn the_rule_is_data() {
    let (_dir, path) = temp();
    let once = SqliteStore::open_with(
        &path,
        LockRetry {
            attempts: 1,
            step: MS(20),
        },
        Duration::ZERO,
    )
    .unwrap();
    let _holder = hold_write_lock(&path);
    let started = Instant::now();
    let result = once.submit(job("a"), at(0)).await;
    assert!(
        matches!(result, Err(StoreError::Locked { attempts: 1, .. })),
        "{result:?}"
    );
    assert_eq!(started.elapsed(), Duration::ZERO);

    let five = SqliteStore::open_with(
        &path,
        LockRetry {
            attempts: 5,
            step: MS(7),
        },
        Duration::ZERO,
    )
    .unwrap();
    let started = Instant::now();
    assert!(matches!(
        five.submit(job("a"), at(0)).await,
        Err(StoreError::Locked { attempts: 5, .. })
    ));
    assert_eq!(started.elapsed(), MS(7 + 14 + 21 + 28));
}

#[tokio::test(start_paused = true)]
async fn any_other_database_error_fails_at_once() {
    let (_dir, path) = temp();
    let store = store(&path);
    let other = rusqlite::Connection::open(&path).unwrap();
    other
        .execute_batch("CREATE TRIGGER refuse BEFORE INSERT ON jobs BEGIN SELECT RAISE(ABORT, 'refused by policy'); END")
        .unwrap();
    let (events, _guard) = capture();

    let started = Instant::now();
    let refused = store.submit(job("a"), at(0)).await;
    match &refused {
        Err(StoreError::Database {
            op: "submit",
            source,
        }) => assert!(source.to_string().contains("refused by policy")),
        other => panic!("expected a Database error, got {other:?}"),
    }
    other.execute_batch("DROP TABLE jobs").unwrap();
    let missing = store.get("a").await;
    assert!(
        matches!(&missing, Err(StoreError::Database { op: "get", .. })),
        "{missing:?}"
    );
    assert_eq!(started.elapsed(), Duration::ZERO, "no waiting");
    assert!(events.take().is_empty(), "no retry");
}

#[test]
fn a_file_that_is_not_a_database_is_refused_at_open() {
    let (_dir, path) = temp();
    std::fs::write(&path, vec![0x5a; 8192]).unwrap();
    match SqliteStore::open(&path, LockRetry::CORE_POLICY) {
        Err(StoreError::Open { what, reason }) => {
            assert_eq!(what, path.display().to_string());
            assert!(reason.contains("not a database"), "{reason}");
        }
        other => panic!("expected Open, got {:?}", other.map(drop)),
    }
    let dir_as_file = path.parent().unwrap();
    assert!(matches!(
        SqliteStore::open(dir_as_file, LockRetry::CORE_POLICY),
        Err(StoreError::Open { .. })
    ));
}

#[tokio::test]
async fn an_oversize_value_in_the_file_is_refused_not_read() {
    let (_dir, path) = temp();
    let store = SqliteStore::open(&path, LockRetry::CORE_POLICY).unwrap();
    store.submit(job("big"), at(0)).await.unwrap();
    // Behind the store's back, a payload one byte over the cap (SQLite's own limit is 1 GB).
    let other = rusqlite::Connection::open(&path).unwrap();
    let fill = |len: usize| {
        let sql = "UPDATE jobs SET payload = '\"' || zeroblob(?1) || '\"' WHERE key = 'big'";
        other.execute(sql, [len as i64 - 2]).unwrap();
    };
    fill(SqliteStore::VALUE_MAX); // at the cap: read, then refused as JSON (raw NULs in a string)
    let read = store.get("big").await;
    assert!(
        matches!(
            &read,
            Err(StoreError::Corrupt {
                field: "payload",
                ..
            })
        ),
        "{read:?}"
    );
    fill(SqliteStore::VALUE_MAX + 1);
    let read = store.get("big").await;
    assert!(
        matches!(&read, Err(StoreError::Database { op: "get", source }) if source.to_string().contains("too big")),
        "{read:?}"
    );

    let payload = serde_json::Value::String("x".repeat(SqliteStore::VALUE_MAX));
    let refused = store
        .submit(
            NewJob {
                payload,
                ..job("huge")
            },
            at(0),
        )
        .await;
    assert!(
        matches!(&refused, Err(StoreError::Database { op: "submit", .. })),
        "{refused:?}"
    );
}

/// On a multi-thread runtime an operation runs on the caller's thread, never blocking the async
/// worker it was on: while a submit waits inside SQLite for another connection's lock, a task
/// queued behind it on the same (single) worker runs, and it is what lets the lock go.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_waiting_operation_leaves_its_worker_to_the_other_tasks() {
    let (_dir, path) = temp();
    // SQLite's own busy wait, long enough that only a released lock ends it, and no retry: a
    // submit that blocked the worker would fail `Locked` after it.
    let once = LockRetry {
        attempts: 1,
        step: Duration::ZERO,
    };
    let store = SqliteStore::open_with(&path, once, Duration::from_secs(60)).unwrap();
    let holder = hold_write_lock(&path);
    let submitted = tokio::spawn(async move {
        // Queued on this task's worker, which is busy with this task until the submit blocks.
        let release = tokio::spawn(async move { holder.execute_batch("COMMIT").unwrap() });
        let job = store.submit(job("a"), at(0)).await;
        release.await.unwrap();
        job
    });
    let job = submitted.await.unwrap().unwrap();
    assert_eq!(job.key, "a");
}

/// The `jobs` table as the releases before the schema version wrote it.
const UNVERSIONED: &str = "
    CREATE TABLE jobs (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE, kind TEXT NOT NULL,
        payload TEXT NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL, progress TEXT NOT NULL,
        last_error TEXT, not_before INTEGER, lease_owner TEXT, lease_until INTEGER,
        created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
    CREATE INDEX jobs_state_seq ON jobs (state, seq);
    INSERT INTO jobs (key, kind, payload, state, attempts, progress, created_at, updated_at) VALUES
        ('waiting', 'ingest', '{\"doc\":1}', 'pending', 0, 'null', 1, 1),
        ('given-up', 'ingest', '{\"doc\":2}', 'failed', 1, '{\"step\":2}', 1, 1);";

fn user_version(path: &Path) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}

/// A file an earlier release wrote is stamped with the schema version at open, its pending
/// and failed jobs kept as they were; a file of a later version is refused, not written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unversioned_file_is_stamped_keeping_its_jobs_and_a_later_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("earlier.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(UNVERSIONED)
        .unwrap();
    assert_eq!(user_version(&path), 0);
    let store = SqliteStore::open(&path, LockRetry::CORE_POLICY).unwrap();
    assert_eq!(user_version(&path), sdk_queue::SCHEMA_VERSION);
    let failed = store.get("given-up").await.unwrap().unwrap();
    assert_eq!(
        (failed.payload, failed.progress),
        (
            serde_json::json!({"doc": 2}),
            serde_json::json!({"step": 2})
        )
    );
    let claimed = store
        .claim_key("waiting", "w", Duration::from_secs(30), SystemTime::now())
        .await
        .unwrap()
        .expect("the pending job is claimable");
    assert_eq!(claimed.payload, serde_json::json!({"doc": 1}));
    drop(store);
    // Opening again changes nothing.
    drop(SqliteStore::open(&path, LockRetry::CORE_POLICY).unwrap());
    assert_eq!(user_version(&path), sdk_queue::SCHEMA_VERSION);

    rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    match SqliteStore::open(&path, LockRetry::CORE_POLICY) {
        Err(StoreError::Open { reason, .. }) => {
            assert!(reason.contains("schema version 99"), "{reason}")
        }
        other => panic!("a later version is refused: {:?}", other.err()),
    }
}
