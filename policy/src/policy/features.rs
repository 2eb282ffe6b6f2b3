//! Features that may be dark, their states' copy, and the messages shown per error class.

use crate::endpoint::Endpoint;

/// A UI feature and the routes it depends on.
#[derive(Debug, Clone, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct FeaturePolicy {
    pub name: &'static str,
    pub routes: &'static [&'static Endpoint],
}

/// A feature state with its German UI copy and what triggers it.
#[derive(Debug, Clone, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct FeatureStateCopy {
    pub state: &'static str,
    pub copy: Option<&'static str>,
    pub when: StateTrigger,
}

/// What puts a feature in a state. Checked in this order: `Row` (the worst
/// news, e.g. dark or paused), `BreakerOpen`, `DeploySuspected`, `StageFailed`,
/// and `Otherwise` when nothing else holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub enum StateTrigger {
    Otherwise,
    Row,
    BreakerOpen,
    DeploySuspected,
    StageFailed,
}

/// German message shown for a final error of a class.
#[derive(Debug, Clone, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct ClassMessage {
    pub class: &'static str,
    pub copy: &'static str,
}
