//! The breaker's word on an attempt, asked before each one.

use std::sync::Arc;

use tokio::time::Instant;

use sdk_policy::endpoint::Endpoint;

use super::probe;
use super::state::{Admission, Generation};
use crate::client::Parts;
use crate::error::Error;

/// The generation attempt `attempt` of a call to `endpoint` is admitted
/// under, or the open breaker's refusal. A breaker no live loop probes is
/// probed by the call itself first.
pub(crate) async fn admit(
    parts: &Arc<Parts>,
    endpoint: &Endpoint,
    attempt: u32,
) -> Result<Generation, Error> {
    let breaker = &parts.gate.breaker;
    let mut admission = breaker.admit(Instant::now, false);
    if matches!(admission, Admission::Rejected(_)) && probe::catch_up(parts).await {
        admission = breaker.admit(Instant::now, false);
    }
    match admission {
        Admission::Allowed(g) | Admission::Canary(g) => Ok(g),
        Admission::Rejected(_) => {
            // Never open without a live probe loop (it may have died with
            // the runtime it was spawned on).
            probe::ensure_loop(parts);
            let error = parts.gate.circuit_open(&parts.plan, endpoint);
            Err(error.with_attempts(attempt - 1))
        }
    }
}
