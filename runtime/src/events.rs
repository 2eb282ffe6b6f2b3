//! An opened SSE route: events, with the stream's watchdog from the spec.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures_util::stream::{FusedStream, Stream, StreamExt};
use sdk_sse::{EventStream, SseEvent, SseParser, StreamFailure};
use tokio::time::Instant;

use crate::call::Call;
use crate::client::Client;
use crate::error::bounded;
use crate::error::{Detail, Error};
use crate::pipeline::StreamSlots;
use sdk_policy::Endpoint;
use sdk_policy::policy::{BufferingRule, OutcomeKind, StreamPolicy};

/// The events of one stream. Its policy's `error_event` and `timeout_event`
/// end it as typed errors (`stream_error`, `stream_timeout`); silence past
/// the watchdog is `stream_stalled`. It does not recover
/// on its own: a job stream's fallback to polling is [`crate::follow::JobProgress`].
///
/// Read with [`Events::next`] or as a [`Stream`]; either way the throttle
/// slots are given back when it ends (a terminal event, an error, a clean end)
/// or is dropped.
pub struct Events {
    pub(crate) client: Client,
    pub(crate) endpoint: &'static Endpoint,
    policy: &'static StreamPolicy,
    stream: EventStream,
    done: bool,
    /// A stream is a request (§8): it holds its throttle slots until it ends.
    slots: Option<StreamSlots>,
    /// When the stream opened and when its events arrived, to tell a
    /// buffering proxy (§6.4).
    arrivals: Arrivals,
    buffered: bool,
    /// The request id the head was answered under: stream errors carry it.
    request_id: Option<String>,
    /// A stream that carries an answer (a chat turn) is one interactive
    /// operation: it ends by the call's overall deadline ([`crate::turn::Turn`]).
    pub(crate) deadline: Option<Instant>,
    /// Such a call is counted when it ends: its start and whether retried.
    deferred: Option<(Instant, bool)>,
}

/// When a stream's request was sent, and when its first and last events arrived.
#[derive(Debug, Clone, Copy)]
struct Arrivals {
    /// When the request went out (for a stream built over a body alone: when it was built).
    opened: Instant,
    first: Option<Instant>,
    last: Option<Instant>,
    events: u32,
}

impl Arrivals {
    fn new() -> Self {
        Arrivals {
            opened: Instant::now(),
            first: None,
            last: None,
            events: 0,
        }
    }

    fn event(&mut self, at: Instant) {
        self.first.get_or_insert(at);
        self.last = Some(at);
        self.events = self.events.saturating_add(1);
    }

    /// Every event came in one burst after a silence: a proxy held the stream.
    fn buffered(&self, rule: &BufferingRule) -> bool {
        match (self.first, self.last) {
            (Some(first), Some(last)) => {
                self.events >= rule.min_events
                    && last.duration_since(first) <= rule.burst
                    && first.duration_since(self.opened) >= rule.silent_for
            }
            _ => false,
        }
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        // Let go by its caller before its end: no failure was seen.
        self.ended(None);
        self.release();
    }
}

/// An event type a generated crate decodes from a stream's events: one
/// variant per typed event name, the rest passed through as sent.
pub trait StreamEvent: Sized + Send + 'static {
    fn decode(event: SseEvent) -> Result<Self, serde_json::Error>;
}

impl StreamEvent for SseEvent {
    fn decode(event: SseEvent) -> Result<Self, serde_json::Error> {
        Ok(event)
    }
}

impl Client {
    /// Opens an SSE route through the same admission and headers as any call.
    pub async fn open_stream(&self, call: Call<'_>) -> Result<Events, Error> {
        Events::open(self, call).await
    }
}

