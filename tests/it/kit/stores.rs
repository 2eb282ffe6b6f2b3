//! What the queue's suites need of a database: stores on it, and raw SQL behind the store's back.

pub mod earlier_pg;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sdk_queue::{JobStore, LockRetry, PgStore, SqliteStore};

/// The injected clock: `ms` after a fixed instant (stores keep whole milliseconds).
pub fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000) + Duration::from_millis(ms)
}

/// One database under test.
#[async_trait::async_trait]
pub trait Harness: Send + Sync + 'static {
    /// The store the cases use.
    fn store(&self) -> Arc<dyn JobStore>;
    /// Another store (its own connections) on the same database, as a second worker has.
    async fn another(&self) -> Arc<dyn JobStore>;
    /// Runs `sql` on the `jobs` table directly, as a hostile or damaged file would have it.
    async fn exec(&self, sql: &str);
    /// Removes what the test made.
    async fn teardown(self);
}

pub struct Sqlite {
    dir: tempfile::TempDir,
    store: Arc<SqliteStore>,
}

impl Sqlite {
    pub fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("queue.db")
    }

    pub async fn new() -> Option<Sqlite> {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(
            SqliteStore::open(dir.path().join("queue.db"), LockRetry::CORE_POLICY).unwrap(),
        );
        Some(Sqlite { dir, store })
    }
}

#[async_trait::async_trait]
impl Harness for Sqlite {
    fn store(&self) -> Arc<dyn JobStore> {
        self.store.clone()
    }

    async fn another(&self) -> Arc<dyn JobStore> {
        Arc::new(SqliteStore::open(self.path(), LockRetry::CORE_POLICY).unwrap())
    }

    async fn exec(&self, sql: &str) {
        let conn = rusqlite::Connection::open(self.path()).unwrap();
        conn.busy_timeout(Duration::from_secs(5)).unwrap();
        conn.execute_batch(sql).unwrap();
    }

    async fn teardown(self) {}
}

/// The URL the PostgreSQL tests read, and what they say without it.
pub const PG_URL_VAR: &str = "SDK_QUEUE_PG_URL";

/// The PostgreSQL URL, or `None` after saying plainly that the test is skipped. Written to the
/// process's stderr, not through `eprintln!`, so a passing test's line is not swallowed.
pub fn pg_url() -> Option<String> {
    match std::env::var(PG_URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            use std::io::Write;
            let line = format!(
                "PostgreSQL suite skipped: set {PG_URL_VAR}=postgres://postgres@127.0.0.1:5432/test\n"
            );
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
            None
        }
    }
}

/// A schema name no other test (or earlier run) uses.
pub fn fresh_schema(prefix: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{prefix}_{}_{n}_{nanos}", std::process::id())
}

/// A raw connection with `schema` first on its search path.
pub async fn pg_raw(url: &str, schema: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(&format!("SET search_path TO \"{schema}\""))
        .await
        .unwrap();
    client
}

pub struct Pg {
    url: String,
    schema: String,
    store: Arc<PgStore>,
    raw: tokio_postgres::Client,
}

impl Pg {
    pub async fn new() -> Option<Pg> {
        let url = pg_url()?;
        let schema = fresh_schema("sdk_queue_suite");
        let store = Arc::new(PgStore::connect(&url, &schema).await.unwrap());
        let raw = pg_raw(&url, &schema).await;
        Some(Pg {
            url,
            schema,
            store,
            raw,
        })
    }
}

#[async_trait::async_trait]
impl Harness for Pg {
    fn store(&self) -> Arc<dyn JobStore> {
        self.store.clone()
    }

    async fn another(&self) -> Arc<dyn JobStore> {
        Arc::new(PgStore::connect(&self.url, &self.schema).await.unwrap())
    }

    async fn exec(&self, sql: &str) {
        self.raw.batch_execute(sql).await.unwrap();
    }

    async fn teardown(self) {
        self.raw
            .batch_execute(&format!("DROP SCHEMA \"{}\" CASCADE", self.schema))
            .await
            .unwrap();
    }
}
