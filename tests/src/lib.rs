//! Integration tests live in the `[[test]]` targets.
