//! [`EventStream`]: an SSE body read through the parser, with the no-byte
//! watchdog the stream policy asks for.

use std::collections::VecDeque;
use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{BoxStream, FusedStream, Stream, StreamExt};
use tokio::time::{Instant, Sleep};

use crate::parser::{SseError, SseEvent, SseParser};

/// Why an [`EventStream`] ended abnormally. All are terminal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamFailure {
    /// No byte for the whole watchdog: close and fall back to polling
    /// (GRAG §6.1) or show the chat error state (§6.2). `silent_for` is the
    /// time since the last byte (or since the stream was created).
    #[error("event stream stalled: no bytes for {silent_for:?}")]
    Stalled { silent_for: Duration },
    /// The body ended mid-event or the transport failed mid-body; `detail`
    /// carries the transport error and its sources.
    #[error("event stream dropped: {detail}")]
    Dropped { detail: String },
    /// The bytes are not a valid event stream.
    #[error("malformed event stream: {0}")]
    Malformed(#[source] SseError),
}

type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// An SSE response body with a no-byte watchdog.
///
/// Events that arrived before a failure are delivered first, then the failure
/// once, then `None`; the body is dropped as soon as the failure is known so
/// the connection is released. Read it with [`EventStream::next`] or as a
/// [`Stream`].
pub struct EventStream {
    body: Option<BoxStream<'static, Result<Bytes, BoxError>>>,
    parser: SseParser,
    watchdog: Duration,
    last_byte: Instant,
    /// When the caller started waiting for the next item; the watchdog never
    /// counts time the caller spent elsewhere.
    waiting_since: Option<Instant>,
    /// Made on the first wait (a timer needs the runtime), then reset.
    timer: Option<Pin<Box<Sleep>>>,
    ready: VecDeque<SseEvent>,
    /// When the chunk that completed each of `ready` arrived.
    arrived: VecDeque<Instant>,
    /// When the last event returned arrived.
    last_arrival: Option<Instant>,
    failure: Option<StreamFailure>,
    last_event_id: Option<String>,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("open", &self.body.is_some())
            .field("watchdog", &self.watchdog)
            .field("ready", &self.ready.len())
            .field("keepalives", &self.keepalives())
            .field("last_event_id", &self.last_event_id)
            .finish_non_exhaustive()
    }
}

impl EventStream {
    /// Wraps a body (e.g. `reqwest::Response::bytes_stream()`); `watchdog` is
    /// the stream policy's no-byte limit.
    pub fn new<S, E>(body: S, watchdog: Duration) -> Self
    where
        S: Stream<Item = Result<Bytes, E>> + Send + Unpin + 'static,
        E: StdError + Send + Sync + 'static,
    {
        Self::with_parser(body, watchdog, SseParser::new())
    }

    /// Like [`EventStream::new`], with the parser's caps given.
    pub fn with_parser<S, E>(body: S, watchdog: Duration, parser: SseParser) -> Self
    where
        S: Stream<Item = Result<Bytes, E>> + Send + Unpin + 'static,
        E: StdError + Send + Sync + 'static,
    {
        Self {
            body: Some(body.map(|r| r.map_err(BoxError::from)).boxed()),
            parser,
            watchdog,
            last_byte: Instant::now(),
            waiting_since: None,
            timer: None,
            ready: VecDeque::new(),
            arrived: VecDeque::new(),
            last_arrival: None,
            failure: None,
            last_event_id: None,
        }
    }

    /// The next event; `None` once the body ended at an event boundary (or
    /// after a failure was returned).
    ///
    /// The watchdog counts only time spent waiting here: a caller busy between
    /// calls cannot observe bytes, so its delay is not blamed on the server.
    pub async fn next(&mut self) -> Option<Result<SseEvent, StreamFailure>> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    /// Comments seen so far (keepalives, for logs and metrics).
    pub fn keepalives(&self) -> u64 {
        self.parser.comments()
    }

