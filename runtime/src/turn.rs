//! A streamed turn with a stage trace (a chat answer, GRAG §6.2): typed
//! events, stages that fail open read by the runtime, and an answer that is
//! either delivered or reported lost, never asked for twice.
//!
//! Every stage the spec does not list as `fail_closed` fails open: the turn
//! goes on, is marked degraded, and so is its feature until a later turn runs
//! clean. A fail-closed stage, `event: error`, the watchdog or a drop end the
//! turn with an error whose [`Error::answer_lost`] is set. So does the
//! interactive deadline (§4.1, 180 s from the call's start, head included):
//! a turn that carries an answer is one interactive operation, and it is
//! counted in the request metrics when it ends, with the class it ended
//! with; a failure after the head is also counted per stream
//! (`sse_fallback{stream}`) and logged.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use futures_util::stream::{FusedStream, Stream};
use sdk_sse::SseEvent;
use serde_json::Value;

use crate::client::Client;
use crate::error::{Error, bounded};
use crate::events::Events;
use crate::events::StreamEvent;
use sdk_policy::policy::{OutcomeKind, StagePolicy};

/// What a turn yields.
#[derive(Debug)]
pub enum TurnUpdate<E> {
    /// An event of the turn, as sent (stage traces included).
    Event(E),
    /// A stage failed open: the answer goes on without it and may be
    /// incomplete. The feature's state is `degraded` from now on.
    Degraded(FailedStage),
}

/// A stage that failed open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedStage {
    pub stage: String,
    pub detail: Option<String>,
}

/// One streamed exchange (a chat turn, an agent session) as a [`Stream`] of
/// typed [`TurnUpdate`]s; it ends after the terminal event, or with one
/// error. Dropping it closes the stream.
pub struct Turn<E> {
    events: Events,
    degraded: Vec<FailedStage>,
    pending: Option<TurnUpdate<E>>,
    done: bool,
    /// The overall deadline of the call, when the stream carries an answer.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

// Nothing in it is pinned structurally.
impl<E> Unpin for Turn<E> {}

impl Client {
    /// Reads an opened stream as a turn (the generated chat method calls
    /// this on what [`Client::open_stream`] opened).
    pub fn turn<E: StreamEvent>(&self, events: Events) -> Turn<E> {
        let deadline = events
            .deadline
            .map(|at| Box::pin(tokio::time::sleep_until(at)));
        Turn {
            events,
            degraded: Vec::new(),
            pending: None,
            done: false,
            deadline,
        }
    }
}

/// What one stage trace event says.
#[derive(Debug, PartialEq, Eq)]
enum Stage {
    Ok,
    FailedOpen(FailedStage),
    FailedClosed(FailedStage),
}

/// Reads a trace event's data under the spec's stage rules; `None` when the
/// event is not a stage report.
fn stage(policy: &StagePolicy, event: &SseEvent, detail_cap: usize) -> Option<Stage> {
    if event.event != policy.event {
        return None;
    }
    let data: Value = serde_json::from_str(&event.data).ok()?;
    let name = data.get(policy.stage_field)?.as_str()?;
    let status = data.get(policy.status_field).and_then(Value::as_str);
    if !status.is_some_and(|s| policy.failed.contains(&s)) {
        return Some(Stage::Ok);
    }
    let failed = FailedStage {
        stage: bounded(name, detail_cap),
        detail: policy
            .detail_field
            .and_then(|f| data.get(f))
            .and_then(Value::as_str)
            .map(|d| bounded(d, detail_cap)),
    };
    Some(if policy.fail_closed.contains(&name) {
        Stage::FailedClosed(failed)
    } else {
        Stage::FailedOpen(failed)
    })
}

impl<E: StreamEvent> Turn<E> {
    /// The next update; `None` after the terminal event or the error.
    pub async fn next(&mut self) -> Option<Result<TurnUpdate<E>, Error>> {
        std::future::poll_fn(|cx| self.poll_update(cx)).await
    }

