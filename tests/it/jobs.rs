//! The durable job queue end to end over the simulator (policy §5.3): jobs
//! persisted before they run, replayed after an open breaker, a dropped
//! connection or WAL backpressure, re-read before an ambiguous send goes out
//! again, 413 splits, failures kept for the UI, and a deploy churn survived
//! with every document and edge on the platform exactly once.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::kit::resilience::{self, Env, wait_until};
use crate::kit::stores;
use futures_util::StreamExt;
use grag_client::types::{CreateKb, Edge, Entity, Point, UploadDocument};
use grag_client::{DocumentId, EdgeId, EntityId, KbId, WorkspaceId};
use grag_jobs::{JobState, Jobs, KgBatch, Upload, upload_key};
use grag_sim::{ChurnPhase, Fault, RetryAfter, Rule};
use sdk_queue::{JobStore, PgStore, SqliteStore};
use sdk_runtime::CircuitState;

const KB: &str = "kb-jobs";
const WS: &str = "ws-jobs";

/// A store in a fresh SQLite file, removed when the test ends.
struct TempDb(std::path::PathBuf);

impl TempDb {
    fn new() -> TempDb {
        let name = format!("grag-jobs-{}.sqlite", uuid::Uuid::new_v4());
        TempDb(std::env::temp_dir().join(name))
    }

    fn store(&self) -> Arc<SqliteStore> {
        Arc::new(SqliteStore::open(&self.0, grag_jobs::lock_retry()).expect("the store opens"))
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0.display()));
        }
    }
}

struct Queue {
    env: Env,
    jobs: Jobs,
    _db: TempDb,
}

impl Queue {
    /// A simulator and client at 1/100, the KB, and a queue on a fresh file.
    async fn start() -> Queue {
        Queue::on(Env::start().await).await
    }

    /// The KB on `env`'s simulator and a queue of its client on a fresh file.
    async fn on(env: Env) -> Queue {
        env.grag
            .workspaces()
            .create_kb(&CreateKb::new(kb(), "Jobs"))
            .await
            .expect("the KB is created");
        let db = TempDb::new();
        let jobs = Jobs::new(env.grag.clone(), db.store(), "worker-1").expect("a replay policy");
        Queue { env, jobs, _db: db }
    }

