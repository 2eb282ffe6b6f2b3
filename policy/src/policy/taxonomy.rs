//! The taxonomy: how an outcome is classified, and what a row decides.

use std::time::Duration;

use crate::endpoint::{Conflict, Endpoint};
use crate::index::{DetailIx, RetryIx, RowIx};
use crate::spelled::spelled;

/// Which kind of outcome a taxonomy row matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub enum OutcomeKind {
    /// Refused, reset, TLS failure or per-attempt timeout.
    Connection,
    /// An HTTP status was received.
    Status,
    /// A 2xx body that does not decode.
    Decode,
    /// The overall deadline ended the call.
    Deadline,
    /// The breaker refused the call client-side.
    CircuitOpen,
    /// A scope or ID was refused client-side.
    InvalidScope,
    /// A request that could not be built (nothing was sent).
    InvalidRequest,
    /// A 2xx body larger than the route's cap (reading stopped there).
    TooLarge,
    StreamError,
    StreamTimeout,
    StreamStalled,
    /// A job followed on a stream (or its status route) ended failed or
    /// cancelled.
    JobFailed,
}

spelled!(OutcomeKind {
    Connection => "connection",
    Status => "status",
    Decode => "decode",
    Deadline => "deadline",
    CircuitOpen => "circuit_open",
    InvalidScope => "invalid_scope",
    InvalidRequest => "invalid_request",
    TooLarge => "too_large",
    StreamError => "stream_error",
    StreamTimeout => "stream_timeout",
    StreamStalled => "stream_stalled",
    JobFailed => "job_failed",
});

/// Conditions of a taxonomy row; `None` matches anything.
#[derive(Debug, Clone, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct RowMatch {
    pub outcome: OutcomeKind,
    /// Inclusive status range (a single status is `(s, s)`).
    pub status: Option<(u16, u16)>,
    /// The detail set the answer's `detail` must match.
    pub detail: Option<DetailIx>,
    pub retry_after: Option<bool>,
    pub conflict: Option<Conflict>,
    /// `Some(true)`: only routes that present no key (an unauthenticated lane).
    pub keyless: Option<bool>,
    /// Only these routes (the policy's own descriptors, compared by address).
    pub routes: Option<&'static [&'static Endpoint]>,
}

/// One row of the error taxonomy.
#[derive(Debug, Clone, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct TaxonomyRow {
    /// This row's own position in [`Policy::taxonomy`](super::Policy::taxonomy): an error keeps it,
    /// and a generated crate reads its class from it.
    pub index: RowIx,
    pub row: &'static str,
    pub matches: RowMatch,
    /// Error class (snake_case), for logs and metrics.
    pub class: &'static str,
    /// The row turns the outcome into a success (the spec's `success` class).
    pub success: bool,
    pub retry: Option<RetryIx>,
    pub feeds_breaker: bool,
    /// A call that is not idempotent and ends here after its request may
    /// have reached the server has an unknown outcome: the server may have
    /// applied it (a 500 raised after the write, a gateway's 502/504 whose
    /// upstream got the request). Never re-sent blindly; read the state first.
    pub outcome_unknown: bool,
    pub alert: Option<&'static str>,
    /// Raise `alert` only outside the deploy-suspected window.
    pub alert_outside_deploy: bool,
    /// The feature state the route's features enter when this row ends a call.
    pub feature_state: Option<&'static str>,
    /// A stable answer: remembered per route this long, failing fast meanwhile.
    pub remember_for: Option<Duration>,
    /// The row that applies when the retry brings back the same detail.
    pub escalate_to: Option<RowIx>,
    /// What this row means for a queued write: replayed, or failed.
    pub replay: Replay,
    pub action: &'static str,
    /// The German message of `class`, resolved by the generator (the same as
    /// [`Policy::message`](super::Policy::message), without a lookup on the error path).
    pub message: Option<&'static str>,
    /// The German message instead of `message` when the outcome is unknown
    /// (`outcome_unknown`): check the current state before trying again.
    pub unknown_message: Option<&'static str>,
}

impl TaxonomyRow {
    /// Whether this row turns the outcome into a success.
    pub fn is_success(&self) -> bool {
        self.success
    }
}

/// What a failure means for a queued write (a job of the replay queue,
/// GRAG §5.3): whether the job waits and is sent again, or fails for a
/// person to decide. The taxonomy row says it, so the queue keeps no status
/// list of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub enum Replay {
    /// The platform, or the way to it, is down: the job is replayed once
    /// the breaker closes, and a deploy is suspected meanwhile.
    Outage,
    /// Not now, but not an outage either (the platform asked for time with
    /// `Retry-After`, a feature is switched off): the job is replayed after
    /// the platform's wait, or the queue's pause.
    Later,
    /// Transient while a deploy is suspected (containers coming up behind
    /// the proxy): replayed then, a verdict on the job otherwise.
    Deploy,
    /// A verdict on the write: the job fails and keeps its error.
    Never,
}

spelled!(Replay {
    Outage => "outage",
    Later => "later",
    Deploy => "deploy",
    Never => "never",
});

impl Replay {
    /// Whether a job that failed on this row is replayed, given whether a
    /// deploy is suspected.
    pub fn replays(self, deploy_suspected: bool) -> bool {
        match self {
            Replay::Outage | Replay::Later => true,
            Replay::Deploy => deploy_suspected,
            Replay::Never => false,
        }
    }
}

/// Named substrings of the `detail` text (matched case-insensitively).
#[derive(Debug, Clone, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct DetailSet {
    pub name: &'static str,
    pub contains: &'static [&'static str],
}

impl DetailSet {
    /// Whether `detail` contains one of the set's substrings, ignoring ASCII
    /// case. Allocation-free: it runs on every classified error answer.
    pub fn matches(&self, detail: &str) -> bool {
        let haystack = detail.as_bytes();
        self.contains.iter().any(|needle| {
            let needle = needle.as_bytes();
            needle.is_empty()
                || haystack
                    .windows(needle.len())
                    .any(|window| window.eq_ignore_ascii_case(needle))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detail_sets_match_substrings_ignoring_case() {
        let dark = DetailSet {
            name: "dark",
            contains: &["feature flag", "disabled"],
        };
        assert!(dark.matches("Rerank is DISABLED on this instance"));
        assert!(dark.matches("blocked by Feature Flag rerank_v2"));
        assert!(!dark.matches("admission control: overloaded"));
        assert!(!dark.matches(""));
        assert!(!dark.matches("disable"), "a prefix of a needle is no match");
    }
}