    /// Whether the turn arrived in one burst at its end (a buffering proxy,
    /// §6.4): the answer is whole, it just did not stream. Known once ended.
    pub fn was_buffered(&self) -> bool {
        self.events.was_buffered()
    }

    /// The stages that failed open so far: the answer may be incomplete.
    pub fn degraded(&self) -> &[FailedStage] {
        &self.degraded
    }

    fn client(&self) -> &Client {
        &self.events.client
    }

    fn poll_update(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<TurnUpdate<E>, Error>>> {
        if let Some(update) = self.pending.take() {
            return Poll::Ready(Some(Ok(update)));
        }
        if self.done {
            return Poll::Ready(None);
        }
        let policy = self.events.policy();
        let expired = self
            .deadline
            .as_mut()
            .is_some_and(|d| d.as_mut().poll(cx).is_ready());
        let polled = if expired {
            Poll::Ready(Some(Err(self.deadline_error())))
        } else {
            self.events.poll_event(cx)
        };
        let item = match ready!(polled) {
            None => {
                self.finish();
                return Poll::Ready(None);
            }
            Some(Err(e)) => Err(self.lost(e)),
            Some(Ok(event)) => {
                let cap = self.client().plan().policy.limits.detail;
                let stage = policy.stages.as_ref().and_then(|s| stage(s, &event, cap));
                match stage {
                    Some(Stage::FailedClosed(failed)) => {
                        let error = self
                            .client()
                            .plan()
                            .error(OutcomeKind::StreamError, self.events.endpoint)
                            .with_detail(match &failed.detail {
                                Some(d) => format!("stage {} failed: {d}", failed.stage),
                                None => format!("stage {} failed", failed.stage),
                            });
                        Err(self.lost(error))
                    }
                    stage => match E::decode(event) {
                        Ok(typed) => {
                            if let Some(Stage::FailedOpen(failed)) = stage {
                                self.fail_open(failed);
                            }
                            Ok(TurnUpdate::Event(typed))
                        }
                        Err(e) => Err(self
                            .client()
                            .plan()
                            .error(OutcomeKind::Decode, self.events.endpoint)
                            .with_detail("a turn event does not decode")
                            .with_decode_failure(&e, cap)),
                    },
                }
            }
        };
        if let Err(e) = &item {
            self.done = true;
            self.events.close();
            self.events.ended(Some(e));
        } else if self.events.is_terminated() {
            self.finish();
        }
        Poll::Ready(Some(item))
    }

    /// A stage failed open: marked on the turn and on the feature.
    fn fail_open(&mut self, failed: FailedStage) {
        if let Some(stages) = &self.events.policy().stages {
            self.client()
                .stage_failed(stages.feature, failed.stage.clone());
        }
        self.degraded.push(failed.clone());
        self.pending = Some(TurnUpdate::Degraded(failed));
    }

    /// The turn reached its end: a clean turn clears the feature's degraded state.
    fn finish(&mut self) {
        self.done = true;
        self.events.ended(None);
        if self.degraded.is_empty()
            && let Some(stages) = &self.events.policy().stages
        {
            self.client().stage_recovered(stages.feature);
        }
    }

    /// The overall deadline ran out while the turn was still streaming.
    fn deadline_error(&self) -> Error {
        let secs = self.client().plan().policy.deadline.as_secs();
        self.client()
            .plan()
            .error(OutcomeKind::Deadline, self.events.endpoint)
            .with_detail(format!(
                "the {secs} s overall deadline ended the turn, not the platform"
            ))
    }

    /// The stream ended early: for a stream that carries an answer (the
    /// spec gives it a `lost_copy`), the answer is lost.
    fn lost(&self, error: Error) -> Error {
        match self.events.policy().lost_copy {
            Some(copy) => error.with_answer_lost(Some(copy)),
            None => error,
        }
    }
}

impl<E: StreamEvent> Stream for Turn<E> {
    type Item = Result<TurnUpdate<E>, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_update(cx)
    }
}

impl<E: StreamEvent> FusedStream for Turn<E> {
    fn is_terminated(&self) -> bool {
        self.done && self.pending.is_none()
    }
}

#[cfg(test)]
mod tests {
    //! A chat turn over a scripted body, under paused time with the
    //! fixture's numbers ([`crate::testing`]: the 150 s watchdog).

