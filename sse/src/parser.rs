//! The incremental `text/event-stream` parser: WHATWG's interpretation
//! rules, with typed caps on a line and an event's data.

use std::borrow::Cow;
use std::time::Duration;

use crate::{DEFAULT_EVENT, MAX_EVENT_BYTES, MAX_LINE_BYTES};

const BOM: &[u8; 3] = b"\xEF\xBB\xBF";

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, [`DEFAULT_EVENT`] when absent.
    pub event: String,
    /// All `data:` lines of the block, joined by `\n`.
    pub data: String,
    /// The last event ID in force at dispatch, `None` when it is the empty
    /// string (never set, or reset by an `id:` with an empty value). As in the
    /// spec it persists across events, also past blocks without data, until
    /// an `id:` line changes it. Nothing in the SDK resumes a stream today; a
    /// resumed request would send this as `Last-Event-ID`, and never an empty
    /// one.
    pub id: Option<String>,
    /// A valid `retry:` (reconnection time, ms) given in this event's block;
    /// the stream's current value is [`SseParser::retry`].
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

/// Where frames go. `Vec<Frame>` keeps comments' text; the event path of
/// [`EventStream`](crate::EventStream) only counts them, so a keepalive costs no allocation.
trait Sink {
    fn event(&mut self, event: SseEvent);
    fn comment(&mut self, text: &[u8]);
}

impl Sink for Vec<Frame> {
    fn event(&mut self, event: SseEvent) {
        self.push(Frame::Event(event));
    }
    fn comment(&mut self, text: &[u8]) {
        let mut comment = String::new();
        push_lossy(&mut comment, text);
        self.push(Frame::Comment(comment));
    }
}

struct EventsOnly<'a, E>(&'a mut E);

impl<E: Extend<SseEvent>> Sink for EventsOnly<'_, E> {
    fn event(&mut self, event: SseEvent) {
        self.0.extend(Some(event));
    }
    fn comment(&mut self, _: &[u8]) {}
}

/// Appends `bytes` with U+FFFD for invalid UTF-8; valid text (nearly all of
/// it) skips the slower replacing decoder.
fn push_lossy(to: &mut String, bytes: &[u8]) {
    to.push_str(&text_of(bytes));
}

/// Up to this length an ASCII check decides valid text before a UTF-8
/// validator is asked: short values (event names, small JSON) are nearly
/// always ASCII, and the check costs a fraction of a validator's setup
/// (simdutf8 hands inputs this short to `std` anyway). Longer ones go
/// straight to simdutf8, faster per byte.
const SHORT: usize = 64;

/// Unchecked data bytes of an open line validated at once: a few KiB, still
/// in the L1 cache, and many fewer calls than chunks of 1 KiB would make.
const CHECK_AFTER: usize = 4096;

#[inline]
fn is_short_ascii(bytes: &[u8]) -> bool {
    bytes.len() <= SHORT && bytes.is_ascii()
}

/// `bytes` as text, U+FFFD for invalid UTF-8.
#[inline]
fn text_of(bytes: &[u8]) -> Cow<'_, str> {
    if is_short_ascii(bytes) {
        // SAFETY: ASCII is valid UTF-8.
        return Cow::Borrowed(unsafe { std::str::from_utf8_unchecked(bytes) });
    }
    match simdutf8::basic::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// The capacity a data buffer of `capacity` grows to when it must hold
/// `need` bytes and the line's `\n` (`check_caps` left room for it).
///
/// A line split across chunks may be long, and each growth the allocator
/// cannot do in place moves every byte so far. The steps are the event cap
/// divided by powers of 4, so a growth at least doubles (4× in a run of
/// them: the bytes move 1.33 times at most instead of twice) and the last
/// one lands on the cap itself: a step sequence that started elsewhere (4×
/// from the first chunk's size) fell just short of the cap and moved a
/// whole 1 MiB line once more for its last few KiB.
fn data_room(capacity: usize, need: usize, max_event: usize) -> usize {
    let want = need
        .saturating_add(1)
        .max(capacity.saturating_mul(2).min(max_event));
    let mut room = max_event.max(want);
    while room / 4 >= want {
        room /= 4;
    }
    room
}

