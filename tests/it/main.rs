//! The in-process integration suites in one test binary: one link for all of
//! them instead of one per suite, one module per area (the client's, the
//! simulator's in `sim`, the job store's in `queue`), one kit (`kit/`). The
//! suites that must be processes of their own are binaries of their own
//! (`compile_fail`, `fleet`, `jobs_crash` here, the simulator's binary in
//! `sim/tests/binary.rs`; see `tests/Cargo.toml`).

mod kit;

mod alerts;
mod book_links;
mod book_output;
mod breaker;
mod compile_pass;
mod core_api;
mod document_values;
mod enums;
mod features;
mod hardening;
mod headers;
mod jobs;
mod logs;
mod nginx;
mod production;
mod prometheus;
mod queue;
mod real_servers;
mod retry_after;
mod scope;
mod sim;
mod spans;
mod streams;
mod taxonomy;
mod throttle;
