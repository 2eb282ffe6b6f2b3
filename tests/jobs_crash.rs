//! Own binary: it spawns worker processes of itself and SIGKILLs them mid-job.
//!
//! Replay workers in processes of their own. One killed with SIGKILL
//! mid-replay loses nothing and doubles nothing: a new process opens the same
//! SQLite file, takes over the dead worker's jobs once their lease ran out,
//! reads back the send the dead one left unanswered, and every job ends done,
//! exactly once on the platform. Two replicas drain one PostgreSQL queue, and
//! the jobs of one killed mid-job are taken over by the other.
//!
//! A worker runs in a child process: this test binary again, running the
//! ignored `worker_process` entry point with its inputs in the environment.

use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use grag_client::types::{CreateKb, Point, UploadDocument};
use grag_client::{DocumentId, KbId};
use grag_jobs::{JobState, Jobs, Upload, upload_key};
use grag_sim::{Fault, Rule};
use grag_sim::{Sim, embedded};
use sdk_queue::{JobStore, NewJob, PgStore, SqliteStore};

const KB: &str = "kb-crash";
const JOBS: usize = 40;

const DB: &str = "GRAG_JOBS_TEST_DB";
/// Instead of `DB`: the PostgreSQL schema (at `SDK_QUEUE_PG_URL`).
const PG_SCHEMA: &str = "GRAG_JOBS_TEST_PG_SCHEMA";
const PG_URL: &str = "SDK_QUEUE_PG_URL";
const URL: &str = "GRAG_JOBS_TEST_URL";
const OWNER: &str = "GRAG_JOBS_TEST_OWNER";
const CLOCK_AHEAD: &str = "GRAG_JOBS_TEST_CLOCK_AHEAD_S";

/// The child: a worker on the store and simulator its environment names,
/// with the test policy (1/100), its clock `CLOCK_AHEAD` seconds ahead.
#[tokio::test]
#[ignore = "the worker process of the crash test, started by it"]
async fn worker_process() {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is set"));
    let ahead = Duration::from_secs(var(CLOCK_AHEAD).parse().expect("seconds"));
    let config = grag_client::Config::new(
        var(URL),
        embedded::KEY,
        grag_client::TenantId::parse(embedded::TENANT).unwrap(),
    );
    let grag = embedded::client_with(config, embedded::policy(100));
    let store: Arc<dyn JobStore> = match std::env::var(PG_SCHEMA) {
        Ok(schema) => Arc::new(
            PgStore::connect(&var(PG_URL), &schema)
                .await
                .expect("PostgreSQL"),
        ),
        Err(_) => {
            Arc::new(SqliteStore::open(var(DB), grag_jobs::lock_retry()).expect("the store opens"))
        }
    };
    let jobs = Jobs::new(grag, store, var(OWNER))
        .expect("a replay policy")
        .with_clock(move || SystemTime::now() + ahead);
    jobs.work().await;
}

