//! The log stage, outermost: the request is logged as it arrives, its
//! route looked up once for every stage, and what the inner stages did
//! (the tenant, the faults, what becomes of the connection) is written to
//! its entry when they answer. It also counts the request in flight until
//! its body is done and gives the answer its `X-Request-ID`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::Response;
use tokio::time::Instant;

use super::notes::{Aftermath, Arrival, Lookup, Shaped, TenantSeen};
use super::route::resolve;
use crate::listener::{CloseConn, ConnId};
use crate::log::LoggedRequest;
use crate::shared::Shared;

/// Counts a request in flight until its response body is finished or
/// dropped, and logs when that was.
struct InFlight(Arc<Shared>, Option<u64>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        if let Some(seq) = self.1 {
            let now = Instant::now();
            self.0.log.update(seq, |e| e.ended = Some(now));
        }
    }
}

/// The stage.
pub(super) async fn log(State(shared): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let arrived = Instant::now();
    let in_flight = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    let mut guard = InFlight(shared.clone(), None);
    let (mut parts, body) = req.into_parts();
    let request_id = request_id(&parts);
    let close = parts.extensions.get::<CloseConn>().cloned();
    let lookup = Lookup(resolve(
        &parts.method,
        parts.uri.path(),
        &shared.config.without_routes,
    ));
    let seq = shared.log.push(entry(&parts, &lookup, arrived, in_flight));
    guard.1 = Some(seq);
    parts.extensions.insert(lookup);
    parts.extensions.insert(Arrival(arrived));
    let mut response = next.run(Request::from_parts(parts, body)).await;

    let tenant = response
        .extensions_mut()
        .remove::<TenantSeen>()
        .map(|t| t.0);
    let faults = response
        .extensions_mut()
        .remove::<Shaped>()
        .unwrap_or_default();
    let faults: Vec<String> = faults.0.into_iter().map(str::to_owned).collect();
    let aftermath = response.extensions_mut().remove::<Aftermath>();
    if aftermath == Some(Aftermath::DropUnanswered) {
        shared.log.update(seq, |e| {
            e.tenant = tenant;
            e.faults = faults;
        });
        if let Some(close) = &close {
            close.now();
        }
        // The connection task drops this future, and the answer held in
        // it, with the connection.
        let _unsent = response;
        return std::future::pending().await;
    }
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert("x-request-id", v);
    }
    let status = response.status().as_u16();
    shared.log.update(seq, |e| {
        e.status = Some(status);
        e.tenant = tenant;
        e.faults = faults;
    });
    let close = close
        .filter(|_| aftermath == Some(Aftermath::CloseAfterAnswer))
        .map(CloseConn::after_answer);
    // The request stays in flight until its body is done (streams included).
    let (parts, body) = response.into_parts();
    let body = Body::from_stream(futures_util::StreamExt::map(
        body.into_data_stream(),
        move |chunk| {
            let _ = &guard;
            let _ = &close;
            chunk
        },
    ));
    Response::from_parts(parts, body)
}

/// The client's `X-Request-ID`, or a new one.
fn request_id(parts: &Parts) -> String {
    parts
        .headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
}

/// The log entry of a request as it arrives.
fn entry(parts: &Parts, lookup: &Lookup, arrived: Instant, in_flight: usize) -> LoggedRequest {
    LoggedRequest {
        seq: 0,
        connection: parts.extensions.get::<ConnId>().map_or(0, |c| c.0),
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        arrived,
        at_ms: 0.0,
        in_flight,
        operation: lookup.0.as_ref().ok().map(|r| r.endpoint.operation),
        tenant: None,
        status: None,
        faults: Vec::new(),
        ended: None,
    }
}
