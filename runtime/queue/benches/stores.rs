//! Jobs per second through each store, beside a bare loop on the same database doing the same
//! writes: one iteration is one job's life, three transactions either way (submit; claim;
//! finish done).
//!
//! - `sqlite/store`: `SqliteStore` (WAL, default `synchronous`): submit, claim, finish.
//! - `sqlite/bare`: one rusqlite connection on a file opened the same way: INSERT, UPDATE to
//!   in flight, UPDATE to done, each its own `BEGIN IMMEDIATE` transaction.
//! - `postgres/store` and `postgres/bare`: the same against `SDK_QUEUE_PG_URL` (one
//!   tokio-postgres connection for the bare loop); skipped, saying so, without it.
//!
//! The ratio store/bare is the price of the store: JSON encoding and decoding of the row, the
//! owner checks, the blocking-thread hop (SQLite) and the pool (PostgreSQL). To see that price
//! and not the disk, neither side waits for a flush to disk: the SQLite files are on tmpfs
//! (`/dev/shm` where it exists) and both PostgreSQL sessions run with `synchronous_commit=off`.
//! A durable commit costs milliseconds on a shared disk and varies with the machine's load by
//! more than the whole of the store's own cost.
//!
//! Run with `cargo bench -p sdk-queue --bench stores` (with `SDK_QUEUE_PG_URL` for PostgreSQL).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sdk_queue::{Finish, JobStore, LockRetry, NewJob, PgStore, SqliteStore};

const LEASE: Duration = Duration::from_secs(60);
const PAYLOAD: &str = r#"{"kb":"kb-1","doc":"doc-7","points":["p-1","p-2","p-3"]}"#;

static NEXT: AtomicU64 = AtomicU64::new(0);

fn next_key() -> String {
    format!("job-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// One job's life through a store.
async fn through_store(store: &dyn JobStore) {
    let key = next_key();
    let now = SystemTime::now();
    let payload = serde_json::from_str(PAYLOAD).unwrap();
    store
        .submit(
            NewJob {
                key: key.clone(),
                kind: "ingest".into(),
                payload,
            },
            now,
        )
        .await
        .unwrap();
    let claimed = store.claim_key(&key, "bench", LEASE, now).await.unwrap();
    assert!(claimed.is_some());
    store
        .finish(&key, "bench", Finish::Done, now)
        .await
        .unwrap();
}

fn sqlite(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .unwrap();
    let mut group = c.benchmark_group("sqlite");
    group.throughput(Throughput::Elements(1));

    let store = SqliteStore::open(dir.path().join("store.db"), LockRetry::CORE_POLICY).unwrap();
    group.bench_function("store", |b| b.to_async(&rt).iter(|| through_store(&store)));

    let bare = rusqlite::Connection::open(dir.path().join("bare.db")).unwrap();
    bare.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
        .unwrap();
    bare.execute_batch(
        "CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE, kind TEXT NOT NULL,
         payload TEXT NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL, lease_owner TEXT, lease_until INTEGER,
         created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL)",
    )
    .unwrap();
    let in_tx = |sql: &str, key: &str| {
        bare.execute_batch("BEGIN IMMEDIATE").unwrap();
        bare.prepare_cached(sql).unwrap().execute([key]).unwrap();
        bare.execute_batch("COMMIT").unwrap();
    };
    group.bench_function("bare", |b| {
        b.iter(|| {
            let key = next_key();
            let insert = format!(
                "INSERT INTO jobs (key, kind, payload, state, attempts, created_at, updated_at) \
                 VALUES (?1, 'ingest', '{PAYLOAD}', 'pending', 0, 1, 1)"
            );
            in_tx(&insert, &key);
            in_tx(
                "UPDATE jobs SET state = 'in_flight', lease_owner = 'bench', lease_until = 2, attempts = attempts + 1 WHERE key = ?1",
                &key,
            );
            in_tx("UPDATE jobs SET state = 'done', lease_owner = NULL, lease_until = NULL WHERE key = ?1", &key);
        })
    });
    group.finish();
}

fn postgres(c: &mut Criterion) {
    let Ok(url) = std::env::var("SDK_QUEUE_PG_URL") else {
        println!(
            "postgres benches skipped: set SDK_QUEUE_PG_URL=postgres://postgres@127.0.0.1:5432/test"
        );
        return;
    };
    let separator = if url.contains('?') { '&' } else { '?' };
    let url = format!("{url}{separator}options=-c%20synchronous_commit%3Doff");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let schema = format!("sdk_queue_bench_{}", std::process::id());
    let (store, raw) = rt.block_on(async {
        let store = PgStore::connect(&url, &schema).await.unwrap();
        let (raw, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        raw.batch_execute(&format!(
            "CREATE TABLE \"{schema}\".bare (seq BIGSERIAL PRIMARY KEY, key TEXT NOT NULL UNIQUE, kind TEXT NOT NULL,
             payload TEXT NOT NULL, state TEXT NOT NULL, attempts BIGINT NOT NULL, lease_owner TEXT, lease_until BIGINT,
             created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL)"
        ))
        .await
        .unwrap();
        (store, raw)
    });
    let mut group = c.benchmark_group("postgres");
    group.throughput(Throughput::Elements(1));
    group.bench_function("store", |b| b.to_async(&rt).iter(|| through_store(&store)));

    let t = format!("\"{schema}\".bare");
    let (insert, claim, finish) = rt.block_on(async {
        let insert = format!(
            "INSERT INTO {t} (key, kind, payload, state, attempts, created_at, updated_at) VALUES ($1, 'ingest', $2, 'pending', 0, 1, 1)"
        );
        let claim = format!("UPDATE {t} SET state = 'in_flight', lease_owner = 'bench', lease_until = 2, attempts = attempts + 1 WHERE key = $1");
        let finish = format!("UPDATE {t} SET state = 'done', lease_owner = NULL, lease_until = NULL WHERE key = $1");
        (raw.prepare(&insert).await.unwrap(), raw.prepare(&claim).await.unwrap(), raw.prepare(&finish).await.unwrap())
    });
    group.bench_function("bare", |b| {
        b.to_async(&rt).iter(|| async {
            let key = next_key();
            raw.execute(&insert, &[&key, &PAYLOAD]).await.unwrap();
            raw.execute(&claim, &[&key]).await.unwrap();
            raw.execute(&finish, &[&key]).await.unwrap();
        })
    });
    group.finish();
    rt.block_on(raw.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE")))
        .unwrap();
}

criterion_group! {
    name = stores;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(5));
    targets = sqlite, postgres
}
criterion_main!(stores);