impl Events {
    /// `client`'s stream of a stream route's call, opened through the
    /// pipeline, with the route's watchdog and, for a stream that carries an
    /// answer, the call's deadline.
    async fn open(client: &Client, call: Call<'_>) -> Result<Events, Error> {
        let endpoint = call.endpoint;
        let Some(policy) = endpoint.stream.map(|i| &client.plan().policy.streams[i]) else {
            let reason = format!("{} is not a stream route", endpoint.path);
            return Err(client.refused(endpoint, reason));
        };
        let opened = crate::pipeline::open(&client.parts, &client.caller, &call).await?;
        let (started, reply, response, slots) =
            (opened.started, opened.reply, opened.response, opened.slots);
        // Built first: from here on, dropping it gives the slots back.
        let mut events = Events::over(
            client.clone(),
            endpoint,
            policy,
            Box::pin(response.bytes_stream()),
            Some(slots),
        );
        events.request_id = Some(reply.request_id().to_owned());
        // A buffering proxy holds the head as well as the events: the
        // silence counts from when the request went out, not from the head.
        events.arrivals.opened = opened.sent;
        // A stream that carries an answer (a chat turn) is one interactive
        // call, head to end: held to the overall deadline and counted when it
        // ends. Any other stream's opening counts as the call; its own
        // failures count as fallbacks to polling.
        if policy.lost_copy.is_some() {
            let deadline = crate::clock::after(started, client.plan().policy.deadline);
            let (started, retried) = reply.opened();
            Ok(events.interactive(deadline, started, retried))
        } else {
            reply.empty()?;
            Ok(events)
        }
    }
}