/// The end of the last whole character of `bytes[from..]`, where `from`
/// starts a character: `bytes.len()`, or the start of a multi-byte character
/// whose last bytes have not arrived. Valid UTF-8 up to there, followed by
/// valid UTF-8, is valid; and if `bytes[from..end]` is invalid, so is every
/// continuation of `bytes`.
fn whole_chars_end(bytes: &[u8], from: usize) -> usize {
    let end = bytes.len();
    for start in (from.max(end.saturating_sub(3))..end).rev() {
        let width = match bytes[start] {
            0x80..=0xBF => continue,
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        return if end - start < width { start } else { end };
    }
    end
}

/// The line not yet terminated at the end of the last chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    /// None: the next byte starts a line.
    None,
    /// Its bytes are in `SseParser::line`.
    Line,
    /// A `data:` line whose value goes straight into `SseParser::data`, so a
    /// long line is copied once. `len` counts the whole line so far, `prefix`
    /// the bytes before its value (`data:` and one space), `before` the data
    /// the event had when the line began.
    Data {
        len: usize,
        prefix: usize,
        before: usize,
    },
}

/// Incremental `text/event-stream` parser; chunks may be split anywhere, also
/// inside a UTF-8 character, a BOM or between `\r` and `\n`, and yield the
/// same frames and errors as the whole input in one chunk.
///
/// Errors are sticky: after one, every further call returns it again, since
/// the position in the stream is no longer trustworthy.
#[derive(Debug)]
pub struct SseParser {
    /// Bytes of the open line when it is [`Open::Line`]; kept for reuse.
    line: Vec<u8>,
    open: Open,
    /// The previous chunk ended in `\r`; a leading `\n` belongs to it.
    after_cr: bool,
    /// Bytes of a leading BOM matched so far; `None` once the stream's first
    /// three bytes are decided.
    bom: Option<usize>,
    /// A field line arrived since the last blank line.
    in_block: bool,
    event: String,
    /// Data buffer with a `\n` after every line, as in the spec. Raw bytes:
    /// decoded once per event (line breaks are ASCII, so this equals decoding
    /// the stream as a whole).
    data: Vec<u8>,
    /// `data[..data_valid]` is valid UTF-8 that ends with a whole character:
    /// a long line's bytes are validated as they arrive, while the cache
    /// still holds them, instead of read again at the end of the event.
    data_valid: usize,
    /// `data` holds invalid UTF-8 (decoded with replacements at dispatch).
    data_invalid: bool,
    /// `retry:` of the current block, for [`SseEvent::retry`].
    block_retry: Option<u64>,
    /// The stream's reconnection time.
    retry: Option<u64>,
    /// The spec's last-event-ID buffer, set by `id:` lines.
    id_buffer: String,
    /// The last event ID string, set from the buffer at every blank line.
    last_id: String,
    comments: u64,
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
    /// data (with a `\n` per line) passes `max_event` bytes (the policy's
    /// `limits`). Neither buffer ever holds more than its cap.
    pub fn with_limits(max_line: usize, max_event: usize) -> Self {
        Self {
            max_line,
            max_event,
            line: Vec::new(),
            open: Open::None,
            after_cr: false,
            bom: Some(0),
            in_block: false,
            event: String::new(),
            data: Vec::new(),
            data_valid: 0,
            data_invalid: false,
            block_retry: None,
            retry: None,
            id_buffer: String::new(),
            last_id: String::new(),
            comments: 0,
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
        self.guarded(chunk, out)
    }

    /// Like [`SseParser::push_into`] for events only: comments are counted
    /// ([`SseParser::comments`]) but their text is not kept.
    pub fn push_events<E: Extend<SseEvent>>(
        &mut self,
        chunk: &[u8],
        out: &mut E,
    ) -> Result<(), SseError> {
        self.guarded(chunk, &mut EventsOnly(out))
    }

    /// Declares the end of input. Bytes after the last blank line that are
    /// part of an event (a partial line, or field lines without their closing
    /// blank line) give [`SseError::Truncated`]; the spec would drop them
    /// silently. Complete comment lines are not an event and pass.
    pub fn finish(&mut self) -> Result<(), SseError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.in_block || self.open != Open::None || self.bom.is_some_and(|n| n > 0) {
            self.failed = Some(SseError::Truncated);
            return Err(SseError::Truncated);
        }
        Ok(())
    }

    /// Comment lines seen so far (keepalives).
    pub fn comments(&self) -> u64 {
        self.comments
    }

