//! Integration tests live in the `[[test]]` targets.
//!
//! The modules below hold no code: they are the Rust blocks of the README,
//! of each chapter of the guide book (`docs/src/`) and of `bench/README.md`,
//! compiled as doctests by `cargo test --workspace` so they cannot rot
//! (`no_run` where a block needs a platform).

/// The README.
#[doc = include_str!("../../README.md")]
pub mod readme {}

/// The guide book, one module per chapter of `docs/src/SUMMARY.md`.
pub mod book {
    #[doc = include_str!("../../docs/src/introduction.md")]
    pub mod introduction {}

    #[doc = include_str!("../../docs/src/client.md")]
    pub mod client {}

    #[doc = include_str!("../../docs/src/replay-queue.md")]
    pub mod replay_queue {}

    #[doc = include_str!("../../docs/src/replicas.md")]
    pub mod replicas {}

    #[doc = include_str!("../../docs/src/proxy.md")]
    pub mod proxy {}

    #[doc = include_str!("../../docs/src/verifying.md")]
    pub mod verifying {}

    #[doc = include_str!("../../docs/src/tools.md")]
    pub mod tools {}

    #[doc = include_str!("../../docs/src/changing-the-policy.md")]
    pub mod changing_the_policy {}

    /// The book's performance chapter is `bench/README.md`, included.
    #[doc = include_str!("../../bench/README.md")]
    pub mod performance {}

    #[doc = include_str!("../../docs/src/layout.md")]
    pub mod layout {}

    #[doc = include_str!("../../docs/src/crates.md")]
    pub mod crates {}
}
