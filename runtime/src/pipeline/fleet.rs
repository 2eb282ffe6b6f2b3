//! The fleet stage: this call's share of the budgets several replicas keep
//! as one tenant, and what a call tells the fleet. Compiled to nothing
//! without the `redis` feature.

use std::time::Duration;

use sdk_policy::endpoint::Endpoint;
use sdk_policy::policy::TaxonomyRow;
use tokio::time::Instant;

use crate::call::Call;
#[cfg(feature = "redis")]
use crate::clock;
use crate::error::Error;
use crate::gate::Gate;
use crate::plan::Plan;

/// This call's share of the fleet, after the local throttle admitted it.
/// `Err(None)`: the deadline passed while waiting; `Err(Some(error))`:
/// refused (the store is away and the policy fails closed, or another
/// replica saw the route dark).
#[cfg(feature = "redis")]
pub(super) async fn fleet_stage(
    plan: &Plan,
    gate: &Gate,
    call: &Call<'_>,
    budgets: &[usize],
    deadline: Instant,
) -> Result<Option<crate::fleet::FleetSlots>, Option<Error>> {
    use crate::fleet::Refusal;
    let Some(fleet) = &gate.fleet else {
        return Ok(None);
    };
    let endpoint = call.endpoint;
    let admitted = fleet.admit(&gate.throttle, endpoint.path, budgets);
    match tokio::time::timeout_at(deadline, admitted).await {
        Err(_) => Err(None),
        Ok(Ok(slots)) => Ok(Some(slots)),
        Ok(Err(Refusal::Closed)) => Err(Some(gate.circuit_open(plan, endpoint).with_detail(
            "the fleet's Redis is unreachable and the policy fails closed: nothing sent",
        ))),
        Ok(Err(Refusal::Dark { left, mark })) => {
            let mut parts = mark.split(' ');
            let row = parts
                .next()
                .and_then(|i| i.parse::<usize>().ok())
                .and_then(|i| plan.policy.taxonomy.get(i));
            let status = parts.next().and_then(|s| s.parse::<u16>().ok());
            let Some(row) = row else {
                // A mark this client cannot read (another version's): send.
                return Ok(None);
            };
            let until = clock::after(Instant::now(), left);
            let r = gate.memory().remember_until(endpoint, row, status, until);
            Err(Some(plan.remembered(r, endpoint)))
        }
    }
}

#[cfg(not(feature = "redis"))]
pub(super) async fn fleet_stage(
    _plan: &Plan,
    _gate: &Gate,
    _call: &Call<'_>,
    _budgets: &[usize],
    _deadline: Instant,
) -> Result<Option<crate::fleet::FleetSlots>, Option<Error>> {
    Ok(None)
}

/// A platform-wide wait (`Retry-After` on a 429 or 503) pauses every replica.
pub(super) fn fleet_pause(gate: &Gate, wait: Duration) {
    #[cfg(feature = "redis")]
    if let Some(fleet) = &gate.fleet {
        fleet.pause(wait);
    }
    #[cfg(not(feature = "redis"))]
    let _ = (gate, wait);
}

/// A stable answer remembered for `for_` (a dark feature) is every
/// replica's: the mark is the row's index and the status.
pub(super) fn fleet_share_dark(
    gate: &Gate,
    endpoint: &'static Endpoint,
    row: &'static TaxonomyRow,
    status: Option<u16>,
    for_: Duration,
) {
    #[cfg(feature = "redis")]
    if let Some(fleet) = &gate.fleet {
        let index = row.index.get();
        let status = status.map_or("-".to_string(), |s| s.to_string());
        fleet.share_dark(endpoint.path, format!("{index} {status}"), for_);
    }
    #[cfg(not(feature = "redis"))]
    let _ = (gate, endpoint, row, status, for_);
}
