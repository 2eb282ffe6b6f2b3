//! An opened SSE route: events, with the stream's watchdog from the spec.

use crate::Endpoint;
use crate::call::Call;
use crate::client::Client;
use crate::error::{Error, ErrorKind};
use crate::policy::{OutcomeKind, StreamPolicy};
use crate::sse::{EventStream, SseEvent, StreamFailure};

/// The events of one stream. `error` and `timeout` events end it as typed
/// errors (T17, T18); silence past the watchdog is T19.
pub struct Events {
    client: Client,
    endpoint: &'static Endpoint,
    policy: &'static StreamPolicy,
    stream: EventStream,
    done: bool,
}

impl Client {
    /// Opens an SSE route through the same admission and headers as any call.
    pub async fn open_stream(&self, call: Call<'_>) -> Result<Events, Error> {
        let endpoint = call.endpoint;
        let Some(policy) = endpoint
            .stream
            .and_then(|i| self.shared.policy.streams.get(i))
        else {
            return Err(self
                .error(
                    ErrorKind::InvalidScope,
                    self.row(OutcomeKind::InvalidScope),
                    &call,
                )
                .with_detail(format!("{} is not a stream route", endpoint.path)));
        };
        let (reply, response) = self.run(&call, true).await?;
        // A 2xx keeps its body for the stream; a 409 answer (a create route) has none.
        let Some(response) = response else {
            return Err(self
                .error(ErrorKind::Decode, self.row(OutcomeKind::Decode), &call)
                .with_status(
                    reply.status(),
                    Some("the answer has no event stream".into()),
                ));
        };
        // The opening counts as the call; the stream's own failures count as fallbacks.
        reply.empty()?;
        Ok(Events {
            client: self.clone(),
            endpoint,
            policy,
            stream: EventStream::new(Box::pin(response.bytes_stream()), policy.watchdog),
            done: false,
        })
    }
}

impl Events {
    /// The stream's contract (watchdog, ceiling, fallback, resend rule).
    pub fn policy(&self) -> &'static StreamPolicy {
        self.policy
    }

    /// Keepalive comments seen so far.
    pub fn keepalives(&self) -> u64 {
        self.stream.keepalives()
    }

    /// The next event; `None` once the stream ended cleanly.
    pub async fn next(&mut self) -> Option<Result<SseEvent, Error>> {
        if self.done {
            return None;
        }
        let item = self.stream.next().await;
        let result = match item {
            None => {
                self.done = true;
                return None;
            }
            Some(Ok(event)) => match event.event.as_str() {
                "error" => Err(self
                    .error(OutcomeKind::StreamError, ErrorKind::Stream)
                    .with_detail(detail_of(&event.data))),
                "timeout" => Err(self
                    .error(OutcomeKind::StreamTimeout, ErrorKind::Stream)
                    .with_detail(detail_of(&event.data))),
                _ => Ok(event),
            },
            Some(Err(StreamFailure::Stalled { silent_for })) => Err(self
                .error(OutcomeKind::StreamStalled, ErrorKind::Stream)
                .with_detail(format!("no byte for {} s", silent_for.as_secs()))),
            Some(Err(StreamFailure::Dropped { detail })) => Err(self
                .error(OutcomeKind::Connection, ErrorKind::Connection)
                .with_detail(detail)),
            Some(Err(StreamFailure::Malformed(e))) => Err(self
                .error(OutcomeKind::Decode, ErrorKind::Decode)
                .with_source(e)),
        };
        match &result {
            Ok(event) => self.done = self.policy.terminal_events.contains(&event.event.as_str()),
            Err(error) => {
                self.done = true;
                // Each of these sends the caller to its fallback (polling, error state).
                if matches!(error.kind(), ErrorKind::Stream | ErrorKind::Connection) {
                    self.client.shared.metrics.sse_fallback(self.policy.name);
                }
            }
        }
        Some(result)
    }

    fn error(&self, outcome: OutcomeKind, kind: ErrorKind) -> Error {
        self.client
            .classified(kind, self.client.row(outcome), self.endpoint)
    }
}

/// The `detail` of a `{"detail": "..."}` frame, else the data as sent.
fn detail_of(data: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(data) {
        Ok(serde_json::Value::Object(map)) => match map.get("detail") {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => data.to_owned(),
        },
        _ => data.to_owned(),
    }
}
