//! The runtime every generated client calls.
//!
//! A generated crate hands the runtime its [`Policy`] (lowered from YAML) and
//! one static [`Endpoint`] per route; the runtime runs each call through the
//! same pipeline: admission, one place that assembles headers, per-attempt
//! timeouts, taxonomy classification, retries inside the deadline.

pub mod alerts;
pub mod backoff;
pub mod breaker;
mod call;
pub mod classify;
mod client;
mod clock;
pub mod endpoint;
mod error;
mod events;
mod features;
mod memory;
mod metrics;
mod pipeline;
pub mod policy;
mod probe;
mod reply;
mod scaled;
pub mod scope;
pub mod sse;
mod telemetry;
pub mod throttle;

pub use call::Call;
pub use client::{Client, ClientConfig};
pub use endpoint::{Endpoint, Lane, Method, ScopeNeed};
pub use error::{ConfigError, Error, ErrorKind, env_var};
pub use events::Events;
pub use features::FeatureStatus;
pub use policy::Policy;
pub use reply::{Created, Progress, Reply};
pub use scope::{Id, IdKind, InvalidId};
