//! Ingest services: voyager point upserts and docfold conversions.

use base64::Engine;
use grag_client::ConversionId;
use grag_client::types::{
    ConversionJob, ConversionResult, ConversionState, ConvertRequest, UpsertPoints, UpsertResult,
};
use serde_json::json;
use tokio::time::Instant;

use super::ctx::Ctx;
use super::ctx::charge;
use super::reply::Answer;
use super::reply::{detail, json_status};
use crate::shared::Shared;
use crate::state::{Conversion, Platform};

pub(super) fn upsert_points(shared: &Shared, p: &mut Platform, ctx: &Ctx) -> Answer {
    let body: UpsertPoints = ctx.json()?;
    let max = shared.config.max_points;
    if body.points.len() > max {
        return Err(detail(
            413,
            format!(
                "batch of {} points exceeds the limit of {max} per upsert",
                body.points.len()
            ),
        ));
    }
    let kb = ctx.param("kb");
    let tenant = p.tenant(&ctx.tenant);
    let Some(state) = tenant.kbs.get_mut(kb) else {
        return Err(detail(404, format!("collection '{kb}' not found")));
    };
    let n = body.points.len();
    for point in body.points {
        state.points.insert(point.id.clone(), point);
    }
    Ok(json_status(
        200,
        &UpsertResult::new()
            .with_status("ok")
            .with_upserted(n as i64),
    ))
}

pub(super) fn convert(shared: &Shared, p: &mut Platform, ctx: &Ctx) -> Answer {
    let body: ConvertRequest = ctx.json()?;
    // The spec types `content_base64` as a string: one that is not base64 is
    // kept as its own bytes rather than refused.
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(body.content_base64.as_bytes())
        .unwrap_or_else(|_| body.content_base64.clone().into_bytes());
    let n = p.next_id();
    let id = format!("conv-{n}");
    let tenant = p.tenant(&ctx.tenant);
    tenant
        .conversions_by_document
        .entry(body.document_id.as_str().to_owned())
        .or_default()
        .push(id.clone());
    tenant.conversions.insert(
        id.clone(),
        Conversion {
            id: id.clone(),
            ready_at: Instant::now() + shared.config.conversion_time,
            text: String::from_utf8_lossy(&bytes).into_owned(),
        },
    );
    charge(tenant, ctx, "docfold", "sim-ocr", 0.001);
    let conversion_id = ConversionId::parse(&id).map_err(|e| detail(500, e.to_string()))?;
    Ok(json_status(
        202,
        &ConversionJob::new(conversion_id, ConversionState::Processing),
    ))
}

/// The latest conversion of a document: `processing` until it is ready.
pub(super) fn conversion_of(p: &mut Platform, ctx: &Ctx) -> Answer {
    let document = ctx.param("document_id");
    let tenant = p.tenant(&ctx.tenant);
    let latest = tenant
        .conversions_by_document
        .get(document)
        .and_then(|ids| ids.last())
        .and_then(|id| tenant.conversions.get(id));
    let Some(c) = latest else {
        return Err(detail(
            404,
            format!("no conversion of document '{document}'"),
        ));
    };
    let status = if Instant::now() < c.ready_at {
        "processing"
    } else {
        "completed"
    };
    let conversion_id = ConversionId::parse(&c.id).map_err(|e| detail(500, e.to_string()))?;
    Ok(json_status(200, &ConversionJob::new(conversion_id, status)))
}

pub(super) fn conversion_result(p: &mut Platform, ctx: &Ctx) -> Answer {
    let id = ctx.param("conversion_id");
    let Some(c) = p.tenant(&ctx.tenant).conversions.get(id) else {
        return Err(detail(404, format!("conversion '{id}' not found")));
    };
    if Instant::now() < c.ready_at {
        return Err(detail(409, format!("conversion '{id}' is still running")));
    }
    let conversion_id = ConversionId::parse(&c.id).map_err(|e| detail(500, e.to_string()))?;
    Ok(json_status(
        200,
        &ConversionResult::new(conversion_id, ConversionState::Completed)
            .with_content(c.text.clone())
            .with_pages(1 + c.text.len() as i64 / 3000)
            .with_metadata(json!({ "converter": "grag-sim" })),
    ))
}
