//! The fault scripting handle: what a test or the admin routes push,
//! clear and switch on a running simulator.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use crate::faults::{
    ActiveRule, Churn, ChurnPhase, Fault, FlakyPlan, MODEL_ROUTES, PhaseEnd, Rule, settle,
};
use crate::shared::Shared;

/// Scripting handle on the simulator's faults; cheap to clone.
#[derive(Clone)]
pub struct Faults {
    pub(crate) shared: Arc<Shared>,
}

impl Faults {
    /// Adds a rule; rules are tried in the order they were pushed and the
    /// first live match decides. Returns the rule's id.
    pub fn push(&self, rule: Rule) -> u64 {
        let state = &self.shared.faults;
        let id = {
            let mut next = state.next_id.lock().unwrap_or_else(|e| e.into_inner());
            *next += 1;
            *next
        };
        state
            .rules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ActiveRule {
                id,
                rule,
                seen: 0,
                fired: 0,
            });
        id
    }

    /// Adds `fault` on one route (`list_kbs`), until cleared.
    pub fn on(&self, operation: &str, fault: Fault) -> u64 {
        self.push(Rule::new(fault).on(operation))
    }

    /// Adds `fault` on one route for the next request only.
    pub fn once(&self, operation: &str, fault: Fault) -> u64 {
        self.push(Rule::new(fault).on(operation).once())
    }

    /// Removes one rule by id; whether it was still there.
    pub fn remove(&self, id: u64) -> bool {
        let mut rules = self
            .shared
            .faults
            .rules
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let before = rules.len();
        rules.retain(|r| r.id != id);
        rules.len() != before
    }

    /// The live rules, with their counters.
    pub fn rules(&self) -> Vec<ActiveRule> {
        self.shared
            .faults
            .rules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Removes every rule, ends a churn in progress and restarts the agent plane.
    pub fn clear(&self) {
        let state = &self.shared.faults;
        state
            .rules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        *state.churn() = None;
        state.churn_stepped.notify_one();
        self.shared
            .agent_plane
            .store(self.shared.config.agent_plane, Ordering::SeqCst);
    }

    /// Starts a deploy now with the configured timings: connections refused
    /// for [`crate::SimConfig::churn_refused`] (the listener closes, open
    /// connections are cut), then transient 401/404/422 answers for
    /// [`crate::SimConfig::churn_flaky`] while `/workspaces/health` is already
    /// 200, then healthy. Returns when the listener is closed.
    ///
    /// The phases follow the clock: for demos and the binary. Tests use
    /// [`Faults::deploy_churn_stepped`], whose phases do not depend on how fast
    /// the machine is.
    pub async fn deploy_churn(&self) {
        let c = &self.shared.config;
        self.deploy_churn_for(c.churn_refused, c.churn_flaky).await;
    }

    /// [`Faults::deploy_churn`] with explicit phase lengths.
    pub async fn deploy_churn_for(&self, refused: Duration, flaky: Duration) {
        let now = Instant::now();
        self.begin_churn(PhaseEnd::At(now + refused), FlakyPlan::For(flaky))
            .await;
    }

    /// Starts a deploy that the caller drives, with no clock involved: the
    /// listener closes and open connections are cut (returns once it is
    /// closed), and connections are refused until the first
    /// [`Faults::churn_step`]. Then the flaky phase (`/workspaces/health` 200,
    /// every other route 401, 404, 422 in turn) lasts for `flaky_answers`
    /// transient answers, after which the platform is healthy by itself;
    /// `None` keeps it flaky until a second [`Faults::churn_step`].
    pub async fn deploy_churn_stepped(&self, flaky_answers: Option<u32>) {
        let flaky = flaky_answers.map_or(FlakyPlan::Step, FlakyPlan::Answers);
        self.begin_churn(PhaseEnd::Step, flaky).await;
    }

    async fn begin_churn(&self, end: PhaseEnd, flaky: FlakyPlan) {
        let state = &self.shared.faults;
        let refusing = !matches!(end, PhaseEnd::At(t) if t <= Instant::now());
        *state.churn() = Some(Churn {
            phase: ChurnPhase::Refused,
            end,
            flaky,
        });
        state.churn_started.notify_one();
        // The accept loop closes the listener on its next turn; wait for it so a
        // caller's next connection attempt is refused.
        if refusing {
            let mut closed = self.shared.listener_closed.subscribe();
            let _ = tokio::time::timeout(Duration::from_secs(10), closed.wait_for(|c| *c)).await;
        }
    }

    /// Ends the current phase of a churn now, timed or stepped: a refusal
    /// turns flaky (returns once the listener accepts again), a flaky phase
    /// turns healthy. Returns the phase now in force (`None`: healthy).
    pub async fn churn_step(&self) -> Option<ChurnPhase> {
        let state = &self.shared.faults;
        let now = Instant::now();
        let (was, phase) = {
            let mut churn = state.churn();
            settle(&mut churn, now);
            let was = churn.map(|c| c.phase);
            *churn = churn.and_then(|c| c.next(now));
            (was, churn.map(|c| c.phase))
        };
        if was == Some(ChurnPhase::Refused) {
            state.churn_stepped.notify_one();
            let mut closed = self.shared.listener_closed.subscribe();
            let _ = tokio::time::timeout(Duration::from_secs(10), closed.wait_for(|c| !*c)).await;
        }
        phase
    }

    /// The phase of the churn in progress, if any.
    pub fn churn_phase(&self) -> Option<ChurnPhase> {
        self.shared.faults.churn_phase(Instant::now())
    }

    /// Whether a deploy churn is in progress (refused or flaky phase).
    pub fn churning(&self) -> bool {
        self.churn_phase().is_some()
    }

    /// Turns the agent plane on or off: off, the agent stream answers 503 with
    /// a stable "not running" detail.
    pub fn set_agent_plane(&self, running: bool) {
        self.shared.agent_plane.store(running, Ordering::SeqCst);
    }

    /// Cold start: the next call of each model-serving route (search/rerank,
    /// completions, groundedness, chat) waits [`crate::SimConfig::cold_start`].
    pub fn cold_start(&self) {
        for op in MODEL_ROUTES {
            self.push(Rule::new(Fault::ColdStart).on(op).once());
        }
    }

    /// A stable dark-flag 503 on one route, until cleared.
    pub fn dark(&self, operation: &str) -> u64 {
        self.on(operation, Fault::Dark)
    }
}