/// Where a worker process finds its queue.
enum Queue<'a> {
    Sqlite(&'a str),
    Postgres(&'a str),
}

fn spawn_worker(queue: Queue<'_>, url: &str, owner: &str, ahead_s: u64) -> Child {
    let mut command = Command::new(std::env::current_exe().expect("the test binary"));
    match queue {
        Queue::Sqlite(db) => command.env(DB, db),
        // Its sessions carry its name, so the test can tell when the server
        // has ended them (`sessions_ended`).
        Queue::Postgres(schema) => command
            .env(PG_SCHEMA, schema)
            .env(PG_URL, with_application_name(owner)),
    };
    command
        .args(["worker_process", "--exact", "--ignored", "--nocapture"])
        .env(URL, url)
        .env(OWNER, owner)
        .env(CLOCK_AHEAD, ahead_s.to_string())
        .spawn()
        .expect("the worker process starts")
}

fn upload(n: usize) -> Upload {
    let doc = format!("doc-{n}");
    Upload {
        kb: KbId::parse(KB).unwrap(),
        document: UploadDocument::new(
            DocumentId::parse(&doc).unwrap(),
            format!("{doc}.txt"),
            "text/plain",
            "SGFsbG8=",
        ),
        points: (0..2)
            .map(|i| Point::new(format!("{doc}-{i}"), vec![1.0, 0.0]))
            .collect(),
    }
}

async fn count(store: &dyn JobStore, state: JobState) -> usize {
    store
        .list(state, JOBS)
        .await
        .expect("the store answers")
        .len()
}

/// Waits up to `secs` for `done` jobs to be done.
async fn wait_done(store: &dyn JobStore, secs: u64) -> usize {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let done = count(store, JobState::Done).await;
        if done == JOBS || tokio::time::Instant::now() > deadline {
            return done;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A simulator with the knowledge base the jobs upload into.
async fn platform() -> Sim {
    let sim = embedded::start(embedded::sim_config(100)).await;
    let grag = embedded::client(&sim, embedded::TENANT, embedded::policy(100));
    grag.workspaces()
        .create_kb(&CreateKb::new(KbId::parse(KB).unwrap(), "Crash"))
        .await
        .unwrap();
    sim
}

/// `JOBS` uploads, persisted and not run yet (as a backend that crashed
/// right after accepting them left them).
async fn fill(store: &dyn JobStore) {
    for n in 0..JOBS {
        let upload = upload(n);
        let job = NewJob {
            key: upload_key(&upload),
            kind: "ingest".into(),
            payload: serde_json::to_value(&upload).unwrap(),
        };
        store.submit(job, SystemTime::now()).await.unwrap();
    }
}

/// Waits until the simulator has seen `n` converts.
async fn converts_seen(sim: &Sim, n: usize) -> bool {
    sim.log()
        .wait_for(Duration::from_secs(60), |entries| {
            entries
                .iter()
                .filter(|e| e.operation == Some("convert"))
                .count()
                >= n
        })
        .await
}

/// Every document once, converted once, with all its points.
fn assert_exactly_once(sim: &Sim) {
    assert_eq!(sim.documents(embedded::TENANT, KB).len(), JOBS);
    for n in 0..JOBS {
        let doc = format!("doc-{n}");
        assert_eq!(
            sim.conversions_of(embedded::TENANT, &doc).len(),
            1,
            "{doc} converted exactly once"
        );
    }
    assert_eq!(sim.points(embedded::TENANT, KB).len(), JOBS * 2);
}

/// `SDK_QUEUE_PG_URL` with `application_name=<owner>`.
fn with_application_name(owner: &str) -> String {
    let url = std::env::var(PG_URL).expect("a PostgreSQL test has its URL");
    let joint = if url.contains('?') { '&' } else { '?' };
    format!("{url}{joint}application_name={owner}")
}

/// A plain connection of the test's own, for what the server says about
/// the workers' sessions.
async fn observer(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("PostgreSQL answers");
    tokio::spawn(connection);
    client
}

/// How many sessions `owner`'s process has open on the server.
async fn sessions_of(observer: &tokio_postgres::Client, owner: &str) -> i64 {
    observer
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            &[&owner],
        )
        .await
        .expect("pg_stat_activity")
        .get(0)
}

/// Waits until the server has ended every session of `owner`'s (killed)
/// process. A statement the process wrote just before SIGKILL (a job's
/// finish) is still carried out by its session, so until then what the dead
/// process holds can still change.
async fn sessions_ended(observer: &tokio_postgres::Client, owner: &str) -> bool {
    for _ in 0..3000 {
        if sessions_of(observer, owner).await == 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// Waits until `owner` holds a job, then returns the keys it holds.
async fn held_by(store: &dyn JobStore, owner: &str) -> Vec<String> {
    for _ in 0..3000 {
        let held: Vec<String> = store
            .list(JobState::InFlight, JOBS)
            .await
            .unwrap()
            .into_iter()
            .filter(|j| j.lease.as_ref().is_some_and(|l| l.owner == owner))
            .map(|j| j.key)
            .collect();
        if !held.is_empty() {
            return held;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Vec::new()
}

fn kill(mut worker: Child) {
    worker.kill().expect("SIGKILL");
    worker.wait().expect("the worker is reaped");
}

#[tokio::test]
async fn a_worker_killed_mid_replay_loses_and_doubles_nothing() {
    let sim = platform().await;
    let path =
        std::env::temp_dir().join(format!("grag-jobs-crash-{}.sqlite", uuid::Uuid::new_v4()));
    let db = path.to_str().expect("a UTF-8 path").to_owned();
    let store = SqliteStore::open(&db, grag_jobs::lock_retry()).unwrap();
    fill(&store).await;
    // The 6th convert is slow: the worker is inside it when it is killed.
    sim.faults().push(
        Rule::new(Fault::delay(Duration::from_millis(250)))
            .on("convert")
            .skip(5)
            .once(),
    );

    let first = spawn_worker(Queue::Sqlite(&db), &sim.url(), "worker-a", 0);
    assert!(
        converts_seen(&sim, 6).await,
        "the worker reaches the slow convert"
    );
    kill(first);
    let done = count(&store, JobState::Done).await;
    let held = count(&store, JobState::InFlight).await;
    assert!(done < JOBS, "killed mid-replay: {done} of {JOBS} done");
    assert!(held >= 1, "the dead worker still holds its jobs: {held}");

    // A new process, its clock past the dead worker's lease.
    let lease = embedded::policy(100).replay.as_ref().unwrap().lease;
    let second = spawn_worker(
        Queue::Sqlite(&db),
        &sim.url(),
        "worker-b",
        lease.as_secs() + 1,
    );
    let done = wait_done(&store, 120).await;
    kill(second);
    assert_eq!(done, JOBS, "every job ends done");
    assert_exactly_once(&sim);
    assert!(
        !sim.log().of("conversion_of").is_empty(),
        "the unanswered convert was read back before anything was sent again"
    );
    drop(store);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{db}{suffix}"));
    }
}

/// Two replicas drain one PostgreSQL queue; one is killed while it holds a
/// job, whose lease the other takes over once it ran out (the scaled lease,
/// 3 s: waited, not raced). Needs `SDK_QUEUE_PG_URL`.
#[tokio::test]
async fn two_replicas_share_a_postgres_queue_and_take_over_a_dead_ones_jobs() {
    let Ok(url) = std::env::var(PG_URL) else {
        eprintln!("PostgreSQL test skipped: set {PG_URL}=postgres://postgres@127.0.0.1:5432/test");
        return;
    };
    let schema = format!("grag_jobs_{}", uuid::Uuid::new_v4().simple());
    let store = PgStore::connect(&url, &schema)
        .await
        .expect("PostgreSQL answers");
    let sim = platform().await;
    fill(&store).await;
    // From the 10th on, converts are slow: a replica is inside a job
    // almost all the time, so the kill finds replica-a holding one.
    sim.faults().push(
        Rule::new(Fault::delay(Duration::from_millis(250)))
            .on("convert")
            .skip(9),
    );

    let a = spawn_worker(Queue::Postgres(&schema), &sim.url(), "replica-a", 0);
    let b = spawn_worker(Queue::Postgres(&schema), &sim.url(), "replica-b", 0);
    assert!(converts_seen(&sim, 10).await, "the replicas work the queue");
    held_by(&store, "replica-a").await;
    let observer = observer(&url).await;
    assert!(sessions_of(&observer, "replica-a").await > 0);
    kill(a);
    assert!(
        sessions_ended(&observer, "replica-a").await,
        "the server ends the dead replica's sessions"
    );
    // What it held when it died, read once its last statement is done.
    let held_by_a = held_by(&store, "replica-a").await;
    assert!(!held_by_a.is_empty(), "replica-a died holding a job");
    let done = wait_done(&store, 120).await;
    kill(b);
    assert_eq!(done, JOBS, "every job ends done");
    assert_exactly_once(&sim);
    for key in &held_by_a {
        let job = store.get(key).await.unwrap().unwrap();
        assert_eq!(job.state, JobState::Done, "{key}");
        assert!(
            job.attempts >= 2,
            "{key}: taken over after replica-a died: {job:?}"
        );
    }
    drop(store);
    observer
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}