impl Events {
    /// The events of `body`, an opened response of `endpoint`, with the
    /// policy's caps and watchdog.
    pub(crate) fn over<B, E>(
        client: Client,
        endpoint: &'static Endpoint,
        policy: &'static StreamPolicy,
        body: B,
        slots: Option<StreamSlots>,
    ) -> Events
    where
        B: Stream<Item = Result<bytes::Bytes, E>> + Send + Unpin + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        let limits = &client.plan().policy.limits;
        let parser = SseParser::with_limits(limits.sse_line, limits.sse_event);
        Events {
            stream: EventStream::with_parser(body, policy.watchdog, parser),
            client,
            endpoint,
            policy,
            done: false,
            slots,
            arrivals: Arrivals::new(),
            buffered: false,
            request_id: None,
            deadline: None,
            deferred: None,
        }
    }

    /// The stream of an interactive call whose answer it carries: held to
    /// `deadline`, and counted in the request metrics when it ends, with
    /// the class it ended with.
    pub(crate) fn interactive(
        mut self,
        deadline: Instant,
        started: Instant,
        retried: bool,
    ) -> Self {
        self.deadline = Some(deadline);
        self.deferred = Some((started, retried));
        self
    }

    /// The call of an interactive stream ended: `failure` is its error, or
    /// `None` for its end (or its caller letting it go). Counted once; a
    /// failure is also counted per stream (`sse_fallback`), logged, and
    /// feeds the sustained-fallbacks alert.
    pub(crate) fn ended(&mut self, failure: Option<&Error>) {
        let Some((started, retried)) = self.deferred.take() else {
            return;
        };
        let class = failure.map_or("ok", Error::class_name);
        self.client
            .recorder()
            .count_call(self.endpoint, class, retried, started);
        if let Some(error) = failure {
            let client = &self.client;
            client
                .plan()
                .policy
                .log_lines
                .stream_failed(&sdk_policy::log::StreamFailedLine {
                    stream: self.policy.name,
                    operation: self.endpoint.operation,
                    row: error.row(),
                    error_class: error.class_name(),
                    request_id: self.request_id.as_deref(),
                    tenant: client.tenant().as_str(),
                    after_ms: started.elapsed().as_millis() as u64,
                });
            client.recorder().stream_fell_back(self.policy.name, error);
        }
    }

    /// The stream's contract (watchdog, ceiling, fallback, resend rule).
    pub fn policy(&self) -> &'static StreamPolicy {
        self.policy
    }

    /// Keepalive comments seen so far.
    pub fn keepalives(&self) -> u64 {
        self.stream.keepalives()
    }

    /// The last event ID string of the stream, `None` when empty (see
    /// [`EventStream::last_event_id`]).
    pub fn last_event_id(&self) -> Option<&str> {
        self.stream.last_event_id()
    }

    /// The reconnection time the server asked for with `retry:`.
    pub fn retry(&self) -> Option<Duration> {
        self.stream.retry()
    }

    /// The next event; `None` once the stream ended cleanly.
    pub async fn next(&mut self) -> Option<Result<SseEvent, Error>> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    pub(crate) fn poll_event(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<SseEvent, Error>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let item = ready!(self.stream.poll_next_unpin(cx));
        let result = match item {
            // A clean end before the contract's terminal event is a drop: the
            // job is still running (poll it), the chat answer likely was not
            // persisted (offer a resend). Never a normal end.
            None if self.policy.ends_with_terminal => Err(self
                .error(OutcomeKind::Connection)
                .with_detail("the stream ended before its terminal event")),
            None => {
                self.judge_arrivals();
                self.end();
                return Poll::Ready(None);
            }
            Some(Ok(event)) => {
                let name = event.event.as_str();
                if name == self.policy.error_event {
                    Err(self
                        .error(OutcomeKind::StreamError)
                        .with_server_detail(Some(self.detail_of(&event.data))))
                } else if name == self.policy.timeout_event {
                    Err(self
                        .error(OutcomeKind::StreamTimeout)
                        .with_server_detail(Some(self.detail_of(&event.data))))
                } else {
                    Ok(event)
                }
            }
            Some(Err(StreamFailure::Stalled { silent_for })) => Err(self
                .error(OutcomeKind::StreamStalled)
                .with_detail(format!("no byte for {:.1} s", silent_for.as_secs_f64()))),
            Some(Err(StreamFailure::Dropped { detail })) => Err(self
                .error(OutcomeKind::Connection)
                .with_detail(bounded(&detail, self.client.plan().policy.limits.detail))),
            Some(Err(StreamFailure::Malformed(e))) => {
                Err(self.error(OutcomeKind::Decode).with_source(e))
            }
        };
        match &result {
            Ok(event) => {
                if let Some(at) = self.stream.last_arrival() {
                    self.arrivals.event(at);
                }
                if self.policy.terminal_events.contains(&event.event.as_str()) {
                    self.judge_arrivals();
                    self.end();
                }
            }
            Err(_) => self.end(),
        }
        Poll::Ready(Some(result))
    }

    /// Whether the stream arrived in one burst at its end: a proxy buffered
    /// it (spec `buffering`). Known once it ended.
    pub fn was_buffered(&self) -> bool {
        self.buffered
    }

    /// The stream ended as it should: did it come in one burst?
    fn judge_arrivals(&mut self) {
        if let Some(rule) = &self.client.plan().policy.buffering
            && self.arrivals.buffered(rule)
        {
            self.buffered = true;
            self.client
                .recorder()
                .stream_buffered(self.policy.name, self.endpoint, rule);
        }
    }

    /// Closes the stream before its end (the body is dropped with it later).
    pub(crate) fn close(&mut self) {
        self.end();
    }

    /// The stream is over: its throttle slots are free for the next request.
    fn end(&mut self) {
        self.done = true;
        self.release();
    }

    fn release(&mut self) {
        if let Some(slots) = self.slots.take() {
            slots.give_back(&self.client.gate().throttle);
        }
    }

    /// The `detail` of a `{"detail": "..."}` frame, cut to the policy's
    /// detail cap; any other data is withheld behind its length and sha256.
    fn detail_of(&self, data: &str) -> Detail {
        let max = self.client.plan().policy.limits.detail;
        let detail = match serde_json::from_str::<serde_json::Value>(data) {
            Ok(serde_json::Value::Object(mut map)) => map.remove("detail"),
            _ => None,
        };
        match detail {
            Some(serde_json::Value::String(s)) => Detail::Shown(bounded(&s, max)),
            Some(other) => Detail::Shown(bounded(
                &crate::pipeline::operator_view(other).to_string(),
                max,
            )),
            None => Detail::withheld("an error event's data", data.as_bytes(), max),
        }
    }

    fn error(&self, outcome: OutcomeKind) -> Error {
        let error = self.client.plan().error(outcome, self.endpoint);
        match &self.request_id {
            Some(id) => error.with_request_id(id.clone()),
            None => error,
        }
    }
}

impl Stream for Events {
    type Item = Result<SseEvent, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_event(cx)
    }
}

impl FusedStream for Events {
    fn is_terminated(&self) -> bool {
        self.done
    }
}
