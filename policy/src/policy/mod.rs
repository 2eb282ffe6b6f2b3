//! The policy as data: everything the generator lowers from `spec/<api>/`.
//!
//! All types are `'static`-friendly so a generated crate can hold its whole
//! policy in one `static`. Nothing API-specific lives in the runtime itself.

use std::time::Duration;

pub use crate::endpoint::Conflict;
use crate::endpoint::Endpoint;
use crate::index::indexes;
pub use crate::index::{BudgetIx, DetailIx, RetryIx, RouteIx, RowIx, StreamIx, TimeoutIx};
use crate::log::{LogLines, LogNames};
use crate::scale::{Divisor, Scale};

mod alerts;
mod breaker;
mod features;
mod fleet;
mod ids;
mod names;
mod retry;
mod streams;
mod taxonomy;
mod throttle;
pub use alerts::*;
pub use breaker::*;
pub use features::*;
pub use fleet::*;
pub use ids::*;
pub use names::*;
pub use retry::*;
pub use streams::*;
pub use taxonomy::*;
pub use throttle::*;

/// The class of an error no taxonomy row matched: every API has it.
pub const UNCLASSIFIED: &str = "unclassified";

/// The whole policy of one API.
#[derive(Debug, Clone, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct Policy {
    /// Short API name (`grag`), used in logs and metrics.
    pub api: &'static str,
    pub headers: HeaderNames,
    pub ids: IdRules,
    /// The spec's reserved tenants: the floor of every policy made from this
    /// one. A clone, [`Policy::scaled`] or an override keeps it, so a copy
    /// whose `ids.reserved_tenants` lost one is refused by the client, on
    /// every construction path, instead of sending that tenant (GRAG §3:
    /// `default` would be served silently).
    pub reserved_floor: &'static [&'static str],
    pub limits: Limits,
    /// Every route of the API: the only descriptors the pipeline sends.
    #[bake(part = Routes)]
    pub routes: &'static [&'static Endpoint],
    /// How long an idle pooled connection is kept: less than the server's
    /// keep-alive, so no request goes out on a connection it already closed.
    pub pool_idle: Duration,
    /// The least pool idle a deployment may configure, for a proxy whose
    /// keep-alive is shorter than the server's.
    pub pool_idle_floor: Duration,
    /// A server's announced `Keep-Alive: timeout=` lowers the pool idle to
    /// this much less; `None`: announcements are not read.
    pub keep_alive_margin: Option<Duration>,
    /// Statuses after which the server closes the connection unannounced
    /// (uvicorn after an unhandled error): unless the answer said
    /// `Connection: close`, no pooled connection is used again.
    #[bake(with = crate::bake::suffixed_all)]
    pub fresh_after: &'static [u16],
    /// What the log lines are called, and who writes them.
    pub log: LogNames,
    pub log_lines: &'static dyn LogLines,
    /// What the exported metrics are called.
    pub metrics: MetricNames,
    #[bake(part = Timeouts)]
    pub timeouts: &'static [TimeoutClass],
    /// Overall deadline of an interactive operation, retries included.
    pub deadline: Duration,
    #[bake(part = Retries)]
    pub retries: &'static [RetryClass],
    /// The origin's circuit breaker; `None` for an API without one (no
    /// failure ever opens anything, no probe runs).
    pub breaker: Option<BreakerPolicy>,
    pub throttle: ThrottlePolicy,
    /// Rows in match order: the first row that matches decides.
    pub taxonomy: &'static [TaxonomyRow],
    pub detail_sets: &'static [DetailSet],
    pub streams: &'static [StreamPolicy],
    /// How a buffering proxy is recognised; `None` for an API without streams.
    pub buffering: Option<BufferingRule>,
    /// Streams falling back to polling this often raise this alert.
    pub fallbacks_sustained: Option<(AlertRate, &'static str)>,
    pub states: &'static [FeatureStateCopy],
    pub messages: &'static [ClassMessage],
    /// Calls fired once after a breaker close to warm cold models, when enabled.
    pub warm_up: &'static [WarmUpCall],
    pub features: &'static [FeaturePolicy],
    pub alerts: AlertNames,
    /// The durable replay queue of the `replay` routes; `None` for an API
    /// whose writes are never queued.
    pub replay: Option<ReplayPolicy>,
    /// How several replicas keep the throttle as one tenant; `None` for an
    /// API whose replicas cannot share it.
    pub fleet: Option<FleetPolicy>,
}

