//! The deploy-churn stage: while containers come up behind the proxy, a
//! connection that raced the listener's cut gets a 502, and then routes
//! answer 401, 404 and 422 in turn (health already 200).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use sdk_runtime::ScopeNeed;
use tokio::time::Instant;

use super::notes::shaped;
use super::route::route_of;
use crate::faults::ChurnAnswer;
use crate::handlers::reply::{detail, plain, unprocessable};
use crate::shared::Shared;

/// The stage.
pub(super) async fn churn(State(shared): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let route = match route_of(&req) {
        Ok(route) => route,
        Err(answer) => return answer,
    };
    let public = route.endpoint.scope == ScopeNeed::Public;
    match shared.faults.churn_answer(Instant::now(), public) {
        Some(answer) => {
            let (label, response) = churned(answer);
            shaped(response, label)
        }
        None => next.run(req).await,
    }
}

/// The answer of a churning deploy, and its log name.
fn churned(answer: ChurnAnswer) -> (&'static str, Response) {
    match answer {
        // Only a connection that raced the cut gets here.
        ChurnAnswer::Refused => ("deploy_churn:refused", plain(502, "Bad Gateway")),
        ChurnAnswer::Flaky(n) => match n % 3 {
            0 => ("deploy_churn:401", detail(401, "Invalid API key")),
            1 => ("deploy_churn:404", plain(404, "404 page not found")),
            _ => (
                "deploy_churn:422",
                unprocessable(&["header", "x-tenant-id"], "Field required"),
            ),
        },
    }
}
