//! A replay worker killed with SIGKILL mid-replay loses nothing and doubles
//! nothing: a new process opens the same SQLite file, takes over the dead
//! worker's jobs once their lease ran out, reads back the send the dead one
//! left unanswered, and every job ends done, exactly once on the platform.
//!
//! The worker runs in a child process: this test binary again, running the
//! ignored `worker_process` entry point with its inputs in the environment.

use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use grag_client::types::{CreateKb, Point, UploadDocument};
use grag_client::{DocumentId, KbId};
use grag_jobs::{JobState, Jobs, Upload, upload_key};
use grag_sim::testkit;
use grag_sim::{Fault, Rule};
use sdk_queue::{JobStore, NewJob, SqliteStore};

const KB: &str = "kb-crash";
const JOBS: usize = 40;

const DB: &str = "GRAG_JOBS_TEST_DB";
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
        testkit::KEY,
        grag_client::TenantId::parse(testkit::TENANT).unwrap(),
    );
    let grag = testkit::client_with(config, testkit::policy(100));
    let store = SqliteStore::open(var(DB), grag_jobs::lock_retry()).expect("the store opens");
    let jobs = Jobs::new(grag, Arc::new(store), var(OWNER))
        .expect("a replay policy")
        .with_clock(move || SystemTime::now() + ahead);
    jobs.work().await;
}

fn spawn_worker(db: &str, url: &str, owner: &str, ahead_s: u64) -> Child {
    Command::new(std::env::current_exe().expect("the test binary"))
        .args(["worker_process", "--exact", "--ignored", "--nocapture"])
        .env(DB, db)
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
        document: UploadDocument {
            document_id: DocumentId::parse(&doc).unwrap(),
            filename: format!("{doc}.txt"),
            content_type: "text/plain".into(),
            content_base64: "SGFsbG8=".into(),
            metadata: None,
        },
        points: (0..2)
            .map(|i| Point {
                id: format!("{doc}-{i}"),
                vector: vec![1.0, 0.0],
                payload: None,
            })
            .collect(),
    }
}

async fn count(store: &SqliteStore, state: JobState) -> usize {
    store.list(state, JOBS).await.expect("the store answers").len()
}

/// Waits up to `secs` for `done` jobs to be done.
async fn wait_done(store: &SqliteStore, secs: u64) -> usize {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let done = count(store, JobState::Done).await;
        if done == JOBS || tokio::time::Instant::now() > deadline {
            return done;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_worker_killed_mid_replay_loses_and_doubles_nothing() {
    let sim = testkit::start(testkit::sim_config(100)).await;
    let grag = testkit::client(&sim, testkit::TENANT, testkit::policy(100));
    grag.workspaces()
        .create_kb(&CreateKb {
            kb_id: KbId::parse(KB).unwrap(),
            name: "Crash".into(),
            description: None,
        })
        .await
        .unwrap();
    let path = std::env::temp_dir().join(format!("grag-jobs-crash-{}.sqlite", uuid::Uuid::new_v4()));
    let db = path.to_str().expect("a UTF-8 path").to_owned();
    let store = SqliteStore::open(&db, grag_jobs::lock_retry()).unwrap();
    for n in 0..JOBS {
        let upload = upload(n);
        let job = NewJob {
            key: upload_key(&upload),
            kind: "ingest".into(),
            payload: serde_json::to_value(&upload).unwrap(),
        };
        store.submit(job, SystemTime::now()).await.unwrap();
    }
    // The 6th convert is slow: the worker is inside it when it is killed.
    sim.faults()
        .push(Rule::new(Fault::delay(Duration::from_millis(250))).on("convert").skip(5).once());

    let mut first = spawn_worker(&db, &sim.url(), "worker-a", 0);
    let log = sim.log();
    assert!(
        log.wait_for(Duration::from_secs(60), |entries| entries
            .iter()
            .filter(|e| e.operation == Some("convert"))
            .count()
            >= 6)
            .await,
        "the worker reaches the slow convert"
    );
    first.kill().expect("SIGKILL");
    first.wait().expect("the worker is reaped");

    let done = count(&store, JobState::Done).await;
    let held = count(&store, JobState::InFlight).await;
    assert!(done < JOBS, "killed mid-replay: {done} of {JOBS} done");
    assert!(held >= 1, "the dead worker still holds its jobs: {held}");

    // A new process, its clock past the dead worker's lease.
    let lease = testkit::policy(100).replay.as_ref().unwrap().lease;
    let mut second = spawn_worker(&db, &sim.url(), "worker-b", lease.as_secs() + 1);
    let done = wait_done(&store, 120).await;
    second.kill().expect("SIGKILL");
    second.wait().expect("the worker is reaped");
    assert_eq!(done, JOBS, "every job ends done");

    assert_eq!(sim.documents(testkit::TENANT, KB).len(), JOBS);
    for n in 0..JOBS {
        let doc = format!("doc-{n}");
        assert_eq!(
            sim.conversions_of(testkit::TENANT, &doc).len(),
            1,
            "{doc} converted exactly once"
        );
    }
    assert_eq!(sim.points(testkit::TENANT, KB).len(), JOBS * 2);
    assert!(
        !log.of("conversion_of").is_empty(),
        "the unanswered convert was read back before anything was sent again"
    );
    drop(store);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{db}{suffix}"));
    }
}
