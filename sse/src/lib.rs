//! Server-sent events (GRAG §6): an incremental `text/event-stream` parser and
//! a stream wrapper with a no-byte watchdog.
//!
//! The parser follows the WHATWG "event stream interpretation" rules: invalid
//! UTF-8 becomes U+FFFD (a stray byte in a keepalive must not end a job's
//! progress), a leading BOM is skipped once, CR, LF and CRLF all end a line,
//! and the last-event-ID and reconnection time are stream state. It departs
//! from the spec in two places, both typed errors: a line or an event's data
//! past its cap (a peer must not grow our memory without bound), and an event
//! cut off by the end of the body — a chat answer that stops mid-event was
//! likely never persisted (GRAG §6.2), so the caller must know.
//!
//! It is written for speed as well: lines are found with `memchr`, a line the
//! chunk holds whole is parsed in place, only a line split across chunks is
//! copied (a `data:` line straight into the event's data), and the buffers are
//! reused, so the cost is linear in the input however it is chunked.
//!
//! [`EventStream`] adds the watchdog the policy asks for (45 s on ingest
//! progress, 150 s on chat): any byte, keepalive comments included, proves the
//! stream alive. Time comes from `tokio::time`, so tests run under a paused
//! clock without sleeping.

mod parser;
mod stream;

pub use parser::{Frame, SseError, SseEvent, SseParser};
pub use stream::{EventStream, StreamFailure, error_chain};

/// Longest line (terminator excluded) the parser buffers by default. A peer
/// that never sends a line break must not grow our memory without bound.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

/// Most data one event gathers by default. A peer that sends `data:` lines
/// and never the blank line that ends the event must not either.
pub const MAX_EVENT_BYTES: usize = 1024 * 1024;

/// Event type used when a block carries no (or an empty) `event:` field.
pub const DEFAULT_EVENT: &str = "message";
