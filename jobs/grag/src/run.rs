//! Submitting a job and running one claimed job to its end.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use grag_client::policy::POLICY;
use grag_client::{DocumentId, Grag, KbId};
use sdk_queue::{
    Erasure, Finish, Job, JobError, JobState, JobStore, LockRetry, NewJob, StoreError,
};
use sdk_runtime::alerts::Alert;
use sdk_runtime::policy::ReplayPolicy;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

use crate::job::{INGEST, JobsError, KG, KgBatch, Upload, document_key, kg_key, upload_key};
use crate::kept::{Content, digest, kept, kept_digest};
use crate::kg;
use crate::metrics::Metrics;
use crate::settle::{Settle, is_outage, settle};
use crate::shared::{Clock, Inner};
use crate::step::{Step, StepError};
use crate::upload::{self, UploadProgress};

/// The store's lock retry rule, as the spec gives it.
pub fn lock_retry() -> LockRetry {
    let replay = POLICY.replay.as_ref();
    LockRetry {
        attempts: replay.map_or(1, |r| r.lock_attempts),
        step: replay.map_or(Duration::ZERO, |r| r.lock_step),
    }
}

/// The durable job queue of one backend process. Cheap to clone.
#[derive(Clone)]
pub struct Jobs {
    pub(crate) inner: Arc<Inner>,
}

impl Jobs {
    /// A queue on `store` whose jobs run through `grag`, leased as `owner`.
    pub fn new(
        grag: Grag,
        store: Arc<dyn JobStore>,
        owner: impl Into<String>,
    ) -> Result<Self, JobsError> {
        let policy = grag
            .runtime()
            .policy()
            .replay
            .as_ref()
            .ok_or(JobsError::NoReplayPolicy)?;
        let grag = grag.deferring_server_waits();
        Ok(Jobs::assemble(
            grag,
            store,
            owner.into(),
            policy,
            Arc::new(SystemTime::now),
        ))
    }

    /// The same queue reading time from `clock` (tests: a lease that has
    /// run out, without waiting for it).
    pub fn with_clock(self, clock: impl Fn() -> SystemTime + Send + Sync + 'static) -> Self {
        let i = &self.inner;
        Jobs::assemble(
            i.grag.clone(),
            i.store.clone(),
            i.owner.clone(),
            i.policy,
            Arc::new(clock),
        )
    }

    fn assemble(
        grag: Grag,
        store: Arc<dyn JobStore>,
        owner: String,
        policy: &'static ReplayPolicy,
        clock: Clock,
    ) -> Self {
        Jobs {
            inner: Arc::new(Inner {
                grag,
                store,
                owner,
                policy,
                clock,
                metrics: Metrics::new(policy),
                wake: Notify::new(),
                last_outage: Mutex::new(None),
                stopping: AtomicBool::new(false),
                running: Mutex::new(HashMap::new()),
                ended: Notify::new(),
            }),
        }
    }

    /// Persists the upload, then runs it. The job that comes back is
    /// `done`, `pending_replay` (an outage: the worker replays it),
    /// `failed` (with its error) or, when it was submitted before and
    /// another worker holds it, as that worker left it.
    pub async fn submit_upload(&self, upload: Upload) -> Result<Job, JobsError> {
        let key = upload_key(&upload);
        self.submit(key, INGEST, &upload).await
    }

    /// Persists the KG batch, then runs it (see [`Jobs::submit_upload`]).
    pub async fn submit_kg(&self, batch: KgBatch) -> Result<Job, JobsError> {
        let key = kg_key(&batch);
        self.submit(key, KG, &batch).await
    }

    /// Runs a failed job again: the UI's re-upload path, a person's decision
    /// once the cause is fixed (a knowledge base created, a file replaced by
    /// the same document id). The job goes on from its checkpoint. `None` if
    /// there is no such job; a job that is not failed is returned as it is.
    pub async fn retry(&self, key: &str) -> Result<Option<Job>, JobsError> {
        let store = &self.inner.store;
        let requeued = store.requeue(key, self.now()).await;
        if requeued.map_err(|e| self.watch(key, e))? {
            self.run_key(key).await?;
        }
        Ok(store.get(key).await?)
    }

