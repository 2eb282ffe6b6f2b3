//! The platform-limits stage: Traefik and the AI gateway count every
//! request of a route per egress address and tenant, and answer 429 before
//! any container sees it (off unless [`crate::SimConfig::with_platform_limits`]).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::notes::{Arrival, Lookup, shaped};
use super::scope::DEFAULT_TENANT;
use crate::handlers::reply::plain;
use crate::listener::Peer;
use crate::shared::Shared;

/// The stage.
pub(super) async fn limits(
    State(shared): State<Arc<Shared>>,
    req: Request,
    next: Next,
) -> Response {
    let ext = req.extensions();
    let refused = match (
        &shared.config.platform_limits,
        ext.get::<Peer>(),
        ext.get::<Lookup>(),
        ext.get::<Arrival>(),
    ) {
        (Some(limits), Some(peer), Some(Lookup(Ok(route))), Some(arrived)) => {
            let tenant = req
                .headers()
                .get("x-tenant-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or(DEFAULT_TENANT);
            let counters = &shared.limits;
            counters.check(limits, peer.0, tenant, route.endpoint, arrived.0)
        }
        _ => None,
    };
    match refused {
        Some(refused) => shaped(plain(429, "Too Many Requests"), refused.fault()),
        None => next.run(req).await,
    }
}
