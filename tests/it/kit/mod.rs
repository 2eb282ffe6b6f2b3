//! The one kit of the integration tests: the simulator and clients of it
//! (`sim`, the resilience environment on it), the documents the tests upload,
//! the job stores on SQLite and PostgreSQL with raw SQL beside them, a
//! recording HTTP server, a test's own tracing subscriber, and a way to run a
//! test alone in a process of its own. They build on `grag_sim::embedded`,
//! which the operator's checks and the benches start from too.

pub mod alone;
pub mod capture;
pub mod document;
pub mod recorder;
pub mod resilience;
pub mod sim;
pub mod stores;
