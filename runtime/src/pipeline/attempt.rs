//! The attempt: one request of the call sent on the transport and read,
//! under the attempt's own timeout and the call's deadline.

use std::time::Duration;

use tokio::time::Instant;

use crate::call::Call;
use crate::clock;
use crate::plan::Plan;
use crate::telemetry::{self, LogScope};
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

/// One request of a call, as the attempt line and the wire need it.
pub(crate) struct Request<'r> {
    pub call: &'r Call<'r>,
    /// The call's rendered path.
    pub path: &'r str,
    pub scope: &'r LogScope<'r>,
    /// The attempt's number, from 1.
    pub number: u32,
}

/// One request as it went out and what came back before `until`.
pub(crate) struct Exchange {
    /// The answer and, on a stream's 2xx, its open response; `None` when
    /// `until` came first.
    pub answer: Option<(Attempt, Option<reqwest::Response>)>,
    /// The ID the request was sent with (`X-Request-ID`).
    pub request_id: String,
    pub started: Instant,
}

/// Sends `request` on the transport and reads its answer, bounded by the
/// route's caps, until `until`, inside `span`: the one place a request is
/// made, for the call's attempts and the breaker's probes alike.
pub(crate) async fn once(
    transport: &Transport,
    plan: &Plan,
    request: Request<'_>,
    wire: Wire,
    until: Instant,
    span: &tracing::Span,
) -> Exchange {
    let endpoint = request.call.endpoint;
    let request_id = uuid::Uuid::new_v4().to_string();
    let started = Instant::now();
    let sent = transport.request(request.call, request.path, &request_id);
    telemetry::sent(plan.policy, request.scope, &request_id, request.number);
    let caps = transport.read_caps(plan.policy, endpoint);
    let performed = perform(&transport.pool, sent, wire, caps);
    // A `Span::none()` is not entered around it, as the call's loop.
    let answer = if span.is_none() {
        tokio::time::timeout_at(until, performed).await
    } else {
        let performed = tracing::Instrument::instrument(performed, span.clone());
        tokio::time::timeout_at(until, performed).await
    };
    Exchange {
        answer: answer.ok(),
        request_id,
        started,
    }
}

/// Sends attempt `request.number` of the call and reads its answer, within
/// the attempt's timeout class (longer while a deploy is suspected:
/// `deploy`) and the call's `deadline`.
pub(super) async fn attempt(
    transport: &Transport,
    plan: &Plan,
    deploy: bool,
    request: Request<'_>,
    deadline: Instant,
    wire: Wire,
) -> Sent {
    let (call, endpoint) = (request.call, request.call.endpoint);
    let timeout = call.timeout.unwrap_or(endpoint.timeout);
    let budget = plan.policy.timeouts[timeout].budget(deploy);
    let attempt_deadline = clock::after(Instant::now(), budget).min(deadline);
    let span = crate::spans::attempt(request.number);
    let exchange = once(transport, plan, request, wire, attempt_deadline, &span).await;
    let timed_out = exchange.answer.is_none();
    let overdue = timed_out && attempt_deadline == deadline;
    let head_withheld = timed_out && !overdue && wire == Wire::Stream;
    let (attempt, response) = exchange.answer.unwrap_or_else(|| {
        let reason = timed_out_reason(budget, wire);
        let failed = Attempt::Failed {
            maybe_sent: true,
            reason,
        };
        (failed, None)
    });
    Sent {
        attempt,
        response,
        request_id: exchange.request_id,
        started: exchange.started,
        deploy,
        head_withheld,
        overdue,
        span,
    }
}

/// Why an attempt that ran out of its own time failed.
fn timed_out_reason(budget: Duration, wire: Wire) -> String {
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
