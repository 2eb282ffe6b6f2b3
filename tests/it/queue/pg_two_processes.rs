//! Two worker processes on one PostgreSQL queue: each test re-runs this test binary as its
//! workers (`--exact <test>` with a role in the environment). Every job runs exactly once: each worker
//! records its completions in a side table whose primary key refuses a second run.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

use crate::kit::stores::{fresh_schema, pg_raw, pg_url};
use sdk_queue::{Claim, Finish, JobState, JobStore, NewJob, PgStore};
use serde_json::json;

const ROLE: &str = "SDK_QUEUE_TEST_ROLE";
const SCHEMA: &str = "SDK_QUEUE_TEST_SCHEMA";
const OWNER: &str = "SDK_QUEUE_TEST_OWNER";
/// Added to the worker's clock: a successor sees a lease expired without waiting for it.
const CLOCK_OFFSET_MS: &str = "SDK_QUEUE_TEST_CLOCK_OFFSET_MS";
/// The line a holding worker prints once it holds its job.
const CLAIMED: &str = "SDK_QUEUE_TEST_CLAIMED";

/// Longer than any test runs, so only the injected clock offset ever expires a lease.
const LEASE: Duration = Duration::from_secs(3600);

/// The role this process plays, if it is a worker child.
fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

fn worker_env() -> (String, String, String, Duration) {
    let var = |name| std::env::var(name).unwrap_or_else(|_| panic!("{name} unset"));
    let offset = var(CLOCK_OFFSET_MS).parse().expect("offset in ms");
    (
        pg_url().unwrap(),
        var(SCHEMA),
        var(OWNER),
        Duration::from_millis(offset),
    )
}

