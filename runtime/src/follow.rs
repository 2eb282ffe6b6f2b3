//! Following a job: its progress stream while it works, its status route when
//! the stream fails, one result at the end.
//!
//! The stream is an optimisation over polling, never the truth: a stall, the
//! server's ceiling (the policy's `timeout_event`: the job is not failed), its
//! `error_event` or a dropped connection switch to polling the spec's `fallback` route at the
//! policy's cadence ([`Client::poll_interval`]); after `reopen_after` polls of
//! a running job the stream is opened again, and once its first event is in,
//! one poll resyncs what the relay never replays. Each switch counts in the
//! stream's fallback metric.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::stream::{BoxStream, Stream, StreamExt};
use sdk_sse::SseEvent;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::call::Call;
use crate::client::Client;
use crate::error::{Error, bounded};
use crate::events::{Events, StreamEvent};
use sdk_policy::Endpoint;
use sdk_policy::Id;
use sdk_policy::policy::{OutcomeKind, StreamFallback, StreamPolicy};

/// What following a job yields; the last item is [`JobUpdate::Completed`] or
/// an error (a failed or cancelled job is class `job_failed`).
#[derive(Debug)]
pub enum JobUpdate<E, S> {
    /// An event of the live stream (the opening one included).
    Event(E),
    /// A poll of the status route: a resync, or the fallback's cadence.
    Status(S),
    /// The stream failed and the job is followed by polling now; the error
    /// says why (stalled, `timeout`, `error`, dropped, or not opened).
    FellBack(Error),
    /// The job completed: its terminal event, or the status that said so.
    Completed(JobDone<E, S>),
}

/// Where a job's completion was read.
#[derive(Debug)]
pub enum JobDone<E, S> {
    Event(E),
    Status(S),
}

/// The progress of one job as a [`Stream`]. Lazy: nothing is sent before
/// the first poll. Dropping it closes the stream and stops polling.
pub struct JobProgress<E, S> {
    /// Builds the follower on the first poll, with the job's expected run
    /// time as known by then.
    start: Option<Start<E, S>>,
    expected: Option<Duration>,
    /// Keepalive comments seen on all of the job's streams so far.
    keepalives: Arc<AtomicU64>,
    /// Whether one of the job's streams arrived in one burst at its end.
    buffered: Arc<AtomicBool>,
    inner: Option<BoxStream<'static, Result<JobUpdate<E, S>, Error>>>,
}

type Start<E, S> = Box<
    dyn FnOnce(
            Option<Duration>,
            Arc<AtomicU64>,
            Arc<AtomicBool>,
        ) -> BoxStream<'static, Result<JobUpdate<E, S>, Error>>
        + Send,
>;

impl<E, S> JobProgress<E, S>
where
    E: StreamEvent,
    S: DeserializeOwned + Send + 'static,
{
    fn new(
        client: Client,
        endpoint: &'static Endpoint,
        policy: &'static StreamPolicy,
        fallback: &'static StreamFallback,
        source: impl Source,
    ) -> Self {
        let start: Start<E, S> = Box::new(move |expected, keepalives, buffered| {
            let polling_only = by_polling_alone(policy, expected, client.polling_only());
            let follower = Follower {
                client,
                endpoint,
                policy,
                fallback,
                source,
                polling_only,
                phase: if polling_only {
                    Phase::Polling {
                        polls: 0,
                        due: true,
                    }
                } else {
                    Phase::Open { reopened: false }
                },
                live: None,
                keepalives,
                buffered,
                closed_keepalives: 0,
                queue: VecDeque::new(),
                _types: std::marker::PhantomData,
            };
            futures_util::stream::unfold(follower, |mut f| async move {
                let item = f.next().await?;
                Some((item, f))
            })
            .fuse()
            .boxed()
        });
        JobProgress {
            start: Some(start),
            expected: None,
            keepalives: Arc::default(),
            buffered: Arc::default(),
            inner: None,
        }
    }

    /// The next update; `None` after the last one.
    pub async fn next(&mut self) -> Option<Result<JobUpdate<E, S>, Error>> {
        StreamExt::next(self).await
    }

    /// Keepalive comments seen so far, on every stream of the job.
    pub fn keepalives(&self) -> u64 {
        self.keepalives.load(Ordering::Relaxed)
    }

    /// Whether one of the job's streams arrived in one burst at its end, as
    /// a buffering proxy delivers it (§6.4), like a chat turn's
    /// `was_buffered`: the job's updates were late, not lost. Once the
    /// policy's `confirm_after` streams did, jobs are followed by polling
    /// alone ([`Client::polling_only`]).
    pub fn was_buffered(&self) -> bool {
        self.buffered.load(Ordering::Relaxed)
    }

    /// A job expected to run this long: past the stream's ceiling (30 min)
    /// the stream could only end in `timeout`, so the job is followed by
    /// polling alone, from the start.
    pub fn expecting(mut self, runtime: Duration) -> Self {
        self.expected = Some(runtime);
        self
    }
}