    /// Runs a done job again from Knoll's state, on a person's request: the
    /// platform lost what it made (a knowledge base purged, a document gone;
    /// §1.4 "anything lost on the GRAG side must be replayable from
    /// Knoll-side state"). A done job keeps no content, so `content` is the
    /// job's content from Knoll's file store; content whose digest is not the
    /// one the job kept is refused ([`JobsError::NotItsContent`]), nothing run.
    /// Every write step of an upload reads first, so what still exists is not
    /// made again: the document is uploaded only if the KB's list lacks it, a
    /// conversion already started is followed instead of starting (and
    /// billing) a second, and points and KG upserts are idempotent by their
    /// IDs. `None` if there is no such job; a job that is not done is returned
    /// as it is.
    pub async fn rerun(
        &self,
        key: &str,
        content: impl Into<Content>,
    ) -> Result<Option<Job>, JobsError> {
        let store = &self.inner.store;
        let Some(job) = store.get(key).await? else {
            return Ok(None);
        };
        if job.state != JobState::Done {
            return Ok(Some(job));
        }
        let refused = |reason: String| JobsError::NotItsContent {
            key: key.to_owned(),
            reason,
        };
        let (kind, given_key, payload) = match content.into() {
            Content::Upload(u) => (INGEST, upload_key(&u), serde_json::to_value(&u)),
            Content::Kg(b) => (KG, kg_key(&b), serde_json::to_value(&b)),
        };
        let payload = payload.map_err(|e| refused(e.to_string()))?;
        if kind != job.kind || given_key != key {
            return Err(refused(format!(
                "the content given is that of job {given_key} ({kind})"
            )));
        }
        let (kept, given) = (kept_digest(&job.payload), digest(&payload));
        if kept != given {
            return Err(refused(format!(
                "its content's SHA-256 is {given}, the job ran content of SHA-256 {kept}"
            )));
        }
        let start = match job.kind.as_str() {
            INGEST => serde_json::to_value(UploadProgress {
                reconcile: true,
                ..UploadProgress::default()
            })
            .expect("a checkpoint serializes"),
            _ => serde_json::Value::Null,
        };
        let rerun = store.rerun(key, &payload, &start, self.now()).await;
        if rerun.map_err(|e| self.watch(key, e))? {
            self.run_key(key).await?;
        }
        Ok(store.get(key).await?)
    }

    /// Erases a job and its content from the store, whatever its state (a
    /// person's request: the document is deleted in Knoll). A job this
    /// process's worker runs is stopped first; one that another replica, or
    /// a submit still running here, holds is left, and the answer says whose
    /// lease it waits for ([`Erasure::Held`]): forget it again once that ends.
    pub async fn forget(&self, key: &str) -> Result<Erasure, JobsError> {
        let stopped = self.lock_running().remove(key);
        let owner = stopped.map(|task| {
            task.abort();
            self.inner.owner.as_str()
        });
        let erased = self.inner.store.forget(key, owner, self.now()).await;
        Ok(erased.map_err(|e| self.watch(key, e))?)
    }

    /// [`Jobs::forget`] of the upload of document `document_id` into `kb`.
    pub async fn forget_document(
        &self,
        kb: &KbId,
        document_id: &DocumentId,
    ) -> Result<Erasure, JobsError> {
        self.forget(&document_key(kb, document_id)).await
    }

    /// Claims the job by key and runs it, if no other worker holds it.
    async fn run_key(&self, key: &str) -> Result<(), JobsError> {
        let lease = self.inner.policy.lease;
        let claimed = self
            .inner
            .store
            .claim_key(key, &self.inner.owner, lease, self.now())
            .await
            .map_err(|e| self.watch(key, e))?;
        if let Some(job) = claimed {
            self.run_claimed(job).await?;
        }
        self.inner.wake.notify_one();
        Ok(())
    }

    async fn submit(
        &self,
        key: String,
        kind: &str,
        payload: &impl Serialize,
    ) -> Result<Job, JobsError> {
        let payload = serde_json::to_value(payload).map_err(|e| JobsError::Corrupt {
            key: key.clone(),
            what: "payload",
            reason: e.to_string(),
        })?;
        let store = &self.inner.store;
        let now = self.now();
        store
            .submit(
                NewJob {
                    key: key.clone(),
                    kind: kind.to_owned(),
                    payload,
                },
                now,
            )
            .await
            .map_err(|e| self.watch(&key, e))?;
        self.run_key(&key).await?;
        store
            .get(&key)
            .await?
            .ok_or(JobsError::Store(StoreError::LeaseLost { key }))
    }

    /// One job by key: its state, attempts and last error.
    pub async fn job(&self, key: &str) -> Result<Option<Job>, JobsError> {
        Ok(self.inner.store.get(key).await?)
    }

