//! One handler per route of the generated client, on the per-tenant state.
//! Bodies are the generated client's own types, so the two cannot drift.
// Handlers answer early with `Err(response)`: the error side is the answer
// itself, returned one level up, so its size does not matter.
#![allow(clippy::result_large_err)]

mod ai;
mod bff;
pub(crate) mod ctx;
mod graph;
mod ingest;
mod ledger;
pub(crate) mod reply;
mod workspaces;

use std::sync::Arc;

use axum::response::Response;
use grag_client::types::Health;

use crate::shared::Shared;
use crate::state::Platform;

use ai::{complete, score, search_rerank};
use bff::{agent_session_stream, chat_stream, orchestrator_events, pipeline_status};
use ctx::Ctx;
use graph::{get_entity, link, list_edges, upsert_edge, upsert_entity};
use ingest::{conversion_of, conversion_result, convert, upsert_points};
use ledger::{spend, totals};
use reply::{Answer, detail, json_status};
use workspaces::{
    conversation_messages, create_conversation, create_kb, get_settings, list_documents, list_kbs,
    put_settings, upload_document,
};

/// Runs the route's handler.
pub(crate) async fn dispatch(shared: &Arc<Shared>, ctx: Ctx) -> Response {
    let answer = match ctx.endpoint.operation {
        "health" => Ok(json_status(200, &Health::new("ok"))),
        "list_kbs" => with(shared, |p| list_kbs(p, &ctx)),
        "create_kb" => with(shared, |p| create_kb(p, &ctx)),
        "list_documents" => with(shared, |p| list_documents(p, &ctx)),
        "upload_document" => with(shared, |p| upload_document(shared, p, &ctx)),
        "create_conversation" => with(shared, |p| create_conversation(p, &ctx)),
        "conversation_messages" => with(shared, |p| conversation_messages(p, &ctx)),
        "get_settings" => with(shared, |p| get_settings(p, &ctx)),
        "put_settings" => with(shared, |p| put_settings(p, &ctx)),
        "search_rerank" => with(shared, |p| search_rerank(p, &ctx)),
        "complete" => with(shared, |p| complete(p, &ctx)),
        "score" => with(shared, |p| score(p, &ctx)),
        "link" => with(shared, |p| link(p, &ctx)),
        "upsert_entity" => with(shared, |p| upsert_entity(p, &ctx)),
        "get_entity" => with(shared, |p| get_entity(p, &ctx)),
        "upsert_edge" => with(shared, |p| upsert_edge(p, &ctx)),
        "list_edges" => with(shared, |p| list_edges(p, &ctx)),
        "totals" => with(shared, |p| totals(p, &ctx)),
        "spend" => with(shared, |p| spend(p, &ctx)),
        "upsert_points" => with(shared, |p| upsert_points(shared, p, &ctx)),
        "convert" => with(shared, |p| convert(shared, p, &ctx)),
        "conversion_of" => with(shared, |p| conversion_of(p, &ctx)),
        "result" => with(shared, |p| conversion_result(p, &ctx)),
        "pipeline_status" => with(shared, |p| pipeline_status(p, &ctx)),
        "orchestrator_events" => orchestrator_events(shared, ctx),
        "chat_stream" => chat_stream(shared, ctx),
        "agent_session_stream" => agent_session_stream(shared, ctx),
        other => Err(detail(
            501,
            format!("route {other} is not simulated yet (grag-sim)"),
        )),
    };
    answer.unwrap_or_else(|e| e)
}

/// Runs `f` on the platform state under its lock.
fn with(shared: &Shared, f: impl FnOnce(&mut Platform) -> Answer) -> Answer {
    let mut platform = shared.platform.lock().unwrap_or_else(|e| e.into_inner());
    f(&mut platform)
}