    use std::io;
    use std::time::Duration;

    use bytes::Bytes;
    use futures_util::StreamExt;
    use tokio::time::Instant;

    use super::*;
    use crate::client::ClientConfig;
    use crate::testing::{CHAT_STREAM, POLICY, TENANT};
    use sdk_policy::Endpoint;
    use sdk_policy::Id;
    use sdk_policy::IdKind;

    fn endpoint() -> &'static Endpoint {
        &CHAT_STREAM
    }

    fn client() -> Client {
        let tenant = Id::parse(&POLICY.ids, IdKind::Tenant, TENANT).unwrap();
        Client::new(
            &POLICY,
            ClientConfig::new("http://127.0.0.1:9", "key", tenant),
        )
        .unwrap()
    }

    /// Frames after their delays (s), then a drop (`true`) or silence.
    fn turn(client: &Client, frames: Vec<(u64, &'static str)>, drop: bool) -> Turn<SseEvent> {
        let frames = futures_util::stream::iter(frames).then(|(after, text)| async move {
            tokio::time::sleep(Duration::from_secs(after)).await;
            Ok::<_, io::Error>(Bytes::from_static(text.as_bytes()))
        });
        let end = if drop {
            futures_util::stream::iter([Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "scripted drop",
            ))])
            .boxed()
        } else {
            futures_util::stream::pending().boxed()
        };
        let policy = &POLICY.streams[endpoint().stream.unwrap()];
        let events = Events::over(
            client.clone(),
            endpoint(),
            policy,
            frames.chain(end).boxed(),
            None,
        );
        client.turn(events)
    }

    const RETRIEVAL: &str = "event: trace\ndata: {\"stage\":\"retrieval\",\"status\":\"ok\"}\n\n";
    const RERANK_FAILED: &str = "event: trace\ndata: {\"stage\":\"rerank\",\"status\":\"failed\",\"detail\":\"reranker down\"}\n\n";
    const GENERATE_FAILED: &str = "event: trace\ndata: {\"stage\":\"generate\",\"status\":\"failed\",\"detail\":\"completion failed upstream\"}\n\n";
    const GENERATE: &str = "event: trace\ndata: {\"stage\":\"generate\",\"status\":\"ok\"}\n\n";
    const DELTA: &str = "event: delta\ndata: {\"text\":\"Alle sechs \"}\n\n";
    const DONE: &str = "event: done\ndata: {\"persisted\":true}\n\n";

    /// Every update in words, with when, and the error it ended with.
    async fn read(mut turn: Turn<SseEvent>) -> (Vec<(String, Duration)>, Option<Error>) {
        let t0 = Instant::now();
        let mut seen = Vec::new();
        while let Some(update) = turn.next().await {
            let word = match update {
                Ok(TurnUpdate::Event(e)) => e.event,
                Ok(TurnUpdate::Degraded(s)) => format!("degraded {}", s.stage),
                Err(e) => return (seen, Some(e)),
            };
            seen.push((word, t0.elapsed()));
        }
        (seen, None)
    }

    fn words(seen: &[(String, Duration)]) -> Vec<&str> {
        seen.iter().map(|(w, _)| w.as_str()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_stage_fails_open_the_turn_is_degraded_and_the_answer_arrives() {
        let client = client();
        let t = turn(
            &client,
            vec![
                (0, RETRIEVAL),
                (1, RERANK_FAILED),
                (100, GENERATE),
                (1, DELTA),
                (1, DONE),
            ],
            false,
        );
        let (seen, end) = read(t).await;
        assert!(end.is_none(), "{end:?}");
        assert_eq!(
            words(&seen),
            [
                "trace",
                "trace",
                "degraded rerank",
                "trace",
                "delta",
                "done"
            ]
        );
        let state = client.feature_state("chat").unwrap();
        assert_eq!(
            (state.state, state.stage.as_deref()),
            ("degraded", Some("rerank"))
        );

        // A clean turn afterwards clears it.
        let t = turn(
            &client,
            vec![(0, RETRIEVAL), (1, GENERATE), (1, DONE)],
            false,
        );
        assert!(read(t).await.1.is_none());
        assert_eq!(client.feature_state("chat").unwrap().state, "available");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_generate_ends_the_turn_with_the_answer_lost() {
        let client = client();
        let t = turn(&client, vec![(0, RETRIEVAL), (120, GENERATE_FAILED)], false);
        let (seen, end) = read(t).await;
        assert_eq!(words(&seen), ["trace"]);
        let e = end.expect("the turn failed");
        assert_eq!((e.row(), e.class_name()), ("T17", "stream_error"), "{e}");
        assert_eq!(
            e.detail(),
            Some("stage generate failed: completion failed upstream")
        );
        assert!(e.answer_lost());
        assert!(e.message().unwrap().contains("Send it again"), "{e:?}");
        assert_eq!(
            client.feature_state("chat").unwrap().state,
            "available",
            "fail closed is no degraded state"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn silence_of_150_s_since_the_last_event_aborts_the_turn() {
        let client = client();
        // 149 s of silence is normal (the completion is not streamed).
        let t = turn(
            &client,
            vec![(0, RETRIEVAL), (149, GENERATE), (1, DELTA)],
            false,
        );
        let t0 = Instant::now();
        let (seen, end) = read(t).await;
        assert_eq!(words(&seen), ["trace", "trace", "delta"]);
        let e = end.expect("stalled");
        assert_eq!((e.row(), e.class_name()), ("T19", "stream_stalled"), "{e}");
        assert_eq!(
            t0.elapsed(),
            Duration::from_secs(300),
            "150 s after the last event"
        );
        assert!(e.answer_lost());
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_that_arrives_in_one_burst_after_a_silence_was_buffered() {
        let alerts = std::sync::Arc::new(crate::alerts::CollectAlerts::default());
        let tenant = Id::parse(&POLICY.ids, IdKind::Tenant, TENANT).unwrap();
        let client = Client::new(
            &POLICY,
            ClientConfig::new("http://127.0.0.1:9", "key", tenant).alerts(alerts.clone()),
        )
        .unwrap();
        // Streamed as it happens: not buffered, however slow.
        let mut live = turn(
            &client,
            vec![(0, RETRIEVAL), (100, GENERATE), (0, DELTA), (0, DONE)],
            false,
        );
        while live.next().await.is_some() {}
        assert!(!live.was_buffered());
        // Everything at once after 30 s: buffered, the answer whole.
        const WHOLE: &str = "event: trace\ndata: {\"stage\":\"retrieval\",\"status\":\"ok\"}\n\n\
            event: trace\ndata: {\"stage\":\"generate\",\"status\":\"ok\"}\n\n\
            event: delta\ndata: {\"text\":\"Alle sechs Jahre.\"}\n\n\
            event: done\ndata: {}\n\n";
        for n in 1..=2 {
            let mut t = turn(&client, vec![(30, WHOLE)], false);
            let (seen, end) = {
                let mut seen = Vec::new();
                let mut end = None;
                while let Some(u) = t.next().await {
                    match u {
                        Ok(TurnUpdate::Event(e)) => seen.push(e.event),
                        Ok(other) => panic!("{other:?}"),
                        Err(e) => end = Some(e),
                    }
                }
                (seen, end)
            };
            assert!(end.is_none(), "{end:?}");
            assert_eq!(
                seen,
                ["trace", "trace", "delta", "done"],
                "the answer arrives whole"
            );
            assert!(t.was_buffered());
            // Confirmed by the second: one alert, jobs polled from now on.
            assert_eq!(client.polling_only(), n == 2);
            assert_eq!(alerts.names().len(), usize::from(n == 2));
        }
        assert_eq!(alerts.names(), ["sse_fallbacks_sustained"]);
        assert!(
            client
                .metrics_text()
                .contains("sdk_test_sse_buffered_total{stream=\"chat\"} 2")
        );
    }

    /// §4.1: the interactive deadline holds after the head too. Events
    /// every 100 s keep the 150 s watchdog quiet; the 180 s deadline (from
    /// the call's start, here the head) still ends the turn.
    #[tokio::test(start_paused = true)]
    async fn a_turn_is_held_to_the_interactive_deadline_after_its_head() {
        let client = client();
        let t0 = Instant::now();
        let frames = vec![(0, RETRIEVAL), (100, GENERATE), (100, DELTA), (100, DONE)];
        let body = futures_util::stream::iter(frames)
            .then(|(after, text)| async move {
                tokio::time::sleep(Duration::from_secs(after)).await;
                Ok::<_, io::Error>(Bytes::from_static(text.as_bytes()))
            })
            .chain(futures_util::stream::pending())
            .boxed();
        let policy = &POLICY.streams[endpoint().stream.unwrap()];
        let events = Events::over(client.clone(), endpoint(), policy, body, None).interactive(
            t0 + POLICY.deadline,
            t0,
            false,
        );
        let (seen, end) = read(client.turn(events)).await;
        assert_eq!(
            words(&seen),
            ["trace", "trace"],
            "the delta at 200 s never came"
        );
        let e = end.expect("the deadline ended it");
        assert_eq!((e.row(), e.class_name()), ("T20", "deadline"), "{e}");
        assert!(e.answer_lost(), "{e}");
        assert_eq!(
            t0.elapsed(),
            Duration::from_secs(180),
            "exactly the deadline"
        );
        let text = client.metrics_text();
        assert!(
            text.contains(r#"sdk_test_sse_fallback_total{stream="chat"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"error_class="deadline",retried="false"} 1"#),
            "{text}"
        );
        assert!(
            !text.contains(r#"error_class="ok""#),
            "a failed turn is no ok call: {text}"
        );
    }

    /// A turn that ends as it should is one `ok` call, counted at its end.
    #[tokio::test(start_paused = true)]
    async fn a_clean_interactive_turn_counts_one_ok_call_and_no_fallback() {
        let client = client();
        let t0 = Instant::now();
        let body = futures_util::stream::iter([(RETRIEVAL), (GENERATE), (DONE)])
            .map(|text| Ok::<_, io::Error>(Bytes::from_static(text.as_bytes())))
            .chain(futures_util::stream::pending())
            .boxed();
        let policy = &POLICY.streams[endpoint().stream.unwrap()];
        let events = Events::over(client.clone(), endpoint(), policy, body, None).interactive(
            t0 + POLICY.deadline,
            t0,
            false,
        );
        let (_, end) = read(client.turn(events)).await;
        assert!(end.is_none(), "{end:?}");
        let text = client.metrics_text();
        assert!(
            text.contains(r#"error_class="ok",retried="false"} 1"#),
            "{text}"
        );
        // Every stream's fallback series is there from the start, at 0.
        let fallbacks: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("sse_fallback_total{"))
            .collect();
        assert!(!fallbacks.is_empty(), "{text}");
        assert!(fallbacks.iter().all(|l| l.ends_with(" 0")), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_drop_mid_answer_or_an_error_event_loses_the_answer() {
        let client = client();
        let (seen, end) = read(turn(
            &client,
            vec![(0, RETRIEVAL), (1, GENERATE), (1, DELTA)],
            true,
        ))
        .await;
        assert_eq!(words(&seen), ["trace", "trace", "delta"]);
        let e = end.expect("dropped");
        assert_eq!(e.class_name(), "connection", "{e}");
        assert!(e.answer_lost());

        let error = "event: error\ndata: {\"detail\":\"llm unavailable\"}\n\n";
        let (_, end) = read(turn(&client, vec![(0, RETRIEVAL), (1, error)], false)).await;
        let e = end.expect("an error event");
        assert_eq!(
            (e.class_name(), e.detail()),
            ("stream_error", Some("llm unavailable"))
        );
        assert!(e.answer_lost());
    }
}
