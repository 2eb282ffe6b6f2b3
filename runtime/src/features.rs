//! Feature states for the UI (policy §9): every degraded mode is visible.

use tokio::time::Instant;

use crate::backoff::PollCadence;
use crate::breaker::CircuitState;
use crate::client::Client;
use crate::gate::Gate;
use sdk_policy::policy::{FeatureStateCopy, Policy, StateTrigger};

/// What the UI shows for a feature right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureStatus {
    /// The state's name from the spec (`available`, `updating`, `dark`, ...).
    pub state: &'static str,
    /// The German copy, when the UI shows one.
    pub copy: Option<&'static str>,
    /// The stage that failed open, for a degraded state.
    pub stage: Option<String>,
}

impl Client {
    /// The state of `feature` (a name from the spec's `features`), or `None`
    /// for an unknown feature. The worst news wins: a row-triggered state
    /// (dark, paused), then breaker open, deploy-suspected, a failed stage.
    pub fn feature_state(&self, feature: &str) -> Option<FeatureStatus> {
        state_of(self.plan().policy, self.gate(), feature)
    }

    /// A fail-open stage of `feature` failed (e.g. a chat trace stage): the
    /// feature shows as degraded until [`Client::stage_recovered`].
    pub fn stage_failed(&self, feature: &str, stage: impl Into<String>) {
        if let Some(f) = self
            .plan()
            .policy
            .features
            .iter()
            .find(|f| f.name == feature)
        {
            self.gate().memory().stage_failed(f.name, stage.into());
        }
    }

    pub fn stage_recovered(&self, feature: &str) {
        self.gate().memory().stage_recovered(feature);
    }

    /// Whether a 429 was seen recently: polling doubles its interval meanwhile.
    pub fn rate_limit_hot(&self) -> bool {
        self.gate().memory().hot_429(Instant::now())
    }

    /// How long to wait before the next poll of a status route: the policy's
    /// interval (5 s), times its hot factor while a 429 is hot, never below
    /// the floor (2 s).
    pub fn poll_interval(&self) -> std::time::Duration {
        PollCadence::new(&self.plan().policy.throttle.polling).interval(self.rate_limit_hot())
    }
}

/// The state of `feature` by the worst news the gate holds.
fn state_of(policy: &'static Policy, gate: &Gate, feature: &str) -> Option<FeatureStatus> {
    let feature = policy.features.iter().find(|f| f.name == feature)?;
    let now = Instant::now();
    let memory = gate.memory();
    let by_row = feature
        .routes
        .iter()
        .filter_map(|e| memory.current(e, now))
        .find_map(|r| r.row.feature_state);
    if let Some(name) = by_row {
        return Some(status(policy.states.iter().find(|s| s.state == name), None));
    }
    let stage = memory.failed_stage(feature.name).map(str::to_owned);
    drop(memory);
    let (open, deploy) = {
        let breaker = gate.breaker();
        (
            breaker.state() != CircuitState::Closed,
            breaker.deploy_suspected(now),
        )
    };
    let trigger = if open {
        StateTrigger::BreakerOpen
    } else if deploy {
        StateTrigger::DeploySuspected
    } else if stage.is_some() {
        StateTrigger::StageFailed
    } else {
        StateTrigger::Otherwise
    };
    let state = policy.states.iter().find(|s| s.when == trigger);
    Some(status(
        state,
        stage.filter(|_| trigger == StateTrigger::StageFailed),
    ))
}

fn status(state: Option<&'static FeatureStateCopy>, stage: Option<String>) -> FeatureStatus {
    match state {
        Some(s) => FeatureStatus {
            state: s.state,
            copy: s.copy,
            stage,
        },
        None => FeatureStatus {
            state: "available",
            copy: None,
            stage,
        },
    }
}
