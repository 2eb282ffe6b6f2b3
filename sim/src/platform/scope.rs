//! The scope stage: the API key, `X-Tenant-ID`, `X-Workspace-ID` and
//! `X-Pipeline-Id` as the real platform checks them, after the faults (a
//! scripted 429 answers a request whatever its headers).
// The checks answer early with `Err(response)`: the error side is the
// answer itself, returned one level up, so its size does not matter.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;
use sdk_runtime::{Endpoint, Lane, ScopeNeed};

use super::notes::{Scope, TenantSeen};
use super::route::route_of;
use crate::config::SimConfig;
use crate::handlers::ctx::is_label;
use crate::handlers::reply::detail;
use crate::shared::Shared;

/// The tenant a request without `X-Tenant-ID` is served as
/// (`allow_default_tenant=true`, the platform-wide default: policy §3).
pub const DEFAULT_TENANT: &str = "default";

/// The stage.
pub(super) async fn scope(
    State(shared): State<Arc<Shared>>,
    mut req: Request,
    next: Next,
) -> Response {
    let route = match route_of(&req) {
        Ok(route) => route,
        Err(answer) => return answer,
    };
    let tenant = match tenant(req.headers(), route.endpoint, &shared.config) {
        Ok(tenant) => tenant,
        Err(answer) => return answer,
    };
    let mut response = match places(req.headers(), route.endpoint) {
        Ok((workspace, pipeline_id)) => {
            req.extensions_mut().insert(Scope {
                tenant: tenant.clone(),
                workspace,
                pipeline_id,
            });
            next.run(req).await
        }
        Err(answer) => answer,
    };
    if let Some(tenant) = tenant {
        response.extensions_mut().insert(TenantSeen(tenant));
    }
    response
}

/// The tenant a request is served as (`None` on a public route), after
/// its API key on a keyed route.
fn tenant(
    headers: &HeaderMap,
    endpoint: &Endpoint,
    config: &SimConfig,
) -> Result<Option<String>, Response> {
    if endpoint.scope == ScopeNeed::Public {
        return Ok(None);
    }
    if endpoint.lane == Lane::Key {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .filter(|k| !k.is_empty());
        match (bearer, &config.api_key) {
            (None, _) => return Err(detail(401, "Not authenticated")),
            (Some(k), Some(want)) if k != want => return Err(detail(401, "Invalid API key")),
            _ => {}
        }
    }
    match headers.get("x-tenant-id") {
        None if config.allow_default_tenant => Ok(Some(DEFAULT_TENANT.to_owned())),
        None => Err(detail(400, "X-Tenant-ID header is required")),
        Some(v) => match v.to_str() {
            Ok(t) if is_label(t) => Ok(Some(t.to_owned())),
            _ => Err(detail(400, "invalid X-Tenant-ID header")),
        },
    }
}

/// The workspace and the pipeline a request names; an ID that is no
/// label is refused like a missing header.
fn places(
    headers: &HeaderMap,
    endpoint: &Endpoint,
) -> Result<(Option<String>, Option<String>), Response> {
    let workspace = match headers.get("x-workspace-id").map(|v| v.to_str()) {
        Some(Ok(w)) if is_label(w) => Some(w.to_owned()),
        Some(_) if endpoint.scope == ScopeNeed::Workspace => {
            return Err(detail(400, "invalid X-Workspace-ID header"));
        }
        _ => None,
    };
    if endpoint.scope == ScopeNeed::Workspace && workspace.is_none() {
        return Err(detail(400, "X-Workspace-ID header is required"));
    }
    let pipeline_id = match headers.get("x-pipeline-id").map(|v| v.to_str()) {
        Some(Ok(p)) if is_label(p) => Some(p.to_owned()),
        Some(_) => return Err(detail(400, "invalid X-Pipeline-Id header")),
        None => None,
    };
    Ok((workspace, pipeline_id))
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderValue, StatusCode};
    use grag_client::policy::ENDPOINTS;

    use super::*;

    fn endpoint(scope: ScopeNeed) -> &'static Endpoint {
        ENDPOINTS
            .iter()
            .copied()
            .find(|e| e.scope == scope && e.lane == Lane::Key)
            .or_else(|| ENDPOINTS.iter().copied().find(|e| e.scope == scope))
            .unwrap_or_else(|| panic!("no route of scope {scope:?}"))
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn config(allow_default_tenant: bool) -> SimConfig {
        SimConfig {
            allow_default_tenant,
            api_key: None,
            ..SimConfig::default()
        }
    }

    #[test]
    fn a_public_route_has_no_tenant() {
        let public = endpoint(ScopeNeed::Public);
        assert_eq!(
            tenant(&headers(&[]), public, &config(false)).ok(),
            Some(None)
        );
    }

    #[test]
    fn the_tenant_header_is_a_label_or_the_default() {
        let workspace = endpoint(ScopeNeed::Workspace);
        let keyed = [("authorization", "Bearer k")];
        let found = tenant(&headers(&keyed), workspace, &config(true)).ok();
        assert_eq!(found, Some(Some(DEFAULT_TENANT.to_owned())));
        let missing = tenant(&headers(&keyed), workspace, &config(false)).err();
        assert_eq!(missing.map(|r| r.status()), Some(StatusCode::BAD_REQUEST));
        let bad = [("authorization", "Bearer k"), ("x-tenant-id", "Knoll")];
        let bad = tenant(&headers(&bad), workspace, &config(true)).err();
        assert_eq!(bad.map(|r| r.status()), Some(StatusCode::BAD_REQUEST));
    }

    #[test]
    fn a_workspace_route_needs_its_workspace() {
        let workspace = endpoint(ScopeNeed::Workspace);
        let refused = places(&headers(&[]), workspace).err();
        assert_eq!(refused.map(|r| r.status()), Some(StatusCode::BAD_REQUEST));
        let named = [("x-workspace-id", "ws-1"), ("x-pipeline-id", "run-1")];
        let found = places(&headers(&named), workspace).ok();
        assert_eq!(found, Some((Some("ws-1".into()), Some("run-1".into()))));
        let bad_pipeline = [("x-workspace-id", "ws-1"), ("x-pipeline-id", "Run 1")];
        assert!(places(&headers(&bad_pipeline), workspace).is_err());
    }
}
