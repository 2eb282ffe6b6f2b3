//! Row 9: jobs per second submitted and completed through each `sdk-queue`
//! store, against a bare loop on the same database doing the same three
//! transactions per job (insert pending; update to in flight; update to
//! done). The ratio is the store's own price: JSON encoding and decoding of
//! the row, the owner checks, leaving the async worker (SQLite) and the pool
//! (PostgreSQL). The SQLite store runs from a task on a multi-thread runtime,
//! as a backend runs it, where an operation needs no thread hop; a second
//! row runs it on a current-thread runtime, where each one hops to a
//! blocking thread. Neither side waits for the disk, so that price is not lost
//! in fsync noise: the SQLite files are on tmpfs (`/dev/shm` where it
//! exists) and both PostgreSQL sessions run with `synchronous_commit=off`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use sdk_queue::{Finish, JobStore, LockRetry, NewJob, PgStore, SqliteStore};

use crate::Opts;
use crate::report::{Goal, Measurement};
use crate::rounds::{pair, rotate};

const LEASE: Duration = Duration::from_secs(60);
const PAYLOAD: &str = r#"{"kb":"kb-1","doc":"doc-7","points":["p-1","p-2","p-3"]}"#;
/// The environment variable naming the PostgreSQL server.
pub const PG_URL: &str = "SDK_QUEUE_PG_URL";

static NEXT: AtomicU64 = AtomicU64::new(0);

