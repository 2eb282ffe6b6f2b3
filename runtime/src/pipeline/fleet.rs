//! The fleet stage: this call's share of the budgets several replicas keep
//! as one tenant, and what a call tells the fleet. Nothing without a fleet.

use std::time::Duration;

use sdk_policy::endpoint::Endpoint;
use sdk_policy::policy::{BudgetIx, TaxonomyRow};
use tokio::time::Instant;

use crate::call::Call;
use crate::clock;
use crate::error::Error;
use crate::fleet::{DarkMark, FleetAsk, FleetSlots, Refusal};
use crate::gate::Gate;
use crate::plan::Plan;

/// This call's share of the fleet, after the local throttle admitted it.
/// `Err(None)`: the deadline passed while waiting; `Err(Some(error))`:
/// refused (the store is away and the policy fails closed, or another
/// replica saw the route dark).
pub(super) async fn fleet_stage(
    plan: &Plan,
    gate: &Gate,
    call: &Call<'_>,
    budgets: &[BudgetIx],
    deadline: Instant,
) -> Result<Option<FleetSlots>, Option<Error>> {
    let Some(fleet) = &gate.fleet else {
        return Ok(None);
    };
    let endpoint = call.endpoint;
    let ask = FleetAsk {
        route: endpoint.route,
        budgets,
    };
    let admitted = fleet.admit(&gate.throttle, ask);
    match tokio::time::timeout_at(deadline, admitted).await {
        Err(_) => Err(None),
        Ok(Ok(slots)) => Ok(Some(slots)),
        Ok(Err(Refusal::Closed)) => Err(Some(gate.circuit_open(plan, endpoint).with_detail(
            "the fleet's Redis is unreachable and the policy fails closed: nothing sent",
        ))),
        Ok(Err(Refusal::Dark { left, mark })) => {
            let Some(row) = plan.policy.taxonomy.get(mark.row.get()) else {
                // A row this client does not have (another version's): send.
                return Ok(None);
            };
            let until = clock::after(Instant::now(), left);
            let r = (gate.memory()).remember_until(endpoint, row, mark.status, until);
            Err(Some(plan.remembered(r, endpoint)))
        }
    }
}

/// A platform-wide wait (`Retry-After` on a 429 or 503) pauses every replica.
pub(super) fn fleet_pause(gate: &Gate, wait: Duration) {
    if let Some(fleet) = &gate.fleet {
        fleet.pause(wait);
    }
}

/// A stable answer remembered for `for_` (a dark feature) is every replica's.
pub(super) fn fleet_share_dark(
    gate: &Gate,
    endpoint: &'static Endpoint,
    row: &'static TaxonomyRow,
    status: Option<u16>,
    for_: Duration,
) {
    if let Some(fleet) = &gate.fleet {
        let mark = DarkMark {
            row: row.index,
            status,
        };
        fleet.share_dark(endpoint.path, mark, for_);
    }
}
