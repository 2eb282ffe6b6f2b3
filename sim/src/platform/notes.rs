//! What the stages tell each other: on the request, what an outer stage
//! learned for the inner ones; on the answer, what an inner stage did, for
//! the log and the connection.

use sdk_runtime::Endpoint;
use tokio::time::Instant;

use crate::faults::Fault;

/// When the request arrived: the instant the platform's limits count it at.
#[derive(Clone, Copy)]
pub(super) struct Arrival(pub Instant);

/// A platform route and its path parameters.
#[derive(Clone)]
pub(super) struct Route {
    pub endpoint: &'static Endpoint,
    pub params: Vec<(&'static str, String)>,
}

/// Why a method and path have no route: Starlette's 404, or its 405 with
/// the methods the path has (`Allow`, RFC 9110).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Miss {
    NotFound,
    MethodNotAllowed { allow: String },
}

/// The route lookup, made once when the request is logged.
#[derive(Clone)]
pub(super) struct Lookup(pub Result<Route, Miss>);

/// The scope headers as the platform read them (`tenant` is `None` on a
/// public route).
#[derive(Clone, Default)]
pub(super) struct Scope {
    pub tenant: Option<String>,
    pub workspace: Option<String>,
    pub pipeline_id: Option<String>,
}

/// A scripted fault the handler applies itself (SSE faults, stage and job
/// failures, a reset mid-body).
#[derive(Clone)]
pub(super) struct HandlerFault(pub Fault);

/// The faults that shaped an answer, by their log names.
#[derive(Clone, Default)]
pub(super) struct Shaped(pub Vec<&'static str>);

/// The tenant a request was served as, once the scope stage read it.
#[derive(Clone)]
pub(super) struct TenantSeen(pub String);

/// What a fault does to the connection once its request is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Aftermath {
    /// An unhandled error: the connection closes once the answer is out.
    CloseAfterAnswer,
    /// The write took effect, then the process died: the connection drops
    /// before a byte of the answer.
    DropUnanswered,
}

/// `response` with `label` among the faults that shaped it.
pub(super) fn shaped(
    mut response: axum::response::Response,
    label: &'static str,
) -> axum::response::Response {
    let extensions = response.extensions_mut();
    match extensions.get_mut::<Shaped>() {
        Some(Shaped(labels)) => labels.push(label),
        None => {
            extensions.insert(Shaped(vec![label]));
        }
    }
    response
}
