//! The runtime every generated client calls.
//!
//! A generated crate hands the runtime its [`Policy`] (lowered from YAML) and
//! one static [`Endpoint`] per route; the runtime runs each call through the
//! same pipeline: admission, one place that assembles headers, per-attempt
//! timeouts, taxonomy classification, retries inside the deadline.

pub mod backoff;
pub mod breaker;
pub mod endpoint;
pub mod policy;
pub mod scope;
pub mod throttle;

pub use endpoint::{Endpoint, Lane, Method, ScopeNeed};
pub use policy::Policy;
pub use scope::{Id, IdKind, InvalidId};
