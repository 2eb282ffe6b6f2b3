//! The runtime every generated client calls.
//!
//! A generated crate hands the runtime its [`Policy`] (lowered from YAML) and
//! one static [`Endpoint`] per route; the runtime runs each call through the
//! same pipeline: admission, one place that assembles headers, per-attempt
//! timeouts, taxonomy classification, retries inside the deadline.

pub mod alerts;
mod api_error;
mod backoff;
mod breaker;
mod call;
mod classify;
mod client;
mod clock;
mod digest;
mod error;
mod events;
mod features;
pub mod fleet;
mod follow;
mod gate;
mod ids;
mod memory;
mod metrics;
mod origin;
mod pipeline;
mod plan;
mod pool;
mod rate;
mod recorder;
mod refs;
mod reply;
mod spans;
mod telemetry;
#[cfg(test)]
mod testing;
mod throttle;
mod transport;
mod turn;
mod wire;

pub use api_error::{ApiError, ErrorClasses};
pub use breaker::CircuitState;
pub use call::Call;
pub use client::{Client, ClientConfig, sentinel_url};
pub use error::{ConfigError, Error, env_flag, env_var};
pub use events::{Events, StreamEvent};
pub use features::FeatureStatus;
pub use fleet::FleetStatus;
pub use follow::{JobDone, JobProgress, JobUpdate};
pub use refs::{RequestRef, RequestRefs};
pub use reply::{Created, Progress, Reply};
pub use sdk_policy::Policy;
pub use sdk_policy::{Endpoint, Lane, Method, OutcomeKind, RouteIx, ScopeNeed};
pub use sdk_policy::{Id, IdKind, InvalidId};
pub use sdk_policy::{endpoint, log, policy, scope};
/// The SSE parser and its watchdog, a crate of its own; kept at this path for callers.
pub use sdk_sse as sse;
pub use turn::{FailedStage, Turn, TurnUpdate};

/// What [`id_newtype!`] expands to names, whatever the caller's dependencies.
#[doc(hidden)]
pub mod __private {
    pub use serde;
}

/// The runtime's parts the benches and the suites drive by themselves (the
/// throttle, the breaker's state machine, the classifier): not the API a
/// generated crate or its user names.
#[doc(hidden)]
pub mod internals {
    pub use crate::breaker::{Admission, Breaker, SharedBreaker};
    pub use crate::classify::{Outcome, classify};
    pub use crate::throttle::Throttle;
}