    /// Failed jobs, oldest first, with their errors: the UI's re-upload list.
    pub async fn failed(&self, limit: usize) -> Result<Vec<Job>, JobsError> {
        Ok(self.inner.store.list(JobState::Failed, limit).await?)
    }

    /// The queue's metrics (§10.3) in the Prometheus text format, the
    /// depth and the store's rows and payload bytes read from it now.
    pub async fn metrics_text(&self) -> String {
        self.refresh_depth().await;
        self.inner.metrics.encode()
    }

    pub(crate) fn now(&self) -> SystemTime {
        self.inner.now()
    }

    /// The gauge is read only here, so the store is asked only here, not
    /// after every job.
    async fn refresh_depth(&self) {
        if let Ok(depth) = self.inner.store.depth().await {
            self.inner.metrics.set_depth(&depth);
        }
        if let Ok(footprint) = self.inner.store.footprint().await {
            self.inner.metrics.set_footprint(&footprint);
        }
    }

    /// Runs a job this worker holds to its end or to its next replay, and
    /// records the outcome. A store error leaves the job as it is: its lease
    /// runs out and a worker takes it over.
    pub(crate) async fn run_claimed(&self, job: Job) -> Result<JobState, JobsError> {
        let (finish, state) = match self.run_steps(&job).await {
            Ok(()) => (Finish::Done(kept(&job.kind, &job.payload)), JobState::Done),
            Err(StepError::Store(e)) => return Err(e.into()),
            Err(StepError::Unknown {
                step,
                request_id,
                read,
            }) => self.verdict(
                &job,
                unknown_error(step, request_id, &read),
                None,
                replayed(&job),
            ),
            // It can never run: keep it, failed, with the reason.
            Err(StepError::Corrupt { what, reason }) => {
                self.verdict(&job, corrupt_error(what, &reason), None, true)
            }
            Err(StepError::PointTooLarge { error, point }) => {
                let error_of_job = too_large_error(&error, &point);
                self.verdict(&job, error_of_job, Some(&error), replayed(&job))
            }
            Err(StepError::Platform(e)) => self.platform_failed(&job, &e),
            Err(StepError::Stopped) => (handed_back(), JobState::PendingReplay),
        };
        self.record(&job, finish, state).await
    }

    /// The steps of the job's kind, from its checkpoint on.
    async fn run_steps(&self, job: &Job) -> Result<(), StepError> {
        let step = Step::new(&self.inner, &job.key);
        match job.kind.as_str() {
            INGEST => match (decode("payload", &job.payload), progress(job)) {
                (Ok(upload), Ok(mut progress)) => upload::run(&step, &upload, &mut progress).await,
                (Err(e), _) | (_, Err(e)) => Err(e),
            },
            KG => match (decode("payload", &job.payload), progress(job)) {
                (Ok(batch), Ok(mut progress)) => kg::run(&step, &batch, &mut progress).await,
                (Err(e), _) | (_, Err(e)) => Err(e),
            },
            other => Err(StepError::Corrupt {
                what: "kind",
                reason: format!("`{other}` is no job kind of this queue"),
            }),
        }
    }

    /// A job that can never succeed: failed with `error`, and alerted as a
    /// replay failure when `alert` (a first run's refusal is not one).
    fn verdict(
        &self,
        job: &Job,
        error: JobError,
        cause: Option<&grag_client::Error>,
        alert: bool,
    ) -> (Finish, JobState) {
        if alert {
            self.failed_alert(job, cause, &error.detail);
        }
        (Finish::Failed(error), JobState::Failed)
    }

    /// The platform call failed: [`settle`] decides between a replay and a
    /// failure.
    fn platform_failed(&self, job: &Job, e: &grag_client::Error) -> (Finish, JobState) {
        let deploy = self.inner.grag.runtime().deploy_suspected() || self.in_outage();
        let error = job_error(e);
        match settle(e, deploy) {
            Settle::Replay { after } => {
                if is_outage(e) {
                    self.saw_outage();
                }
                let wait = after.unwrap_or(self.inner.policy.pause);
                let not_before = Some(self.now() + wait);
                (
                    Finish::Replay { error, not_before },
                    JobState::PendingReplay,
                )
            }
            Settle::Fail => {
                // A first run's refusal is the job's own error (its row
                // alerts where the taxonomy says); a replay that fails
                // after the close is what `replay_failures` is for.
                if replayed(job) {
                    self.failed_alert(job, Some(e), e.class_name());
                }
                (Finish::Failed(error), JobState::Failed)
            }
        }
    }