// Nothing in it is pinned structurally: the boxed stream is pinned on its own.
impl<E, S> Unpin for JobProgress<E, S> {}

impl<E, S> Stream for JobProgress<E, S>
where
    E: StreamEvent,
    S: DeserializeOwned + Send + 'static,
{
    type Item = Result<JobUpdate<E, S>, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(start) = this.start.take() {
            this.inner = Some(start(
                this.expected,
                this.keepalives.clone(),
                this.buffered.clone(),
            ));
        }
        match this.inner.as_mut() {
            Some(inner) => inner.poll_next_unpin(cx),
            None => Poll::Ready(None),
        }
    }
}

impl Client {
    /// Follows the job a stream route (one with a `fallback`) reports on;
    /// the generated job-progress methods call this.
    pub fn follow_job<E, S>(&self, call: Call<'_>) -> JobProgress<E, S>
    where
        E: StreamEvent,
        S: DeserializeOwned + Send + 'static,
    {
        JobProgress::of(self, call)
    }
}

impl<E, S> JobProgress<E, S>
where
    E: StreamEvent,
    S: DeserializeOwned + Send + 'static,
{
    /// `client` following the job `call` reports on, or a refusal for a
    /// route that is no job stream with a fallback.
    fn of(client: &Client, call: Call<'_>) -> Self {
        let endpoint = call.endpoint;
        let policy = endpoint.stream.map(|i| &client.plan().policy.streams[i]);
        let Some((policy, fallback)) = policy.and_then(|p| Some((p, p.fallback.as_ref()?))) else {
            let reason = format!("{} is not a job stream with a fallback", endpoint.path);
            let error = client.refused(endpoint, reason);
            return JobProgress {
                start: None,
                expected: None,
                keepalives: Arc::default(),
                buffered: Arc::default(),
                inner: Some(futures_util::stream::iter([Err(error)]).fuse().boxed()),
            };
        };
        let source = Platform {
            client: client.clone(),
            endpoint,
            fallback: fallback.route,
            workspace: call.workspace.cloned(),
            path: call.path.iter().map(|p| (*p).to_owned()).collect(),
        };
        JobProgress::new(client.clone(), endpoint, policy, fallback, source)
    }
}

/// Where a follower gets the job's stream and status: the platform, or a
/// test's script.
pub(crate) trait Source: Send + 'static {
    fn open(&mut self) -> impl Future<Output = Result<Events, Error>> + Send;
    /// The status route's answer, as JSON.
    fn status(&mut self) -> impl Future<Output = Result<Value, Error>> + Send;
}

/// The platform: the stream route and its fallback, with the job's arguments.
struct Platform {
    client: Client,
    endpoint: &'static Endpoint,
    fallback: &'static Endpoint,
    workspace: Option<Id>,
    path: Vec<String>,
}

impl Platform {
    fn call(&self, endpoint: &'static Endpoint) -> Call<'_> {
        let mut call = Call::new(endpoint);
        if let Some(ws) = &self.workspace {
            call = call.workspace(ws);
        }
        for p in &self.path {
            call = call.path(p);
        }
        call
    }
}

impl Source for Platform {
    async fn open(&mut self) -> Result<Events, Error> {
        self.client.open_stream(self.call(self.endpoint)).await
    }

    async fn status(&mut self) -> Result<Value, Error> {
        self.client.send(self.call(self.fallback)).await?.json()
    }
}

/// Where the follower is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Open the stream next; `reopened`: not the first time, so resync.
    Open {
        reopened: bool,
    },
    /// Reading the live stream (held in `Follower::live`).
    Live {
        first_seen: bool,
        resync: bool,
    },
    /// Polling; `due`: the next poll goes out without waiting.
    Polling {
        polls: u32,
        due: bool,
    },
    Done,
}

/// Whether a job is followed by polling alone: it is expected to outlast the
/// stream's ceiling (the stream could only end in `timeout`), or a proxy was
/// seen buffering streams.
fn by_polling_alone(
    policy: &StreamPolicy,
    expected: Option<Duration>,
    proxy_buffering: bool,
) -> bool {
    proxy_buffering || expected.zip(policy.ceiling).is_some_and(|(e, c)| e > c)
}

