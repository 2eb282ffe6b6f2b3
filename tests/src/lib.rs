//! Integration tests live in the `[[test]]` targets.

/// The README's Rust blocks, compiled as doctests by `cargo test --workspace`
/// so they cannot rot (`no_run` where a block needs a platform).
#[doc = include_str!("../../README.md")]
pub mod readme {}
