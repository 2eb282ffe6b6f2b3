//! Placeholder: filled in by the resilience tests.