/// What a status answer says about the job.
#[derive(Debug, PartialEq, Eq)]
enum JobState {
    Running,
    Completed,
    /// Failed or cancelled, with the job's error text when it has one.
    Failed(String),
}

/// Reads a job's state from a status answer or a terminal event's data.
fn job_state(fallback: &StreamFallback, state: &str, data: &Value) -> JobState {
    if fallback.completed.contains(&state) {
        return JobState::Completed;
    }
    if fallback.failed.contains(&state) {
        let error = fallback
            .error_field
            .and_then(|f| data.get(f))
            .and_then(Value::as_str)
            .map_or_else(|| format!("the job ended {state}"), str::to_owned);
        return JobState::Failed(error);
    }
    JobState::Running
}

struct Follower<E, S, Src> {
    client: Client,
    endpoint: &'static Endpoint,
    policy: &'static StreamPolicy,
    fallback: &'static StreamFallback,
    source: Src,
    polling_only: bool,
    phase: Phase,
    /// The open stream, while the phase is [`Phase::Live`].
    live: Option<Events>,
    keepalives: Arc<AtomicU64>,
    buffered: Arc<AtomicBool>,
    /// Keepalives of the streams closed before `live`.
    closed_keepalives: u64,
    queue: VecDeque<Result<JobUpdate<E, S>, Error>>,
    _types: std::marker::PhantomData<fn() -> (E, S)>,
}