    /// Writes the job's end (or its next replay) to the store.
    async fn record(
        &self,
        job: &Job,
        finish: Finish,
        state: JobState,
    ) -> Result<JobState, JobsError> {
        let now = self.now();
        self.inner
            .store
            .finish(&job.key, &self.inner.owner, finish, now)
            .await
            .map_err(|e| self.watch(&job.key, e))?;
        if state == JobState::Failed {
            self.inner.metrics.failed();
        }
        Ok(state)
    }

    /// Whether a job met an outage within the breaker's deploy-suspected
    /// window: the platform may be deploying although the breaker never
    /// opened (fewer endpoints failed than it counts), so its transient
    /// 401/404/422 (`replay: deploy` rows) are the deploy's, not the job's.
    fn in_outage(&self) -> bool {
        let policy = self.inner.grag.runtime().policy();
        let window = policy.breaker.as_ref().map(|b| b.deploy_suspected);
        let last = *self
            .inner
            .last_outage
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match (last, window) {
            (Some(at), Some(window)) => self.now() < at + window,
            _ => false,
        }
    }

    fn saw_outage(&self) {
        *self
            .inner
            .last_outage
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(self.now());
    }

    /// A store error on its way up, looked at ([`Inner::watch`]).
    pub(crate) fn watch(&self, key: &str, e: StoreError) -> StoreError {
        self.inner.watch(key, e)
    }

    fn failed_alert(&self, job: &Job, e: Option<&grag_client::Error>, why: &str) {
        let runtime = self.inner.grag.runtime();
        runtime.alert(Alert {
            endpoint: e.map(|e| e.endpoint()),
            row: e.map(|e| e.row()),
            detail: Some(format!("job {} failed: {why}", job.key)),
            request_id: e.and_then(|e| e.request_id()).map(str::to_owned),
            ..runtime.alert_of(self.inner.policy.failure_alert)
        });
    }
}

/// Whether this run of `job` is a replay: it waited through an outage, was
/// taken over from a crashed worker, or was run again.
fn replayed(job: &Job) -> bool {
    job.attempts > 1
}

fn decode<T: DeserializeOwned>(
    what: &'static str,
    value: &serde_json::Value,
) -> Result<T, StepError> {
    T::deserialize(value).map_err(|e| StepError::Corrupt {
        what,
        reason: e.to_string(),
    })
}

/// The job's checkpoint; none yet (`null`) is the start.
fn progress<T: DeserializeOwned + Default>(job: &Job) -> Result<T, StepError> {
    if job.progress.is_null() {
        return Ok(T::default());
    }
    decode("progress", &job.progress)
}

/// A job a stopping process hands back at a checkpoint: eligible at once.
pub(crate) fn handed_back() -> Finish {
    Finish::Replay {
        error: JobError {
            class: "handed_back".into(),
            row: None,
            status: None,
            request_id: None,
            detail: "its replica stopped and handed it back at a checkpoint".into(),
        },
        not_before: None,
    }
}

/// A write in doubt that no read can settle: never sent again.
fn unknown_error(step: &str, request_id: Option<String>, read: &str) -> JobError {
    let detail = format!(
        "{step} may have been applied (request {}); the platform cannot say: {read}. Not sent again: check the platform before running it again",
        request_id
            .as_deref()
            .unwrap_or("unknown: no answer was read")
    );
    JobError {
        class: "outcome_unknown".into(),
        row: None,
        status: None,
        request_id,
        detail,
    }
}

/// A payload or checkpoint that does not decode.
fn corrupt_error(what: &str, reason: &str) -> JobError {
    JobError {
        class: "corrupt_job".into(),
        row: None,
        status: None,
        request_id: None,
        detail: format!("its {what} does not decode: {reason}"),
    }
}

/// A single point refused as too large, after every split.
fn too_large_error(e: &grag_client::Error, point: &str) -> JobError {
    let mut error = job_error(e);
    error.detail = format!(
        "point `{point}` alone is refused as too large ({}), after the batch was split down to single points: {}",
        e.status()
            .map_or_else(|| "no status".to_owned(), |s| s.to_string()),
        error.detail
    );
    error
}

/// The error a job keeps (§10.1 `grag_refs.last_error`): class, row, status,
/// request id and the bounded detail.
fn job_error(e: &grag_client::Error) -> JobError {
    JobError {
        class: e.class_name().to_owned(),
        row: Some(e.row().to_owned()),
        status: e.status(),
        request_id: e.request_id().map(str::to_owned),
        detail: e.to_string(),
    }
}
