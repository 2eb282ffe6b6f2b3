//! The alerts the runtime raises: their names, severities and rates.

use std::time::Duration;

/// Alerts the runtime raises on its own.
#[derive(Debug, Clone, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct AlertNames {
    /// A call failed after its retry class was used up.
    pub retry_exhausted: &'static str,
    /// `None`: raised for every exhausted call. `Some`: only when exhaustion
    /// is elevated, at least this many within this long (the Core policy:
    /// "alert on elevated retry-exhaustion rates").
    pub retry_exhausted_rate: Option<AlertRate>,
    /// Every alert of the spec (degradation.yaml `alerts`) with its severity:
    /// what a sink routes on.
    pub severities: &'static [AlertSeverity],
}

/// An alert's severity (degradation.yaml `alerts.<name>.severity`, one of its
/// `severities`: `page`, `ops`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct AlertSeverity {
    pub alert: &'static str,
    pub severity: &'static str,
}

/// "Elevated": at least `at_least` events within a rolling `within`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct AlertRate {
    pub at_least: u32,
    pub within: Duration,
}
