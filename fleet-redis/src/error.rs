//! How a store call fails: the store's breaker and the primary's finder
//! both speak it.

/// A store call that did not answer in time, or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("no answer within the {0} ms deadline")]
    Deadline(u128),
    /// The deadline's timer fired late (this process did not run for a
    /// while): whether Redis would have answered in time is unknown.
    #[error("no answer within the {0} ms deadline, seen {1} ms late")]
    Late(u128, u128),
    /// Nothing listens at the address (the connection was refused): not a
    /// stall to wait out. A dropped connection is not this: redis-rs makes
    /// it again, and the next call may well succeed.
    #[error("{0}")]
    Gone(String),
    #[error("{0}")]
    Redis(String),
}
