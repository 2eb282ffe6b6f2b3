//! Server-sent events (GRAG §6): an incremental `text/event-stream` parser and
//! a stream wrapper with a no-byte watchdog.
//!
//! The parser follows the WHATWG "event stream interpretation" rules but is
//! strict where the spec is lenient: invalid UTF-8 and oversized lines are
//! typed errors instead of replacement characters or unbounded buffering, and
//! an event cut off by the end of the body is reported instead of silently
//! discarded — a chat answer that stops mid-event was likely never persisted
//! (GRAG §6.2), so the caller must know.
//!
//! [`EventStream`] adds the watchdog the policy asks for (45 s on ingest
//! progress, 150 s on chat): any byte, keepalive comments included, proves the
//! stream alive. Time comes from `tokio::time`, so tests run under a paused
//! clock without sleeping.

use std::collections::VecDeque;
use std::error::Error as StdError;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{BoxStream, Stream, StreamExt};
use tokio::time::Instant;

use crate::error::error_chain;

/// Longest line (terminator excluded) the parser buffers by default. A peer
/// that never sends a line break must not grow our memory without bound.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

/// Most data one event gathers by default. A peer that sends `data:` lines
/// and never the blank line that ends the event must not either.
pub const MAX_EVENT_BYTES: usize = 1024 * 1024;

/// Event type used when a block carries no (or an empty) `event:` field.
pub const DEFAULT_EVENT: &str = "message";

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, [`DEFAULT_EVENT`] when absent.
    pub event: String,
    /// All `data:` lines of the block, joined by `\n`.
    pub data: String,
    /// The last event ID in force at dispatch. As in the spec it persists
    /// across events until an `id:` line changes it; `id:` with an empty value
    /// clears it. This is what a resumed request would send as `Last-Event-ID`.
    pub id: Option<String>,
    /// A valid `retry:` (reconnection time, ms) given in this event's block.
    pub retry: Option<u64>,
}

/// What the parser yields: events, and comments kept separate so a watchdog
/// or log can see keepalives (`: keepalive` every 20 s on ingest progress).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Event(SseEvent),
    /// Comment text after the `:` (one leading space removed).
    Comment(String),
}

/// Why the byte stream is not a valid event stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// Line `line` (1-based) is not UTF-8, which the format mandates.
    #[error("event stream line {line} is not valid UTF-8")]
    InvalidUtf8 { line: u64 },
    /// A line exceeded its cap before its terminator arrived.
    #[error("event stream line longer than {limit} bytes")]
    LineTooLong { limit: usize },
    /// The data of one event exceeded its cap before the event ended.
    #[error("event stream event with more than {limit} bytes of data")]
    EventTooLarge { limit: usize },
    /// The input ended inside an event (after the last blank line).
    #[error("event stream ended mid-event")]
    Truncated,
}

/// Incremental `text/event-stream` parser; chunks may be split anywhere, also
/// inside a UTF-8 character or between `\r` and `\n`.
///
/// Errors are sticky: after one, every further call returns it again, since
/// the position in the stream is no longer trustworthy.
#[derive(Debug)]
pub struct SseParser {
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// The previous chunk ended in `\r`; a leading `\n` belongs to it.
    after_cr: bool,
    /// No line completed yet (a leading BOM is stripped from the first line).
    first_line: bool,
    lines_seen: u64,
    /// A field line arrived since the last blank line.
    in_block: bool,
    event: String,
    /// Data buffer with a `\n` after every line, as in the spec.
    data: String,
    retry: Option<u64>,
    last_id: Option<String>,
    failed: Option<SseError>,
    max_line: usize,
    max_event: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl SseParser {
    pub fn new() -> Self {
        Self::with_limits(MAX_LINE_BYTES, MAX_EVENT_BYTES)
    }

    /// A parser that refuses lines over `max_line` bytes and events whose
    /// data passes `max_event` bytes (the policy's `limits`).
    pub fn with_limits(max_line: usize, max_event: usize) -> Self {
        Self {
            max_line,
            max_event,
            line: Vec::new(),
            after_cr: false,
            first_line: true,
            lines_seen: 0,
            in_block: false,
            event: String::new(),
            data: String::new(),
            retry: None,
            last_id: None,
            failed: None,
        }
    }

    /// Feeds one chunk and returns the frames it completed.
    ///
    /// On error, frames completed earlier in the same chunk are lost; use
    /// [`SseParser::push_into`] to keep them.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<Frame>, SseError> {
        let mut out = Vec::new();
        self.push_into(chunk, &mut out)?;
        Ok(out)
    }

