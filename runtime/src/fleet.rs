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

use sdk_policy::RowIx;
use sdk_policy::policy::BudgetIx;
use sdk_policy::{Policy, RouteIx};
use tokio::time::Instant;

use crate::alerts::AlertSink;

pub use crate::metrics::FleetMetrics;

/// A boxed future of a fleet operation: the trait is object-safe, and one
/// allocation beside a store round trip costs nothing measurable.
pub type FleetFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The fleet stage after the local throttle.
pub trait Fleet: Send + Sync + fmt::Debug + 'static {
    /// The share of the fleet's budgets of the request `ask` names, after
    /// the replica's own throttle (`local`) admitted it. The slots are held
    /// while the request is in flight; dropping them gives them back.
    fn admit<'a>(
        &'a self,
        local: &'a dyn LocalWindows,
        ask: FleetAsk<'a>,
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

/// At most this many distinct budgets per request: the route's and a
/// caller's mode (a backfill).
pub const MAX_BUDGETS: usize = 2;

/// One request the fleet is asked to admit: its route and the budgets it
/// draws from (at most [`MAX_BUDGETS`], each once), by their positions in
/// the policy.
#[derive(Debug, Clone, Copy)]
pub struct FleetAsk<'a> {
    pub route: RouteIx,
    pub budgets: &'a [BudgetIx],
}

/// A request's budgets as plain table positions, held by value (at most
/// [`MAX_BUDGETS`]; any beyond are dropped), for a future that outlives
/// the ask or a table read by `usize`.
#[derive(Debug, Clone, Copy)]
pub struct Positions {
    at: [usize; MAX_BUDGETS],
    len: usize,
}

impl Positions {
    pub fn of(budgets: &[BudgetIx]) -> Self {
        let mut at = [0; MAX_BUDGETS];
        for (slot, budget) in at.iter_mut().zip(budgets) {
            *slot = budget.get();
        }
        let len = budgets.len().min(MAX_BUDGETS);
        Positions { at, len }
    }

    pub fn as_slice(&self) -> &[usize] {
        &self.at[..self.len]
    }
}

/// The replica's own throttle as a fleet may reshape it while its store is
/// away: the runtime defines these few operations and its throttle does
/// them, so a backend never holds the throttle itself. A window is a
/// budget's (`Some(position)`) or the rolling second (`None`).
pub trait LocalWindows: Send + Sync {
    /// Each window's limit as `limit_of(window, the policy's limit)`.
    fn set_window_limits(&self, limit_of: &dyn Fn(Option<BudgetIx>, u32) -> u32);
    /// The rolling second paced at `per_second`, at most `burst` at once.
    fn set_rate(&self, per_second: u32, burst: u32);
    /// The policy's rate and burst again.
    fn reset_rate(&self);
    /// The policy's burst (the most sent at once).
    fn burst(&self) -> u32;
    /// Counts sends this replica did not make into its windows: `second`
    /// into the rolling second, each budget's into its window.
    fn seed_windows(&self, second: &[Instant], budgets: &[(BudgetIx, Vec<Instant>)]);
    /// Gives up the window slots a request admitted locally holds (those of
    /// `budgets` and the rolling second) until [`HeldWindows::retake`].
    fn leave_windows<'a>(&'a self, budgets: &[BudgetIx]) -> Box<dyn HeldWindows + 'a>;
}

/// Window slots a request gave up for a while; dropped, it needs none again.
pub trait HeldWindows: Send + Sync + fmt::Debug {
    /// Waits for a slot of each window again, in its queue.
    fn retake<'a>(self: Box<Self>) -> FleetFuture<'a, ()>
    where
        Self: 'a;
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
