//! The static descriptor of one route, emitted by the generator.

use crate::index::{BudgetIx, RetryIx, RouteIx, StreamIx, TimeoutIx};
use crate::policy::Conflict;

/// HTTP method of a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }
}

/// Which scope headers a route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeNeed {
    /// No headers at all (liveness probe).
    Public,
    /// Authorization (unless on a [`Lane::Keyless`] route) and the tenant.
    Tenant,
    /// Tenant and workspace.
    Workspace,
}

crate::spelled::spelled!(ScopeNeed {
    Public => "public",
    Tenant => "tenant",
    Workspace => "workspace",
});

/// How a route is authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// The client presents its API key.
    Key,
    /// A proxy in front of the route (a backend-for-frontend) injects the
    /// key server-side: no Authorization header is sent.
    Keyless,
}

/// Everything the pipeline needs to know about a route.
#[derive(Debug)]
pub struct Endpoint {
    /// Platform service name (`kg-service`).
    pub service: &'static str,
    /// Method name on the generated handle (`upsert_entity`).
    pub operation: &'static str,
    pub method: Method,
    /// Full templated path (`/kg-service/api/v1/entities/{entity_id}`).
    pub path: &'static str,
    pub scope: ScopeNeed,
    pub lane: Lane,
    pub timeout: TimeoutIx,
    pub retry: RetryIx,
    pub idempotent: bool,
    pub budget: BudgetIx,
    /// A write the caller may queue for replay while the breaker is open (`Error::replayable`).
    pub replay: bool,
    pub conflict: Conflict,
    /// Stamp the pipeline id header when the client has one.
    pub pipeline_id: bool,
    /// The stream contract of an SSE route.
    pub stream: Option<StreamIx>,
    /// Largest 2xx body read, in bytes: reading stops there with a typed error.
    pub max_response: usize,
    /// Its position in its policy's `routes` (checked when a client is
    /// built): a call's descriptor is one of the policy's own when that
    /// entry is this very descriptor.
    pub route: RouteIx,
}

#[cfg(feature = "bake")]
mod bake {
    use proc_macro2::TokenStream;

    use super::*;
    use crate::bake::{Bake, Names, bake_struct, bake_unit_enum};

    bake_unit_enum!(Method {
        Get,
        Post,
        Put,
        Patch,
        Delete
    });
    bake_unit_enum!(ScopeNeed {
        Public,
        Tenant,
        Workspace
    });
    bake_unit_enum!(Lane { Key, Keyless });

    /// The descriptor itself, as its static's value; a reference to one
    /// elsewhere in a policy is [`Names::endpoint`].
    impl Bake for Endpoint {
        fn bake(&self, n: &dyn Names) -> TokenStream {
            bake_struct!(
                self,
                n,
                Endpoint {
                    service,
                    operation,
                    method,
                    path,
                    scope,
                    lane,
                    timeout,
                    retry,
                    idempotent,
                    budget,
                    replay,
                    conflict,
                    pipeline_id,
                    stream,
                    max_response,
                    route,
                }
            )
        }
    }
}
