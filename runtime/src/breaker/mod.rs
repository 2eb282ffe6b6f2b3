//! The origin circuit breaker: its pure state machine (`state`), the step
//! that admits each attempt (`admit`) and what follows a transition, the
//! probe loop, the canary, the fleet's close and the warm-up (`probe`).
//! The last two are functions of the client's parts, not of a client.

mod admit;
mod probe;
mod state;

pub(crate) use admit::admit;
pub(crate) use probe::react;
pub use state::{
    Admission, Breaker, BreakerGuard, CircuitState, Generation, SharedBreaker, Transition,
};
