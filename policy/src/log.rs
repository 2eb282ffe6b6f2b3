//! The log lines of an API. `tracing` fixes an event's target and field names
//! at compile time, so the generated crate writes the lines (with the spec's
//! names) and the runtime hands it the values through [`LogLines`].

use std::fmt;

use crate::scale::{Divisor, Scale};

/// The most path fields a policy may log (the generator refuses more).
pub const MAX_PATH_FIELDS: usize = 4;

/// The values of one attempt's line (policy: never a body, only its length
/// and sha256).
#[derive(Debug, Clone, Copy)]
pub struct AttemptLine<'a> {
    /// The request ID we sent.
    pub request_id: &'a str,
    /// The platform's echo of it, when that differs from what we sent (a
    /// proxy or the platform put its own): the ID its logs know the request by.
    pub echoed_request_id: Option<&'a str>,
    pub tenant: &'a str,
    pub workspace: Option<&'a str>,
    /// The values of the spec's path fields (`kb_id` from `{kb}`), in
    /// [`LogNames::path_fields`] order; `None` where the route has none.
    pub path_values: &'a [Option<&'a str>],
    pub pipeline_id: Option<&'a str>,
    pub service: &'a str,
    pub operation: &'a str,
    pub method: &'a str,
    /// The templated path.
    pub path: &'a str,
    pub status: Option<u16>,
    pub error_class: &'a str,
    pub row: &'a str,
    pub attempt: u32,
    pub retry_after_s: Option<u64>,
    pub latency_ms: u64,
    pub circuit_state: &'a str,
    pub body_len: usize,
    pub body_sha256: &'a str,
}

/// A request leaving: its ID is logged on send as well as on receive (policy
/// §10.1), so a request that never got an answer can still be found.
#[derive(Debug, Clone, Copy)]
pub struct SentLine<'a> {
    pub request_id: &'a str,
    pub tenant: &'a str,
    pub pipeline_id: Option<&'a str>,
    pub operation: &'a str,
    pub method: &'a str,
    /// The templated path.
    pub path: &'a str,
    pub attempt: u32,
}

/// The values of an alert's line; the detail only as length and sha256,
/// since it is part of a response body and may quote the request.
#[derive(Debug, Clone, Copy)]
pub struct AlertLine<'a> {
    pub alert: &'a str,
    /// `page`, `ops`: the spec's severity of the alert.
    pub severity: &'a str,
    pub endpoint: Option<&'a str>,
    pub row: Option<&'a str>,
    pub detail_len: usize,
    pub detail_sha256: &'a str,
    pub request_id: Option<&'a str>,
}

/// A call that used up its retries, with its request context: the same
/// scope and path fields as its attempt lines (Core: "with request/session
/// context"), so the line joins with them.
#[derive(Debug, Clone, Copy)]
pub struct ExhaustedLine<'a> {
    pub operation: &'a str,
    pub row: &'a str,
    pub status: Option<u16>,
    pub attempts: u32,
    pub request_id: Option<&'a str>,
    pub tenant: &'a str,
    pub workspace: Option<&'a str>,
    /// As [`AttemptLine::path_values`].
    pub path_values: &'a [Option<&'a str>],
    pub pipeline_id: Option<&'a str>,
}

/// A stream that failed after its head (a chat turn's stall, drop,
/// `event: error`, failed stage or deadline): the call's end, logged once.
#[derive(Debug, Clone, Copy)]
pub struct StreamFailedLine<'a> {
    pub stream: &'a str,
    pub operation: &'a str,
    pub row: &'a str,
    pub error_class: &'a str,
    /// The request id the stream's head was answered under.
    pub request_id: Option<&'a str>,
    pub tenant: &'a str,
    /// From the call's start to the failure.
    pub after_ms: u64,
}

/// Writes an API's log lines; implemented by its generated crate.
pub trait LogLines: Send + Sync + fmt::Debug {
    /// Whether attempt lines are written at all (nothing is computed for them otherwise).
    fn enabled(&self) -> bool;
    /// A request was handed to the connection (before its answer).
    fn sent(&self, line: &SentLine<'_>);
    fn attempt(&self, line: &AttemptLine<'_>);
    fn alert(&self, line: &AlertLine<'_>);
    fn retry_exhausted(&self, line: &ExhaustedLine<'_>);
    /// A stream failed after its head.
    fn stream_failed(&self, line: &StreamFailedLine<'_>);
    /// A breaker transition (`Opened`) and the state it leads to.
    fn breaker(&self, transition: &str, state: &str);
    /// A warm-up call after a close, and whether it succeeded.
    fn warm_up(&self, operation: &str, ok: bool);
}

/// What the lines are called, for the runtime's side of them.
#[derive(Debug, Clone, PartialEq, Eq, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct LogNames {
    /// The `tracing` target of attempt lines (`grag_client`).
    pub target: &'static str,
    /// Fields taken from the path: `(field, placeholders)`, e.g.
    /// `("kb_id", &["kb", "kb_id"])`.
    pub path_fields: &'static [(&'static str, &'static [&'static str])],
}

/// The writer is the generated crate's static: scaling keeps it.
impl Scale for &dyn LogLines {
    fn scale(&self, _: Divisor) -> Self {
        *self
    }
}

/// The writer is named, never written out: `&crate::log::LINES`.
#[cfg(feature = "bake")]
impl crate::bake::Bake for &dyn LogLines {
    fn bake(&self, names: &dyn crate::bake::Names) -> crate::bake::TokenStream {
        names.log_lines()
    }
}