    /// The last event ID string as of the items returned so far: that of the
    /// last event, or of an `id:`-only block read after it. `None` when empty;
    /// a resumed request must then send no `Last-Event-ID` (nothing resumes
    /// streams today: job progress resyncs by polling, chat is never re-sent).
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_event_id.as_deref()
    }

    /// When the last event returned arrived: the chunk that completed it,
    /// however late the caller read it.
    pub fn last_arrival(&self) -> Option<Instant> {
        self.last_arrival
    }

    /// The reconnection time the server asked for (`retry:`), as of the bytes
    /// read so far.
    pub fn retry(&self) -> Option<Duration> {
        self.parser.retry()
    }

    fn poll_event(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<SseEvent, StreamFailure>>> {
        let waiting_since = *self.waiting_since.get_or_insert_with(Instant::now);
        let item = loop {
            if let Some(event) = self.ready.pop_front() {
                self.last_arrival = self.arrived.pop_front();
                if self.ready.is_empty() {
                    self.sync_last_event_id();
                } else {
                    self.last_event_id.clone_from(&event.id);
                }
                break Some(Ok(event));
            }
            if let Some(failure) = self.failure.take() {
                break Some(Err(failure));
            }
            let Some(body) = self.body.as_mut() else {
                break None;
            };
            match body.poll_next_unpin(cx) {
                Poll::Pending => {
                    let deadline = self.last_byte.max(waiting_since) + self.watchdog;
                    let timer = self
                        .timer
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                    if timer.deadline() != deadline {
                        timer.as_mut().reset(deadline);
                    }
                    if timer.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.fail(StreamFailure::Stalled {
                        silent_for: self.last_byte.elapsed(),
                    });
                }
                Poll::Ready(None) => match self.parser.finish() {
                    Ok(()) => self.body = None,
                    Err(SseError::Truncated) => self.fail(StreamFailure::Dropped {
                        detail: "body ended mid-event".to_owned(),
                    }),
                    Err(e) => self.fail(StreamFailure::Malformed(e)),
                },
                Poll::Ready(Some(Err(e))) => self.fail(StreamFailure::Dropped {
                    detail: error_chain(&*e),
                }),
                Poll::Ready(Some(Ok(chunk))) => {
                    // An empty chunk carries no byte and proves nothing.
                    if chunk.is_empty() {
                        continue;
                    }
                    self.last_byte = Instant::now();
                    let parsed = self.parser.push_events(&chunk, &mut self.ready);
                    let stamped = self.ready.len() - self.arrived.len();
                    self.arrived
                        .extend(std::iter::repeat_n(self.last_byte, stamped));
                    if self.ready.is_empty() {
                        self.sync_last_event_id();
                    }
                    if let Err(e) = parsed {
                        self.fail(StreamFailure::Malformed(e));
                    }
                }
            }
        };
        self.waiting_since = None;
        Poll::Ready(item)
    }

    /// Every event parsed was returned: the parser's ID is the caller's.
    fn sync_last_event_id(&mut self) {
        let id = self.parser.last_event_id();
        if self.last_event_id.as_deref() != id {
            self.last_event_id = id.map(str::to_owned);
        }
    }

    fn fail(&mut self, failure: StreamFailure) {
        self.body = None;
        self.timer = None;
        self.failure = Some(failure);
    }
}

impl Stream for EventStream {
    type Item = Result<SseEvent, StreamFailure>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_event(cx)
    }
}

impl FusedStream for EventStream {
    fn is_terminated(&self) -> bool {
        self.body.is_none() && self.ready.is_empty() && self.failure.is_none()
    }
}

