//! Stream contracts: events, buffering, stages and the polling fallback.

use std::time::Duration;

use crate::endpoint::Endpoint;

/// An SSE contract.
#[derive(Debug, Clone, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct StreamPolicy {
    pub name: &'static str,
    /// Silence (no byte at all) after which the stream counts as stalled.
    pub watchdog: Duration,
    pub keepalive: Option<Duration>,
    pub ceiling: Option<Duration>,
    pub resync_after_reconnect: bool,
    pub resend: bool,
    /// A clean close before a terminal event is a drop, not an end.
    pub ends_with_terminal: bool,
    /// The `event:` name that fails the stream (the `stream_error` outcome).
    pub error_event: &'static str,
    /// The `event:` name of the server's ceiling (the `stream_timeout` outcome).
    pub timeout_event: &'static str,
    pub first_event: Option<&'static str>,
    pub terminal_events: &'static [&'static str],
    /// The status route that stands in for the stream when it fails (a job's
    /// progress); `None`: a failed stream is the caller's error.
    pub fallback: Option<StreamFallback>,
    /// How the stream reports its stages (a chat turn's trace), `None` when
    /// it does not.
    pub stages: Option<StagePolicy>,
    /// What the UI shows when the stream ends without its answer (a chat
    /// turn): the user's message is kept, a resend is offered.
    pub lost_copy: Option<&'static str>,
}

/// A proxy that buffers event streams (§6.4) holds every byte back and
/// delivers the stream in one burst when it ends. A stream whose events
/// (at least `min_events`) all arrived within `burst` of each other, after
/// `silent_for` or more of nothing since it opened, was buffered; after
/// `confirm_after` such streams buffering is confirmed: the alert is raised
/// and jobs are followed by polling alone from then on.
#[derive(Debug, Clone, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct BufferingRule {
    #[bake(with = crate::bake::suffixed)]
    pub min_events: u32,
    pub burst: Duration,
    pub silent_for: Duration,
    #[bake(with = crate::bake::suffixed)]
    pub confirm_after: u32,
    pub alert: &'static str,
}

/// A stream's stage trace: which events report stages, and which stages fail
/// closed. Every other failed stage fails open: the stream goes on, the
/// result is marked degraded and so is the feature.
#[derive(Debug, Clone, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct StagePolicy {
    /// The event that reports a stage (`trace`).
    pub event: &'static str,
    pub stage_field: &'static str,
    pub status_field: &'static str,
    /// Status values that mean the stage failed.
    pub failed: &'static [&'static str],
    /// Stages whose failure ends the stream.
    pub fail_closed: &'static [&'static str],
    /// The field with the stage's error text, if any.
    pub detail_field: Option<&'static str>,
    /// The feature shown degraded while a stage fails open.
    pub feature: &'static str,
}

/// How a stream falls back to polling its status route, and how that route's
/// answer reads.
#[derive(Debug, Clone, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct StreamFallback {
    /// The status route; its path parameters are the stream route's.
    pub route: &'static Endpoint,
    /// The answer's field holding the job's state.
    pub status_field: &'static str,
    /// States (and terminal event names) that end the job with its result.
    pub completed: &'static [&'static str],
    /// States (and terminal event names) that end the job with its error.
    pub failed: &'static [&'static str],
    /// The field (of the answer, or of a terminal event's data) with the
    /// job's error text.
    pub error_field: Option<&'static str>,
    /// Polls of a running job after a fallback before the stream is opened
    /// again (0: never again).
    #[bake(with = crate::bake::suffixed)]
    pub reopen_after: u32,
}
