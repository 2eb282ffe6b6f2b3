//! ledger: a pipeline's totals and the tenant's spend by service or provider.

use std::collections::BTreeMap;

use grag_client::types::{LedgerTotals, Spend, SpendGrouping, SpendLine};
use serde_json::json;

use super::ctx::Ctx;
use super::reply::Answer;
use super::reply::{json_status, unprocessable};
use crate::state::Platform;

pub(super) fn totals(p: &mut Platform, ctx: &Ctx) -> Answer {
    let Some(pipeline) = ctx.query("pipeline_id").filter(|v| !v.is_empty()) else {
        return Err(unprocessable(&["query", "pipeline_id"], "Field required"));
    };
    if !super::ctx::is_label(pipeline) {
        return Err(unprocessable(
            &["query", "pipeline_id"],
            "String should match the pipeline id pattern",
        ));
    }
    let tenant = p.tenant(&ctx.tenant);
    let mut breakdown = BTreeMap::<&str, f64>::new();
    let mut total = 0.0;
    let mut calls = 0;
    for c in tenant
        .ledger
        .iter()
        .filter(|c| c.pipeline_id.as_deref() == Some(pipeline))
    {
        *breakdown.entry(c.service).or_default() += c.cost;
        total += c.cost;
        calls += 1;
    }
    let mut totals = LedgerTotals::new()
        .with_total_cost(total)
        .with_currency("EUR")
        .with_calls(calls)
        .with_breakdown(json!(breakdown));
    totals.pipeline_id = grag_client::PipelineId::parse(pipeline).ok();
    Ok(json_status(200, &totals))
}

pub(super) fn spend(p: &mut Platform, ctx: &Ctx) -> Answer {
    // The platform knows its two groupings; a value it does not know is a 422.
    let group_by = match ctx.query("group_by").map(SpendGrouping::from) {
        Some(SpendGrouping::Unknown(_)) => {
            return Err(unprocessable(
                &["query", "group_by"],
                "Input should be 'service' or 'provider'",
            ));
        }
        Some(g) => g,
        None => return Err(unprocessable(&["query", "group_by"], "Field required")),
    };
    let by_service = group_by == SpendGrouping::Service;
    let mut sums = BTreeMap::<&str, f64>::new();
    for c in &p.tenant(&ctx.tenant).ledger {
        let key = if by_service { c.service } else { c.provider };
        *sums.entry(key).or_default() += c.cost;
    }
    let items = sums
        .into_iter()
        .map(|(key, cost)| SpendLine::new(key.to_owned(), cost).with_currency("EUR"))
        .collect::<Vec<_>>();
    Ok(json_status(200, &Spend::new(items).with_group_by(group_by)))
}
