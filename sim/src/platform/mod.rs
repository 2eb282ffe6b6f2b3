//! The front door of every platform request: log, route lookup from the
//! generated client's `ENDPOINTS`, deploy churn, fault rules, the scope
//! headers as the real platform checks them, then the route's handler.
// Handlers answer early with `Err(response)`: the error side is the answer
// itself, returned one level up, so its size does not matter.
#![allow(clippy::result_large_err)]

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::response::Response;
use grag_client::policy::ENDPOINTS;
use sdk_runtime::{Endpoint, Lane, ScopeNeed};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::faults::{ChurnAnswer, Fault};
use crate::handlers::ctx::{Ctx, is_label};
use crate::handlers::reply::{detail, plain, unprocessable};
use crate::log::LoggedRequest;
use crate::sse::channel_body;
use crate::{CloseConn, ConnId, Peer, Shared};

/// The tenant a request without `X-Tenant-ID` is served as
/// (`allow_default_tenant=true`, the platform-wide default: policy §3).
pub const DEFAULT_TENANT: &str = "default";

/// Largest request body the simulator reads.
const BODY_LIMIT: usize = 64 * 1024 * 1024;

fn with_retry_after(mut response: Response, value: Option<String>) -> Response {
    if let Some(v) = value
        && let Ok(v) = HeaderValue::from_str(&v)
    {
        response.headers_mut().insert(header::RETRY_AFTER, v);
    }
    response
}

/// What the log learns while the request is served.
#[derive(Default)]
struct Meta {
    tenant: Option<String>,
    faults: Vec<String>,
}

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

