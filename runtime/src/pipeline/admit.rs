//! Before a byte is sent. The prelude, once per call: the body check and
//! remembered answers (the scope is the plan's to check). Admission, before
//! every attempt the breaker let through: the path, the budgets, the
//! throttle and the fleet.

use sdk_policy::endpoint::Endpoint;
use sdk_policy::policy::{BudgetIx, OutcomeKind, TaxonomyRow};
use tokio::time::Instant;

use super::Run;
use super::fleet::fleet_stage;
use crate::breaker::Generation;
use crate::call::Call;
use crate::client::Caller;
use crate::error::{Detail, Error};
use crate::gate::Gate;
use crate::plan::Plan;
use crate::throttle::Permit;

/// What admission hands the attempt: the breaker's generation it reports
/// to, and the throttle's and the fleet's slots, held while it is in flight.
pub(super) struct Admitted<'c> {
    pub generation: Generation,
    pub permit: Permit<'c>,
    pub fleet: Option<crate::fleet::FleetSlots>,
}

/// The prelude's word on a call.
pub(super) enum Prelude {
    Go,
    /// Refused with what the route answered before (a dark feature): fails
    /// fast without sending a byte.
    Refused(Error),
    /// Refused with a row to settle: a body serde refused is a client bug
    /// (T31), refused before the breaker or the throttle.
    Settled {
        error: Error,
        row: Option<&'static TaxonomyRow>,
        detail: Option<Detail>,
    },
}

/// The prelude's refusals, whatever the origin's state.
pub(super) fn prelude(plan: &Plan, gate: &Gate, call: &Call<'_>, started: Instant) -> Prelude {
    let endpoint = call.endpoint;
    if let Some(reason) = &call.unencodable {
        let error = (plan.error(OutcomeKind::InvalidRequest, endpoint)).with_detail(reason.clone());
        let row = plan.row_of(OutcomeKind::InvalidRequest);
        let detail = Some(Detail::Shown(reason.clone()));
        return Prelude::Settled { error, row, detail };
    }
    match gate.memory().fail_fast(endpoint, || started) {
        Some(remembered) => Prelude::Refused(plan.remembered(remembered, endpoint)),
        None => Prelude::Go,
    }
}

/// Admission of attempt `run.attempt` the breaker let through (its
/// `generation`): the path, rendered once, then the route's budgets and the
/// caller's, locally and across the fleet, within the call's deadline.
pub(super) async fn admit<'g>(
    plan: &Plan,
    gate: &'g Gate,
    caller: &Caller,
    run: &mut Run<'_, '_>,
    generation: Generation,
) -> Result<Admitted<'g>, Error> {
    let call = run.call;
    if run.path.is_none() {
        let path = call.render_path();
        run.path = Some(path.map_err(|reason| plan.refused(call.endpoint, reason))?);
    }
    let both = budgets(caller, call.endpoint);
    let budgets = &both[..if both[0] == both[1] { 1 } else { 2 }];
    let positions = both.map(BudgetIx::get);
    // A free admission builds no timeout: only a wait needs the deadline.
    let permit = match gate.throttle.try_admit_all(&positions[..budgets.len()]) {
        Ok(permit) => permit,
        Err(waiting) => match tokio::time::timeout_at(run.deadline, waiting).await {
            Ok(permit) => permit,
            Err(_) => return Err(run.deadline_error(plan, None, false)),
        },
    };
    // The fleet's share, after this replica's own.
    let fleet = match fleet_stage(plan, gate, call, budgets, run.deadline).await {
        Ok(slots) => slots,
        Err(None) => return Err(run.deadline_error(plan, None, false)),
        Err(Some(error)) => return Err(error),
    };
    Ok(Admitted {
        generation,
        permit,
        fleet,
    })
}

/// The budgets a call of `endpoint` draws from: its route's, and the
/// caller's mode (a bulk backfill, the fan-out) if the handle has one
/// (the route's twice when it has none).
fn budgets(caller: &Caller, endpoint: &Endpoint) -> [BudgetIx; 2] {
    [
        endpoint.budget,
        caller.extra_budget.unwrap_or(endpoint.budget),
    ]
}

#[cfg(test)]
mod tests {
    use crate::client::Client;
    use crate::client::ClientConfig;
    use crate::error::ConfigError;
    use crate::testing::{JOB_EVENTS, JOB_STATUS, POLICY, TENANT};
    use sdk_policy::Id;
    use sdk_policy::IdKind;
    use sdk_policy::Policy;

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
