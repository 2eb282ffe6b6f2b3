//! Writing `text/event-stream` bodies, with the SSE faults applied on the way
//! out (stall, drop mid-event, `event: error`, proxy buffering, a clean end
//! before the terminal event, sse-starlette's CRLF lines and pings).

use std::io;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::faults::Fault;

type Chunk = Result<Bytes, io::Error>;

/// A body fed through a channel: the producer task writes, hyper reads. A
/// dropped connection closes the channel, which ends the producer.
pub(crate) fn channel_body(capacity: usize) -> (mpsc::Sender<Chunk>, Body) {
    let (tx, rx) = mpsc::channel::<Chunk>(capacity);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    (tx, Body::from_stream(stream))
}

/// The producer side of one SSE response.
pub(crate) struct SseOut {
    tx: mpsc::Sender<Chunk>,
    fault: Option<Fault>,
    events: u32,
    buffer: Option<Vec<u8>>,
    shutdown: watch::Receiver<bool>,
    stopped: bool,
    /// Lines end in CRLF (sse-starlette) instead of LF.
    crlf: bool,
    /// The ping task of an sse-starlette stream; it holds a sender, so it
    /// must end with the producer for the body to end.
    pinger: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for SseOut {
    fn drop(&mut self) {
        if let Some(pinger) = self.pinger.take() {
            pinger.abort();
        }
    }
}

/// A 200 `text/event-stream` response and the writer feeding it.
pub(crate) fn sse_response(
    shutdown: watch::Receiver<bool>,
    fault: Option<Fault>,
) -> (SseOut, Response) {
    let (tx, body) = channel_body(16);
    let buffered = matches!(fault, Some(Fault::SseBuffered));
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    let pinger = match fault {
        Some(Fault::SseStarlette { ping_ms }) => Some(tokio::spawn(ping(
            tx.clone(),
            Duration::from_millis(ping_ms.max(1)),
        ))),
        _ => None,
    };
    let crlf = pinger.is_some();
    let out = SseOut {
        tx,
        fault,
        events: 0,
        buffer: buffered.then(Vec::new),
        shutdown,
        stopped: false,
        crlf,
        pinger,
    };
    (out, response)
}

/// sse-starlette's ping: `: ping - <date>`, CRLF-terminated, once at the
/// start and then every `every`, each its own chunk (so never inside an event).
async fn ping(tx: mpsc::Sender<Chunk>, every: Duration) {
    loop {
        let now = httpdate::fmt_http_date(std::time::SystemTime::now());
        let line = format!(": ping - {now}\r\n\r\n");
        if tx.send(Ok(Bytes::from(line))).await.is_err() {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = tx.closed() => return,
        }
    }
}

/// One event as it goes on the wire. Data is JSON, so it is one line.
pub(crate) fn frame(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// `text` with every LF turned into CRLF, as sse-starlette ends its lines.
fn crlf(text: String) -> String {
    text.replace('\n', "\r\n")
}

impl SseOut {
    /// Writes an event; `false` once the stream is over (client gone,
    /// shutdown, or a fault ended it), so the producer stops.
    pub(crate) async fn event(&mut self, name: &str, data: &Value) -> bool {
        if self.stopped {
            return false;
        }
        match self.fault.clone() {
            Some(Fault::SseStall { after_events }) if self.events >= after_events => {
                self.stall().await;
                return false;
            }
            Some(Fault::SseError {
                after_events,
                detail,
            }) if self.events >= after_events => {
                let error = frame("error", &serde_json::json!({ "detail": detail }));
                self.write(error.into_bytes()).await;
                self.stopped = true;
                return false;
            }
            Some(Fault::SseDrop { after_events }) if self.events >= after_events => {
                let whole = frame(name, data).into_bytes();
                let half = whole[..whole.len() / 2].to_vec();
                self.write(half).await;
                self.flush().await;
                // Let the half event reach the wire before the cut.
                tokio::time::sleep(Duration::from_millis(5)).await;
                let _ = self
                    .tx
                    .send(Err(io::Error::new(
                        io::ErrorKind::ConnectionReset,
                        "simulated drop mid-event",
                    )))
                    .await;
                self.stopped = true;
                return false;
            }
            Some(Fault::SseExtraEvent {
                after_events,
                event,
                data,
            }) if self.events == after_events => {
                let mut text = frame(&event, &data);
                if self.crlf {
                    text = crlf(text);
                }
                if !self.write(text.into_bytes()).await {
                    return false;
                }
            }
            Some(Fault::SseEndsEarly { after_events }) if self.events >= after_events => {
                // A clean end: what was sent is complete, the body ends here.
                self.flush().await;
                self.stopped = true;
                return false;
            }
            _ => {}
        }
        self.events += 1;
        let mut text = frame(name, data);
        if self.crlf {
            text = crlf(text);
        }
        self.write(text.into_bytes()).await
    }

    /// Writes a comment line (`: keepalive`).
    pub(crate) async fn comment(&mut self, text: &str) -> bool {
        if self.stopped {
            return false;
        }
        if let Some(Fault::SseStall { after_events }) = self.fault
            && self.events >= after_events
        {
            self.stall().await;
            return false;
        }
        let mut line = format!(": {text}\n\n");
        if self.crlf {
            line = crlf(line);
        }
        self.write(line.into_bytes()).await
    }

    /// Sleeps until `at`; `false` when the client left or the sim stops first.
    pub(crate) async fn sleep_until(&mut self, at: Instant) -> bool {
        if self.stopped {
            return false;
        }
        let shutdown = &mut self.shutdown;
        tokio::select! {
            _ = tokio::time::sleep_until(at) => true,
            _ = self.tx.closed() => { self.stopped = true; false }
            _ = crate::shared::stopped(shutdown) => { self.stopped = true; false }
        }
    }

    pub(crate) async fn sleep(&mut self, d: Duration) -> bool {
        self.sleep_until(Instant::now() + d).await
    }

    /// Ends the stream cleanly (a buffered stream is released now, at once).
    pub(crate) async fn finish(mut self) {
        self.flush().await;
    }

    async fn write(&mut self, bytes: Vec<u8>) -> bool {
        if let Some(buffer) = &mut self.buffer {
            buffer.extend_from_slice(&bytes);
            return true;
        }
        if self.tx.send(Ok(Bytes::from(bytes))).await.is_err() {
            self.stopped = true;
            return false;
        }
        true
    }

    async fn flush(&mut self) {
        if let Some(buffer) = self.buffer.take()
            && !buffer.is_empty()
        {
            let _ = self.tx.send(Ok(Bytes::from(buffer))).await;
        }
    }

    /// No byte any more, connection open, until the client leaves or the sim stops.
    async fn stall(&mut self) {
        self.stopped = true;
        let shutdown = &mut self.shutdown;
        tokio::select! {
            _ = self.tx.closed() => {}
            _ = crate::shared::stopped(shutdown) => {}
        }
    }
}
