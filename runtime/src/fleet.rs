//! Several replicas, one tenant: what the pipeline asks of a fleet that
//! keeps the throttle's promises across replicas. The runtime holds only
//! this vocabulary; a backend (`sdk-fleet-redis`) implements it, and a
//! client given a store URL connects through the [`FleetBackend`] its
//! configuration names.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use sdk_policy::Policy;
use sdk_policy::RowIx;

use crate::alerts::AlertSink;
use crate::throttle::Throttle;

pub use crate::metrics::FleetMetrics;

/// A boxed future of a fleet operation: the trait is object-safe, and one
/// allocation beside a store round trip costs nothing measurable.
pub type FleetFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The fleet stage after the local throttle.
pub trait Fleet: Send + Sync + fmt::Debug + 'static {
    /// This request's share of the fleet's budgets (`route`, drawing from
    /// `budgets`), after `throttle` admitted it locally. The slots are held
    /// while the request is in flight; dropping them gives them back.
    fn admit<'a>(
        &'a self,
        throttle: &'a Throttle,
        route: &'static str,
        budgets: &'a [usize],
    ) -> FleetFuture<'a, Result<FleetSlots, Refusal>>;

    /// A platform-wide wait (`Retry-After` on a 429 or 503) pauses every replica.
    fn pause(&self, wait: Duration);

    /// A route answered dark (a stable answer remembered for `for_`): every
    /// replica fails fast on it with `mark` for as long.
    fn share_dark(&self, route: &'static str, mark: DarkMark, for_: Duration);

    /// The breaker's probe or canary (`turn`), run by one replica at a time
    /// for the whole fleet: the holder runs `check` and shares what it saw;
    /// the others take that (see [`TurnTimes`]).
    fn one_at_a_time<'a>(
        &'a self,
        turn: Turn,
        times: TurnTimes,
        check: FleetFuture<'a, bool>,
    ) -> FleetFuture<'a, bool>;

    /// How long ago a replica's `turn` last saw the origin healthy, if one did
    /// and it is still fresh.
    fn healthy_since(&self, turn: Turn) -> FleetFuture<'_, Option<Duration>>;

    /// This replica's view of its fleet.
    fn status(&self) -> FleetStatus;

    /// Leaves the fleet: no longer counted live, its leases given back.
    fn leave(&self) -> FleetFuture<'_, ()>;
}

/// Connects a client to its fleet: the backend a configuration names.
pub trait FleetBackend: Send + Sync + 'static {
    /// A fleet member for `setup`; a URL the backend cannot use is refused
    /// (its reason), before anything is sent.
    fn connect(&self, setup: FleetSetup) -> Result<Arc<dyn Fleet>, String>;
}

/// What a fleet member is made of.
pub struct FleetSetup {
    pub tenant: String,
    pub url: String,
    /// The API's whole policy (its fleet section, throttle, severities).
    pub policy: &'static Policy,
    /// The fleet's metrics, registered with the client's.
    pub metrics: Option<FleetMetrics>,
    /// The client's alert sink, counting what it raises.
    pub alerts: Arc<dyn AlertSink>,
}

/// The fleet's side of one admitted request (its leases in the store, or
/// its slots of a degraded share). Dropping it gives them back.
pub struct FleetSlots(Box<dyn Send + Sync + fmt::Debug>);

impl FleetSlots {
    pub fn new(held: impl Send + Sync + fmt::Debug + 'static) -> Self {
        FleetSlots(Box::new(held))
    }
}

impl fmt::Debug for FleetSlots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Why the fleet stage sent nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The store is away and the policy fails closed.
    Closed,
    /// Another replica saw the route dark with `mark`, for `left` more.
    Dark { left: Duration, mark: DarkMark },
}

/// What a replica saw on a dark route: the taxonomy row and the status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DarkMark {
    pub row: RowIx,
    pub status: Option<u16>,
}

/// The breaker's two checks a fleet runs one replica at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    Probe,
    Canary,
}

impl Turn {
    pub fn name(self) -> &'static str {
        match self {
            Turn::Probe => "probe",
            Turn::Canary => "canary",
        }
    }
}

/// How long a replica holds a turn, how long what it saw is taken by the
/// others, and how long they wait for it.
#[derive(Debug, Clone, Copy)]
pub struct TurnTimes {
    pub hold: Duration,
    pub fresh: Duration,
    pub wait: Duration,
}

/// A fleet member's view of its fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetStatus {
    /// The shared store is away: this replica runs at its share (or refuses).
    pub degraded: bool,
    /// Replicas the last heartbeat counted as live.
    pub live_replicas: usize,
    /// In-flight leases this replica holds in the store.
    pub leases_held: usize,
    /// The longest a failed store call took (bounded by the fleet's deadline).
    pub slowest_failed_call: Duration,
}