impl<E, S, Src> Follower<E, S, Src>
where
    E: StreamEvent,
    S: DeserializeOwned + Send + 'static,
    Src: Source,
{
    async fn next(&mut self) -> Option<Result<JobUpdate<E, S>, Error>> {
        loop {
            if let Some(item) = self.queue.pop_front() {
                return Some(item);
            }
            match self.phase {
                Phase::Done => return None,
                Phase::Open { reopened } => match self.source.open().await {
                    Ok(events) => {
                        self.live = Some(events);
                        self.phase = Phase::Live {
                            first_seen: false,
                            resync: reopened && self.policy.resync_after_reconnect,
                        };
                    }
                    Err(e) => {
                        // Its head held past the open timeout: a buffering
                        // proxy, as a stream arriving in one burst is.
                        if e.head_withheld() {
                            self.buffered.store(true, Ordering::Relaxed);
                            self.client
                                .recorder()
                                .stream_withheld(self.policy.name, self.endpoint);
                        }
                        self.fall_back(e)
                    }
                },
                Phase::Live { first_seen, resync } => {
                    let Some(events) = self.live.as_mut() else {
                        self.phase = Phase::Open { reopened: true };
                        continue;
                    };
                    let next = events.next().await;
                    let seen = self.closed_keepalives + events.keepalives();
                    self.keepalives.store(seen, Ordering::Relaxed);
                    match next {
                        Some(Ok(event)) => self.on_event(event, first_seen, resync).await,
                        Some(Err(e)) => self.fall_back(e),
                        // Only a stream whose contract allows a clean end gets
                        // here; the job is not over, so it is polled.
                        None => self.fall_back(
                            self.client
                                .plan()
                                .error(OutcomeKind::Connection, self.endpoint)
                                .with_detail("the stream ended before the job did"),
                        ),
                    }
                }
                Phase::Polling { polls, due } => {
                    if !due {
                        tokio::time::sleep(self.client.poll_interval()).await;
                    }
                    self.poll(polls).await;
                }
            }
        }
    }

    /// One live event: the opening check, the resync poll, terminal events.
    async fn on_event(&mut self, event: SseEvent, first_seen: bool, resync: bool) {
        if !first_seen
            && let Some(first) = self.policy.first_event
            && event.event != first
        {
            let error = self.contract_error(
                self.endpoint,
                bounded(
                    &format!("the stream opened with `{}`, not `{first}`", event.event),
                    self.client.plan().policy.limits.detail,
                ),
                None,
            );
            self.finish(Err(error));
            return;
        }
        self.phase = Phase::Live {
            first_seen: true,
            resync: false,
        };
        let fallback = self.fallback;
        let name = event.event.clone();
        let ends =
            fallback.completed.contains(&name.as_str()) || fallback.failed.contains(&name.as_str());
        let state = ends.then(|| {
            let data = serde_json::from_str::<Value>(&event.data).unwrap_or(Value::Null);
            job_state(fallback, &name, &data)
        });
        let typed = match E::decode(event) {
            Ok(typed) => typed,
            // The job goes on though its stream cannot be read: poll it.
            Err(e) => {
                let error = self.contract_error(
                    self.endpoint,
                    bounded(
                        &format!("event `{name}` does not decode"),
                        self.client.plan().policy.limits.detail,
                    ),
                    Some(e),
                );
                self.fall_back(error);
                return;
            }
        };
        match state {
            Some(JobState::Completed) => {
                self.finish(Ok(JobUpdate::Completed(JobDone::Event(typed))))
            }
            Some(JobState::Failed(error)) => {
                self.queue.push_back(Ok(JobUpdate::Event(typed)));
                let error = self.job_failed(error);
                self.finish(Err(error));
            }
            _ => {
                self.queue.push_back(Ok(JobUpdate::Event(typed)));
                // Reconnected: what happened while away is only in the status.
                if resync {
                    self.poll_status().await;
                }
            }
        }
    }

    /// The stream failed: count it, say so, poll now and then at the cadence.
    fn fall_back(&mut self, error: Error) {
        self.close();
        self.client
            .recorder()
            .stream_fell_back(self.policy.name, &error);
        self.queue.push_back(Ok(JobUpdate::FellBack(error)));
        self.phase = Phase::Polling {
            polls: 0,
            due: true,
        };
    }

    /// One poll in the polling phase.
    async fn poll(&mut self, polls: u32) {
        if self.poll_status().await == Some(JobState::Running) {
            let polls = polls.saturating_add(1);
            let reopen = self.fallback.reopen_after;
            // A buffering proxy confirmed meanwhile keeps the stream shut.
            let stream_usable = !self.polling_only && !self.client.polling_only();
            self.phase = if stream_usable && self.policy.resend && reopen > 0 && polls >= reopen {
                Phase::Open { reopened: true }
            } else {
                Phase::Polling { polls, due: false }
            };
        }
    }

    /// Polls the status route once and queues what it says; a terminal
    /// state or a failed poll ends the follow. `None` when it ended.
    async fn poll_status(&mut self) -> Option<JobState> {
        let fallback = self.fallback;
        let value = match self.source.status().await {
            Ok(v) => v,
            Err(e) => {
                self.finish(Err(e));
                return None;
            }
        };
        let state = value
            .get(fallback.status_field)
            .and_then(Value::as_str)
            .map(|s| job_state(fallback, s, &value));
        let status = match (state.is_some(), serde_json::from_value::<S>(value)) {
            (true, Ok(status)) => status,
            (_, result) => {
                let detail = format!(
                    "the status answer has no string `{}` or does not decode",
                    fallback.status_field
                );
                let error = self.contract_error(fallback.route, detail, result.err());
                self.finish(Err(error));
                return None;
            }
        };
        match state.expect("checked above") {
            JobState::Running => {
                self.queue.push_back(Ok(JobUpdate::Status(status)));
                Some(JobState::Running)
            }
            JobState::Completed => {
                self.finish(Ok(JobUpdate::Completed(JobDone::Status(status))));
                None
            }
            JobState::Failed(error) => {
                self.queue.push_back(Ok(JobUpdate::Status(status)));
                let error = self.job_failed(error);
                self.finish(Err(error));
                None
            }
        }
    }

    /// Closes the live stream, if one is open (its slots go back).
    fn close(&mut self) {
        if let Some(events) = self.live.take() {
            self.closed_keepalives += events.keepalives();
            if events.was_buffered() {
                self.buffered.store(true, Ordering::Relaxed);
            }
        }
    }

    /// The platform broke the stream's or the status route's contract: the
    /// decode row, with its alert (contract drift).
    fn contract_error(
        &self,
        endpoint: &'static Endpoint,
        detail: String,
        source: Option<serde_json::Error>,
    ) -> Error {
        let row = self.client.plan().row_of(OutcomeKind::Decode);
        let mut error = self
            .client
            .plan()
            .error(OutcomeKind::Decode, endpoint)
            .with_detail(detail);
        if let Some(e) = source {
            error = error.with_decode_failure(&e, self.client.plan().policy.limits.detail);
        }
        if let Some(alert) = row.and_then(|r| r.alert) {
            self.client.recorder().raise(alert, &error);
        }
        error
    }

    /// T32: the job ended failed or cancelled.
    fn job_failed(&self, detail: String) -> Error {
        self.client
            .plan()
            .error(OutcomeKind::JobFailed, self.endpoint)
            .with_detail(bounded(&detail, self.client.plan().policy.limits.detail))
    }

    /// The last item; the stream (if open) is closed.
    fn finish(&mut self, last: Result<JobUpdate<E, S>, Error>) {
        self.close();
        self.queue.push_back(last);
        self.phase = Phase::Done;
    }
}