/// Bounds on what a server may send, in bytes. The largest 2xx body is per
/// route ([`Endpoint::max_response`]).
#[derive(Debug, Clone, PartialEq, Eq, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct Limits {
    /// Bytes of a non-2xx body read for its `detail`; the rest is never read.
    pub error_body: usize,
    /// Longest `detail` an error keeps (cut on a char boundary, marked as cut).
    pub detail: usize,
    /// Longest SSE line.
    pub sse_line: usize,
    /// Most data one SSE event may gather before its blank line.
    pub sse_event: usize,
}

indexes!(
    TimeoutIx => TimeoutClass,
    RetryIx => RetryClass,
    BudgetIx => BudgetPolicy,
    StreamIx => StreamPolicy,
    RowIx => TaxonomyRow,
    DetailIx => DetailSet,
);

impl Policy {
    /// This policy with every duration divided by `divisor` (at least 1 ms
    /// where it was non-zero), but the fleet's timers (`#[scale(skip)]`).
    /// The copy lives for the rest of the process: make one per test
    /// binary, not per call.
    pub fn scaled(&self, divisor: u32) -> &'static Policy {
        Box::leak(Box::new(self.scale(Divisor::new(divisor))))
    }

    /// Whether every typed index of this policy's routes, rows and warm-up
    /// calls is inside its table, and every row sits at its own index: a
    /// generated policy always is, a hand-made copy may not be. A client
    /// refuses a policy that is not, once, so no call checks it again.
    pub fn check_indices(&self) -> Result<(), &'static str> {
        let timeouts = self.timeouts.len();
        let budgets = self.throttle.budgets.len();
        let routes = self.routes.iter().enumerate().all(|(i, e)| {
            e.route.get() == i
                && e.timeout.get() < timeouts
                && e.retry.get() < self.retries.len()
                && e.budget.get() < budgets
                && e.stream.is_none_or(|s| s.get() < self.streams.len())
        });
        if !routes {
            return Err(
                "a route is not at its own position, or its timeout, retry, budget or stream index is outside its table",
            );
        }
        let rows = self.taxonomy.iter().enumerate().all(|(i, r)| {
            r.index.get() == i
                && r.retry.is_none_or(|x| x.get() < self.retries.len())
                && r.escalate_to.is_none_or(|x| x.get() < self.taxonomy.len())
                && r.matches
                    .detail
                    .is_none_or(|x| x.get() < self.detail_sets.len())
        });
        if !rows {
            return Err(
                "a taxonomy row's index, retry, escalation or detail set is outside its table",
            );
        }
        let warm_up = self
            .warm_up
            .iter()
            .all(|w| w.timeout.is_none_or(|t| t.get() < timeouts));
        let replay = self
            .replay
            .as_ref()
            .is_none_or(|r| r.budget.get() < budgets);
        if !warm_up || !replay {
            return Err("a warm-up timeout class or the replay budget is outside its table");
        }
        Ok(())
    }

    /// The first taxonomy row of `kind`: how an outcome with no status or
    /// detail to match is classified.
    pub fn row_of(&self, kind: OutcomeKind) -> Option<&'static TaxonomyRow> {
        self.taxonomy.iter().find(|r| r.matches.outcome == kind)
    }

    /// The German message for an error class, if the spec has one.
    pub fn message(&self, class: &str) -> Option<&'static str> {
        self.messages
            .iter()
            .find(|m| m.class == class)
            .map(|m| m.copy)
    }

    /// The German copy of a feature state, if the spec has one.
    pub fn state_copy(&self, state: &str) -> Option<&'static str> {
        self.states
            .iter()
            .find(|s| s.state == state)
            .and_then(|s| s.copy)
    }

    /// The severity of the alert `name` (`page`, `ops`), if the spec has the alert.
    pub fn severity(&self, name: &str) -> Option<&'static str> {
        self.alerts
            .severities
            .iter()
            .find(|a| a.alert == name)
            .map(|a| a.severity)
    }

    /// A budget by name.
    pub fn budget(&self, name: &str) -> Option<&'static BudgetPolicy> {
        self.throttle.budgets.iter().find(|b| b.name == name)
    }
}
