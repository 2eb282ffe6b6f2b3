//! Outcome -> taxonomy row. The rows are data; the first that matches decides.

use sdk_policy::endpoint::{Endpoint, Lane};
use sdk_policy::policy::{OutcomeKind, Policy, TaxonomyRow};

/// What one attempt (or a client-side check) came to.
#[derive(Debug, Clone, Copy)]
pub enum Outcome<'a> {
    /// A non-2xx answer.
    Status {
        status: u16,
        detail: Option<&'a str>,
        retry_after: bool,
    },
    /// Any other outcome the runtime itself decides (a connection failure,
    /// a body over its cap, ...).
    Other(OutcomeKind),
}

impl Outcome<'_> {
    fn kind(&self) -> OutcomeKind {
        match self {
            Outcome::Status { .. } => OutcomeKind::Status,
            Outcome::Other(kind) => *kind,
        }
    }
}

/// The first row of the policy that matches `outcome` on `endpoint`.
pub fn classify(
    policy: &'static Policy,
    endpoint: &Endpoint,
    outcome: &Outcome<'_>,
) -> Option<&'static TaxonomyRow> {
    policy
        .taxonomy
        .iter()
        .find(|row| matches(policy, row, endpoint, outcome))
}

fn matches(policy: &Policy, row: &TaxonomyRow, endpoint: &Endpoint, outcome: &Outcome<'_>) -> bool {
    let m = &row.matches;
    if m.outcome != outcome.kind() {
        return false;
    }
    let Outcome::Status {
        status,
        detail,
        retry_after,
    } = *outcome
    else {
        return true;
    };
    if let Some((lo, hi)) = m.status
        && !(lo..=hi).contains(&status)
    {
        return false;
    }
    if let Some(set) = m.detail
        && !detail.is_some_and(|d| policy.detail_sets[set].matches(d))
    {
        return false;
    }
    if m.retry_after.is_some_and(|want| want != retry_after) {
        return false;
    }
    if m.conflict.is_some_and(|want| want != endpoint.conflict) {
        return false;
    }
    if m.keyless
        .is_some_and(|want| want != (endpoint.lane == Lane::Keyless))
    {
        return false;
    }
    if m.routes
        .is_some_and(|routes| !routes.iter().any(|r| std::ptr::eq(*r, endpoint)))
    {
        return false;
    }
    true
}