    /// Like [`SseParser::push`], but appends to `out`, which keeps the frames
    /// completed before an error (they are valid and were sent first).
    pub fn push_into(&mut self, chunk: &[u8], out: &mut Vec<Frame>) -> Result<(), SseError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = self.feed(chunk, out);
        if let Err(e) = &result {
            self.failed = Some(e.clone());
        }
        result
    }

    /// Declares the end of input. Bytes after the last blank line that are
    /// part of an event (a partial line, or field lines without their closing
    /// blank line) give [`SseError::Truncated`]; the spec would drop them
    /// silently. Complete comment lines are not an event and pass.
    pub fn finish(&mut self) -> Result<(), SseError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.in_block || !self.line.is_empty() {
            self.failed = Some(SseError::Truncated);
            return Err(SseError::Truncated);
        }
        Ok(())
    }

    fn feed(&mut self, mut chunk: &[u8], out: &mut Vec<Frame>) -> Result<(), SseError> {
        // An empty chunk must not forget a pending `\r`.
        if self.after_cr && !chunk.is_empty() {
            self.after_cr = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        while !chunk.is_empty() {
            match chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
                None => {
                    self.append(chunk)?;
                    break;
                }
                Some(end) => {
                    self.append(&chunk[..end])?;
                    let rest = &chunk[end + 1..];
                    chunk = if chunk[end] == b'\r' {
                        match rest.first() {
                            Some(b'\n') => &rest[1..],
                            Some(_) => rest,
                            None => {
                                self.after_cr = true;
                                rest
                            }
                        }
                    } else {
                        rest
                    };
                    self.end_line(out)?;
                }
            }
        }
        Ok(())
    }

    fn append(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len() + bytes.len() > self.max_line {
            return Err(SseError::LineTooLong {
                limit: self.max_line,
            });
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn end_line(&mut self, out: &mut Vec<Frame>) -> Result<(), SseError> {
        self.lines_seen += 1;
        let mut bytes = std::mem::take(&mut self.line);
        if std::mem::replace(&mut self.first_line, false) && bytes.starts_with(b"\xEF\xBB\xBF") {
            bytes.drain(..3);
        }
        let line = String::from_utf8(bytes).map_err(|_| SseError::InvalidUtf8 {
            line: self.lines_seen,
        })?;
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_str(), ""),
        };
        if field.is_empty() {
            out.push(Frame::Comment(value.to_owned()));
            return Ok(());
        }
        self.in_block = true;
        match field {
            "event" => value.clone_into(&mut self.event),
            "data" => {
                if self.data.len() + value.len() + 1 > self.max_event {
                    return Err(SseError::EventTooLarge {
                        limit: self.max_event,
                    });
                }
                self.data.push_str(value);
                self.data.push('\n');
            }
            "id" if !value.contains('\0') => {
                self.last_id = (!value.is_empty()).then(|| value.to_owned());
            }
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                // Digits only but overflowing u64: ignored like any invalid value.
                if let Ok(ms) = value.parse() {
                    self.retry = Some(ms);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<Frame>) {
        self.in_block = false;
        let event = std::mem::take(&mut self.event);
        let mut data = std::mem::take(&mut self.data);
        let retry = self.retry.take();
        // Spec: a block without data lines is not dispatched.
        if data.is_empty() {
            return;
        }
        data.pop();
        out.push(Frame::Event(SseEvent {
            event: if event.is_empty() {
                DEFAULT_EVENT.to_owned()
            } else {
                event
            },
            data,
            id: self.last_id.clone(),
            retry,
        }));
    }
}

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
/// the connection is released.
pub struct EventStream {
    body: Option<BoxStream<'static, Result<Bytes, BoxError>>>,
    parser: SseParser,
    watchdog: Duration,
    last_byte: Instant,
    ready: VecDeque<SseEvent>,
    failure: Option<StreamFailure>,
    keepalives: u64,
    last_event_id: Option<String>,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("open", &self.body.is_some())
            .field("watchdog", &self.watchdog)
            .field("ready", &self.ready.len())
            .field("keepalives", &self.keepalives)
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
            ready: VecDeque::new(),
            failure: None,
            keepalives: 0,
            last_event_id: None,
        }
    }

    /// The next event; `None` once the body ended at an event boundary (or
    /// after a failure was returned).
    ///
    /// The watchdog counts only time spent waiting here: a caller busy between
    /// calls cannot observe bytes, so its delay is not blamed on the server.
    pub async fn next(&mut self) -> Option<Result<SseEvent, StreamFailure>> {
        let waiting_since = Instant::now();
        loop {
            if let Some(event) = self.ready.pop_front() {
                self.last_event_id.clone_from(&event.id);
                return Some(Ok(event));
            }
            if let Some(failure) = self.failure.take() {
                return Some(Err(failure));
            }
            let body = self.body.as_mut()?;
            let deadline = self.last_byte.max(waiting_since) + self.watchdog;
            match tokio::time::timeout_at(deadline, body.next()).await {
                Err(_) => self.fail(StreamFailure::Stalled {
                    silent_for: self.last_byte.elapsed(),
                }),
                Ok(None) => match self.parser.finish() {
                    Ok(()) => self.body = None,
                    Err(SseError::Truncated) => self.fail(StreamFailure::Dropped {
                        detail: "body ended mid-event".to_owned(),
                    }),
                    Err(e) => self.fail(StreamFailure::Malformed(e)),
                },
                Ok(Some(Err(e))) => self.fail(StreamFailure::Dropped {
                    detail: error_chain(&*e),
                }),
                Ok(Some(Ok(chunk))) => {
                    // An empty chunk carries no byte and proves nothing.
                    if chunk.is_empty() {
                        continue;
                    }
                    self.last_byte = Instant::now();
                    let mut frames = Vec::new();
                    let parsed = self.parser.push_into(&chunk, &mut frames);
                    for frame in frames {
                        match frame {
                            Frame::Event(event) => self.ready.push_back(event),
                            Frame::Comment(_) => self.keepalives += 1,
                        }
                    }
                    if let Err(e) = parsed {
                        self.fail(StreamFailure::Malformed(e));
                    }
                }
            }
        }
    }

    /// Comments seen so far (keepalives, for logs and metrics).
    pub fn keepalives(&self) -> u64 {
        self.keepalives
    }

    /// ID of the last event returned by [`EventStream::next`].
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_event_id.as_deref()
    }

    fn fail(&mut self, failure: StreamFailure) {
        self.body = None;
        self.failure = Some(failure);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Result<Vec<Frame>, SseError> {
        let mut parser = SseParser::new();
        let mut frames = Vec::new();
        for chunk in chunks {
            frames.extend(parser.push(chunk)?);
        }
        parser.finish()?;
        Ok(frames)
    }

    fn ev(event: &str, data: &str, id: Option<&str>) -> Frame {
        Frame::Event(SseEvent {
            event: event.to_owned(),
            data: data.to_owned(),
            id: id.map(str::to_owned),
            retry: None,
        })
    }

    fn comment(text: &str) -> Frame {
        Frame::Comment(text.to_owned())
    }

    /// Multi-event sample in `\n` form; converted to other line endings below.
    const SAMPLE: &str = "event: subscribed\ndata: {\"job\":\"j-1\"}\n\n\
        : keepalive\n\n\
        id: 7\nevent: node_start\ndata: Größe ✓ 🦀\ndata:second line\n\n\
        retry: 3000\ndata\n\n\
        data: after\n\n";

    fn sample_frames() -> Vec<Frame> {
        vec![
            ev("subscribed", "{\"job\":\"j-1\"}", None),
            comment("keepalive"),
            ev("node_start", "Größe ✓ 🦀\nsecond line", Some("7")),
            Frame::Event(SseEvent {
                event: DEFAULT_EVENT.to_owned(),
                data: String::new(),
                id: Some("7".to_owned()),
                retry: Some(3000),
            }),
            ev("message", "after", Some("7")),
        ]
    }

    #[test]
    fn sse_every_line_ending_style_parses_alike() {
        let lf = SAMPLE.to_owned();
        let crlf = SAMPLE.replace('\n', "\r\n");
        let cr = SAMPLE.replace('\n', "\r");
        // Mixed: cycle the three styles line by line, except that `\r`
        // followed by a blank line's `\n` would read as one `\r\n`.
        let mut mixed = String::new();
        let mut prev = "";
        for (i, line) in SAMPLE.split_terminator('\n').enumerate() {
            let mut end = ["\n", "\r\n", "\r"][i % 3];
            if prev == "\r" && line.is_empty() && end == "\n" {
                end = "\r";
            }
            mixed.push_str(line);
            mixed.push_str(end);
            prev = end;
        }
        for text in [lf, crlf, cr, mixed] {
            assert_eq!(
                parse_all(&[text.as_bytes()]).unwrap(),
                sample_frames(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn sse_split_at_every_offset_gives_same_frames() {
        for text in [SAMPLE.to_owned(), SAMPLE.replace('\n', "\r\n")] {
            let bytes = text.as_bytes();
            let want = sample_frames();
            for i in 0..=bytes.len() {
                assert_eq!(
                    parse_all(&[&bytes[..i], &bytes[i..]]).unwrap(),
                    want,
                    "split at {i}"
                );
                for j in i..=bytes.len() {
                    assert_eq!(
                        parse_all(&[&bytes[..i], &bytes[i..j], &bytes[j..]]).unwrap(),
                        want,
                        "split at {i}, {j}"
                    );
                }
            }
            let single: Vec<&[u8]> = bytes.chunks(1).collect();
            assert_eq!(parse_all(&single).unwrap(), want);
        }
    }

    #[test]
    fn sse_cr_at_chunk_end_then_lf_is_one_terminator() {
        // If the `\n` after a chunk-final `\r` counted as a blank line, the
        // event would be dispatched early with only its first data line.
        let frames = parse_all(&[b"data: a\r", b"\ndata: b\r\n\r\n"]).unwrap();
        assert_eq!(frames, vec![ev("message", "a\nb", None)]);
    }

    #[test]
    fn sse_multi_line_data_and_field_syntax() {
        let frames =
            parse_all(&[b"data:x\ndata:  two spaces\ndata\ndata: \nevent\nfoo: ignored\nbar\n\n"])
                .unwrap();
        assert_eq!(frames, vec![ev("message", "x\n two spaces\n\n", None)]);
    }

    #[test]
    fn sse_comments_are_reported_separately() {
        let frames = parse_all(&[b": keepalive\n:raw\n:\ndata: x\n: inside\n\n"]).unwrap();
        assert_eq!(
            frames,
            vec![
                comment("keepalive"),
                comment("raw"),
                comment(""),
                comment("inside"),
                ev("message", "x", None),
            ]
        );
    }

    #[test]
    fn sse_id_persists_and_retry_is_validated() {
        let frames = parse_all(&[b"id: 1\nretry: 15\ndata: a\n\n\
            retry: 1x\ndata: b\n\n\
            id: bad\0id\ndata: c\n\n\
            id\ndata: d\n\n\
            id: 2\n\ndata: e\n\n"])
        .unwrap();
        let with = |data: &str, id: Option<&str>, retry: Option<u64>| {
            Frame::Event(SseEvent {
                event: DEFAULT_EVENT.to_owned(),
                data: data.to_owned(),
                id: id.map(str::to_owned),
                retry,
            })
        };
        assert_eq!(
            frames,
            vec![
                with("a", Some("1"), Some(15)),
                with("b", Some("1"), None),
                with("c", Some("1"), None),
                with("d", None, None),
                // An id-only block is not dispatched but still sets the ID.
                with("e", Some("2"), None),
            ]
        );
    }

    #[test]
    fn sse_block_without_data_is_not_dispatched() {
        let frames = parse_all(&[b"event: timeout\n\nevent: error\nid: 3\n\n\n\n"]).unwrap();
        assert_eq!(frames, vec![]);
        // …but an empty data line is data.
        let frames = parse_all(&[b"event: ping\ndata:\n\n"]).unwrap();
        assert_eq!(frames, vec![ev("ping", "", None)]);
    }

    #[test]
    fn sse_leading_bom_is_stripped() {
        let frames = parse_all(&[b"\xEF\xBB", b"\xBFdata: x\n\n"]).unwrap();
        assert_eq!(frames, vec![ev("message", "x", None)]);
    }

    #[test]
    fn sse_invalid_utf8_is_a_typed_error() {
        assert_eq!(
            parse_all(&[b"data: ok\n\ndata: \xFF\n\n"]),
            Err(SseError::InvalidUtf8 { line: 3 })
        );
        // A multi-byte character cut short by a line break.
        assert_eq!(
            parse_all(&[b"data: \xC3", b"\n\n"]),
            Err(SseError::InvalidUtf8 { line: 1 })
        );
        // push_into keeps the frames before the bad line; the error is sticky.
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        let err = parser
            .push_into(b"data: ok\n\n\xFE\n", &mut out)
            .unwrap_err();
        assert_eq!(out, vec![ev("message", "ok", None)]);
        assert_eq!(parser.push(b"data: later\n\n"), Err(err.clone()));
        assert_eq!(parser.finish(), Err(err));
    }

    #[test]
    fn sse_line_too_long_is_rejected_before_its_end() {
        let mut parser = SseParser::new();
        let at_limit = vec![b'a'; MAX_LINE_BYTES - "data:".len()];
        parser.push(b"data:").unwrap();
        parser.push(&at_limit).unwrap();
        let frames = parser.push(b"\n\n").unwrap();
        assert!(matches!(&frames[..], [Frame::Event(e)] if e.data.len() == at_limit.len()));

        let mut parser = SseParser::new();
        parser.push(b"data:").unwrap();
        parser.push(&at_limit).unwrap();
        assert_eq!(
            parser.push(b"a"),
            Err(SseError::LineTooLong {
                limit: MAX_LINE_BYTES
            })
        );
    }

    #[test]
    fn sse_truncated_final_event_is_reported() {
        for tail in [
            &b"data: b"[..],
            b"data: b\n",
            b"data: b\r",
            b"event: x\n",
            b": partial comm",
        ] {
            let mut parser = SseParser::new();
            let frames = parser.push(&[&b"data: a\n\n"[..], tail].concat()).unwrap();
            assert_eq!(frames, vec![ev("message", "a", None)]);
            assert_eq!(parser.finish(), Err(SseError::Truncated), "{tail:?}");
        }
        for clean in [&b""[..], b"data: a\n\n", b"data: a\r\r", b": keepalive\n"] {
            assert_eq!(parse_all(&[clean]).map(|_| ()), Ok(()), "{clean:?}");
        }
    }

    // ---- EventStream ----

    use std::io;
    use tokio::sync::mpsc;

    type Tx = mpsc::UnboundedSender<Result<Bytes, io::Error>>;

    const WATCHDOG: Duration = Duration::from_secs(45);

    fn channel_stream(watchdog: Duration) -> (Tx, EventStream) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let body = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
        (tx, EventStream::new(body, watchdog))
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
        let (tx, mut stream) = channel_stream(WATCHDOG);
        send(&tx, "data: ok\n\ndata: \u{0}");
        tx.send(Ok(Bytes::from_static(b"\xFF\n\n"))).unwrap();
        assert_eq!(data(stream.next().await), "ok");
        assert_eq!(
            stream.next().await,
            Some(Err(StreamFailure::Malformed(SseError::InvalidUtf8 {
                line: 3
            })))
        );
        assert_eq!(stream.next().await, None);
    }
}
