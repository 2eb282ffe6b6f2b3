//! The front door of every platform request, as one axum middleware per
//! stage, outermost first: the log, the platform's limits, the route (404,
//! 405), deploy churn, fault rules, the scope headers as the real platform
//! checks them, then the route's handler. A stage that answers stops the
//! request there: a request a limit refused meets no fault rule, and the
//! log sees every answer.

mod churn;
mod faults;
mod limits;
mod notes;
mod record;
mod route;
mod scope;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{from_fn, from_fn_with_state};
use axum::response::Response;
use tower::ServiceBuilder;

use crate::faults::Fault;
use crate::handlers::ctx::Ctx;
use crate::shared::Shared;
use notes::{HandlerFault, Scope};
use route::{BODY_LIMIT, parse_query, route_of};
pub use scope::DEFAULT_TENANT;

/// Every path that is not an admin route: the stages, then the handler.
pub(crate) fn service(shared: Arc<Shared>) -> Router {
    let stages = ServiceBuilder::new()
        .layer(from_fn_with_state(shared.clone(), record::log))
        .layer(from_fn_with_state(shared.clone(), limits::limits))
        .layer(from_fn(route::route))
        .layer(from_fn_with_state(shared.clone(), churn::churn))
        .layer(from_fn_with_state(shared.clone(), faults::faults))
        .layer(from_fn_with_state(shared.clone(), scope::scope));
    Router::new()
        .fallback(handle)
        .layer(stages)
        .with_state(shared)
}

/// The route's handler, on the request as the stages left it.
async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let route = match route_of(&req) {
        Ok(route) => route,
        Err(answer) => return answer,
    };
    let (mut parts, body) = req.into_parts();
    let fault = parts.extensions.remove::<HandlerFault>().map(|f| f.0);
    let scope = parts.extensions.remove::<Scope>().unwrap_or_default();
    // The route stage read the body whole: this takes it back.
    let body = axum::body::to_bytes(body, BODY_LIMIT)
        .await
        .unwrap_or_default();
    let cut = fault == Some(Fault::ResetMidBody);
    let ctx = Ctx {
        endpoint: route.endpoint,
        params: route.params,
        query: parse_query(parts.uri.query().unwrap_or("")),
        pipeline_id: scope.pipeline_id,
        body,
        tenant: scope.tenant.unwrap_or_default(),
        workspace: scope.workspace,
        fault,
    };
    let response = crate::handlers::dispatch(&shared, ctx).await;
    match cut {
        true => faults::cut_mid_body(response).await,
        false => response,
    }
}
