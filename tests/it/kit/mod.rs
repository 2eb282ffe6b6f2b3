//! The one kit of the integration tests: the resilience environment on the
//! simulator, a recording HTTP server, a test's own tracing subscriber, and
//! a way to run a test alone in a process of its own. The simulator's own start-up helpers stay in
//! `grag_sim::testkit` (the demo uses them too); these build on them.

pub mod alone;
pub mod capture;
pub mod recorder;
pub mod resilience;
