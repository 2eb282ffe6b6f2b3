//! `grag-verify`: an operator's checks of a GRAG deploy through the generated
//! client, against the embedded simulator when `GRAG_URL` is unset.
//!
//! - [`canary`]: the knoll flow end to end, per step its taxonomy row, latency
//!   and request id, and a verdict naming the failing step;
//! - [`probe`]: the open verification items (`Retry-After` on 429, SSE buffering);
//! - [`drift`]: the spec against each service's own OpenAPI document.

pub mod canary;
pub mod drift;
pub mod probe;
pub mod progress;
pub mod target;

use serde::Serialize;

/// The process's exit status: what an operator's script branches on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Exit {
    /// All is well.
    Ok,
    /// The platform is at fault.
    Platform,
    /// Our side is: a contract violation, bad configuration.
    Ours,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Platform => 1,
            Exit::Ours => 2,
        }
    }

    /// The worse of two.
    pub fn max(self, other: Exit) -> Exit {
        if other.code() > self.code() {
            other
        } else {
            self
        }
    }
}
