//! The transport: the pool, the parsed origin and the authorization, the
//! one place a request and its headers are assembled.

use reqwest::header::{CONTENT_TYPE, HeaderValue};
use sdk_policy::endpoint::{Endpoint, Lane, Method, ScopeNeed};
use sdk_policy::policy::Policy;

use crate::call::Call;
use crate::origin::Origin;
use crate::pool::Pool;
use crate::wire::ReadCaps;

pub(crate) struct Transport {
    pub pool: Pool,
    /// The base URL parsed and the header names made, once.
    pub origin: Origin,
    /// `<scheme> <key>` (`Bearer`), built once and marked sensitive (never in a debug print).
    pub authorization: HeaderValue,
}

impl Transport {
    /// The only place a request and its headers are assembled.
    pub fn request(
        &self,
        call: &Call<'_>,
        path: &str,
        request_id: &str,
    ) -> reqwest::RequestBuilder {
        let endpoint = call.endpoint;
        let origin = &self.origin;
        let mut request = self
            .pool
            .client(endpoint.idempotent)
            .request(
                method(endpoint),
                origin.route_url(endpoint, path, &call.query),
            )
            .header(origin.request_id.clone(), request_id);
        if endpoint.scope != ScopeNeed::Public {
            if endpoint.lane == Lane::Key {
                let key = self.authorization.clone();
                request = request.header(origin.authorization.clone(), key);
            }
            request = request.header(origin.tenant.clone(), origin.tenant_value.clone());
        }
        // The generator gives a workspace route and a pipeline route only to
        // an API that names the header.
        if let (Some(workspace), Some(name)) = (call.workspace, &origin.workspace) {
            request = request.header(name.clone(), workspace.as_str());
        }
        if endpoint.pipeline_id
            && let (Some(pipeline), Some(name)) = (call.pipeline, &origin.pipeline)
        {
            request = request.header(name.clone(), pipeline);
        }
        if let Some(body) = &call.body {
            request = request
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .body(body.clone());
        }
        request
    }

    /// What reading an answer of `endpoint` needs.
    pub fn read_caps(&self, policy: &Policy, endpoint: &Endpoint) -> ReadCaps<'_> {
        ReadCaps {
            response: endpoint.max_response,
            error_body: policy.limits.error_body,
            request_id: &self.origin.request_id,
            retry_after: &self.origin.retry_after,
        }
    }
}

fn method(endpoint: &Endpoint) -> reqwest::Method {
    match endpoint.method {
        Method::Get => reqwest::Method::GET,
        Method::Post => reqwest::Method::POST,
        Method::Put => reqwest::Method::PUT,
        Method::Patch => reqwest::Method::PATCH,
        Method::Delete => reqwest::Method::DELETE,
    }
}