/// The fallback handler: every path that is not an admin route.
pub(crate) async fn platform(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let arrived = Instant::now();
    let in_flight = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    let mut guard = InFlight(shared.clone(), None);
    let (parts, body) = req.into_parts();
    let request_id = parts
        .headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let close = parts.extensions.get::<CloseConn>().cloned();
    let peer = parts.extensions.get::<Peer>().map(|p| p.0);
    let resolved = resolve_without(
        &parts.method,
        parts.uri.path(),
        &shared.config.without_routes,
    );
    let seq = shared.log.push(LoggedRequest {
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
        operation: resolved.as_ref().ok().map(|(e, _)| e.operation),
        tenant: None,
        status: None,
        faults: Vec::new(),
        ended: None,
    });
    guard.1 = Some(seq);
    let mut meta = Meta::default();
    // The platform's limits come first: Traefik answers before any container.
    let refused = match (&shared.config.platform_limits, peer, &resolved) {
        (Some(limits), Some(peer), Ok((endpoint, _))) => {
            let tenant = parts
                .headers
                .get("x-tenant-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or(crate::DEFAULT_TENANT);
            shared.limits.check(limits, peer, tenant, endpoint, arrived)
        }
        _ => None,
    };
    let mut response = match refused {
        Some(refused) => {
            meta.faults.push(refused.fault().into());
            plain(429, "Too Many Requests")
        }
        None => serve(&shared, parts.headers, parts.uri, body, resolved, &mut meta).await,
    };
    if meta.faults.iter().any(|f| f == "applied_then_lost") {
        shared.log.update(seq, |e| {
            e.tenant = meta.tenant.take();
            e.faults = std::mem::take(&mut meta.faults);
        });
        if let Some(close) = &close {
            close.now();
        }
        // The connection task drops this future with the connection.
        return std::future::pending().await;
    }
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert("x-request-id", v);
    }
    let status = response.status().as_u16();
    // An unhandled error: the connection closes once this answer is out.
    let close = close
        .filter(|_| meta.faults.iter().any(|f| f == "unhandled"))
        .map(CloseConn::after_answer);
    shared.log.update(seq, |e| {
        e.status = Some(status);
        e.tenant = meta.tenant;
        e.faults = meta.faults;
    });
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

async fn serve(
    shared: &Arc<Shared>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    body: Body,
    resolved: Resolved,
    meta: &mut Meta,
) -> Response {
    let body = match axum::body::to_bytes(body, BODY_LIMIT).await {
        Ok(b) => b,
        Err(_) => return detail(400, "request body could not be read"),
    };
    let (endpoint, params) = match resolved {
        Ok(r) => r,
        Err(response) => return response,
    };
    // No ID of the platform is longer than the longest opaque one.
    let max = grag_client::policy::POLICY.ids.opaque_max_len;
    if let Some((name, _)) = params.iter().find(|(_, v)| v.len() > max) {
        return unprocessable(
            &["path", name],
            format!("String should have at most {max} characters"),
        );
    }

    // Deploy churn: containers coming up behind the proxy.
    let public = endpoint.scope == ScopeNeed::Public;
    match shared.faults.churn_answer(Instant::now(), public) {
        Some(ChurnAnswer::Refused) => {
            // Only a connection that raced the cut gets here.
            meta.faults.push("deploy_churn:refused".into());
            return plain(502, "Bad Gateway");
        }
        Some(ChurnAnswer::Flaky(n)) => {
            let (label, response) = match n % 3 {
                0 => ("deploy_churn:401", detail(401, "Invalid API key")),
                1 => ("deploy_churn:404", plain(404, "404 page not found")),
                _ => (
                    "deploy_churn:422",
                    unprocessable(&["header", "x-tenant-id"], "Field required"),
                ),
            };
            meta.faults.push(label.into());
            return response;
        }
        None => {}
    }

    // Scripted faults: the first live rule matching the route.
    let mut fault = shared.faults.take(endpoint);
    if let Some(f) = &fault {
        meta.faults.push(f.name().into());
    }
    match fault.clone() {
        Some(Fault::Delay { ms }) => {
            wait(shared, Duration::from_millis(ms)).await;
            fault = None;
        }
        Some(Fault::ColdStart) => {
            wait(shared, shared.config.cold_start).await;
            fault = None;
        }
        Some(Fault::ValidationEcho { max_length }) => {
            return validation_echo(&body, max_length);
        }
        Some(f) => {
            if let Some(answer) = status_fault(endpoint, &f) {
                return answer;
            }
        }
        None => {}
    }
    if endpoint.stream.is_some() && fault == Some(Fault::ResetMidBody) {
        fault = Some(Fault::SseDrop { after_events: 1 });
    }

    // The scope headers, as the platform checks them.
    if endpoint.scope != ScopeNeed::Public {
        if endpoint.lane == Lane::Key {
            let bearer = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .filter(|k| !k.is_empty());
            match (bearer, &shared.config.api_key) {
                (None, _) => return detail(401, "Not authenticated"),
                (Some(k), Some(want)) if k != want => return detail(401, "Invalid API key"),
                _ => {}
            }
        }
        let tenant = match headers.get("x-tenant-id") {
            None if shared.config.allow_default_tenant => DEFAULT_TENANT.to_owned(),
            None => return detail(400, "X-Tenant-ID header is required"),
            Some(v) => match v.to_str() {
                Ok(t) if is_label(t) => t.to_owned(),
                _ => return detail(400, "invalid X-Tenant-ID header"),
            },
        };
        meta.tenant = Some(tenant);
    }
    let workspace = match headers.get("x-workspace-id").map(|v| v.to_str()) {
        Some(Ok(w)) if is_label(w) => Some(w.to_owned()),
        Some(_) if endpoint.scope == ScopeNeed::Workspace => {
            return detail(400, "invalid X-Workspace-ID header");
        }
        _ => None,
    };
    if endpoint.scope == ScopeNeed::Workspace && workspace.is_none() {
        return detail(400, "X-Workspace-ID header is required");
    }

    // A pipeline id that is no label is refused like a bad scope header.
    let pipeline_id = match headers.get("x-pipeline-id").map(|v| v.to_str()) {
        Some(Ok(p)) if is_label(p) => Some(p.to_owned()),
        Some(_) => return detail(400, "invalid X-Pipeline-Id header"),
        None => None,
    };
    let ctx = Ctx {
        endpoint,
        params,
        query: parse_query(uri.query().unwrap_or("")),
        pipeline_id,
        body,
        tenant: meta.tenant.clone().unwrap_or_default(),
        workspace,
        fault: fault.clone(),
    };
    let response = crate::handlers::dispatch(shared, ctx).await;
    if fault == Some(Fault::ResetMidBody) {
        return cut_mid_body(response).await;
    }
    response
}

/// Sleeps `d`, or until the simulator stops.
async fn wait(shared: &Shared, d: Duration) {
    let mut shutdown = shared.shutdown.clone();
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = crate::stopped(&mut shutdown) => {}
    }
}

/// The answer of a fault that replaces the route's answer, if it is one.
fn status_fault(endpoint: &Endpoint, fault: &Fault) -> Option<Response> {
    Some(match fault {
        Fault::RateLimited { retry_after } => with_retry_after(
            plain(429, "Too Many Requests"),
            retry_after.map(|r| r.header_value()),
        ),
        Fault::Budget => detail(
            402,
            "budget exhausted: the tenant's AI budget for this period is used up",
        ),
        Fault::AdminGate => detail(403, "admin role required for this operation"),
        Fault::BadGateway => plain(502, "Bad Gateway"),
        // Starlette's ServerErrorMiddleware answers plain text with its
        // length; the connection is closed after it (see `CloseConn`).
        Fault::Unhandled => {
            let text = "Internal Server Error";
            let mut response = plain(500, text);
            response
                .headers_mut()
                .insert(header::CONTENT_LENGTH, HeaderValue::from(text.len()));
            response
        }
        Fault::Dark => detail(
            503,
            format!(
                "{} is disabled by feature flag {}_enabled",
                endpoint.service,
                endpoint.operation.replace('-', "_")
            ),
        ),
        Fault::Safety => detail(
            503,
            "fail-closed safety check: admission refused, try again later",
        ),
        Fault::Backpressure { retry_after } => with_retry_after(
            detail(503, "write-ahead log backpressure: ingest paused"),
            Some(retry_after.header_value()),
        ),
        Fault::Status {
            status,
            detail: text,
            retry_after,
        } => with_retry_after(
            detail(*status, text.clone()),
            retry_after.map(|r| r.header_value()),
        ),
        _ => return None,
    })
}