/// This binary as a worker running `test` in `role`.
fn spawn_worker(
    test: &str,
    role: &str,
    schema: &str,
    owner: &str,
    clock_offset: Duration,
) -> Worker {
    // The harness names a test by its path below the crate (`queue::pg_two_processes::…`).
    let (_, module) = module_path!()
        .split_once("::")
        .expect("a module below the crate");
    let test = format!("{module}::{test}");
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &test, "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(SCHEMA, schema)
        .env(OWNER, owner)
        .env(CLOCK_OFFSET_MS, clock_offset.as_millis().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Worker(Some(child))
}

/// A child that is killed if the test ends before it does.
struct Worker(Option<Child>);

impl Worker {
    fn child(&mut self) -> &mut Child {
        self.0.as_mut().unwrap()
    }

    /// Waits for a clean exit; its output is the failure message otherwise.
    fn succeed(mut self) -> String {
        let out = self.0.take().unwrap().wait_with_output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "worker failed ({}):\n{text}",
            out.status
        );
        text
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

async fn queue(url: &str, schema: &str, jobs: usize) -> (PgStore, tokio_postgres::Client) {
    let store = PgStore::connect(url, schema).await.unwrap();
    let raw = pg_raw(url, schema).await;
    raw.batch_execute(
        "CREATE TABLE completions (key TEXT PRIMARY KEY, owner TEXT NOT NULL);
         CREATE TABLE ready (owner TEXT PRIMARY KEY);",
    )
    .await
    .unwrap();
    for i in 0..jobs {
        let job = NewJob {
            key: format!("job-{i:03}"),
            kind: "ingest".into(),
            payload: json!({ "n": i }),
        };
        store.submit(job, SystemTime::now()).await.unwrap();
    }
    (store, raw)
}

/// Claims and runs jobs until none is eligible at the worker's clock; returns how many it ran.
/// Running a job is recording it in `completions`: a second run of a job fails on its key.
async fn drain(
    store: &PgStore,
    raw: &tokio_postgres::Client,
    owner: &str,
    clock_offset: Duration,
) -> usize {
    let mut ran = 0;
    loop {
        let now = SystemTime::now() + clock_offset;
        let jobs = store
            .claim(Claim {
                owner,
                kinds: &["ingest"],
                limit: 1,
                lease: LEASE,
                now,
            })
            .await
            .unwrap();
        if jobs.is_empty() {
            return ran;
        }
        for job in jobs {
            raw.execute(
                "INSERT INTO completions (key, owner) VALUES ($1, $2)",
                &[&job.key, &owner],
            )
            .await
            .unwrap_or_else(|e| panic!("{} ran twice: {e}", job.key));
            store
                .finish(
                    &job.key,
                    owner,
                    Finish::Done(serde_json::json!({"kept": true})),
                    now,
                )
                .await
                .unwrap();
            ran += 1;
        }
    }
}

async fn completions(raw: &tokio_postgres::Client) -> Vec<(String, String)> {
    let rows = raw
        .query("SELECT key, owner FROM completions ORDER BY key", &[])
        .await
        .unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

async fn drop_schema(raw: &tokio_postgres::Client, schema: &str) {
    raw.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_in_two_processes_drain_one_queue_each_job_once() {
    const TEST: &str = "two_workers_in_two_processes_drain_one_queue_each_job_once";
    const JOBS: usize = 100;
    if role().as_deref() == Some("drain") {
        let (url, schema, owner, offset) = worker_env();
        let store = PgStore::connect(&url, &schema).await.unwrap();
        let raw = pg_raw(&url, &schema).await;
        // Both start draining only once both are connected, so they really share the queue.
        raw.execute("INSERT INTO ready (owner) VALUES ($1)", &[&owner])
            .await
            .unwrap();
        let give_up = std::time::Instant::now() + Duration::from_secs(60); // a hang guard, not a timing
        while raw
            .query_one("SELECT COUNT(*) FROM ready", &[])
            .await
            .unwrap()
            .get::<_, i64>(0)
            < 2
        {
            assert!(
                std::time::Instant::now() < give_up,
                "the other worker never connected"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        println!("{owner} ran {}", drain(&store, &raw, &owner, offset).await);
        return;
    }
    let Some(url) = pg_url() else { return };
    let schema = fresh_schema("sdk_queue_drain");
    let (store, raw) = queue(&url, &schema, JOBS).await;

    let workers =
        ["w1", "w2"].map(|owner| spawn_worker(TEST, "drain", &schema, owner, Duration::ZERO));
    for w in workers {
        println!(
            "{}",
            w.succeed()
                .lines()
                .filter(|l| l.contains(" ran "))
                .collect::<String>()
        );
    }

    let done = completions(&raw).await;
    assert_eq!(
        done.len(),
        JOBS,
        "every job ran (the key refuses a second run)"
    );
    for job in store.list(JobState::Done, JOBS + 1).await.unwrap().iter() {
        assert_eq!((job.attempts, job.lease.as_ref()), (1, None), "{}", job.key);
    }
    assert_eq!(
        store.list(JobState::Done, JOBS + 1).await.unwrap().len(),
        JOBS
    );
    assert!(store.depth().await.unwrap().is_empty(), "nothing left");
    drop_schema(&raw, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_job_is_taken_over_once_its_lease_expired() {
    const TEST: &str = "a_killed_workers_job_is_taken_over_once_its_lease_expired";
    match role().as_deref() {
        Some("hold") => {
            let (url, schema, owner, offset) = worker_env();
            let store = PgStore::connect(&url, &schema).await.unwrap();
            let now = SystemTime::now() + offset;
            let job = store
                .claim(Claim {
                    owner: &owner,
                    kinds: &["ingest"],
                    limit: 1,
                    lease: LEASE,
                    now,
                })
                .await
                .unwrap();
            let key = &job[0].key;
            store
                .checkpoint(key, &owner, &json!({ "step": "sent" }), LEASE, now)
                .await
                .unwrap();
            println!("{CLAIMED} {key}");
            // Hold the job until killed (or until the test's end closes stdin).
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            return;
        }
        Some("takeover") => {
            let (url, schema, owner, offset) = worker_env();
            let store = PgStore::connect(&url, &schema).await.unwrap();
            let raw = pg_raw(&url, &schema).await;
            println!("{owner} ran {}", drain(&store, &raw, &owner, offset).await);
            return;
        }
        _ => {}
    }
    let Some(url) = pg_url() else { return };
    let schema = fresh_schema("sdk_queue_kill");
    let (store, raw) = queue(&url, &schema, 3).await;

    let mut holder = spawn_worker(TEST, "hold", &schema, "crashed", Duration::ZERO);
    let stdout = BufReader::new(holder.child().stdout.take().unwrap());
    // libtest may have begun the line (`test <name> ... `), so the marker is looked for anywhere in it.
    let line = stdout
        .lines()
        .map_while(Result::ok)
        .find(|l| l.contains(CLAIMED));
    let Some(line) = line else {
        panic!("the holder never claimed: {}", holder.succeed())
    };
    let key = line.split(CLAIMED).nth(1).unwrap().trim().to_owned();
    assert_eq!(key, "job-000", "the oldest job first");

    let held = store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (held.state, held.lease.as_ref().map(|l| l.owner.as_str())),
        (JobState::InFlight, Some("crashed"))
    );
    assert_eq!(
        store
            .claim_key(&key, "other", LEASE, SystemTime::now())
            .await
            .unwrap(),
        None,
        "a live lease is never shared"
    );

    holder.child().kill().unwrap(); // SIGKILL: no clean-up runs in the holder
    let status = holder.child().wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "{status}");
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().state,
        JobState::InFlight,
        "the dead worker still holds it"
    );

    // A successor whose clock is past the lease takes the job over, and the rest of the queue.
    let successor = spawn_worker(
        TEST,
        "takeover",
        &schema,
        "successor",
        LEASE + Duration::from_secs(1),
    );
    assert!(successor.succeed().contains("successor ran 3"));

    let taken = store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (taken.state, taken.attempts, taken.lease),
        (JobState::Done, 2, None)
    );
    assert_eq!(
        taken.progress,
        json!({ "step": "sent" }),
        "the checkpoint survived the takeover"
    );
    let done = completions(&raw).await;
    let expected: Vec<(String, String)> = ["job-000", "job-001", "job-002"]
        .map(|k| (k.into(), "successor".into()))
        .into();
    assert_eq!(
        done, expected,
        "each job ran once, the taken-over one by the successor"
    );
    drop_schema(&raw, &schema).await;
}
