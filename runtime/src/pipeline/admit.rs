//! Before a byte is sent. The prelude, once per call: the route and scope
//! check, the body check and remembered answers. Admission, before every
//! attempt: the breaker, the path, the budgets, the throttle and the fleet.

use std::borrow::Cow;
use std::sync::OnceLock;

use super::Run;
use crate::breaker::{Admission, CircuitState, Generation};
use crate::call::Call;
use crate::client::Client;
use crate::endpoint::{Endpoint, ScopeNeed};
use crate::error::{Class, Detail, Error};
use crate::memory::Remembered;
use crate::policy::{BudgetIx, OutcomeKind, Policy, StateTrigger, TaxonomyRow};
use crate::scope::IdKind;
use crate::throttle::Permit;

/// What admission hands the attempt: the breaker's generation it reports
/// to, and the throttle's and the fleet's slots, held while it is in flight.
pub(super) struct Admitted<'c> {
    pub generation: Generation,
    pub permit: Permit<'c>,
    pub fleet: Option<crate::fleet::FleetSlots>,
}

impl Client {
    /// Refuses a call whose scope does not fit its route, before a byte is
    /// sent (T22): a descriptor that is not one of the policy's own routes
    /// (§3.4: a hand-made one could drop the tenant and the key; the
    /// client checked the indices of its own when it was built, so the
    /// entry at the descriptor's own position is the one to compare), a missing
    /// workspace, an ID of another kind as the workspace, a workspace on a
    /// route that takes none. Path values are checked when the path is rendered.
    pub(super) fn check_scope(&self, call: &Call<'_>) -> Result<(), Error> {
        let endpoint = call.endpoint;
        let policy = self.shared.policy;
        let own = policy.routes.get(endpoint.route.get());
        let reason = if !own.is_some_and(|r| std::ptr::eq(*r, endpoint)) {
            format!(
                "{} is not a route of the {} policy: only its generated route table is sent",
                endpoint.path, policy.api
            )
        } else {
            match (endpoint.scope, call.workspace) {
                (ScopeNeed::Workspace, None) => {
                    format!("{} needs a workspace (X-Workspace-ID)", endpoint.path)
                }
                (ScopeNeed::Workspace, Some(id)) if id.kind() != IdKind::Workspace => {
                    format!("{id:?} is not a workspace")
                }
                (ScopeNeed::Public | ScopeNeed::Tenant, Some(_)) => {
                    format!("{} takes no workspace", endpoint.path)
                }
                _ => return Ok(()),
            }
        };
        Err(self.refused(endpoint, reason))
    }

    /// The prelude's refusals: a body serde refused is a client bug (T31),
    /// whatever the origin's state, refused before the breaker or the
    /// throttle; a stable answer (a dark feature) fails fast without
    /// sending a byte.
    pub(super) fn prelude(&self, call: &Call<'_>, run: &Run<'_, '_>) -> Option<Error> {
        let endpoint = call.endpoint;
        if let Some(reason) = &call.unencodable {
            let error = self
                .error(OutcomeKind::InvalidRequest, endpoint)
                .with_detail(reason.clone());
            let row = self.row_of(OutcomeKind::InvalidRequest);
            let detail = Some(Detail::Shown(reason.clone()));
            self.finish_row(row, &error, endpoint, None, detail, false);
            return Some(error);
        }
        let remembered = self.memory().fail_fast(endpoint, || run.started)?;
        Some(self.remembered(remembered, endpoint))
    }

    /// A call refused before a byte is sent (T22), for `reason`: a scope
    /// that does not fit the route, or (from a generated method) an argument
    /// that contradicts its proof.
    pub fn refused(&self, endpoint: &Endpoint, reason: impl Into<Cow<'static, str>>) -> Error {
        self.error(OutcomeKind::InvalidScope, endpoint)
            .with_detail(reason)
    }

    /// The open breaker's refusal without the attempt loop: what `attempts`
    /// decides for a call the breaker refuses while a live loop probes it
    /// (so the call has nothing to catch up), read from the breaker's state
    /// word, not its lock. `None` for everything else: a call the scope
    /// check, its body or a remembered answer refuses first goes the long way.
    /// Called before the attempt loop's future is even built: a refusal
    /// moves nothing but the error, which is the route's shared one. The
    /// call's span is made and closed here, when anything records it.
    pub(super) fn refused_at_once(&self, call: &Call<'_>) -> Option<Error> {
        let error = self.refused_while_open(call)?;
        if crate::spans::recorded() {
            crate::spans::failed(&crate::spans::call(self, call), &error);
        }
        Some(error)
    }

