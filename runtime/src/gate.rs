//! The gate: what lets an attempt through or refuses it before a byte is
//! sent. The origin breaker with its probe flag, the throttle, the fleet's
//! share, and the memory of stable answers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use sdk_policy::endpoint::Endpoint;
use sdk_policy::policy::{OutcomeKind, Policy, StateTrigger, TaxonomyRow};

use crate::breaker::{Breaker, BreakerGuard, CircuitState, Generation, SharedBreaker, Transition};
use crate::call::Call;
use crate::error::{Class, Error};
use crate::fleet::Fleet;
use crate::memory::Memory;
use crate::plan::Plan;
use crate::throttle::Throttle;

pub(crate) struct Gate {
    pub breaker: SharedBreaker,
    /// A probe loop is running for the open breaker.
    pub probing: AtomicBool,
    pub throttle: Throttle,
    /// The fleet stage after the throttle; `None`: this replica alone.
    pub fleet: Option<Arc<dyn Fleet>>,
    memory: Mutex<Memory>,
    circuit_open: CircuitOpen,
}

impl Gate {
    pub fn new(policy: &'static Policy, fleet: Option<Arc<dyn Fleet>>) -> Self {
        Gate {
            breaker: SharedBreaker::new(Breaker::of(policy.breaker.as_ref())),
            probing: AtomicBool::new(false),
            throttle: Throttle::new(&policy.throttle),
            fleet,
            memory: Mutex::new(Memory::default()),
            circuit_open: CircuitOpen::of(policy),
        }
    }

    pub fn breaker(&self) -> BreakerGuard<'_> {
        self.breaker.lock()
    }

    pub fn memory(&self) -> MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a live loop probes the open breaker.
    pub fn probing(&self) -> bool {
        self.probing.load(Ordering::Acquire)
    }

    /// Records an attempt's outcome in the breaker, giving the transition
    /// it made, if any.
    pub fn record(
        &self,
        generation: Generation,
        endpoint: &'static str,
        failed: bool,
    ) -> Option<Transition> {
        // A success changes nothing but a half-open breaker's canary: while
        // the state word says closed there is nothing to record (a breaker
        // that left closed since has another generation, which ignores it).
        if !failed && self.breaker.state() == CircuitState::Closed {
            return None;
        }
        let now = tokio::time::Instant::now();
        let mut breaker = self.breaker();
        if failed {
            breaker.record_failure(generation, endpoint, now)
        } else {
            breaker.record_success(generation, now)
        }
    }

    /// The refusal of an open breaker (T21), with the German text of the
    /// breaker-open feature state.
    pub fn circuit_open(&self, plan: &Plan, endpoint: &Endpoint) -> Error {
        let CircuitOpen { row, copy, .. } = self.circuit_open;
        let error = plan
            .error(Class::Judged(OutcomeKind::CircuitOpen, row), endpoint)
            .with_detail("the origin breaker is open: failing fast without sending");
        match copy {
            Some(copy) => error.with_message(Some(copy)),
            None => error,
        }
    }

    /// The open breaker's refusal of `call` without the attempt loop, read
    /// from the breaker's state word, not its lock: only while a live loop
    /// probes it (the call has nothing to catch up) and nothing else would
    /// refuse it first (its scope, its body, a remembered answer). The
    /// refusal of a route is built once and shared after.
    #[inline]
    pub fn refused_while_open(&self, plan: &Plan, call: &Call<'_>) -> Option<Error> {
        if self.breaker.state() == CircuitState::Closed
            || !self.probing()
            || call.unencodable.is_some()
            || plan.check_scope(call).is_err()
        {
            return None;
        }
        if (self.memory())
            .fail_fast(call.endpoint, tokio::time::Instant::now)
            .is_some()
        {
            return None;
        }
        let e = call.endpoint;
        // The scope check found `e` at its own position: its slot is its own.
        Some(match self.circuit_open.refusals.get(e.route.get()) {
            Some(slot) => slot.get_or_init(|| self.circuit_open(plan, e)).shared(),
            None => self.circuit_open(plan, e),
        })
    }
}

/// The open breaker's refusal as the policy words it, looked up once per
/// client: its row (T21) and the breaker-open feature state's copy, and
/// the refusal of each route, built at its first and shared after: a call
/// refused at once is the same error every time.
struct CircuitOpen {
    row: Option<&'static TaxonomyRow>,
    copy: Option<&'static str>,
    refusals: Box<[OnceLock<Error>]>,
}

impl CircuitOpen {
    fn of(policy: &'static Policy) -> Self {
        let row = policy.row_of(OutcomeKind::CircuitOpen);
        let state = (policy.states.iter()).find(|s| s.when == StateTrigger::BreakerOpen);
        CircuitOpen {
            row,
            copy: state.and_then(|s| s.copy),
            refusals: policy.routes.iter().map(|_| OnceLock::new()).collect(),
        }
    }
}
