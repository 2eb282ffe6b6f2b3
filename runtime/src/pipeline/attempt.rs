//! The attempt: one request of the call sent on the transport and read,
//! under the attempt's own timeout and the call's deadline.

use std::time::Duration;

use tokio::time::Instant;

use super::Run;
use crate::clock;
use crate::plan::Plan;
use crate::telemetry;
use crate::transport::Transport;
use crate::wire::{Attempt, Wire, perform};

/// One attempt as it went out and came back.
pub(crate) struct Sent {
    pub attempt: Attempt,
    /// A stream's open response, on a 2xx.
    pub response: Option<reqwest::Response>,
    /// The ID this attempt was sent with (`X-Request-ID`).
    pub request_id: String,
    pub started: Instant,
    /// The origin was deploy-suspected when the attempt started.
    pub deploy: bool,
    /// A stream's opening timed out before its head: a proxy may hold it.
    pub head_withheld: bool,
    /// The overall deadline ended the attempt in flight.
    pub overdue: bool,
    /// The attempt's span (`spans::attempt`).
    pub span: tracing::Span,
}

/// Sends attempt `run.attempt` of the call on its rendered path and reads
/// its answer, within the attempt's timeout class (longer while a deploy
/// is suspected: `deploy`) and the call's deadline.
pub(super) async fn attempt(
    transport: &Transport,
    plan: &Plan,
    deploy: bool,
    run: &Run<'_, '_>,
    wire: Wire,
) -> Sent {
    let (call, endpoint) = (run.call, run.call.endpoint);
    let path = run.path.as_deref().unwrap_or_default();
    let request_id = uuid::Uuid::new_v4().to_string();
    let started = Instant::now();
    let timeout = call.timeout.unwrap_or(endpoint.timeout);
    let budget = plan.policy.timeouts[timeout].budget(deploy);
    let attempt_deadline = clock::after(started, budget).min(run.deadline);
    let request = transport.request(call, path, &request_id);
    telemetry::sent(plan.policy, &run.scope, &request_id, run.attempt);
    let caps = transport.read_caps(plan.policy, endpoint);
    let span = crate::spans::attempt(run.attempt);
    let performed = perform(&transport.pool, request, wire, caps);
    // As the call's loop: a `Span::none()` is not entered around it.
    let timed = if span.is_none() {
        tokio::time::timeout_at(attempt_deadline, performed).await
    } else {
        let performed = tracing::Instrument::instrument(performed, span.clone());
        tokio::time::timeout_at(attempt_deadline, performed).await
    };
    let overdue = timed.is_err() && attempt_deadline == run.deadline;
    let head_withheld = timed.is_err() && !overdue && wire == Wire::Stream;
    let (attempt, response) = timed.unwrap_or_else(|_| {
        let reason = timed_out(budget, wire);
        let failed = Attempt::Failed {
            maybe_sent: true,
            reason,
        };
        (failed, None)
    });
    Sent {
        attempt,
        response,
        request_id,
        started,
        deploy,
        head_withheld,
        overdue,
        span,
    }
}

/// Why an attempt that ran out of its own time failed.
fn timed_out(budget: Duration, wire: Wire) -> String {
    match wire {
        Wire::Stream => format!(
            "no response head within the {} ms attempt timeout (a proxy may be holding the stream)",
            budget.as_millis()
        ),
        Wire::Read => format!(
            "no answer within the {} ms attempt timeout",
            budget.as_millis()
        ),
    }
}