    /// Waits (up to `secs`) until no job is left to run; whether it came.
    async fn settled(&self, secs: u64) -> bool {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        while tokio::time::Instant::now() < deadline {
            if self
                .jobs
                .metrics_text()
                .await
                .lines()
                .filter(|l| l.starts_with("knoll_replay_queue_depth{"))
                .all(|l| l.ends_with(" 0"))
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        false
    }

    /// Runs every job that is waiting, as if its pause were over.
    async fn replay(&self) -> usize {
        let later = self
            .jobs
            .clone()
            .with_clock(|| SystemTime::now() + Duration::from_secs(3600));
        later.drain().await.expect("the store answers")
    }

    async fn state(&self, key: &str) -> JobState {
        self.jobs
            .job(key)
            .await
            .unwrap()
            .expect("the job exists")
            .state
    }
}

fn kb() -> KbId {
    KbId::parse(KB).unwrap()
}

fn upload(n: usize, points: usize) -> Upload {
    let doc = format!("doc-{n}");
    Upload {
        kb: kb(),
        document: UploadDocument::new(
            DocumentId::parse(&doc).unwrap(),
            format!("{doc}.txt"),
            "text/plain",
            "SGFsbG8gS25vbGw=",
        ),
        points: (0..points)
            .map(|i| Point::new(format!("{doc}-chunk-{i}"), vec![0.1, 0.2, 0.3]))
            .collect(),
    }
}

fn batch(n: usize) -> KgBatch {
    let entity = |id: String| Entity::new(EntityId::parse(&id).unwrap(), "concept", id.clone());
    let (a, b) = (format!("e-{n}-a"), format!("e-{n}-b"));
    KgBatch {
        workspace: WorkspaceId::parse(WS).unwrap(),
        entities: vec![entity(a.clone()), entity(b.clone())],
        edges: vec![Edge::new(
            EdgeId::parse(&format!("edge-{n}")).unwrap(),
            EntityId::parse(&a).unwrap(),
            EntityId::parse(&b).unwrap(),
            "relates_to",
        )],
    }
}

#[tokio::test]
async fn an_upload_runs_every_step_once() {
    let q = Queue::start().await;
    let job = q.jobs.submit_upload(upload(1, 10)).await.unwrap();
    assert_eq!(job.state, JobState::Done, "{job:?}");
    let sim = &q.env.sim;
    assert_eq!(sim.documents("knoll", KB).len(), 1);
    assert_eq!(sim.conversions_of("knoll", "doc-1").len(), 1);
    assert_eq!(sim.points("knoll", KB).len(), 10);
    assert_eq!(q.env.count("upload_document"), 1);
    assert_eq!(q.env.count("convert"), 1);
    assert_eq!(q.env.count("upsert_points"), 1);
    assert_eq!(q.env.count("list_documents"), 0, "nothing was ambiguous");
}

#[tokio::test]
async fn an_open_breaker_queues_the_write_and_the_worker_replays_it_after_the_close() {
    let q = Queue::start().await;
    q.env.open_breaker().await;
    let job = q.jobs.submit_upload(upload(1, 3)).await.unwrap();
    assert_eq!(job.state, JobState::PendingReplay, "{job:?}");
    assert_eq!(job.last_error.as_ref().unwrap().class, "circuit_open");
    assert_eq!(
        q.env.count("upload_document"),
        0,
        "failed fast, nothing sent"
    );
    let batch_job = q.jobs.submit_kg(batch(1)).await.unwrap();
    assert_eq!(batch_job.state, JobState::PendingReplay);
    assert!(
        q.jobs
            .metrics_text()
            .await
            .contains("knoll_replay_queue_depth{kind=\"ingest\"} 1"),
        "{}",
        q.jobs.metrics_text().await
    );

    let worker = tokio::spawn(q.jobs.clone().work());
    assert!(
        q.env
            .wait_for_state(CircuitState::Closed, Duration::from_secs(10))
            .await
    );
    let sim = &q.env.sim;
    assert!(
        wait_until(Duration::from_secs(10), || sim.points("knoll", KB).len()
            == 3
            && sim.edges("knoll", WS).len() == 1)
        .await,
        "the worker replays both jobs once the breaker closed"
    );
    assert!(q.settled(10).await, "every job ends done");
    worker.abort();
    assert_eq!(q.state(&batch_job.key).await, JobState::Done);
    assert_eq!(q.env.count("upload_document"), 1);
    assert_eq!(sim.conversions_of("knoll", "doc-1").len(), 1);
    assert!(
        q.jobs
            .metrics_text()
            .await
            .contains("knoll_replay_queue_depth{kind=\"ingest\"} 0")
    );
}

#[tokio::test]
async fn an_upload_applied_whose_answer_was_lost_is_read_back_not_sent_again() {
    let q = Queue::start().await;
    // Every attempt of the call is applied (the first) or refused 409 (the
    // retries), and none is answered: the call fails on the connection.
    q.env.sim.faults().push(
        Rule::new(Fault::AppliedThenLost)
            .on("upload_document")
            .times(3),
    );
    let job = q.jobs.submit_upload(upload(1, 2)).await.unwrap();
    assert_eq!(job.state, JobState::PendingReplay, "{job:?}");
    assert_eq!(
        q.env.sim.documents("knoll", KB).len(),
        1,
        "the upload took effect"
    );
    let sent = q.env.count("upload_document");

    assert_eq!(q.jobs.drain().await.unwrap(), 0, "it waits its pause");
    assert_eq!(q.replay().await, 1);
    assert_eq!(q.state(&job.key).await, JobState::Done);
    assert_eq!(
        q.env.count("list_documents"),
        1,
        "the replay read the state first"
    );
    assert_eq!(
        q.env.count("upload_document"),
        sent,
        "and did not upload again"
    );
    assert_eq!(q.env.sim.documents("knoll", KB).len(), 1);
    assert_eq!(q.env.sim.points("knoll", KB).len(), 2);
}

#[tokio::test]
async fn a_convert_applied_whose_answer_was_lost_is_read_back_not_sent_again() {
    let q = Queue::start().await;
    q.env
        .sim
        .faults()
        .push(Rule::new(Fault::AppliedThenLost).on("convert").once());
    let job = q.jobs.submit_upload(upload(1, 2)).await.unwrap();
    assert_eq!(job.state, JobState::PendingReplay, "{job:?}");
    assert_eq!(
        q.env.count("convert"),
        1,
        "not idempotent: the client did not re-send"
    );
    assert_eq!(q.env.sim.conversions_of("knoll", "doc-1").len(), 1);

    assert_eq!(q.replay().await, 1);
    assert_eq!(q.state(&job.key).await, JobState::Done);
    assert_eq!(
        q.env.count("conversion_of"),
        1,
        "the replay read the state first"
    );
    assert_eq!(
        q.env.count("convert"),
        1,
        "and did not convert (and bill) again"
    );
    assert_eq!(q.env.sim.conversions_of("knoll", "doc-1").len(), 1);
    assert_eq!(q.env.sim.points("knoll", KB).len(), 2);
}

#[tokio::test]
async fn a_convert_lost_before_it_arrived_is_sent_on_replay() {
    let q = Queue::start().await;
    q.env
        .sim
        .faults()
        .push(Rule::new(Fault::BadGateway).on("convert").once());
    let job = q.jobs.submit_upload(upload(1, 1)).await.unwrap();
    assert_eq!(job.state, JobState::PendingReplay, "{job:?}");
    assert_eq!(
        q.env.count("convert"),
        1,
        "a 502 may have reached docfold: not re-sent"
    );
    assert!(q.env.sim.conversions_of("knoll", "doc-1").is_empty());
    assert_eq!(q.replay().await, 1);
    assert_eq!(q.state(&job.key).await, JobState::Done);
    assert_eq!(q.env.count("conversion_of"), 1, "read: none started");
    assert_eq!(
        q.env.sim.conversions_of("knoll", "doc-1").len(),
        1,
        "then sent"
    );
}

#[tokio::test]
async fn a_600_point_upsert_answered_413_lands_as_3_batches_of_at_most_256() {
    let q = Queue::start().await;
    let job = q.jobs.submit_upload(upload(1, 600)).await.unwrap();
    assert_eq!(job.state, JobState::Done, "{job:?}");
    assert_eq!(
        q.env.statuses("upsert_points"),
        vec![Some(413), Some(200), Some(200), Some(200)],
        "the simulator takes at most 256 points per upsert"
    );
    assert_eq!(q.env.sim.points("knoll", KB).len(), 600);
}

#[tokio::test]
async fn a_single_point_refused_413_on_the_first_run_fails_without_a_replay_failure() {
    let q = Queue::start().await;
    q.env.sim.faults().push(
        Rule::new(Fault::Status {
            status: 413,
            detail: "point too large".into(),
            retry_after: None,
        })
        .on("upsert_points"),
    );
    let job = q.jobs.submit_upload(upload(1, 1)).await.unwrap();
    assert_eq!(job.state, JobState::Failed, "{job:?}");
    assert_eq!(q.env.statuses("upsert_points"), vec![Some(413)]);
    // Refused on its first run: the job's own error, not a replay failure,
    // and the series the `replay_failures` rule reads stays at 0.
    assert!(
        !q.env.alert_names().contains(&"replay_failures"),
        "{:?}",
        q.env.alert_names()
    );
    assert!(
        q.env
            .grag
            .runtime()
            .metrics_text()
            .contains("grag_client_alerts_total{alert=\"replay_failures\"} 0"),
        "{}",
        q.env.grag.runtime().metrics_text()
    );
    assert!(
        q.jobs
            .metrics_text()
            .await
            .contains("knoll_replay_failures_total 1")
    );
}

#[tokio::test]
async fn a_503_with_retry_after_requeues_the_job_for_after_the_wait() {
    let q = Queue::start().await;
    q.env.sim.faults().push(
        Rule::new(Fault::Backpressure {
            retry_after: RetryAfter::Seconds(30),
        })
        .on("upsert_points")
        .once(),
    );
    let before = SystemTime::now();
    let job = q.jobs.submit_upload(upload(1, 2)).await.unwrap();
    assert_eq!(job.state, JobState::PendingReplay, "{job:?}");
    assert_eq!(q.env.count("upsert_points"), 1, "no wait inside the call");
    let not_before = job.not_before.expect("re-queued for after the wait");
    assert!(
        not_before >= before + Duration::from_secs(30),
        "{not_before:?}"
    );
    assert_eq!(q.jobs.drain().await.unwrap(), 0, "not before the wait");

    let later = q
        .jobs
        .clone()
        .with_clock(|| SystemTime::now() + Duration::from_secs(31));
    assert_eq!(later.drain().await.unwrap(), 1);
    assert_eq!(q.state(&job.key).await, JobState::Done);
    assert_eq!(q.env.count("upsert_points"), 2);
    assert_eq!(
        q.env.count("upload_document"),
        1,
        "the replay went on from its step"
    );
}

#[tokio::test]
async fn a_write_the_platform_refuses_fails_and_keeps_its_error_for_the_ui() {
    let q = Queue::start().await;
    let mut orphan = upload(1, 1);
    orphan.kb = KbId::parse("kb-missing").unwrap();
    let job = q.jobs.submit_upload(orphan).await.unwrap();
    assert_eq!(job.state, JobState::Failed, "{job:?}");
    let error = job.last_error.as_ref().expect("the error is kept");
    assert_eq!(error.status, Some(404));
    assert_eq!(error.class, "not_found");
    assert!(
        error.request_id.is_some(),
        "the join key with platform logs"
    );
    let failed = q.jobs.failed(10).await.unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(
        failed[0].key,
        upload_key(&upload(1, 1)).replace(KB, "kb-missing")
    );
    // Refused on its first run: the job's own error, not a replay failure.
    assert!(
        !q.env.alert_names().contains(&"replay_failures"),
        "{:?}",
        q.env.alert_names()
    );
    assert!(
        q.jobs
            .metrics_text()
            .await
            .contains("knoll_replay_failures_total 1")
    );
    assert_eq!(
        q.jobs.drain().await.unwrap(),
        0,
        "a failed job is not replayed"
    );

    // The re-upload path: the cause fixed, a person runs it again.
    q.env
        .grag
        .workspaces()
        .create_kb(&CreateKb::new(
            KbId::parse("kb-missing").unwrap(),
            "Now there",
        ))
        .await
        .unwrap();
    let again = q
        .jobs
        .retry(&job.key)
        .await
        .unwrap()
        .expect("the job exists");
    assert_eq!(again.state, JobState::Done, "{again:?}");
    assert_eq!(again.attempts, 2);
    assert_eq!(q.env.sim.documents("knoll", "kb-missing").len(), 1);
    assert!(q.jobs.failed(10).await.unwrap().is_empty());
    assert!(
        q.jobs
            .retry("ingest:kb-missing:nothing")
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn submitting_the_same_job_twice_runs_it_once() {
    let q = Queue::start().await;
    let first = q.jobs.submit_kg(batch(1)).await.unwrap();
    let again = q.jobs.submit_kg(batch(1)).await.unwrap();
    assert_eq!(first.key, again.key);
    assert_eq!(again.state, JobState::Done);
    assert_eq!(q.env.count("upsert_edge"), 1);
    assert_eq!(q.env.count("upsert_entity"), 2);
}

/// 200 uploads and 200 KG batches before, during and after a deploy churn
/// (its phases are steps of the test): afterwards every job is done and the
/// platform holds each document, conversion and edge exactly once.
#[tokio::test]
async fn a_deploy_churn_loses_and_doubles_nothing() {
    let q = Queue::start().await;
    let worker = tokio::spawn(q.jobs.clone().work());
    let submit = |range: std::ops::Range<usize>| {
        let jobs = q.jobs.clone();
        async move {
            for n in range {
                let (a, b) =
                    tokio::join!(jobs.submit_upload(upload(n, 2)), jobs.submit_kg(batch(n)));
                a.unwrap();
                b.unwrap();
            }
        }
    };
    submit(0..70).await;
    q.env.sim.faults().deploy_churn_stepped(Some(30)).await;
    submit(70..140).await;
    // Flaky for 30 transient answers (401, 404, 422 in turn), then healthy.
    assert_eq!(
        q.env.sim.faults().churn_step().await,
        Some(ChurnPhase::Flaky)
    );
    submit(140..160).await;
    submit(160..200).await;
    assert!(q.settled(60).await, "the queue drains after the churn");
    worker.abort();

    let sim = &q.env.sim;
    let failed = q.jobs.failed(1000).await.unwrap();
    assert!(
        failed.is_empty(),
        "{} failed, first: {:?}",
        failed.len(),
        failed.first()
    );
    let documents = sim.documents("knoll", KB);
    assert_eq!(documents.len(), 200);
    for n in 0..200 {
        let doc = format!("doc-{n}");
        assert_eq!(
            sim.conversions_of("knoll", &doc).len(),
            1,
            "{doc}: converted once"
        );
        let key = upload_key(&upload(n, 2));
        assert_eq!(q.state(&key).await, JobState::Done, "{key}");
    }
    assert_eq!(sim.points("knoll", KB).len(), 400);
    assert_eq!(sim.edges("knoll", WS).len(), 200);
    assert!(q.jobs.failed(1).await.unwrap().is_empty());
}

/// While ingest work holds both ingest slots (two slow upserts in flight),
/// interactive calls are answered at once: the queue never takes their
/// slots, and the third upsert waits for one of the two.
#[tokio::test]
async fn interactive_calls_never_wait_on_the_queue() {
    // 1/10: an attempt may take 3 s, so the 2 s upserts stay in flight.
    let env = Env::with(resilience::sim_config(), grag_sim::embedded::policy(10)).await;
    let Queue { env, jobs, _db } = Queue::on(env).await;
    env.sim
        .faults()
        .push(Rule::new(Fault::delay(Duration::from_secs(2))).on("upsert_points"));
    let submits: Vec<_> = (0..4)
        .map(|n| {
            tokio::spawn({
                let jobs = jobs.clone();
                async move { jobs.submit_upload(upload(n, 1)).await }
            })
        })
        .collect();
    let log = env.sim.log();
    let unanswered = |log: &grag_sim::RequestLog| {
        log.of("upsert_points")
            .iter()
            .filter(|e| e.status.is_none())
            .count()
    };
    assert!(
        log.wait_for(Duration::from_secs(30), |entries| entries
            .iter()
            .filter(|e| e.operation == Some("upsert_points"))
            .count()
            >= 2)
            .await
    );
    for _ in 0..3 {
        env.grag.workspaces().list_kbs().await.unwrap();
        env.grag.workspaces().get_settings().await.unwrap();
        assert_eq!(
            unanswered(&log),
            2,
            "answered while both ingest slots are held"
        );
    }
    assert_eq!(log.of("upsert_points").len(), 2, "the ingest limit is 2");
    for submit in submits {
        assert_eq!(submit.await.unwrap().unwrap().state, JobState::Done);
    }
}

/// Collects the JSON lines a subscriber writes.
#[derive(Clone, Default)]
struct Lines(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    fn parsed(&self) -> Vec<serde_json::Value> {
        String::from_utf8(self.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// Core "Persistence Contention Policy" and "Operational Recommendations": a
/// job store that stays locked through its 3 tries is logged with the job's
/// key and raises the retry-exhaustion alert (DB pressure).
#[tokio::test]
async fn a_job_store_that_stays_locked_is_logged_with_the_job_key_and_alerted() {
    let env = Env::start().await;
    let db = TempDb::new();
    let store = Arc::new(
        SqliteStore::open_with(&db.0, grag_jobs::lock_retry(), Duration::ZERO)
            .expect("the store opens"),
    );
    let jobs = Jobs::new(env.grag.clone(), store, "worker-1").unwrap();
    // Another process holds the write lock for the whole test.
    let holder = rusqlite::Connection::open(&db.0).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();

    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = crate::kit::capture::set_default(subscriber);

    let job = upload(1, 1);
    let key = upload_key(&job);
    let result = jobs.submit_upload(job).await;
    assert!(
        matches!(
            result,
            Err(grag_jobs::JobsError::Store(sdk_queue::StoreError::Locked {
                attempts: 3,
                ..
            }))
        ),
        "{result:?}"
    );
    let logged: Vec<_> = lines
        .parsed()
        .into_iter()
        .filter(|l| l["message"] == "job store locked, retries exhausted")
        .collect();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(logged[0]["job_key"], key.as_str());
    assert_eq!(logged[0]["op"], "submit");
    assert_eq!(logged[0]["attempts"], 3);
    assert_eq!(env.alert_names(), ["retry_exhausted"]);
    let alert = env.alerts.taken().pop().unwrap();
    assert!(
        alert.detail.as_deref().is_some_and(|d| d.contains(&key)),
        "{alert:?}"
    );
    assert_eq!(
        env.total(),
        0,
        "nothing was sent for a job that was never stored"
    );
    drop(holder);
}

/// A queue on a platform whose docfold has no `conversion_of` route (it is
/// inferred; §5.3.3 names only the document list and the pipeline status).
async fn queue_without_conversion_of() -> Queue {
    let config = resilience::sim_config().without_route("conversion_of");
    Queue::on(Env::with(config, resilience::policy()).await).await
}

#[tokio::test]
async fn without_conversion_of_a_convert_in_doubt_fails_to_the_ui_and_is_never_sent_again() {
    // Applied, then the answer was lost; and a gateway's 502 (maybe not applied).
    for (fault, started) in [(Fault::AppliedThenLost, 1), (Fault::BadGateway, 0)] {
        let q = queue_without_conversion_of().await;
        q.env
            .sim
            .faults()
            .push(Rule::new(fault.clone()).on("convert").once());
        let job = q.jobs.submit_upload(upload(1, 1)).await.unwrap();
        assert_eq!(job.state, JobState::PendingReplay, "{fault:?}: {job:?}");
        let sent_as = job.last_error.as_ref().and_then(|e| e.request_id.clone());
        assert!(sent_as.is_some(), "{job:?}");

        assert_eq!(q.replay().await, 1);
        let failed = q.jobs.job(&job.key).await.unwrap().unwrap();
        assert_eq!(failed.state, JobState::Failed, "{fault:?}: {failed:?}");
        let error = failed.last_error.expect("kept for the UI");
        assert_eq!(error.class, "outcome_unknown", "{error:?}");
        assert_eq!(
            error.request_id, sent_as,
            "the send in doubt, for the operator"
        );
        assert!(error.detail.contains("Not Found"), "{error:?}");
        let asked = q
            .env
            .sim
            .log()
            .entries()
            .into_iter()
            .filter(|r| r.path.ends_with("/documents/doc-1/conversion"))
            .count();
        assert_eq!(asked, 1, "asked once, answered `Not Found`");
        assert_eq!(q.env.count("convert"), 1, "{fault:?}: never sent again");
        assert_eq!(
            q.env.sim.conversions_of("knoll", "doc-1").len(),
            started,
            "no second (billed) conversion"
        );
        assert!(
            q.env.alert_names().contains(&"replay_failures"),
            "{:?}",
            q.env.alert_names()
        );
        // Later replays leave it failed: nothing is sent.
        assert_eq!(q.replay().await, 0);
        assert_eq!(q.env.count("convert"), 1);
    }
}

/// A `conversion_of` that says "none started" with FastAPI's default 404
/// reads exactly like a missing route: the job fails to the UI (nothing was
/// started, but nobody can tell), and no second convert is ever sent.
#[tokio::test]
async fn a_fastapi_default_404_from_the_reconcile_read_settles_nothing() {
    let q = Queue::start().await;
    let faults = q.env.sim.faults();
    // Maybe not applied: a gateway's 502.
    faults.push(Rule::new(Fault::BadGateway).on("convert").once());
    faults.push(
        Rule::new(Fault::Status {
            status: 404,
            detail: "Not Found".into(),
            retry_after: None,
        })
        .on("conversion_of"),
    );
    let job = q.jobs.submit_upload(upload(1, 1)).await.unwrap();
    assert_eq!(job.state, JobState::PendingReplay, "{job:?}");
    assert_eq!(q.replay().await, 1);
    let failed = q.jobs.job(&job.key).await.unwrap().unwrap();
    assert_eq!(failed.state, JobState::Failed, "{failed:?}");
    assert_eq!(failed.last_error.unwrap().class, "outcome_unknown");
    assert_eq!(q.env.count("convert"), 1, "never sent again");
    assert!(q.env.sim.conversions_of("knoll", "doc-1").is_empty());
}

#[tokio::test]
async fn a_405_from_the_reconcile_read_is_no_such_route_too() {
    let q = Queue::start().await;
    let faults = q.env.sim.faults();
    faults.push(Rule::new(Fault::AppliedThenLost).on("convert").once());
    faults.push(
        Rule::new(Fault::Status {
            status: 405,
            detail: "Method Not Allowed".into(),
            retry_after: None,
        })
        .on("conversion_of"),
    );
    let job = q.jobs.submit_upload(upload(1, 1)).await.unwrap();
    assert_eq!(q.replay().await, 1);
    let failed = q.jobs.job(&job.key).await.unwrap().unwrap();
    assert_eq!(failed.state, JobState::Failed, "{failed:?}");
    assert_eq!(failed.last_error.unwrap().class, "outcome_unknown");
    assert_eq!(q.env.sim.conversions_of("knoll", "doc-1").len(), 1);
}

/// The pipeline and the queue agree: a convert the platform refused (a 503:
/// a known outcome) is unsent, so its replay needs no read, even on a
/// platform without one.
#[tokio::test]
async fn a_refused_convert_is_sent_on_replay_without_a_read() {
    let q = queue_without_conversion_of().await;
    q.env.sim.faults().push(
        Rule::new(Fault::Status {
            status: 503,
            detail: "admission control: overloaded".into(),
            retry_after: None,
        })
        .on("convert")
        .once(),
    );
    let job = q.jobs.submit_upload(upload(1, 1)).await.unwrap();
    assert_eq!(job.state, JobState::PendingReplay, "{job:?}");
    assert_eq!(q.replay().await, 1);
    assert_eq!(q.state(&job.key).await, JobState::Done);
    assert_eq!(
        q.env.count("conversion_of"),
        0,
        "nothing in doubt, nothing to read"
    );
    assert_eq!(q.env.sim.conversions_of("knoll", "doc-1").len(), 1);
}

/// §1.4: what GRAG lost is replayable from Knoll-side state. A done upload
/// whose document the platform lost runs again on request: the document and
/// its points come back, the conversion that still exists is followed, not
/// started (and billed) a second time.
#[tokio::test]
async fn a_done_job_whose_document_was_lost_runs_again_without_a_second_copy() {
    let q = Queue::start().await;
    let job = q.jobs.submit_upload(upload(1, 3)).await.unwrap();
    assert_eq!(job.state, JobState::Done, "{job:?}");
    assert_eq!(q.env.sim.points("knoll", KB).len(), 3);

    // Nothing lost: a rerun reads, and makes nothing twice.
    let again = q.jobs.rerun(&job.key, upload(1, 3)).await.unwrap().unwrap();
    assert_eq!(again.state, JobState::Done, "{again:?}");
    assert_eq!(
        q.env.count("upload_document"),
        1,
        "the document list showed it"
    );
    assert_eq!(q.env.count("convert"), 1, "the conversion was found");
    assert_eq!(q.env.sim.documents("knoll", KB).len(), 1);

    assert!(q.env.sim.lose_document("knoll", KB, "doc-1"));
    assert!(q.env.sim.points("knoll", KB).is_empty());
    let again = q.jobs.rerun(&job.key, upload(1, 3)).await.unwrap().unwrap();
    assert_eq!(again.state, JobState::Done, "{again:?}");
    assert_eq!(
        q.env.count("upload_document"),
        2,
        "uploaded again: it was gone"
    );
    assert_eq!(q.env.count("convert"), 1, "the conversion still existed");
    assert_eq!(q.env.sim.conversions_of("knoll", "doc-1").len(), 1);
    assert_eq!(q.env.sim.documents("knoll", KB).len(), 1);
    assert_eq!(q.env.sim.points("knoll", KB).len(), 3);

    // Only a done job runs again this way; an unknown key is `None`.
    assert!(
        q.jobs
            .rerun("no-such-job", upload(1, 3))
            .await
            .unwrap()
            .is_none()
    );
}

/// A done job keeps no content: a rerun takes it from Knoll again, and
/// content that is not what the job ran (the file changed, another
/// document) is refused before anything is sent.
#[tokio::test]
async fn a_rerun_with_content_other_than_the_jobs_is_refused_and_sends_nothing() {
    let q = Queue::start().await;
    let job = q.jobs.submit_upload(upload(1, 3)).await.unwrap();
    assert_eq!(job.state, JobState::Done, "{job:?}");
    let kept = q.jobs.job(&job.key).await.unwrap().unwrap().payload;
    assert_eq!(kept["document_id"], "doc-1");
    assert_eq!(kept["points"], 3);
    assert!(kept.get("points").is_some_and(|p| p.is_u64()), "{kept}");
    assert!(!kept.to_string().contains("SGFsbG8gS25vbGw="), "{kept}");

    let mut changed = upload(1, 3);
    changed.document.content_base64 = "b3RoZXI=".into();
    let err = q.jobs.rerun(&job.key, changed).await.unwrap_err();
    assert!(
        matches!(&err, grag_jobs::JobsError::NotItsContent { key, reason }
            if key == &job.key && reason.contains("SHA-256")),
        "{err}"
    );
    let other = q.jobs.rerun(&job.key, upload(2, 3)).await.unwrap_err();
    assert!(
        other.to_string().contains("ingest:kb-jobs:doc-2"),
        "{other}"
    );
    let kg = q.jobs.rerun(&job.key, batch(1)).await.unwrap_err();
    assert!(
        matches!(kg, grag_jobs::JobsError::NotItsContent { .. }),
        "{kg}"
    );
    assert_eq!(q.state(&job.key).await, JobState::Done);
    assert_eq!(q.env.count("upload_document"), 1, "nothing was sent");
    assert_eq!(q.env.count("list_documents"), 0, "not even a read");

    let again = q.jobs.rerun(&job.key, upload(1, 3)).await.unwrap().unwrap();
    assert_eq!(again.state, JobState::Done, "{again:?}");
    assert_eq!(q.env.count("list_documents"), 1, "the right content runs");
}

/// An upload of real size: `content` bytes of document, `points` chunk
/// embeddings of 384 dimensions.
fn sized_upload(n: usize, content: usize, points: usize) -> Upload {
    let mut up = upload(n, 0);
    up.document.content_base64 = format!("{n:08}").repeat(content / 8);
    up.points = (0..points)
        .map(|i| {
            Point::new(
                format!("doc-{n}-chunk-{i}"),
                (0..384)
                    .map(|d| (d + i) as f64 / 1000.0)
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    up
}

/// Uploads of real size run to done in rounds, each a retention period
/// after the last (the queue's clock, injected), with the retention pass
/// after each: the payload bytes the store holds stay what one round's done
/// jobs keep, a few hundred bytes each, however many uploads ran; after a
/// last pass, nothing.
async fn done_uploads_keep_a_small_constant(q: &Queue, jobs: &Jobs, store: &dyn JobStore) {
    const UPLOADS: usize = 2_000;
    const ROUNDS: usize = 4;
    const PER_ROUND: usize = UPLOADS / ROUNDS;
    // Eight submitted at a time, as Knoll's request handlers would; the
    // ingest budget still bounds the calls in flight.
    const AT_ONCE: usize = 8;
    let policy = q.env.grag.runtime().policy().replay.clone().unwrap();
    let period = policy.keep_done + Duration::from_secs(1);
    let mut content_bytes = 0;
    for round in 0..ROUNDS {
        let ahead = period * round as u32;
        let jobs = jobs.clone().with_clock(move || SystemTime::now() + ahead);
        let uploads: Vec<Upload> = (round * PER_ROUND..(round + 1) * PER_ROUND)
            .map(|n| sized_upload(n, 32 << 10, 4))
            .collect();
        content_bytes += uploads
            .iter()
            .map(|u| serde_json::to_vec(u).unwrap().len())
            .sum::<usize>();
        let ran: Vec<_> = futures_util::stream::iter(uploads)
            .map(|up| jobs.submit_upload(up))
            .buffer_unordered(AT_ONCE)
            .collect()
            .await;
        for job in ran {
            job.unwrap();
        }
        // A call that timed out on a loaded machine left its job to replay,
        // after the pause: the worker runs it then.
        let pause = policy.pause;
        let replay = jobs
            .clone()
            .with_clock(move || SystemTime::now() + ahead + pause);
        while replay.drain().await.unwrap() > 0 {}
        // The previous round ended a retention period ago: this pass deletes it.
        let pruned = jobs.prune().await.unwrap();
        assert_eq!(pruned, if round == 0 { 0 } else { PER_ROUND as u64 });

        let footprint = store.footprint().await.unwrap();
        assert_eq!(footprint.len(), 1, "only done jobs: {footprint:?}");
        let done = footprint[0];
        assert_eq!((done.state, done.rows), (JobState::Done, PER_ROUND as u64));
        let per_job = done.payload_bytes / PER_ROUND as u64;
        assert!(
            per_job < 400,
            "{per_job} bytes a done job, of {} bytes content",
            content_bytes / ((round + 1) * PER_ROUND)
        );
        assert!(
            content_bytes > 100 * (round + 1) * done.payload_bytes as usize,
            "{content_bytes} bytes of content, {footprint:?}"
        );
        let text = jobs.metrics_text().await;
        let gauge = |name: &str| {
            let line = format!("{name}{{state=\"done\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&line))
                .unwrap_or_else(|| panic!("{line} in {text}"))
                .parse::<u64>()
                .unwrap()
        };
        assert_eq!(gauge(policy.store_rows_metric), done.rows);
        assert_eq!(gauge(policy.store_bytes_metric), done.payload_bytes);
    }
    assert_eq!(
        q.env.sim.documents("knoll", KB).len(),
        UPLOADS,
        "every upload reached the platform once"
    );

    let ahead = period * ROUNDS as u32;
    let later = jobs.clone().with_clock(move || SystemTime::now() + ahead);
    assert_eq!(later.prune().await.unwrap(), PER_ROUND as u64);
    assert_eq!(store.footprint().await.unwrap(), []);
}

/// A simulator whose conversions are ready at once: the uploads below wait
/// on no conversion, only on the calls and the store they are about.
async fn converting_at_once() -> Queue {
    let mut config = resilience::sim_config();
    config.conversion_time = Duration::ZERO;
    Queue::on(Env::with(config, resilience::policy()).await).await
}

#[tokio::test]
async fn done_uploads_leave_a_small_constant_of_payload_bytes_not_their_content() {
    let q = converting_at_once().await;
    done_uploads_keep_a_small_constant(&q, &q.jobs, &*q._db.store()).await;
}

/// The same on PostgreSQL. Needs `SDK_QUEUE_PG_URL`.
#[tokio::test]
async fn done_uploads_leave_a_small_constant_of_payload_bytes_on_postgres_too() {
    let Some(url) = stores::pg_url() else { return };
    let schema = stores::fresh_schema("grag_jobs");
    let store = Arc::new(
        PgStore::connect(&url, &schema)
            .await
            .expect("PostgreSQL answers"),
    );
    let q = converting_at_once().await;
    let jobs = Jobs::new(q.env.grag.clone(), store.clone(), "worker-pg").unwrap();
    done_uploads_keep_a_small_constant(&q, &jobs, &*store).await;
    let raw = stores::pg_raw(&url, &schema).await;
    raw.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

/// The bytes of the store's file and its WAL, once the WAL is checkpointed.
fn file_bytes(db: &TempDb) -> Vec<u8> {
    let conn = rusqlite::Connection::open(&db.0).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    drop(conn);
    let mut bytes = std::fs::read(&db.0).unwrap();
    if let Ok(wal) = std::fs::read(format!("{}-wal", db.0.display())) {
        bytes.extend(wal);
    }
    bytes
}

fn holds(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// Erasure: a forgotten job's row is gone, and so are its bytes. SQLite
/// runs with `secure_delete`, so neither the content a done job dropped nor
/// a forgotten failed job's lingers in the file's free pages.
#[tokio::test]
async fn forgotten_and_done_content_leaves_no_trace_in_the_sqlite_file() {
    let q = Queue::start().await;
    let marker = |n: usize| format!("KNOLLMARKER{n}XYZ");
    let mut done = sized_upload(1, 8 << 10, 2);
    done.document.content_base64 = marker(1).repeat(500);
    let done = q.jobs.submit_upload(done).await.unwrap();
    assert_eq!(done.state, JobState::Done, "{done:?}");

    // A write the platform refuses (404: no such KB) fails and keeps its
    // content for the UI's re-upload, until it is forgotten.
    let mut failed = sized_upload(2, 8 << 10, 2);
    failed.kb = KbId::parse("kb-absent").unwrap();
    failed.document.content_base64 = marker(2).repeat(500);
    let failed = q.jobs.submit_upload(failed).await.unwrap();
    assert_eq!(failed.state, JobState::Failed, "{failed:?}");
    let bytes = file_bytes(&q._db);
    assert!(!holds(&bytes, &marker(1)), "a done job's content is gone");
    assert!(holds(&bytes, &marker(2)), "a failed job keeps its content");

    let erased = q
        .jobs
        .forget_document(
            &KbId::parse("kb-absent").unwrap(),
            &DocumentId::parse("doc-2").unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(erased, grag_jobs::Erasure::Erased);
    assert_eq!(q.jobs.job(&failed.key).await.unwrap(), None);
    assert_eq!(
        q.jobs.forget(&failed.key).await.unwrap(),
        grag_jobs::Erasure::Absent
    );
    assert_eq!(
        q.jobs.forget(&done.key).await.unwrap(),
        grag_jobs::Erasure::Erased
    );
    let bytes = file_bytes(&q._db);
    assert!(!holds(&bytes, &marker(2)), "the forgotten content is gone");
    assert!(!holds(&bytes, "doc-1.txt"), "the forgotten done job too");
}

/// T3 says `replay: deploy`: a 401 while no deploy is suspected is a verdict
/// on the write, kept for the UI; inside the window (the churn above) the
/// same answer is the deploy's and the job is replayed.
#[tokio::test]
async fn a_401_outside_a_deploy_fails_the_job_instead_of_queueing_it() {
    let q = Queue::start().await;
    q.env.sim.faults().push(
        Rule::new(Fault::Status {
            status: 401,
            detail: "invalid api key".into(),
            retry_after: None,
        })
        .on("upload_document"),
    );
    let job = q.jobs.submit_upload(upload(1, 1)).await.unwrap();
    assert_eq!(job.state, JobState::Failed, "{job:?}");
    let error = job.last_error.as_ref().expect("the error is kept");
    assert_eq!((error.class.as_str(), error.status), ("auth", Some(401)));
    assert_eq!(q.replay().await, 0, "nothing waits for a replay");
    assert_eq!(q.env.count("upload_document"), 1, "sent once, never again");
}

#[tokio::test]
async fn a_replay_that_fails_after_the_close_raises_replay_failures() {
    // degradation.yaml `replay_failures`: a job that waited through an outage
    // and fails when it is replayed after the breaker closed.
    let q = Queue::start().await;
    q.env.open_breaker().await;
    let mut orphan = upload(1, 1);
    orphan.kb = KbId::parse("kb-missing").unwrap();
    let job = q.jobs.submit_upload(orphan).await.unwrap();
    assert_eq!(job.state, JobState::PendingReplay, "{job:?}");
    assert!(
        q.env
            .wait_for_state(CircuitState::Closed, Duration::from_secs(10))
            .await
    );
    // Past the deploy-suspected window, a 404 is the job's, not the deploy's.
    let later = q
        .jobs
        .clone()
        .with_clock(|| SystemTime::now() + Duration::from_secs(3600));
    tokio::time::sleep(
        q.env
            .grag
            .runtime()
            .policy()
            .breaker
            .as_ref()
            .unwrap()
            .deploy_suspected,
    )
    .await;
    later.drain().await.unwrap();
    let failed = q.jobs.job(&job.key).await.unwrap().unwrap();
    assert_eq!(failed.state, JobState::Failed, "{failed:?}");
    let alerts = q.env.alerts.taken();
    let raised: Vec<_> = alerts
        .iter()
        .filter(|a| a.name == "replay_failures")
        .collect();
    assert_eq!(raised.len(), 1, "{alerts:?}");
    assert_eq!(raised[0].severity, "ops");
    assert!(
        raised[0]
            .detail
            .as_deref()
            .is_some_and(|d| d.contains(&job.key)),
        "{raised:?}"
    );
}

/// A queue whose one upload the worker replays, the platform holding its
/// upload call `hold_ms` (within the scaled attempt timeout): the worker is
/// mid-step when the test stops it.
async fn a_replay_mid_step(hold_ms: u64) -> (Queue, String, tokio::task::JoinHandle<()>) {
    let q = Queue::start().await;
    q.env.open_breaker().await;
    let job = q.jobs.submit_upload(upload(1, 3)).await.unwrap();
    assert_eq!(job.state, JobState::PendingReplay, "{job:?}");
    let sim = &q.env.sim;
    sim.faults()
        .push(Rule::new(Fault::Delay { ms: hold_ms }).on("upload_document"));
    let worker = tokio::spawn(q.jobs.clone().work());
    assert!(
        wait_until(Duration::from_secs(20), || !sim
            .log()
            .of("upload_document")
            .is_empty())
        .await,
        "the worker replays the upload"
    );
    (q, job.key, worker)
}

/// Another replica's worker on the same store: it takes the job over at
/// once (no lease to wait out) and finishes it without sending it twice.
async fn another_replica_finishes(q: &Queue, key: &str) {
    let job = q.jobs.job(key).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::PendingReplay, "{job:?}");
    assert_eq!(job.last_error.as_ref().unwrap().class, "handed_back");
    assert!(job.lease.is_none(), "{job:?}");
    let other = Jobs::new(q.env.grag.clone(), q._db.store(), "worker-2").unwrap();
    assert_eq!(other.drain().await.unwrap(), 1, "claimed at once");
    assert_eq!(q.state(key).await, JobState::Done);
    assert_eq!(q.env.sim.documents("knoll", KB).len(), 1, "one document");
    assert_eq!(q.env.sim.conversions_of("knoll", "doc-1").len(), 1);
}

#[tokio::test]
async fn a_stopping_worker_hands_its_job_back_at_the_next_checkpoint() {
    let (q, key, worker) = a_replay_mid_step(150).await;
    let stopped = q.jobs.shutdown(Duration::from_secs(30)).await.unwrap();
    assert_eq!(stopped, grag_jobs::Stopped { settled: 1, cut: 0 });
    tokio::time::timeout(Duration::from_secs(10), worker)
        .await
        .expect("the work loop ends")
        .unwrap();
    another_replica_finishes(&q, &key).await;
    // Its upload was done and checkpointed: not sent again.
    assert_eq!(q.env.count("upload_document"), 1, "sent once");
}

#[tokio::test]
async fn a_job_still_running_when_the_grace_ends_is_handed_back_as_its_checkpoint_left_it() {
    let (q, key, worker) = a_replay_mid_step(150).await;
    // No grace: the job, mid-call, is cut at once.
    let stopped = q.jobs.shutdown(Duration::ZERO).await.unwrap();
    assert_eq!(stopped, grag_jobs::Stopped { settled: 0, cut: 1 });
    tokio::time::timeout(Duration::from_secs(10), worker)
        .await
        .expect("the work loop ends")
        .unwrap();
    // Cut mid-call, its upload is in doubt: the next worker reads it back
    // and sends it again only if it never landed.
    tokio::time::sleep(Duration::from_millis(300)).await;
    another_replica_finishes(&q, &key).await;
}

/// Retention from the spec: a done job goes `keep_done` after it ended, a
/// failed one (its content kept for the UI's re-upload) `keep_failed`
/// after; the worker runs the pass every `prune_every` on its own.
#[tokio::test]
async fn the_retention_pass_deletes_ended_jobs_once_the_spec_lets_it() {
    let q = Queue::start().await;
    let done = q.jobs.submit_upload(upload(1, 1)).await.unwrap();
    assert_eq!(done.state, JobState::Done, "{done:?}");
    let mut absent = upload(2, 1);
    absent.kb = KbId::parse("kb-absent").unwrap();
    let failed = q.jobs.submit_upload(absent).await.unwrap();
    assert_eq!(failed.state, JobState::Failed, "{failed:?}");

    let policy = q.env.grag.runtime().policy().replay.clone().unwrap();
    assert!(policy.keep_done < policy.keep_failed, "{policy:?}");
    let at = |ahead: Duration| q.jobs.clone().with_clock(move || SystemTime::now() + ahead);
    let second = Duration::from_secs(1);
    assert_eq!(at(policy.keep_done - second).prune().await.unwrap(), 0);
    assert_eq!(at(policy.keep_done + second).prune().await.unwrap(), 1);
    assert_eq!(q.jobs.job(&done.key).await.unwrap(), None);
    assert_eq!(
        q.state(&failed.key).await,
        JobState::Failed,
        "kept for the UI"
    );

    let worker = at(policy.keep_failed + second);
    let run = tokio::spawn(worker.clone().work());
    let deadline = tokio::time::Instant::now() + policy.prune_every * 20;
    while q.jobs.job(&failed.key).await.unwrap().is_some() {
        assert!(tokio::time::Instant::now() < deadline, "no pass ran");
        tokio::time::sleep(policy.prune_every / 4).await;
    }
    worker.shutdown(Duration::ZERO).await.unwrap();
    run.await.unwrap();
}

/// A file the release before the schema version wrote, with uploads still
/// pending and one failed: opened by this release it is migrated in place,
/// every pending job runs to done, and the failed one, kept as it was, runs
/// when the UI sends it again.
#[tokio::test]
async fn a_file_the_earlier_release_wrote_is_migrated_and_its_pending_and_failed_jobs_run_to_done()
{
    let q = Queue::start().await;
    let db = TempDb::new();
    let conn = rusqlite::Connection::open(&db.0).unwrap();
    conn.execute_batch(
        "CREATE TABLE jobs (
            seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE, kind TEXT NOT NULL,
            payload TEXT NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL,
            progress TEXT NOT NULL, last_error TEXT, not_before INTEGER, lease_owner TEXT,
            lease_until INTEGER, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
         CREATE INDEX jobs_state_seq ON jobs (state, seq);",
    )
    .unwrap();
    let keys: Vec<String> = (1..=5).map(|n| upload_key(&upload(n, 2))).collect();
    for n in 1..=5 {
        let payload = serde_json::to_string(&upload(n, 2)).unwrap();
        conn.execute(
            "INSERT INTO jobs (key, kind, payload, state, attempts, progress, created_at, updated_at) \
             VALUES (?1, 'ingest', ?2, 'pending', 0, 'null', 1, 1)",
            rusqlite::params![keys[n - 1], payload],
        )
        .unwrap();
    }
    // A failed upload, its content kept for the UI's re-upload path.
    let failed = upload(6, 2);
    let failed_key = upload_key(&failed);
    conn.execute(
        "INSERT INTO jobs (key, kind, payload, state, attempts, progress, last_error, created_at, updated_at) \
         VALUES (?1, 'ingest', ?2, 'failed', 1, 'null', ?3, 1, 1)",
        rusqlite::params![
            failed_key,
            serde_json::to_string(&failed).unwrap(),
            r#"{"class":"bad_request","row":"T27","status":400,"request_id":null,"detail":"refused"}"#
        ],
    )
    .unwrap();
    drop(conn);

    let jobs = Jobs::new(q.env.grag.clone(), db.store(), "worker-new").unwrap();
    assert_eq!(jobs.drain().await.unwrap(), 5);
    let kept = jobs.job(&failed_key).await.unwrap();
    let kept = kept.expect("the failed job survives the migration");
    assert_eq!(kept.state, JobState::Failed);
    assert_eq!(kept.payload, serde_json::to_value(&failed).unwrap());
    assert_eq!(kept.last_error.map(|e| e.class), Some("bad_request".into()));
    let retried = jobs.retry(&failed_key).await.unwrap().unwrap();
    assert_eq!(retried.state, JobState::Done, "{:?}", retried.last_error);
    for key in &keys {
        let job = jobs.job(key).await.unwrap().unwrap();
        assert_eq!(job.state, JobState::Done, "{job:?}");
        assert!(job.payload.get("digest").is_some(), "{}", job.payload);
    }
    assert_eq!(q.env.sim.documents("knoll", KB).len(), 6);
    let conn = rusqlite::Connection::open(&db.0).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, sdk_queue::SCHEMA_VERSION);
}

/// Erasure of a job in flight: another replica's lease is waited for, and
/// the answer says whose; this process's worker is stopped first and the
/// job erased, never to come back.
#[tokio::test]
async fn forgetting_a_running_job_stops_this_workers_run_and_waits_for_another_replicas() {
    let (q, key, worker) = a_replay_mid_step(300).await;
    let other = Jobs::new(q.env.grag.clone(), q._db.store(), "worker-2").unwrap();
    match other.forget(&key).await.unwrap() {
        grag_jobs::Erasure::Held(lease) => assert_eq!(lease.owner, "worker-1"),
        erased => panic!("another replica's job is waited for: {erased:?}"),
    }
    assert_eq!(q.state(&key).await, JobState::InFlight);

    assert_eq!(
        q.jobs.forget(&key).await.unwrap(),
        grag_jobs::Erasure::Erased
    );
    assert_eq!(q.jobs.job(&key).await.unwrap(), None);
    // Past the step it was in: the erased job does not come back, and no
    // later step is sent for it.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(q.jobs.job(&key).await.unwrap(), None);
    assert_eq!(q.env.count("convert"), 0, "its next step never ran");
    q.jobs.shutdown(Duration::ZERO).await.unwrap();
    worker.await.unwrap();
}