/// `error: source: source…`, for people: transport errors often hide the
/// useful part (e.g. "connection reset") in their sources.
pub fn error_chain(e: &dyn StdError) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DEFAULT_EVENT;

    use std::io;
    use tokio::sync::mpsc;

    type Tx = mpsc::UnboundedSender<Result<Bytes, io::Error>>;

    const WATCHDOG: Duration = Duration::from_secs(45);

    fn channel_stream(watchdog: Duration) -> (Tx, EventStream) {
        channel_stream_with(watchdog, SseParser::new())
    }

    fn channel_stream_with(watchdog: Duration, parser: SseParser) -> (Tx, EventStream) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let body = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
        (tx, EventStream::with_parser(body, watchdog, parser))
    }

    fn send(tx: &Tx, text: &str) {
        tx.send(Ok(Bytes::copy_from_slice(text.as_bytes())))
            .unwrap();
    }

    fn data(result: Option<Result<SseEvent, StreamFailure>>) -> String {
        result.expect("an item").expect("an event").data
    }

    #[tokio::test(start_paused = true)]
    async fn sse_stream_stall_detected_after_exactly_the_watchdog() {
        let (tx, mut stream) = channel_stream(WATCHDOG);
        let start = Instant::now();
        assert_eq!(
            stream.next().await,
            Some(Err(StreamFailure::Stalled {
                silent_for: WATCHDOG
            }))
        );
        assert_eq!(start.elapsed(), WATCHDOG);
        assert_eq!(stream.next().await, None);
        // The body was dropped on failure: the connection is released.
        assert!(tx.is_closed());
    }

    #[tokio::test(start_paused = true)]
    async fn sse_stream_stall_measured_from_last_byte() {
        let (tx, mut stream) = channel_stream(WATCHDOG);
        let sender = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            send(&tx, "data: par");
            tokio::time::sleep(Duration::from_secs(30)).await;
            // Empty chunks carry no byte and must not reset the watchdog.
            tx.send(Ok(Bytes::new())).unwrap();
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(tx);
        });
        let start = Instant::now();
        assert_eq!(
            stream.next().await,
            Some(Err(StreamFailure::Stalled {
                silent_for: WATCHDOG
            }))
        );
        assert_eq!(start.elapsed(), Duration::from_secs(30) + WATCHDOG);
        sender.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn sse_stream_keepalives_reset_the_watchdog() {
        let (tx, mut stream) = channel_stream(WATCHDOG);
        let sender = tokio::spawn(async move {
            for _ in 0..15 {
                tokio::time::sleep(Duration::from_secs(20)).await;
                send(&tx, ": keepalive\n\n");
            }
            send(&tx, "event: completed\ndata: done\n\n");
        });
        let start = Instant::now();
        let event = stream.next().await.unwrap().unwrap();
        assert_eq!(
            (event.event.as_str(), event.data.as_str()),
            ("completed", "done")
        );
        assert_eq!(start.elapsed(), Duration::from_secs(5 * 60));
        assert_eq!(stream.keepalives(), 15);
        sender.await.unwrap();
        assert_eq!(stream.next().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn sse_stream_body_dropped_mid_event() {
        let (tx, mut stream) = channel_stream(WATCHDOG);
        send(&tx, "id: 1\ndata: first\n\nid: 2\ndata: half of the ans");
        drop(tx);
        assert_eq!(data(stream.next().await), "first");
        assert_eq!(
            stream.next().await,
            Some(Err(StreamFailure::Dropped {
                detail: "body ended mid-event".to_owned()
            }))
        );
        assert_eq!(stream.next().await, None);
        assert_eq!(stream.last_event_id(), Some("1"));
    }

    #[tokio::test(start_paused = true)]
    async fn sse_stream_transport_error_is_dropped_with_its_text() {
        let (tx, mut stream) = channel_stream(WATCHDOG);
        send(&tx, "data: first\n\n");
        tx.send(Err(io::Error::new(
            io::ErrorKind::ConnectionReset,
            "connection reset by peer",
        )))
        .unwrap();
        assert_eq!(data(stream.next().await), "first");
        match stream.next().await {
            Some(Err(StreamFailure::Dropped { detail })) => {
                assert!(detail.contains("connection reset by peer"), "{detail}");
            }
            other => panic!("expected Dropped, got {other:?}"),
        }
        assert_eq!(stream.next().await, None);
        assert!(tx.is_closed());
    }

    #[tokio::test(start_paused = true)]
    async fn sse_stream_buffered_until_end_yields_every_event_in_order() {
        let (tx, mut stream) = channel_stream(WATCHDOG);
        let names = ["subscribed", "node_start", "node_complete", "completed"];
        let body: String = names
            .iter()
            .enumerate()
            .map(|(i, name)| format!(": keepalive\nid: {i}\nevent: {name}\ndata: {i}\n\n"))
            .collect();
        let sender = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(40)).await;
            send(&tx, &body);
        });
        for (i, name) in names.iter().enumerate() {
            let event = stream.next().await.unwrap().unwrap();
            assert_eq!(event.event, *name);
            assert_eq!(event.data, i.to_string());
            assert_eq!(stream.last_event_id(), Some(&*i.to_string()));
        }
        assert_eq!(stream.next().await, None);
        assert_eq!(stream.keepalives(), names.len() as u64);
        sender.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn sse_stream_malformed_after_valid_events() {
        let (tx, mut stream) = channel_stream_with(WATCHDOG, SseParser::with_limits(64, 64));
        // Invalid UTF-8 is no failure…
        send(&tx, "data: ok\n\n: \u{0}");
        tx.send(Ok(Bytes::from_static(b"\xFF\n\ndata: "))).unwrap();
        // …a line past its cap is.
        send(&tx, &"x".repeat(100));
        assert_eq!(data(stream.next().await), "ok");
        assert_eq!(
            stream.next().await,
            Some(Err(StreamFailure::Malformed(SseError::LineTooLong {
                limit: 64
            })))
        );
        assert_eq!(stream.next().await, None);
        assert_eq!(stream.keepalives(), 1);
        assert!(tx.is_closed());
    }

    #[tokio::test(start_paused = true)]
    async fn sse_stream_last_event_id_and_retry_follow_id_only_blocks() {
        let (tx, mut stream) = channel_stream(WATCHDOG);
        send(
            &tx,
            "id: 1\ndata: a\n\nid: 2\ndata: b\n\nid: 3\nretry: 2500\n\n",
        );
        assert_eq!(data(stream.next().await), "a");
        // Event b is still queued: the ID is a's, not the parser's 3.
        assert_eq!(stream.last_event_id(), Some("1"));
        assert_eq!(data(stream.next().await), "b");
        // Nothing queued: the id-only block after b counts.
        assert_eq!(stream.last_event_id(), Some("3"));
        assert_eq!(stream.retry(), Some(Duration::from_millis(2500)));
        // A block that carries only an empty `id:` empties it.
        send(&tx, "id\n\n");
        send(&tx, "data: c\n\n");
        assert_eq!(
            stream.next().await.unwrap().unwrap(),
            SseEvent {
                event: DEFAULT_EVENT.to_owned(),
                data: "c".to_owned(),
                id: None,
                retry: None,
            }
        );
        assert_eq!(stream.last_event_id(), None);
        assert_eq!(stream.retry(), Some(Duration::from_millis(2500)));
    }

    #[tokio::test(start_paused = true)]
    async fn sse_stream_is_a_futures_stream_ending_after_its_failure() {
        let (tx, stream) = channel_stream(WATCHDOG);
        send(&tx, "data: 1\n\ndata: 2\n\ndata: 3");
        drop(tx);
        let mut stream = stream;
        assert!(!stream.is_terminated());
        let items: Vec<_> = (&mut stream).collect().await;
        assert_eq!(
            items,
            vec![
                Ok(SseEvent {
                    event: DEFAULT_EVENT.to_owned(),
                    data: "1".to_owned(),
                    id: None,
                    retry: None,
                }),
                Ok(SseEvent {
                    event: DEFAULT_EVENT.to_owned(),
                    data: "2".to_owned(),
                    id: None,
                    retry: None,
                }),
                Err(StreamFailure::Dropped {
                    detail: "body ended mid-event".to_owned()
                }),
            ]
        );
        assert!(stream.is_terminated());
    }
}
