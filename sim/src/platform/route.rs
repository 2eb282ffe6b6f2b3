//! The route stage: the request's body read, then a route of the
//! generated client's table for its method and path, or the 404/405
//! Starlette gives, and the 422 of an ID longer than any the platform has.
// A stage answers early with `Err(response)`: the error side is the answer
// itself, returned one level up, so its size does not matter.
#![allow(clippy::result_large_err)]

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::Response;
use grag_client::policy::ENDPOINTS;

use super::notes::{Lookup, Miss, Route};
use crate::handlers::reply::{detail, unprocessable};

/// Largest request body the simulator reads.
pub(super) const BODY_LIMIT: usize = 64 * 1024 * 1024;

/// The stage: every later one sees a [`Route`] and a body already read.
pub(super) async fn route(req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, BODY_LIMIT).await {
        Ok(b) => b,
        Err(_) => return detail(400, "request body could not be read"),
    };
    let route = match parts.extensions.get::<Lookup>() {
        Some(Lookup(Ok(route))) => route.clone(),
        Some(Lookup(Err(miss))) => return miss.answer(),
        None => return out_of_order(),
    };
    // No ID of the platform is longer than the longest opaque one.
    let max = grag_client::policy::POLICY.ids.opaque_max_len;
    if let Some((name, _)) = route.params.iter().find(|(_, v)| v.len() > max) {
        return unprocessable(
            &["path", name],
            format!("String should have at most {max} characters"),
        );
    }
    parts.extensions.insert(route);
    next.run(Request::from_parts(parts, Body::from(body))).await
}

/// The route the route stage found, for the stages after it.
pub(super) fn route_of(req: &Request) -> Result<Route, Response> {
    req.extensions()
        .get::<Route>()
        .cloned()
        .ok_or_else(out_of_order)
}

/// A stage ran before the one that sets what it reads: a bug of the stack.
fn out_of_order() -> Response {
    detail(500, "the simulator's platform stages are out of order")
}

impl Miss {
    pub(super) fn answer(&self) -> Response {
        match self {
            Miss::NotFound => detail(404, "Not Found"),
            Miss::MethodNotAllowed { allow } => {
                let mut response = detail(405, "Method Not Allowed");
                if let Ok(v) = HeaderValue::from_str(allow) {
                    response.headers_mut().insert(header::ALLOW, v);
                }
                response
            }
        }
    }
}

/// The route of a method and path on a platform that lacks the routes
/// named in `absent` ([`crate::SimConfig::without_routes`]): they answer as
/// Starlette answers a path it has no route for, or a method it has none
/// for on a known path.
pub(super) fn resolve(method: &Method, path: &str, absent: &[String]) -> Result<Route, Miss> {
    let mut allowed: Vec<&'static str> = Vec::new();
    for endpoint in ENDPOINTS.iter().copied() {
        if absent.iter().any(|op| op == endpoint.operation) {
            continue;
        }
        let Some(params) = match_template(endpoint.path, path) else {
            continue;
        };
        if endpoint.method.as_str() == method.as_str() {
            return Ok(Route { endpoint, params });
        }
        allowed.push(endpoint.method.as_str());
    }
    Err(match allowed.is_empty() {
        true => Miss::NotFound,
        false => Miss::MethodNotAllowed {
            allow: allowed.join(", "),
        },
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

/// A query string's pairs, decoded.
pub(super) fn parse_query(q: &str) -> Vec<(String, String)> {
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
            let Ok(found) = resolve(&method, &path, &[]) else {
                panic!("{path}")
            };
            assert_eq!(found.endpoint.operation, endpoint.operation);
            assert!(found.params.iter().all(|(_, v)| v == "x-1"));
        }
    }

    #[test]
    fn unknown_paths_and_methods() {
        let miss = |method: &Method, path: &str| resolve(method, path, &[]).err();
        assert_eq!(miss(&Method::GET, "/nope"), Some(Miss::NotFound));
        assert_eq!(
            Miss::NotFound.answer().status(),
            axum::http::StatusCode::NOT_FOUND
        );
        let Some(not_allowed) = miss(&Method::DELETE, "/workspaces/api/v1/kbs") else {
            panic!("DELETE on the KB list resolved");
        };
        assert!(matches!(&not_allowed, Miss::MethodNotAllowed { allow } if allow.contains("GET")));
        let answer = not_allowed.answer();
        assert_eq!(answer.status(), axum::http::StatusCode::METHOD_NOT_ALLOWED);
        assert!(answer.headers().contains_key(header::ALLOW));
        assert!(miss(&Method::GET, "/workspaces/api/v1/kbs//documents").is_some());
    }

    #[test]
    fn a_route_the_platform_lacks_is_not_allowed() {
        let absent = ["list_kbs".to_owned()];
        let found = resolve(&Method::GET, "/workspaces/api/v1/kbs", &absent).err();
        let allow = "POST".to_owned();
        assert_eq!(found, Some(Miss::MethodNotAllowed { allow }));
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
