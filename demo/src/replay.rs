//! Uploads and KG writes accepted during a deploy are queued durably and
//! replayed after it, each exactly once.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use base64::Engine;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use grag_client::types::{Edge, Entity, Point, UploadDocument};
use grag_client::{DocumentId, EdgeId, EntityId, Grag, KbId, WorkspaceId};
use grag_jobs::{JobState, Jobs, KgBatch, Upload};
use grag_sim::Sim;
use sdk_queue::SqliteStore;
use tokio::time::Instant;

use crate::scene::stamp;
use crate::stage::{SPEED, Walk};

/// The replay runs at 1/50 of the platform's time, like the churn before it.
const REPLAY_SPEED: u32 = 50;
const UPLOADS: usize = 4;

/// The SQLite file of the demo's queue, removed when the step ends.
struct DemoDb(std::path::PathBuf);

impl Drop for DemoDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0.display()));
        }
    }
}

fn upload(kb: &KbId, n: usize) -> Result<Upload> {
    let text = format!("Prüfbericht {n}: Lager und Fahrbahn ohne Befund.");
    Ok(Upload {
        kb: kb.clone(),
        document: UploadDocument::new(
            DocumentId::parse(&format!("bericht-{n}"))?,
            format!("bericht-{n}.txt"),
            "text/plain",
            base64::engine::general_purpose::STANDARD.encode(text),
        ),
        points: (0..3)
            .map(|i| {
                Point::new(
                    format!("bericht-{n}-chunk-{i}"),
                    vec![0.1 * i as f64, 0.5, 0.2],
                )
            })
            .collect(),
    })
}

fn edge(n: usize) -> Result<KgBatch> {
    let entity = |id: &str, name: &str| -> Result<Entity> {
        Ok(Entity::new(EntityId::parse(id)?, "bauwerk", name))
    };
    let (a, b) = (format!("bruecke-{n}"), format!("lager-{n}"));
    Ok(KgBatch {
        workspace: WorkspaceId::parse("ws-demo")?,
        entities: vec![entity(&a, "Brücke")?, entity(&b, "Lager")?],
        edges: vec![Edge::new(
            EdgeId::parse(&format!("hat-lager-{n}"))?,
            EntityId::parse(&a)?,
            EntityId::parse(&b)?,
            "hat_lager",
        )],
    })
}

/// Opens the queue, submits during a deploy, lets the worker drain it, then
/// counts what the platform stored.
pub(crate) fn queued_through_a_deploy(walk: &mut Walk) -> BoxFuture<'_, Result<()>> {
    async move {
        let policy = grag_client::policy::POLICY.scaled(REPLAY_SPEED);
        let grag = Grag::with_policy(walk.config()?, policy)?;
        let (sim, kb) = (&walk.sim, &walk.kb);
        let db = DemoDb(
            std::env::temp_dir().join(format!("grag-demo-jobs-{}.sqlite", std::process::id())),
        );
        let store = SqliteStore::open(&db.0, grag_jobs::lock_retry()).context("the job store")?;
        let jobs = Jobs::new(grag.clone(), Arc::new(store), "demo-worker")?;
        println!(
            "   queue: {} (WAL), worker `demo-worker`, at most 2 jobs at once",
            db.0.display()
        );
        let shrink = SPEED / f64::from(REPLAY_SPEED);
        let refused = sim.config().churn_refused.mul_f64(shrink);
        let flaky = sim.config().churn_flaky.mul_f64(shrink);
        let churn = Instant::now();
        sim.faults().deploy_churn_for(refused, flaky).await;
        println!(
            "   {} a deploy starts: connections refused for {:.2} s",
            stamp(churn),
            refused.as_secs_f64()
        );
        let keys = submit(&jobs, kb, churn).await?;
        let pause = policy.replay.as_ref().map_or(Duration::ZERO, |r| r.pause);
        println!(
            "   {} breaker {}. The worker replays oldest first, never while the breaker is open,",
            stamp(churn),
            grag.runtime().circuit_state().as_str()
        );
        println!(
            "   each job after its pause ({} ms here, 5 s at platform speed); a replayed send is read back first",
            pause.as_millis()
        );
        drain(&jobs, &keys, churn).await?;
        stored_once(sim, kb)
    }
    .boxed()
}

/// The writes submitted while the platform is away: each is kept for replay.
async fn submit(jobs: &Jobs, kb: &KbId, churn: Instant) -> Result<Vec<String>> {
    let mut keys = Vec::new();
    for n in 0..UPLOADS {
        let job = jobs.submit_upload(upload(kb, n)?).await?;
        let why = job.last_error.as_ref().map_or("-".to_owned(), |e| {
            format!("{} ({})", e.class, e.row.as_deref().unwrap_or("-"))
        });
        println!(
            "   {} upload bericht-{n}: {} — {why}",
            stamp(churn),
            job.state.as_str()
        );
        keys.push(job.key);
    }
    let batch = jobs.submit_kg(edge(1)?).await?;
    println!(
        "   {} KG batch (2 entities, 1 edge): {}",
        stamp(churn),
        batch.state.as_str()
    );
    keys.push(batch.key);
    for line in jobs
        .metrics_text()
        .await
        .lines()
        .filter(|l| l.starts_with("knoll_replay_queue_depth{"))
    {
        println!("   {} {line}", stamp(churn));
    }
    Ok(keys)
}

/// Runs the worker until every job is done, then prints each job and the
/// queue's metrics.
async fn drain(jobs: &Jobs, keys: &[String], churn: Instant) -> Result<()> {
    let worker = tokio::spawn(jobs.clone().work());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut done = 0;
        for key in keys {
            if jobs
                .job(key)
                .await?
                .is_some_and(|j| j.state == JobState::Done)
            {
                done += 1;
            }
        }
        if done == keys.len() {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the queue did not drain within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.abort();
    for key in keys {
        if let Some(job) = jobs.job(key).await? {
            println!(
                "   {} {key}: {} after {} attempt(s)",
                stamp(churn),
                job.state.as_str(),
                job.attempts
            );
        }
    }
    for line in jobs
        .metrics_text()
        .await
        .lines()
        .filter(|l| l.starts_with("knoll_replay"))
    {
        println!("   {line}");
    }
    Ok(())
}

/// What the platform holds: each document converted exactly once.
fn stored_once(sim: &Sim, kb: &KbId) -> Result<()> {
    let mut once = true;
    for n in 0..UPLOADS {
        let doc = format!("bericht-{n}");
        let conversions = sim.conversions_of("knoll", &doc).len();
        once &= conversions == 1;
        println!("   platform: {doc} stored, converted {conversions}×");
    }
    println!(
        "   platform: {} document(s) in {}, {} KG edge(s) in ws-demo",
        sim.documents("knoll", kb.as_str()).len(),
        kb.as_str(),
        sim.edges("knoll", "ws-demo").len()
    );
    anyhow::ensure!(once, "a document was converted more than once");
    Ok(())
}
