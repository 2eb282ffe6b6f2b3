//! The static descriptor of one route, emitted by the generator.

use crate::index::{BudgetIx, RetryIx, RouteIx, StreamIx, TimeoutIx};
use crate::scale::{Divisor, Scale};

/// HTTP method of a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "bake", derive(Bake))]
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
#[cfg_attr(feature = "bake", derive(Bake))]
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
#[cfg_attr(feature = "bake", derive(Bake))]
pub enum Lane {
    /// The client presents its API key.
    Key,
    /// A proxy in front of the route (a backend-for-frontend) injects the
    /// key server-side: no Authorization header is sent.
    Keyless,
}

/// What a 409 means on a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub enum Conflict {
    /// A plain error.
    Error,
    /// The thing already exists: success (idempotent create).
    Success,
    /// Still being processed: poll again.
    Poll,
}

crate::spelled::spelled!(Conflict {
    Error => "error",
    Success => "success",
    Poll => "poll",
});

/// Everything the pipeline needs to know about a route. Its bake is the
/// descriptor itself, as its static's value.
#[derive(Debug)]
#[cfg_attr(feature = "bake", derive(Bake))]
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

crate::index::indexes!(RouteIx => &'static Endpoint);

/// A route in a policy is its static, never a copy: scaling keeps it.
impl Scale for &Endpoint {
    fn scale(&self, _: Divisor) -> Self {
        self
    }
}

/// A route in a policy names the generated crate's static of it.
#[cfg(feature = "bake")]
impl crate::bake::Bake for &Endpoint {
    fn bake(&self, names: &dyn crate::bake::Names) -> crate::bake::TokenStream {
        names.endpoint(self.route)
    }
}