#[cfg(test)]
mod tests {
    //! The follower against a scripted stream and status route, under paused
    //! time with the fixture's numbers ([`crate::testing`]: 45 s watchdog, 5 s
    //! polling, 30 min ceiling): every delay below is exact.

    use std::io;
    use std::sync::Mutex;

    use bytes::Bytes;
    use serde_json::json;
    use tokio::time::Instant;

    use super::*;
    use crate::alerts::CollectAlerts;
    use crate::client::ClientConfig;
    use crate::testing::{JOB_EVENTS, POLICY, TENANT};
    use sdk_policy::IdKind;

    /// How a scripted body ends after its frames.
    enum End {
        /// No byte any more, connection open.
        Stall,
        /// The connection is cut.
        Drop,
    }

    /// A body: each frame after its delay, then the end.
    struct Body(Vec<(u64, &'static str)>, End);

    type Log = Arc<Mutex<Vec<(&'static str, Duration)>>>;

    struct Scripted {
        client: Client,
        opens: VecDeque<Option<Body>>,
        statuses: VecDeque<Value>,
        log: Log,
        t0: Instant,
    }

    fn endpoint() -> &'static Endpoint {
        &JOB_EVENTS
    }

    fn stream_policy() -> &'static StreamPolicy {
        &POLICY.streams[endpoint().stream.expect("a stream route")]
    }

    impl Source for Scripted {
        async fn open(&mut self) -> Result<Events, Error> {
            self.log.lock().unwrap().push(("open", self.t0.elapsed()));
            let Some(Body(frames, end)) = self.opens.pop_front().expect("an open is scripted")
            else {
                return Err(self
                    .client
                    .plan()
                    .error(
                        crate::error::Class::Judged(
                            OutcomeKind::Status,
                            self.client.plan().row_of(OutcomeKind::Connection),
                        ),
                        endpoint(),
                    )
                    .with_detail("scripted: not opened"));
            };
            let frames = futures_util::stream::iter(frames).then(|(after, text)| async move {
                tokio::time::sleep(Duration::from_secs(after)).await;
                Ok::<_, io::Error>(Bytes::from_static(text.as_bytes()))
            });
            let end = match end {
                End::Stall => futures_util::stream::pending().boxed(),
                End::Drop => futures_util::stream::iter([Err(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    "scripted drop",
                ))])
                .boxed(),
            };
            let body = frames.chain(end).boxed();
            Ok(Events::over(
                self.client.clone(),
                endpoint(),
                stream_policy(),
                body,
                None,
            ))
        }

        async fn status(&mut self) -> Result<Value, Error> {
            self.log.lock().unwrap().push(("status", self.t0.elapsed()));
            Ok(self.statuses.pop_front().expect("a status is scripted"))
        }
    }

    fn client(alerts: Arc<CollectAlerts>) -> Client {
        let tenant = Id::parse(&POLICY.ids, IdKind::Tenant, TENANT).unwrap();
        let config = ClientConfig::new("http://127.0.0.1:9", "key", tenant).alerts(alerts);
        Client::new(&POLICY, config).unwrap()
    }

    fn running() -> Value {
        json!({ "status": "running", "progress": 0.5 })
    }

    fn completed() -> Value {
        json!({ "status": "completed", "progress": 1.0, "results": { "chunks": 3 } })
    }

    const SUBSCRIBED: &str = "event: subscribed\ndata: {\"job_id\":\"j-1\"}\n\n";
    const NODE: &str = "event: node_start\ndata: {\"job_id\":\"j-1\",\"node\":\"chunk\"}\n\n";
    const DONE: &str = "event: completed\ndata: {\"job_id\":\"j-1\",\"results\":{}}\n\n";
    const KEEPALIVE: &str = ": keepalive\n\n";