fn next_key() -> String {
    format!("job-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Jobs per second of `n` jobs run by `run`.
fn rate(n: usize, run: impl FnOnce()) -> f64 {
    let started = Instant::now();
    run();
    n as f64 / started.elapsed().as_secs_f64()
}

/// `n` jobs' lives through a store: submit, claim, finish done.
async fn through_store(store: &dyn JobStore, n: usize) {
    for _ in 0..n {
        let key = next_key();
        let now = SystemTime::now();
        let payload = serde_json::from_str(PAYLOAD).expect("the payload is JSON");
        let job = NewJob {
            key: key.clone(),
            kind: "ingest".into(),
            payload,
        };
        store.submit(job, now).await.expect("submit");
        let claimed = store
            .claim_key(&key, "bench", LEASE, now)
            .await
            .expect("claim");
        assert!(claimed.is_some(), "the job just submitted is claimed");
        store
            .finish(
                &key,
                "bench",
                Finish::Done(serde_json::json!({"kept": true})),
                now,
            )
            .await
            .expect("finish");
    }
}

const BARE_TABLE: &str = "(seq INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, kind TEXT NOT NULL, \
     payload TEXT NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL, lease_owner TEXT, \
     lease_until INTEGER, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL)";
const CLAIM: &str =
    "SET state = 'in_flight', lease_owner = 'bench', lease_until = 2, attempts = attempts + 1";
const FINISH: &str = "SET state = 'done', lease_owner = NULL, lease_until = NULL";

fn bare_sqlite(conn: &rusqlite::Connection, n: usize) {
    let in_tx = |sql: &str, key: &str| {
        conn.execute_batch("BEGIN IMMEDIATE").expect("begin");
        conn.prepare_cached(sql)
            .and_then(|mut s| s.execute([key]))
            .expect("the statement runs");
        conn.execute_batch("COMMIT").expect("commit");
    };
    let insert = format!(
        "INSERT INTO jobs (key, kind, payload, state, attempts, created_at, updated_at) \
         VALUES (?1, 'ingest', '{PAYLOAD}', 'pending', 0, 1, 1)"
    );
    let claim = format!("UPDATE jobs {CLAIM} WHERE key = ?1");
    let finish = format!("UPDATE jobs {FINISH} WHERE key = ?1");
    for _ in 0..n {
        let key = next_key();
        in_tx(&insert, &key);
        in_tx(&claim, &key);
        in_tx(&finish, &key);
    }
}

pub fn run(opts: &Opts) {
    let n = if opts.quick { 200 } else { 1000 };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    sqlite(opts, n, &rt);
    postgres(opts, n, &rt);
}

/// The SQLite store, from a multi-thread and a current-thread runtime, against
/// the same transactions on one bare connection.
fn sqlite(opts: &Opts, n: usize, rt: &tokio::runtime::Runtime) {
    // How a backend runs the store: a task on `#[tokio::main]`'s multi-thread runtime.
    let mt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let shm = std::path::Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("sdk-bench-jobs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");

    let store = SqliteStore::open(dir.join("store.db"), LockRetry::CORE_POLICY).expect("the store");
    let bare = rusqlite::Connection::open(dir.join("bare.db")).expect("the bare database");
    bare.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
        .expect("WAL");
    bare.execute_batch(&format!("CREATE TABLE jobs {BARE_TABLE}"))
        .expect("the bare table");
    let in_task = |n| {
        let store = store.clone();
        let task = mt.spawn(async move { through_store(&store, n).await });
        mt.block_on(task).expect("the store loop");
    };
    let mut samples = rotate(
        opts.rounds,
        &mut [
            &mut || rate(n, || in_task(n)),
            &mut || rate(n, || rt.block_on(through_store(&store, n))),
            &mut || rate(n, || bare_sqlite(&bare, n)),
        ],
    );
    let peer = samples.pop().expect("three contenders");
    let (current, multi) = (samples.pop().expect("ours"), samples.pop().expect("ours"));
    Measurement::new(
        "job store sqlite: submit, claim, finish",
        "jobs/s",
        (multi, peer.clone()),
    )
    .note("SqliteStore (WAL, tmpfs) from a task on a multi-thread runtime vs the same three rusqlite transactions on one connection")
    .goal(Goal::ratio(">=", 0.5))
    .print();
    Measurement::new(
        "job store sqlite, current-thread runtime",
        "jobs/s",
        (current, peer),
    )
    .note("the same on a current-thread runtime, where every operation hops to a blocking thread")
    .print();
    drop(store);
    drop(bare);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The PostgreSQL store against the same statements on one bare connection,
/// when a server is named.
fn postgres(opts: &Opts, n: usize, rt: &tokio::runtime::Runtime) {
    let Ok(url) = std::env::var(PG_URL) else {
        eprintln!(
            "job store postgres: skipped, set {PG_URL}=postgres://postgres@127.0.0.1:5432/test"
        );
        return;
    };
    let separator = if url.contains('?') { '&' } else { '?' };
    let url = format!("{url}{separator}options=-c%20synchronous_commit%3Doff");
    let schema = format!("sdk_bench_jobs_{}", std::process::id());
    let (store, bare) = rt.block_on(async {
        let store = PgStore::connect(&url, &schema)
            .await
            .expect("PostgreSQL answers");
        (store, BarePg::new(&url, &schema).await)
    });
    let samples = pair(
        opts.rounds,
        || rate(n, || rt.block_on(through_store(&store, n))),
        || rate(n, || rt.block_on(bare.run(n))),
    );
    Measurement::new("job store postgres: submit, claim, finish", "jobs/s", samples)
        .note("PgStore (pool, synchronous_commit=off) vs the same three statements on one tokio-postgres connection")
        .goal(Goal::ratio(">=", 0.75))
        .print();
    let _ = rt.block_on(
        bare.client
            .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE")),
    );
}

/// The bare loop on PostgreSQL: one connection, three prepared statements.
struct BarePg {
    client: tokio_postgres::Client,
    insert: tokio_postgres::Statement,
    claim: tokio_postgres::Statement,
    finish: tokio_postgres::Statement,
}

impl BarePg {
    async fn new(url: &str, schema: &str) -> BarePg {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("PostgreSQL answers");
        tokio::spawn(connection);
        let t = format!("\"{schema}\".bare");
        let table = BARE_TABLE.replace("INTEGER PRIMARY KEY", "BIGSERIAL PRIMARY KEY");
        client
            .batch_execute(&format!("CREATE TABLE {t} {table}"))
            .await
            .expect("the bare table");
        let prepare = |sql: String| {
            let client = &client;
            async move { client.prepare(&sql).await.expect("the statement prepares") }
        };
        let insert = prepare(format!(
            "INSERT INTO {t} (key, kind, payload, state, attempts, created_at, updated_at) \
             VALUES ($1, 'ingest', $2, 'pending', 0, 1, 1)"
        ))
        .await;
        let claim = prepare(format!("UPDATE {t} {CLAIM} WHERE key = $1")).await;
        let finish = prepare(format!("UPDATE {t} {FINISH} WHERE key = $1")).await;
        BarePg {
            client,
            insert,
            claim,
            finish,
        }
    }

    async fn run(&self, n: usize) {
        for _ in 0..n {
            let key = next_key();
            let c = &self.client;
            c.execute(&self.insert, &[&key, &PAYLOAD])
                .await
                .expect("insert");
            c.execute(&self.claim, &[&key]).await.expect("claim");
            c.execute(&self.finish, &[&key]).await.expect("finish");
        }
    }
}
