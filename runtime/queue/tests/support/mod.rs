//! What the store suite needs of a database: stores on it, and raw SQL behind the store's back.

#![allow(dead_code)] // each test binary uses its part

pub mod cases;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sdk_queue::{JobStore, LockRetry, SqliteStore};

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

/// Writes each test case once for a backend: `cases!(make_harness; case_a, case_b)`.
#[macro_export]
macro_rules! cases {
    ($make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let Some(h) = $make.await else { return };
                $crate::support::cases::$case(&h).await;
                $crate::support::Harness::teardown(h).await;
            }
        )*
    };
}

/// Every case of the suite, for `cases!`.
#[macro_export]
macro_rules! suite {
    ($make:expr) => {
        $crate::cases!($make;
            submit_is_idempotent,
            claim_takes_the_oldest_of_the_kinds_asked,
            not_before_holds_a_replay_back,
            an_expired_lease_is_taken_over,
            the_old_owner_loses_the_lease,
            finish_sets_each_end_state,
            claim_key_takes_only_an_eligible_job,
            depth_counts_every_job_not_done,
            list_gives_the_oldest_first,
            corrupt_rows_are_typed_errors,
            concurrent_claimers_never_share_a_job,
        );
    };
}