    /// `Err` with the open breaker's refusal when [`Client::send`] would
    /// refuse `call` at once (the same decision). A generated method asks
    /// before it builds the send future, so a refusal moves nothing but the
    /// error; `send` asks again for a call that did not.
    pub fn fail_fast(&self, call: &Call<'_>) -> Result<(), Error> {
        match self.refused_at_once(call) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    fn refused_while_open(&self, call: &Call<'_>) -> Option<Error> {
        let shared = &self.shared;
        if shared.breaker.state() == CircuitState::Closed
            || !shared.probing.load(std::sync::atomic::Ordering::Acquire)
            || call.unencodable.is_some()
            || self.check_scope(call).is_err()
        {
            return None;
        }
        if (self.memory())
            .fail_fast(call.endpoint, tokio::time::Instant::now)
            .is_some()
        {
            return None;
        }
        let e = call.endpoint;
        // The scope check found `e` at its own position: its slot is its own.
        let error = match self.shared.circuit_open.refusals.get(e.route.get()) {
            Some(slot) => slot.get_or_init(|| self.circuit_open(e)).shared(),
            None => self.circuit_open(e),
        };
        (self.shared.metrics).refused(e.route, e.service, error.class_name());
        Some(error)
    }

    /// A call that fails fast with what the route answered before.
    pub(super) fn remembered(&self, r: Remembered, endpoint: &Endpoint) -> Error {
        self.error(Class::Judged(OutcomeKind::Status, Some(r.row)), endpoint)
            .with_status_opt(r.status, r.detail)
            .with_detail_prefix("remembered")
    }

    /// Admission of attempt `run.attempt`: the breaker first (an open one
    /// refuses before anything is allocated but the error), then the path,
    /// rendered once, then the route's budgets and the caller's, locally
    /// and across the fleet, within the call's deadline.
    pub(super) async fn admit(&self, run: &mut Run<'_, '_>) -> Result<Admitted<'_>, Error> {
        let call = run.call;
        let generation = self.admit_breaker(call.endpoint, run.attempt).await?;
        if run.path.is_none() {
            let path = call.render_path();
            run.path = Some(path.map_err(|reason| self.refused(call.endpoint, reason))?);
        }
        let budgets = self.budgets(call.endpoint).map(BudgetIx::get);
        let budgets = &budgets[..if budgets[0] == budgets[1] { 1 } else { 2 }];
        // A free admission builds no timeout: only a wait needs the deadline.
        let permit = match self.shared.throttle.try_admit_all(budgets) {
            Ok(permit) => permit,
            Err(waiting) => match tokio::time::timeout_at(run.deadline, waiting).await {
                Ok(permit) => permit,
                Err(_) => return Err(run.deadline_error(None, false)),
            },
        };
        // The fleet's share, after this replica's own (issue 17).
        let fleet = match self.fleet_stage(call, budgets, run.deadline).await {
            Ok(slots) => slots,
            Err(None) => return Err(run.deadline_error(None, false)),
            Err(Some(error)) => return Err(error),
        };
        Ok(Admitted {
            generation,
            permit,
            fleet,
        })
    }

    /// The breaker's word on attempt `attempt`; a breaker no live loop
    /// probes is probed by the call itself first.
    async fn admit_breaker(&self, endpoint: &Endpoint, attempt: u32) -> Result<Generation, Error> {
        let breaker = &self.shared.breaker;
        let mut admission = breaker.admit(tokio::time::Instant::now, false);
        if matches!(admission, Admission::Rejected(_)) && self.catch_up().await {
            admission = breaker.admit(tokio::time::Instant::now, false);
        }
        match admission {
            Admission::Allowed(g) | Admission::Canary(g) => Ok(g),
            Admission::Rejected(_) => {
                // Never open without a live probe loop (it may have died
                // with the runtime it was spawned on).
                self.ensure_probe_loop();
                Err(self.circuit_open(endpoint).with_attempts(attempt - 1))
            }
        }
    }

    /// The budgets a call of `endpoint` draws from: its route's, and the
    /// caller's mode (a bulk backfill, the fan-out) if the client has one
    /// (the route's twice when it has none).
    fn budgets(&self, endpoint: &Endpoint) -> [BudgetIx; 2] {
        [
            endpoint.budget,
            self.extra_budget.unwrap_or(endpoint.budget),
        ]
    }

    /// The refusal of an open breaker (T21), with the German text of the
    /// breaker-open feature state.
    pub(super) fn circuit_open(&self, endpoint: &Endpoint) -> Error {
        let CircuitOpen { row, copy, .. } = self.shared.circuit_open;
        let error = self
            .error(Class::Judged(OutcomeKind::CircuitOpen, row), endpoint)
            .with_detail("the origin breaker is open: failing fast without sending");
        match copy {
            Some(copy) => error.with_message(Some(copy)),
            None => error,
        }
    }
}

/// The open breaker's refusal as the policy words it, looked up once per
/// client: its row (T21) and the breaker-open feature state's copy, and
/// the refusal of each route, built at its first and shared after: a call
/// refused at once is the same error every time.
pub(crate) struct CircuitOpen {
    row: Option<&'static TaxonomyRow>,
    copy: Option<&'static str>,
    refusals: Box<[OnceLock<Error>]>,
}

impl CircuitOpen {
    pub(crate) fn of(policy: &'static Policy) -> Self {
        let row = policy.row_of(OutcomeKind::CircuitOpen);
        let state = (policy.states.iter()).find(|s| s.when == StateTrigger::BreakerOpen);
        CircuitOpen {
            row,
            copy: state.and_then(|s| s.copy),
            refusals: policy.routes.iter().map(|_| OnceLock::new()).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{JOB_EVENTS, JOB_STATUS, POLICY, TENANT};
    use crate::{Client, ClientConfig, ConfigError, Id, IdKind, Policy};

    fn build(policy: &'static Policy) -> Result<Client, ConfigError> {
        let tenant = Id::parse(&policy.ids, IdKind::Tenant, TENANT).unwrap();
        Client::new(
            policy,
            ClientConfig::new("http://127.0.0.1:9", "key", tenant),
        )
    }

    #[test]
    fn a_route_table_whose_routes_are_not_at_their_own_positions_is_refused() {
        assert!(build(&POLICY).is_ok());
        // The scope check reads a descriptor's entry by its own position:
        // a table in another order would refuse its own routes.
        let swapped: &'static Policy = Box::leak(Box::new(Policy {
            routes: Box::leak(Box::new([&JOB_STATUS, &JOB_EVENTS])),
            ..POLICY.clone()
        }));
        assert!(
            matches!(build(swapped), Err(ConfigError::Policy(what)) if what.contains("own position")),
            "accepted"
        );
    }
}
