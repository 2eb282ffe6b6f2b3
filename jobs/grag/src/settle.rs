//! What a failed step means for its job: a pure decision on the error.

use std::time::Duration;

use grag_client::Error;
use sdk_runtime::OutcomeKind;

/// The fate of a job whose step failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Keep it for replay once the breaker closes: an outage, not a verdict
    /// on the job. `after`: not before this wait (the platform asked for it).
    Replay { after: Option<Duration> },
    /// Nothing the platform will accept later: keep the error for the UI's
    /// re-upload path.
    Fail,
}

/// Decides from the error alone. An open breaker, a connection that failed
/// for good, the deadline, a 5xx, a 429 and any answer that carried
/// `Retry-After` (WAL backpressure) are outages: the job is replayed. So is
/// a 401: the write waits for the key to work again (T3 raises its alert),
/// it is not dropped. A 404 or 422 while a deploy is suspected is the
/// deploy's, not the job's. Every other answer (400, 402, 403, a 404 of a
/// missing knowledge base, a 413 a split could not cure, a 422, a body that
/// does not decode) fails the job.
pub fn settle(error: &Error, deploy_suspected: bool) -> Settle {
    let after = error.retry_after();
    if after.is_some() {
        return Settle::Replay { after };
    }
    let replay = is_outage(error)
        || match error.status() {
            Some(401) => true,
            Some(404 | 422) => deploy_suspected,
            _ => false,
        };
    if replay {
        Settle::Replay { after: None }
    } else {
        Settle::Fail
    }
}

/// The platform (or the way to it) is down, not the request wrong.
pub fn is_outage(error: &Error) -> bool {
    match error.kind() {
        OutcomeKind::CircuitOpen | OutcomeKind::Connection | OutcomeKind::Deadline => true,
        OutcomeKind::Status => matches!(error.status(), Some(429 | 500..=599)),
        _ => false,
    }
}
