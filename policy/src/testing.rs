//! Fixtures for tests of the runtime's parts: a route no spec holds (the
//! example breaker, [`BreakerPolicy::example`](crate::policy::BreakerPolicy::example),
//! is written beside its type).
//! Behind the `testing` feature, so they are not part of the vocabulary a
//! generated crate sees.

use crate::endpoint::{Conflict, Endpoint, Lane, Method, ScopeNeed};
use crate::index::{BudgetIx, RetryIx, RouteIx, TimeoutIx};

/// A public liveness read, `GET /health`: the probe and canary of the
/// example breaker, whose sending is the client's business, not the state
/// machine's.
pub static HEALTH: Endpoint = Endpoint {
    service: "svc",
    operation: "health",
    method: Method::Get,
    path: "/health",
    scope: ScopeNeed::Public,
    lane: Lane::Key,
    timeout: TimeoutIx::new(0),
    retry: RetryIx::new(0),
    idempotent: true,
    budget: BudgetIx::new(0),
    replay: false,
    conflict: Conflict::Error,
    pipeline_id: false,
    stream: None,
    max_response: 1024,
    route: RouteIx::new(0),
};
