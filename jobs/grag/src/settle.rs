//! What a failed step means for its job: a pure decision on the error.

use std::time::Duration;

use grag_client::Error;
use sdk_runtime::ErrorKind;

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
/// `Retry-After` (WAL backpressure) are outages: the job is replayed. A
/// 401/404/422 while a deploy is suspected is the deploy's, not the job's.
/// Every other answer (400, 402, 403, 404 of a missing knowledge base, 413
/// a split could not cure, 422, a body that does not decode) fails the job.
pub fn settle(error: &Error, deploy_suspected: bool) -> Settle {
    let after = error.retry_after();
    if after.is_some() {
        return Settle::Replay { after };
    }
    let outage = match error.kind() {
        ErrorKind::CircuitOpen | ErrorKind::Connection | ErrorKind::Deadline => true,
        ErrorKind::Status => match error.status() {
            Some(429) | Some(500..=599) => true,
            Some(401 | 404 | 422) => deploy_suspected,
            _ => false,
        },
        _ => false,
    };
    if outage {
        Settle::Replay { after: None }
    } else {
        Settle::Fail
    }
}
