//! The vocabulary of a policy: what the generator lowers a spec to and the
//! runtime executes. Data and pure functions only (no I/O, no async), so
//! `cargo xtask codegen` builds without the runtime's HTTP stack and without
//! the generated crates.

// The derives name the crate by its package name, from outside as here.
extern crate self as sdk_policy;
// `#[derive(Bake, Scale)]` in every module, without an import in each.
#[macro_use]
extern crate sdk_policy_derive;

#[cfg(feature = "bake")]
pub mod bake;
pub mod endpoint;
pub mod index;
pub mod log;
pub mod policy;
mod scale;
pub mod scope;
mod spelled;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use endpoint::{Endpoint, Lane, Method, ScopeNeed};
pub use index::{BudgetIx, DetailIx, RetryIx, RouteIx, RowIx, StreamIx, TimeoutIx};
pub use policy::{OutcomeKind, Policy};
pub use scope::{Id, IdKind, InvalidId};