    /// The stream's last event ID string as of the last blank line, `None`
    /// when empty. An `id:`-only block changes it without an event.
    pub fn last_event_id(&self) -> Option<&str> {
        (!self.last_id.is_empty()).then_some(self.last_id.as_str())
    }

    /// The stream's reconnection time: the last valid `retry:` seen, also in
    /// a block that carried no data.
    pub fn retry(&self) -> Option<Duration> {
        self.retry.map(Duration::from_millis)
    }

    fn guarded(&mut self, chunk: &[u8], sink: &mut impl Sink) -> Result<(), SseError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = self.feed(chunk, sink);
        if let Err(e) = &result {
            self.failed = Some(e.clone());
        }
        result
    }

    fn feed(&mut self, mut chunk: &[u8], sink: &mut impl Sink) -> Result<(), SseError> {
        if let Some(matched) = self.bom {
            let n = BOM[matched..]
                .iter()
                .zip(chunk)
                .take_while(|(a, b)| a == b)
                .count();
            if matched + n == BOM.len() {
                self.bom = None;
                chunk = &chunk[n..];
            } else if n == chunk.len() {
                // All of it may still be a BOM; wait for more.
                self.bom = Some(matched + n);
                return Ok(());
            } else {
                // Not a BOM: the bytes held back from earlier chunks are text.
                self.bom = None;
                if matched > 0 {
                    self.extend_open(&BOM[..matched])?;
                }
            }
        }
        // An empty chunk must not forget a pending `\r`.
        if self.after_cr && !chunk.is_empty() {
            self.after_cr = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        while let Some(end) = memchr::memchr2(b'\n', b'\r', chunk) {
            let (segment, rest) = (&chunk[..end], &chunk[end + 1..]);
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
            if self.open == Open::None {
                self.line_in_place(segment, sink)?;
            } else {
                self.extend_open(segment)?;
                self.end_open(sink)?;
            }
        }
        if !chunk.is_empty() {
            self.extend_open(chunk)?;
        }
        Ok(())
    }

    /// Appends bytes of a line whose terminator has not arrived yet.
    fn extend_open(&mut self, mut bytes: &[u8]) -> Result<(), SseError> {
        if self.open == Open::None {
            self.open = Open::Line;
            self.line.clear();
        }
        if self.open == Open::Line {
            // Take the few bytes that decide whether this is a `data:` line
            // and where its value starts (bounded: at most `data: `).
            if self.line.len() < 6 && b"data:".starts_with(&self.line[..self.line.len().min(5)]) {
                let n = bytes.len().min(6 - self.line.len());
                self.line.extend_from_slice(&bytes[..n]);
                bytes = &bytes[n..];
            }
            if self.line.len() >= 6 && self.line.starts_with(b"data:") {
                let prefix = if self.line[5] == b' ' { 6 } else { 5 };
                let (len, before) = (self.line.len(), self.data.len());
                self.check_caps(len, Some((prefix, before)))?;
                self.in_block = true;
                self.data.extend_from_slice(&self.line[prefix..]);
                self.open = Open::Data {
                    len,
                    prefix,
                    before,
                };
            } else {
                self.check_caps(self.line.len() + bytes.len(), None)?;
                self.line.extend_from_slice(bytes);
                return Ok(());
            }
        }
        if let Open::Data {
            len,
            prefix,
            before,
        } = self.open
        {
            let len = len + bytes.len();
            self.check_caps(len, Some((prefix, before)))?;
            let need = self.data.len() + bytes.len();
            if need > self.data.capacity() {
                let room = data_room(self.data.capacity(), need, self.max_event);
                self.data.reserve_exact(room - self.data.len());
            }
            self.data.extend_from_slice(bytes);
            if self.data.len() - self.data_valid >= CHECK_AFTER {
                self.check_data();
            }
            self.open = Open::Data {
                len,
                prefix,
                before,
            };
        }
        Ok(())
    }

    /// Validates the data bytes after `data_valid` up to the last whole
    /// character (a character split across chunks waits for its rest).
    fn check_data(&mut self) {
        if self.data_invalid {
            return;
        }
        let end = whole_chars_end(&self.data, self.data_valid);
        if simdutf8::basic::from_utf8(&self.data[self.data_valid..end]).is_ok() {
            self.data_valid = end;
        } else {
            self.data_invalid = true;
        }
    }

    /// The open line got its terminator.
    fn end_open(&mut self, sink: &mut impl Sink) -> Result<(), SseError> {
        match std::mem::replace(&mut self.open, Open::None) {
            Open::None => Ok(()),
            Open::Data { .. } => {
                self.data.push(b'\n');
                Ok(())
            }
            Open::Line => {
                let line = std::mem::take(&mut self.line);
                let result = self.line_in_place(&line, sink);
                self.line = line;
                result
            }
        }
    }

    /// The cap a line passes once `len` of its bytes are known; for a `data:`
    /// line, `(prefix, before)` as in [`Open::Data`]. Of two caps passed at
    /// once, the one passed at the earlier byte wins, so every chunking of
    /// the input gives the same error.
    fn check_caps(&self, len: usize, data: Option<(usize, usize)>) -> Result<(), SseError> {
        let line_at = self.max_line.saturating_add(1);
        // The value may add `max_event - before - 1` bytes, plus its `\n`.
        let event_at = data
            .map(|(prefix, before)| prefix.saturating_add(self.max_event.saturating_sub(before)));
        match event_at {
            Some(at) if len >= at && at < line_at => Err(SseError::EventTooLarge {
                limit: self.max_event,
            }),
            _ if len >= line_at => Err(SseError::LineTooLong {
                limit: self.max_line,
            }),
            _ => Ok(()),
        }
    }

    /// One whole line, terminator excluded.
    fn line_in_place(&mut self, line: &[u8], sink: &mut impl Sink) -> Result<(), SseError> {
        if line.is_empty() {
            self.dispatch(sink);
            return Ok(());
        }
        // The fields nearly every event has: their colon is known without a
        // search (neither name holds a colon, so it is the first one).
        let colon = if line.starts_with(b"data:") {
            Some(4)
        } else if line.starts_with(b"event:") {
            Some(5)
        } else {
            memchr::memchr(b':', line)
        };
        let (field, value, prefix) = match colon {
            Some(colon) => match line.get(colon + 1) {
                Some(b' ') => (&line[..colon], &line[colon + 2..], colon + 2),
                _ => (&line[..colon], &line[colon + 1..], colon + 1),
            },
            None => (line, &[][..], line.len()),
        };
        let is_data = field == b"data";
        self.check_caps(line.len(), is_data.then_some((prefix, self.data.len())))?;
        if field.is_empty() {
            self.comments += 1;
            sink.comment(value);
            return Ok(());
        }
        self.in_block = true;
        match field {
            b"data" => {
                if self.data.capacity() == 0 {
                    // The last event took the buffer: allocated at its size.
                    self.data = Vec::with_capacity(value.len() + 1);
                } else {
                    self.data.reserve(value.len() + 1);
                }
                self.data.extend_from_slice(value);
                self.data.push(b'\n');
            }
            b"event" => {
                // The last event took the buffer: allocated at its size at once.
                let name = text_of(value);
                if self.event.capacity() == 0 {
                    self.event = name.into_owned();
                } else {
                    self.event.clear();
                    self.event.push_str(&name);
                }
            }
            b"id" if memchr::memchr(0, value).is_none() => {
                self.id_buffer.clear();
                push_lossy(&mut self.id_buffer, value);
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                // Digits only but overflowing u64: ignored like any invalid value.
                if let Some(ms) = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok()) {
                    self.retry = Some(ms);
                    self.block_retry = Some(ms);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, sink: &mut impl Sink) {
        self.in_block = false;
        if self.last_id != self.id_buffer {
            self.last_id.clone_from(&self.id_buffer);
        }
        let retry = self.block_retry.take();
        // Spec: a block without data lines is not dispatched.
        if self.data.is_empty() {
            self.event.clear();
            return;
        }
        self.data.pop();
        let data = std::mem::take(&mut self.data);
        let valid = std::mem::take(&mut self.data_valid);
        let invalid = std::mem::take(&mut self.data_invalid);
        // Validation is the largest cost of a long event after the copy;
        // simdutf8 does it several times faster than `String::from_utf8`,
        // which would then repeat it; a short one is decided by its ASCII check.
        // The bytes before `valid` were checked as they arrived.
        let rest = &data[valid..];
        let data = if !invalid && (is_short_ascii(rest) || simdutf8::basic::from_utf8(rest).is_ok())
        {
            // SAFETY: `data[..valid]` is valid UTF-8 ending with a whole
            // character (`check_data`), and the line above validated the rest.
            unsafe { String::from_utf8_unchecked(data) }
        } else {
            String::from_utf8_lossy(&data).into_owned()
        };
        let event = if self.event.is_empty() {
            DEFAULT_EVENT.to_owned()
        } else {
            std::mem::take(&mut self.event)
        };
        sink.event(SseEvent {
            event,
            data,
            id: self.last_event_id().map(str::to_owned),
            retry,
        });
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

    /// Every way to cut `input` into two or three chunks, and 1-byte chunks,
    /// gives what the whole input gives (frames and outcome).
    fn parse_every_split(input: &[u8]) -> Result<Vec<Frame>, SseError> {
        let whole = parse_all(&[input]);
        for i in 0..=input.len() {
            for j in i..=input.len() {
                let split = parse_all(&[&input[..i], &input[i..j], &input[j..]]);
                assert_eq!(split, whole, "{input:?} split at {i}, {j}");
            }
        }
        let single: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(parse_all(&single), whole, "{input:?} in 1-byte chunks");
        whole
    }

    #[test]
    fn sse_invalid_utf8_is_replaced_never_an_error() {
        let r = "\u{FFFD}";
        let table: &[(&[u8], Vec<Frame>)] = &[
            (b"data: \xFF\n\n", vec![ev("message", r, None)]),
            (b"data: \xE2\x82\xAC\n\n", vec![ev("message", "€", None)]),
            // A character cut short by a line break is one U+FFFD, in data
            // lines of one event as anywhere else: the break is not glue.
            (b"data: \xC3\n\n", vec![ev("message", r, None)]),
            (
                b"data: \xE2\x82\ndata: \xAC\n\n",
                vec![ev("message", &format!("{r}\n{r}"), None)],
            ),
            (
                b"data: a\xF0\x9F\xA6b\n\n",
                vec![ev("message", &format!("a{r}b"), None)],
            ),
            (
                b": keep\xFEalive\ndata: ok\n\n",
                vec![comment(&format!("keep{r}alive")), ev("message", "ok", None)],
            ),
            (
                b"f\xFFeld: x\ndata: ok\n\n",
                vec![ev("message", "ok", None)],
            ),
            (
                b"event: n\xE2\x82\ndata: x\n\n",
                vec![ev(&format!("n{r}"), "x", None)],
            ),
            (b"id: \xFF\ndata: x\n\n", vec![ev("message", "x", Some(r))]),
        ];
        for (input, want) in table {
            assert_eq!(parse_every_split(input).as_ref(), Ok(want), "{input:?}");
        }
    }

    #[test]
    fn sse_long_data_lines_decode_alike_however_their_characters_are_cut() {
        // Long lines are validated piece by piece as they arrive; a
        // character cut by a chunk's end must wait for its rest (valid text
        // is never taken for invalid, which would decode it again with
        // replacements), and an invalid byte anywhere must still become
        // U+FFFD.
        let text = "Größe ✓ 🦀 und Gewicht. ".repeat(400);
        let bad = |at: usize, byte: u8| {
            let mut line = text.clone().into_bytes();
            line[at] = byte;
            line
        };
        let mut lines: Vec<Vec<u8>> = vec![
            bad(4097, 0xFF),
            bad(5, 0x80),
            bad(text.len() - 1, 0xF0),
            [text.as_bytes(), "€".as_bytes().get(..2).unwrap()].concat(),
        ];
        // Shifted by 0 to 3 bytes, so the pieces' ends fall at every place
        // in a character of 2, 3 and 4 bytes.
        for shift in 0..4 {
            lines.push(["x".repeat(shift), text.clone()].concat().into_bytes());
        }
        for line in &lines {
            let input = [&b"data: "[..], line, b"\ndata: ", line, b"\n\n"].concat();
            let want = String::from_utf8_lossy(&[&line[..], b"\n", line].concat()).into_owned();
            for chunk in [
                1,
                2,
                3,
                5,
                7,
                1000,
                4093,
                4094,
                4095,
                4096,
                4097,
                input.len(),
            ] {
                let mut parser = SseParser::new();
                let mut events = vec![];
                for c in input.chunks(chunk) {
                    parser.push_events(c, &mut events).unwrap();
                    assert!(!parser.data_invalid || want.contains('\u{FFFD}'));
                }
                parser.finish().unwrap();
                assert_eq!(events.len(), 1);
                assert!(events[0].data == want, "chunks of {chunk}");
            }
        }
    }

    #[test]
    fn sse_leading_bom_is_skipped_once() {
        type Want = Result<Vec<Frame>, SseError>;
        let table: &[(&[u8], Want)] = &[
            (
                b"\xEF\xBB\xBFdata: x\n\n",
                Ok(vec![ev("message", "x", None)]),
            ),
            (b"\xEF\xBB\xBF: c\n", Ok(vec![comment("c")])),
            (b"\xEF\xBB\xBF", Ok(vec![])),
            // A second BOM is text: the first line's field is `\u{FEFF}data`.
            (b"\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\n", Ok(vec![])),
            // Two bytes of a BOM are not one; they begin the first field name.
            (b"\xEF\xBBdata: x\n\n", Ok(vec![])),
            (b"\xEF\xBB: x\n\n", Ok(vec![])),
            // Only at the very start of the stream.
            (
                b"data: a\n\n\xEF\xBB\xBFdata: b\n\n",
                Ok(vec![ev("message", "a", None)]),
            ),
            (b"\xEF\xBB", Err(SseError::Truncated)),
        ];
        for (input, want) in table {
            assert_eq!(&parse_every_split(input), want, "{input:?}");
        }
    }

    /// The stream's state after some input: frames, last event ID, retry.
    fn state_after(input: &[u8]) -> (Vec<Frame>, Option<String>, Option<Duration>) {
        let mut parser = SseParser::new();
        let frames = parser.push(input).unwrap();
        let id = parser.last_event_id().map(str::to_owned);
        (frames, id, parser.retry())
    }

    #[test]
    fn sse_last_event_id_and_retry_are_stream_state() {
        let a1 = ev("message", "a", Some("1"));
        let ms = |n| Some(Duration::from_millis(n));
        type Row = (
            &'static [u8],
            Vec<Frame>,
            Option<&'static str>,
            Option<Duration>,
        );
        let table: &[Row] = &[
            (b"id: 1\ndata: a\n\n", vec![a1.clone()], Some("1"), None),
            // An id-only block dispatches nothing but sets the ID.
            (b"id: 1\n\n", vec![], Some("1"), None),
            (
                b"data: a\n\nid: 1\n\n",
                vec![ev("message", "a", None)],
                Some("1"),
                None,
            ),
            // It takes effect at the blank line, as in the spec.
            (b"id: 1\n", vec![], None, None),
            // `id:` with an empty value empties it (`None`: never sent).
            (b"id: 1\ndata: a\n\nid\n\n", vec![a1.clone()], None, None),
            (
                b"id: 1\n\nid:\ndata: b\n\n",
                vec![ev("message", "b", None)],
                None,
                None,
            ),
            // An ID containing NUL is ignored.
            (b"id: 1\n\nid: a\0b\n\n", vec![], Some("1"), None),
            (
                b"id: 1\n\ndata: b\n\n",
                vec![ev("message", "b", Some("1"))],
                Some("1"),
                None,
            ),
            (b"retry: 1500\n\n", vec![], None, ms(1500)),
            (b"retry: 1500\n", vec![], None, ms(1500)),
            (
                b"retry: 10\n\nretry: x\n\nretry:\n\nretry: -1\n\n",
                vec![],
                None,
                ms(10),
            ),
            (b"retry: 15x\n\nretry: 1 5\n\n", vec![], None, None),
            (b"retry: 99999999999999999999999\n\n", vec![], None, None),
        ];
        for (input, frames, id, retry) in table {
            let want = (frames.clone(), id.map(str::to_owned), *retry);
            assert_eq!(
                state_after(input),
                want,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
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

    #[test]
    fn sse_endless_data_lines_stop_at_the_event_cap() {
        // 493 MB once: `data:` lines without the blank line that ends the
        // event. Both in whole lines and in pieces of a line, the buffer
        // stays within its cap and the error is typed.
        const CAP: usize = 64 * 1024;
        for (line, chunk) in [
            (&b"data: 0123456789abcdef\n"[..], 4096),
            (b"data:x\n", 7),
            (b"data: ", 1000),
        ] {
            let mut parser = SseParser::with_limits(usize::MAX, CAP);
            let mut input = line.repeat(4 * CAP / line.len());
            if line == b"data: " {
                // One endless `data:` line: its bytes go straight to the event.
                input = [line, &vec![b'x'; 4 * CAP][..]].concat();
            }
            let err = input
                .chunks(chunk)
                .find_map(|c| parser.push(c).err())
                .expect("the cap is hit");
            assert_eq!(err, SseError::EventTooLarge { limit: CAP }, "{line:?}");
            assert!(parser.data.len() <= CAP, "{}", parser.data.len());
            assert!(
                parser.data.capacity() <= 2 * CAP,
                "{}",
                parser.data.capacity()
            );
        }
    }

    #[test]
    fn sse_a_long_data_line_grows_in_steps_that_end_at_the_event_cap() {
        // Every capacity the data buffer takes is the cap over a power of 4,
        // so no growth moves a line of nearly the cap's size for a few bytes.
        for (cap, chunk) in [(MAX_EVENT_BYTES, 1024), (100_000, 777), (4096, 1)] {
            let mut parser = SseParser::with_limits(usize::MAX, cap);
            let input = [&b"data: "[..], &vec![b'x'; cap - 1], b"\n\n"].concat();
            let mut steps = vec![];
            let mut events = vec![];
            for c in input.chunks(chunk) {
                parser.push_events(c, &mut events).unwrap();
                let capacity = parser.data.capacity();
                if capacity > 0 && steps.last() != Some(&capacity) {
                    steps.push(capacity);
                }
            }
            assert_eq!(events.len(), 1);
            assert_eq!(events[0].data.len(), cap - 1);
            assert_eq!(steps.last(), Some(&cap), "{steps:?}");
            for step in &steps {
                let mut at = cap;
                while at > *step {
                    at /= 4;
                }
                assert_eq!(at, *step, "cap {cap}: {steps:?}");
            }
        }
    }

    #[test]
    fn sse_endless_line_stops_at_the_line_cap() {
        const CAP: usize = 16 * 1024;
        for start in [&b""[..], b":", b"event: ", b"data: "] {
            let mut parser = SseParser::with_limits(CAP, usize::MAX);
            let err = std::iter::once(start)
                .chain(std::iter::repeat_n(&[b'y'; 1000][..], 4 * CAP / 1000))
                .find_map(|c| parser.push(c).err())
                .expect("the cap is hit");
            assert_eq!(err, SseError::LineTooLong { limit: CAP }, "{start:?}");
            assert!(parser.line.capacity() <= 2 * CAP && parser.data.capacity() <= 2 * CAP);
        }
    }

    /// An input, its line and event caps, and what parsing it gives: the
    /// number of events, or the cap passed.
    type CapRow = (&'static [u8], usize, usize, Result<usize, SseError>);

    /// Every row gives the same result in one chunk and cut anywhere in three.
    fn assert_caps_for_any_chunking(table: &[CapRow]) {
        for (input, max_line, max_event, want) in table {
            let run = |chunks: &[&[u8]]| {
                let mut parser = SseParser::with_limits(*max_line, *max_event);
                let mut frames = Vec::new();
                for chunk in chunks {
                    parser.push_into(chunk, &mut frames)?;
                }
                parser.finish().map(|()| frames.len())
            };
            assert_eq!(&run(&[input]), want, "{:?}", String::from_utf8_lossy(input));
            for i in 0..=input.len() {
                for j in i..=input.len() {
                    let chunks = [&input[..i], &input[i..j], &input[j..]];
                    assert_eq!(&run(&chunks), want, "{input:?} split at {i}, {j}");
                }
            }
        }
    }

    #[test]
    fn sse_caps_are_exact_and_the_same_for_any_chunking() {
        // `data: ` + 4 bytes of value + `\n` is 5 bytes of data.
        assert_caps_for_any_chunking(&[
            (b"data: abcd\n\n", 10, 5, Ok(1)),
            (
                b"data: abcde\n\n",
                10,
                5,
                Err(SseError::LineTooLong { limit: 10 }),
            ),
            (
                b"data: abcd\n\n",
                9,
                5,
                Err(SseError::LineTooLong { limit: 9 }),
            ),
            (
                b"data: abcd\n\n",
                10,
                4,
                Err(SseError::EventTooLarge { limit: 4 }),
            ),
            (b"data: ab\ndata: c\n\n", 100, 5, Ok(1)),
            (b"data: ab\ndata:\ndata\n\n", 100, 5, Ok(1)),
            (
                b"data: ab\ndata: c\ndata\n\n",
                100,
                5,
                Err(SseError::EventTooLarge { limit: 5 }),
            ),
        ]);
    }

    #[test]
    fn sse_past_both_caps_the_one_passed_first_is_named_for_any_chunking() {
        // The line's on a tie (`data: ` + 3 value bytes is the 9th byte and
        // 3 + 1 bytes of data).
        assert_caps_for_any_chunking(&[
            (
                b"data: abcdefgh\n\n",
                8,
                2,
                Err(SseError::EventTooLarge { limit: 2 }),
            ),
            (
                b"data: abcdefgh\n\n",
                8,
                3,
                Err(SseError::LineTooLong { limit: 8 }),
            ),
            (
                b"data: abcdefgh\n\n",
                7,
                30,
                Err(SseError::LineTooLong { limit: 7 }),
            ),
            (
                b"data:abcdefgh\n\n",
                7,
                3,
                Err(SseError::LineTooLong { limit: 7 }),
            ),
            (
                b"data:abcdefgh\n\n",
                7,
                2,
                Err(SseError::EventTooLarge { limit: 2 }),
            ),
        ]);
    }

    #[test]
    fn sse_caps_apply_to_comments_and_other_fields_for_any_chunking() {
        assert_caps_for_any_chunking(&[
            (
                b": abcdefghij\n",
                10,
                5,
                Err(SseError::LineTooLong { limit: 10 }),
            ),
            (
                b"event: abcdefghij\n",
                10,
                5,
                Err(SseError::LineTooLong { limit: 10 }),
            ),
        ]);
    }

    mod chunking {
        use super::*;
        use proptest::prelude::*;

        /// Pieces an input is made of: every kind of line, every line
        /// ending, non-ASCII and invalid bytes, a BOM, NUL in an ID.
        const PIECES: &[&[u8]] = &[
            b"data: x",
            b"data:",
            b"data",
            b"data: Gr\xC3\xB6\xC3\x9Fe \xF0\x9F\xA6\x80",
            b"data: \xE2\x82",
            b"\xFF",
            b"event: node_start",
            b"event:",
            b"id: 7",
            b"id:",
            b"id: a\0b",
            b"retry: 300",
            b"retry: x",
            b": keepalive",
            b":",
            b"unknown: y",
            b"\xEF\xBB\xBF",
            b"\n",
            b"\r",
            b"\r\n",
            b"\n\n",
            b"\r\r",
        ];

        #[derive(Debug, PartialEq)]
        struct Outcome {
            frames: Vec<Frame>,
            end: Result<(), SseError>,
            last_event_id: Option<String>,
            retry: Option<Duration>,
        }

        fn run(chunks: &[&[u8]], caps: (usize, usize)) -> Outcome {
            let mut parser = SseParser::with_limits(caps.0, caps.1);
            let mut frames = Vec::new();
            let end = chunks
                .iter()
                .try_for_each(|c| parser.push_into(c, &mut frames))
                .and_then(|()| parser.finish());
            Outcome {
                frames,
                end,
                last_event_id: parser.last_event_id().map(str::to_owned),
                retry: parser.retry(),
            }
        }

        fn input() -> impl Strategy<Value = Vec<u8>> {
            prop::collection::vec(prop::sample::select(PIECES), 0..40).prop_map(|p| p.concat())
        }

        fn caps() -> impl Strategy<Value = (usize, usize)> {
            prop_oneof![
                Just((MAX_LINE_BYTES, MAX_EVENT_BYTES)),
                (1usize..40, 1usize..60)
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            #[test]
            fn sse_every_chunking_yields_what_one_chunk_does(
                input in input(),
                caps in caps(),
                mut cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
            ) {
                let whole = run(&[&input], caps);
                let single: Vec<&[u8]> = input.chunks(1).collect();
                prop_assert_eq!(&run(&single, caps), &whole, "1-byte chunks");
                // Random cuts.
                let mut at: Vec<usize> = cuts.drain(..).map(|i| i.index(input.len() + 1)).collect();
                at.sort_unstable();
                let mut chunks = Vec::new();
                let mut from = 0;
                for to in at.into_iter().chain([input.len()]) {
                    chunks.push(&input[from..to]);
                    from = to;
                }
                prop_assert_eq!(&run(&chunks, caps), &whole, "cut into {:?}", chunks);
                // A cut after every `\r`, so a `\r\n` always straddles two chunks.
                let cr: Vec<&[u8]> = input.split_inclusive(|&b| b == b'\r').collect();
                prop_assert_eq!(&run(&cr, caps), &whole, "CR at chunk ends");
            }
        }
    }
}