    /// What the follower yielded, as words, with when.
    #[derive(Debug, PartialEq)]
    enum Seen {
        Event(String),
        Status(String),
        FellBack(&'static str),
        Completed(&'static str),
        Failed(&'static str, String),
    }

    struct Run {
        seen: Vec<(Seen, Duration)>,
        keepalives: u64,
        log: Vec<(&'static str, Duration)>,
        client: Client,
        alerts: Arc<CollectAlerts>,
    }

    async fn run(
        opens: Vec<Option<Body>>,
        statuses: Vec<Value>,
        expected: Option<Duration>,
        prepare: impl FnOnce(&Client),
    ) -> Run {
        let alerts = Arc::new(CollectAlerts::default());
        let client = client(alerts.clone());
        prepare(&client);
        let log = Log::default();
        let t0 = Instant::now();
        let source = Scripted {
            client: client.clone(),
            opens: opens.into(),
            statuses: statuses.into(),
            log: log.clone(),
            t0,
        };
        let policy = stream_policy();
        let fallback = policy.fallback.as_ref().unwrap();
        let mut progress: JobProgress<SseEvent, Value> =
            JobProgress::new(client.clone(), endpoint(), policy, fallback, source);
        if let Some(d) = expected {
            progress = progress.expecting(d);
        }
        let mut seen = Vec::new();
        while let Some(item) = progress.next().await {
            let at = t0.elapsed();
            let word = match item {
                Ok(JobUpdate::Event(e)) => Seen::Event(e.event),
                Ok(JobUpdate::Status(s)) => Seen::Status(s["status"].as_str().unwrap().into()),
                Ok(JobUpdate::FellBack(e)) => Seen::FellBack(e.class_name()),
                Ok(JobUpdate::Completed(JobDone::Event(_))) => Seen::Completed("event"),
                Ok(JobUpdate::Completed(JobDone::Status(_))) => Seen::Completed("status"),
                Err(e) => Seen::Failed(e.class_name(), e.detail().unwrap_or("").to_owned()),
            };
            seen.push((word, at));
        }
        let log = log.lock().unwrap().clone();
        Run {
            seen,
            keepalives: progress.keepalives(),
            log,
            client,
            alerts,
        }
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn fallbacks(client: &Client) -> Option<String> {
        client
            .metrics_text()
            .lines()
            .find(|l| l.starts_with("sdk_test_sse_fallback_total{stream=\"jobs\"}"))
            .map(str::to_owned)
    }

    #[tokio::test(start_paused = true)]
    async fn keepalives_longer_than_the_watchdog_keep_the_stream_live() {
        // 100 s of keepalives only, every 20 s: more than twice the 45 s watchdog.
        let body = Body(
            vec![
                (0, SUBSCRIBED),
                (20, KEEPALIVE),
                (20, KEEPALIVE),
                (20, KEEPALIVE),
                (20, KEEPALIVE),
                (20, KEEPALIVE),
                (5, NODE),
                (5, DONE),
            ],
            End::Stall,
        );
        let r = run(vec![Some(body)], vec![], None, |_| {}).await;
        assert_eq!(
            r.seen,
            [
                (Seen::Event("subscribed".into()), secs(0)),
                (Seen::Event("node_start".into()), secs(105)),
                (Seen::Completed("event"), secs(110)),
            ]
        );
        assert_eq!(r.log, [("open", secs(0))], "no poll");
        assert_eq!(r.keepalives, 5);
        assert_eq!(
            fallbacks(&r.client).as_deref(),
            Some("sdk_test_sse_fallback_total{stream=\"jobs\"} 0"),
            "no fallback counted"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_falls_back_to_polling_every_5_s_and_delivers_the_result() {
        let body = Body(vec![(0, SUBSCRIBED), (10, NODE)], End::Stall);
        let r = run(
            vec![Some(body)],
            vec![running(), running(), completed()],
            None,
            |_| {},
        )
        .await;
        assert_eq!(
            r.seen,
            [
                (Seen::Event("subscribed".into()), secs(0)),
                (Seen::Event("node_start".into()), secs(10)),
                // 45 s after the last byte.
                (Seen::FellBack("stream_stalled"), secs(55)),
                (Seen::Status("running".into()), secs(55)),
                (Seen::Status("running".into()), secs(60)),
                (Seen::Completed("status"), secs(65)),
            ]
        );
        assert_eq!(
            r.log,
            [
                ("open", secs(0)),
                ("status", secs(55)),
                ("status", secs(60)),
                ("status", secs(65)),
            ]
        );
        assert_eq!(
            fallbacks(&r.client).as_deref(),
            Some("sdk_test_sse_fallback_total{stream=\"jobs\"} 1")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_30_min_timeout_event_is_no_failure_the_job_is_polled() {
        // Keepalives every 20 s up to the ceiling, then `event: timeout`.
        let mut frames = vec![(0, SUBSCRIBED)];
        frames.extend(std::iter::repeat_n((20, KEEPALIVE), 90));
        frames.push((0, "event: timeout\ndata: {\"detail\":\"ceiling\"}\n\n"));
        let r = run(
            vec![Some(Body(frames, End::Stall))],
            vec![running(), completed()],
            None,
            |_| {},
        )
        .await;
        assert_eq!(
            r.seen,
            [
                (Seen::Event("subscribed".into()), secs(0)),
                (Seen::FellBack("stream_timeout"), secs(1800)),
                (Seen::Status("running".into()), secs(1800)),
                (Seen::Completed("status"), secs(1805)),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_event_or_a_drop_falls_back() {
        let error = Body(
            vec![
                (0, SUBSCRIBED),
                (
                    1,
                    "event: error\ndata: {\"detail\":\"relay lost redis\"}\n\n",
                ),
            ],
            End::Stall,
        );
        let r = run(vec![Some(error)], vec![completed()], None, |_| {}).await;
        assert_eq!(
            r.seen[1..],
            [
                (Seen::FellBack("stream_error"), secs(1)),
                (Seen::Completed("status"), secs(1)),
            ]
        );
        let dropped = Body(vec![(0, SUBSCRIBED), (2, "event: node_st")], End::Drop);
        let r = run(vec![Some(dropped)], vec![completed()], None, |_| {}).await;
        assert_eq!(
            r.seen[1..],
            [
                (Seen::FellBack("connection"), secs(2)),
                (Seen::Completed("status"), secs(2)),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn after_six_polls_the_stream_is_reopened_and_resynced_by_exactly_one_poll() {
        let first = Body(vec![(0, SUBSCRIBED)], End::Stall);
        let second = Body(vec![(0, SUBSCRIBED), (3, NODE), (3, DONE)], End::Stall);
        let r = run(
            vec![Some(first), Some(second)],
            vec![running(); 7],
            None,
            |_| {},
        )
        .await;
        let polls: Vec<Duration> = r
            .log
            .iter()
            .filter(|(what, _)| *what == "status")
            .map(|(_, at)| *at)
            .collect();
        // The fallback at 45 s polls at once and every 5 s; the stream is
        // reopened after the sixth, and the resync poll follows its `subscribed`.
        assert_eq!(polls, [45, 50, 55, 60, 65, 70, 70].map(secs), "{:?}", r.log);
        let opens: Vec<Duration> = r
            .log
            .iter()
            .filter(|(what, _)| *what == "open")
            .map(|(_, at)| *at)
            .collect();
        assert_eq!(opens, [secs(0), secs(70)]);
        assert_eq!(
            r.seen[r.seen.len() - 4..],
            [
                (Seen::Event("subscribed".into()), secs(70)),
                (Seen::Status("running".into()), secs(70)),
                (Seen::Event("node_start".into()), secs(73)),
                (Seen::Completed("event"), secs(76)),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn while_a_429_is_hot_polling_slows_to_10_s() {
        let r = run(
            vec![None],
            vec![running(), running(), completed()],
            None,
            |client| {
                client
                    .gate()
                    .memory()
                    .saw_429(Instant::now(), Duration::from_secs(3600))
            },
        )
        .await;
        assert_eq!(
            r.seen[0],
            (Seen::FellBack("connection"), secs(0)),
            "not opened"
        );
        let polls: Vec<Duration> = r.log[1..].iter().map(|(_, at)| *at).collect();
        assert_eq!(polls, [0, 10, 20].map(secs));
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_expected_past_the_ceiling_is_followed_by_polling_alone() {
        let r = run(
            vec![],
            vec![running(), running(), completed()],
            Some(Duration::from_secs(31 * 60)),
            |_| {},
        )
        .await;
        assert_eq!(
            r.log,
            [
                ("status", secs(0)),
                ("status", secs(5)),
                ("status", secs(10))
            ]
        );
        assert_eq!(r.seen.last(), Some(&(Seen::Completed("status"), secs(10))));
        assert_eq!(
            fallbacks(&r.client).as_deref(),
            Some("sdk_test_sse_fallback_total{stream=\"jobs\"} 0"),
            "polling by choice is no fallback"
        );

        // Within the ceiling the stream is used.
        let body = Body(vec![(0, SUBSCRIBED), (1, DONE)], End::Stall);
        let r = run(
            vec![Some(body)],
            vec![],
            Some(Duration::from_secs(30 * 60)),
            |_| {},
        )
        .await;
        assert_eq!(r.log, [("open", secs(0))]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_that_does_not_open_with_subscribed_breaks_the_contract() {
        let body = Body(vec![(0, NODE)], End::Stall);
        let r = run(vec![Some(body)], vec![], None, |_| {}).await;
        assert_eq!(
            r.seen,
            [(
                Seen::Failed(
                    "decode",
                    "the stream opened with `node_start`, not `subscribed`".into()
                ),
                secs(0)
            )]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_or_cancelled_job_ends_in_a_typed_error_with_its_reason() {
        let failed =
            "event: failed\ndata: {\"job_id\":\"j-1\",\"error\":\"node embed failed\"}\n\n";
        let body = Body(vec![(0, SUBSCRIBED), (1, failed)], End::Stall);
        let r = run(vec![Some(body)], vec![], None, |_| {}).await;
        assert_eq!(
            r.seen[1..],
            [
                (Seen::Event("failed".into()), secs(1)),
                (
                    Seen::Failed("job_failed", "node embed failed".into()),
                    secs(1)
                ),
            ]
        );
        let r = run(
            vec![None],
            vec![json!({ "status": "cancelled", "progress": 0.2 })],
            None,
            |_| {},
        )
        .await;
        assert_eq!(
            r.seen[1..],
            [
                (Seen::Status("cancelled".into()), secs(0)),
                (
                    Seen::Failed("job_failed", "the job ended cancelled".into()),
                    secs(0)
                ),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn five_fallbacks_within_10_min_raise_the_sustained_alert_once() {
        // Every stream stalls; after each fallback six polls, then a reopen
        // (and its resync poll). The fifth fallback's first poll completes.
        let opens = (0..5)
            .map(|_| Some(Body(vec![(0, SUBSCRIBED)], End::Stall)))
            .collect();
        let mut statuses = vec![running(); 4 * 6 + 4];
        statuses.push(completed());
        let r = run(opens, statuses, None, |_| {}).await;
        let fell_back: Vec<Duration> = r
            .seen
            .iter()
            .filter(|(s, _)| *s == Seen::FellBack("stream_stalled"))
            .map(|(_, at)| *at)
            .collect();
        // 45 s of silence, then 25 s of polls before the next open.
        assert_eq!(fell_back, [45, 115, 185, 255, 325].map(secs));
        assert_eq!(r.seen.last(), Some(&(Seen::Completed("status"), secs(325))));
        assert_eq!(
            r.alerts.names(),
            ["sse_fallbacks_sustained"],
            "once, at the fifth"
        );
        assert_eq!(
            fallbacks(&r.client).as_deref(),
            Some("sdk_test_sse_fallback_total{stream=\"jobs\"} 5")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_missing_subscribed_raises_contract_drift() {
        let r = run(
            vec![Some(Body(vec![(0, NODE)], End::Stall))],
            vec![],
            None,
            |_| {},
        )
        .await;
        assert_eq!(r.alerts.names(), ["contract_drift"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_stream_that_arrives_in_one_burst_reports_it_and_two_switch_jobs_to_polling() {
        // A buffering proxy: nothing for 8 s, then every event at once.
        let burst = || Body(vec![(8, SUBSCRIBED), (0, NODE), (0, DONE)], End::Stall);
        let alerts = Arc::new(CollectAlerts::default());
        let client = client(alerts.clone());
        for n in 1..=2 {
            let log = Log::default();
            let source = Scripted {
                client: client.clone(),
                opens: vec![Some(burst())].into(),
                statuses: VecDeque::new(),
                log: log.clone(),
                t0: Instant::now(),
            };
            let policy = stream_policy();
            let mut progress: JobProgress<SseEvent, Value> = JobProgress::new(
                client.clone(),
                endpoint(),
                policy,
                policy.fallback.as_ref().unwrap(),
                source,
            );
            assert!(!progress.was_buffered(), "not known before it ends");
            let mut last = None;
            while let Some(item) = progress.next().await {
                last = Some(item);
            }
            assert!(
                matches!(last, Some(Ok(JobUpdate::Completed(_)))),
                "{last:?}"
            );
            assert!(progress.was_buffered(), "stream {n}");
            assert_eq!(client.polling_only(), n == 2, "confirmed by the second");
        }
        assert_eq!(alerts.names(), ["sse_fallbacks_sustained"]);
        assert!(
            client
                .metrics_text()
                .contains("sdk_test_sse_buffered_total{stream=\"jobs\"} 2")
        );
        // A live stream, however slow, is not buffered.
        let live = Body(vec![(0, SUBSCRIBED), (8, NODE), (0, DONE)], End::Stall);
        let r = run(vec![Some(live)], vec![], None, |_| {}).await;
        assert_eq!(r.seen.last(), Some(&(Seen::Completed("event"), secs(8))));
        assert!(!r.client.polling_only());
    }

    #[test]
    fn polling_alone_only_past_the_ceiling_or_behind_a_buffering_proxy() {
        let p = stream_policy();
        assert!(!by_polling_alone(p, None, false));
        assert!(!by_polling_alone(p, Some(secs(1800)), false));
        assert!(by_polling_alone(p, Some(secs(1801)), false));
        assert!(by_polling_alone(p, None, true));
    }
}