/// The 422 pydantic gives a string over its `max_length`: it quotes the
/// rejected value. Which value: the body's first top-level string field
/// (`loc: ["body", <field>]`); without one, the whole body (`loc: ["body"]`).
fn validation_echo(body: &[u8], max_length: u32) -> Response {
    let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let field = parsed.as_object().and_then(|o| {
        o.iter()
            .find_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
    });
    let (loc, input) = match field {
        Some((name, value)) => (json!(["body", name]), Value::String(value)),
        None => (json!(["body"]), parsed),
    };
    detail(
        422,
        json!([{
            "type": "string_too_long",
            "loc": loc,
            "msg": format!("String should have at most {max_length} characters"),
            "input": input,
            "ctx": { "max_length": max_length },
        }]),
    )
}

/// Sends the status line and half the body, then cuts the connection.
async fn cut_mid_body(response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, BODY_LIMIT)
        .await
        .unwrap_or_default();
    parts.headers.remove(header::CONTENT_LENGTH);
    let (tx, body) = channel_body(2);
    let half = bytes.slice(..bytes.len() / 2);
    tokio::spawn(async move {
        let _ = tx.send(Ok(half)).await;
        // Give the first half a moment on the wire before the cut.
        tokio::time::sleep(Duration::from_millis(5)).await;
        let _ = tx
            .send(Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "simulated reset mid-body",
            )))
            .await;
    });
    Response::from_parts(parts, body)
}

/// A route and its path parameters, or the 404/405 answer.
pub(crate) type Resolved = Result<(&'static Endpoint, Vec<(&'static str, String)>), Response>;

/// The route of a method and path, from the generated client's table.
#[cfg(test)]
pub(crate) fn resolve(method: &Method, path: &str) -> Resolved {
    resolve_without(method, path, &[])
}

/// [`resolve`] on a platform that lacks the routes named in `absent`
/// ([`crate::SimConfig::without_routes`]): they answer as Starlette answers
/// a path it has no route for (`{"detail": "Not Found"}`), or a method it
/// has none for on a known path (405).
pub(crate) fn resolve_without(method: &Method, path: &str, absent: &[String]) -> Resolved {
    // The methods the path has, for the `Allow` header of a 405 (RFC 9110).
    let mut allowed: Vec<&'static str> = Vec::new();
    for endpoint in ENDPOINTS.iter().copied() {
        if absent.iter().any(|op| op == endpoint.operation) {
            continue;
        }
        let Some(params) = match_template(endpoint.path, path) else {
            continue;
        };
        if endpoint.method.as_str() == method.as_str() {
            return Ok((endpoint, params));
        }
        allowed.push(endpoint.method.as_str());
    }
    Err(if allowed.is_empty() {
        detail(404, "Not Found")
    } else {
        let mut response = detail(405, "Method Not Allowed");
        if let Ok(v) = HeaderValue::from_str(&allowed.join(", ")) {
            response.headers_mut().insert(header::ALLOW, v);
        }
        response
    })
}

fn match_template(template: &'static str, path: &str) -> Option<Vec<(&'static str, String)>> {
    let mut params = Vec::new();
    let mut t = template.split('/');
    let mut p = path.split('/');
    loop {
        match (t.next(), p.next()) {
            (None, None) => return Some(params),
            (Some(ts), Some(ps)) => {
                if let Some(name) = ts.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                    if ps.is_empty() {
                        return None;
                    }
                    params.push((name, percent_decode(ps)));
                } else if ts != ps {
                    return None;
                }
            }
            _ => return None,
        }
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && bytes[i + 1].is_ascii_hexdigit()
            && bytes[i + 2].is_ascii_hexdigit()
            && let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    #[test]
    fn every_route_resolves_to_itself() {
        for endpoint in ENDPOINTS.iter() {
            let path = endpoint
                .path
                .split('/')
                .map(|s| if s.starts_with('{') { "x-1" } else { s })
                .collect::<Vec<_>>()
                .join("/");
            let method = Method::from_bytes(endpoint.method.as_str().as_bytes()).unwrap();
            let (found, params) = resolve(&method, &path).unwrap_or_else(|_| panic!("{path}"));
            assert_eq!(found.operation, endpoint.operation);
            assert!(params.iter().all(|(_, v)| v == "x-1"));
        }
    }

    #[test]
    fn unknown_paths_and_methods() {
        assert_eq!(
            resolve(&Method::GET, "/nope").unwrap_err().status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            resolve(&Method::DELETE, "/workspaces/api/v1/kbs")
                .unwrap_err()
                .status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert!(resolve(&Method::GET, "/workspaces/api/v1/kbs//documents").is_err());
    }

    #[test]
    fn decoding() {
        assert_eq!(percent_decode("a%2Fb"), "a/b");
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(
            parse_query("pipeline_id=run-1&x"),
            [
                ("pipeline_id".to_owned(), "run-1".to_owned()),
                ("x".to_owned(), String::new())
            ]
        );
    }
}
