//! kg-service entities and edges, and entity-linking against them.

use grag_client::types::{Edge, Entity, EntityLink, LinkRequest};
use serde_json::{Value, json};

use super::ctx::Ctx;
use super::reply::Answer;
use super::reply::{detail, json_status, unprocessable};
use crate::state::Platform;

pub(super) fn link(p: &mut Platform, ctx: &Ctx) -> Answer {
    let body: LinkRequest = ctx.json()?;
    let workspace = ctx.workspace.clone().unwrap_or_default();
    let tenant = p.tenant(&ctx.tenant);
    let lower = body.text.to_lowercase();
    let mut links = Vec::new();
    for ((ws, _), entity) in &tenant.entities {
        if ws != &workspace || entity.name.is_empty() {
            continue;
        }
        if let Some(kb) = &body.kb_id
            && entity.kb_id.as_ref().is_some_and(|k| k != kb)
        {
            continue;
        }
        let name = entity.name.to_lowercase();
        for (byte, _) in lower.match_indices(&name) {
            let start = lower[..byte].chars().count() as i64;
            links.push(
                EntityLink::new(
                    entity.entity_id.clone(),
                    body.text
                        .chars()
                        .skip(start as usize)
                        .take(name.chars().count())
                        .collect::<String>(),
                    start,
                    start + name.chars().count() as i64,
                )
                .with_score(1.0),
            );
        }
    }
    links.sort_by_key(|l| l.start);
    Ok(json_status(200, &links))
}

// ---- kg-service --------------------------------------------------------------

pub(super) fn upsert_entity(p: &mut Platform, ctx: &Ctx) -> Answer {
    let mut body: Entity = ctx.json()?;
    // The path names the MERGE key; the body's own id follows it.
    let id = ctx.param("entity_id");
    body.entity_id = serde_json::from_value(json!(id))
        .map_err(|e| unprocessable(&["path", "entity_id"], e.to_string()))?;
    let key = (ctx.workspace.clone().unwrap_or_default(), id.to_owned());
    let entities = &mut p.tenant(&ctx.tenant).entities;
    // MERGE: properties of an existing entity are kept unless overwritten.
    let merged = match entities.get(&key) {
        Some(old) => {
            let mut merged = body;
            let mut props = old.properties.clone().unwrap_or_else(|| json!({}));
            if let (Some(into), Some(Value::Object(new))) =
                (props.as_object_mut(), &merged.properties)
            {
                for (k, v) in new {
                    into.insert(k.clone(), v.clone());
                }
            }
            merged.properties = Some(props);
            merged.kb_id = merged.kb_id.or_else(|| old.kb_id.clone());
            merged
        }
        None => body,
    };
    entities.insert(key, merged.clone());
    Ok(json_status(200, &merged))
}

pub(super) fn get_entity(p: &mut Platform, ctx: &Ctx) -> Answer {
    let id = ctx.param("entity_id");
    let key = (ctx.workspace.clone().unwrap_or_default(), id.to_owned());
    match p.tenant(&ctx.tenant).entities.get(&key) {
        Some(e) => Ok(json_status(200, e)),
        None => Err(detail(404, format!("entity '{id}' not found"))),
    }
}

pub(super) fn upsert_edge(p: &mut Platform, ctx: &Ctx) -> Answer {
    let mut body: Edge = ctx.json()?;
    // The path names the MERGE key; the body's own id follows it.
    let id = ctx.param("edge_id");
    body.edge_id = serde_json::from_value(json!(id))
        .map_err(|e| unprocessable(&["path", "edge_id"], e.to_string()))?;
    let key = (ctx.workspace.clone().unwrap_or_default(), id.to_owned());
    p.tenant(&ctx.tenant).edges.insert(key, body.clone());
    Ok(json_status(200, &body))
}

pub(super) fn list_edges(p: &mut Platform, ctx: &Ctx) -> Answer {
    let id = ctx.param("entity_id");
    let ws = ctx.workspace.clone().unwrap_or_default();
    let tenant = p.tenant(&ctx.tenant);
    if !tenant.entities.contains_key(&(ws.clone(), id.to_owned())) {
        return Err(detail(404, format!("entity '{id}' not found")));
    }
    let edges: Vec<&Edge> = tenant
        .edges
        .iter()
        .filter(|((w, _), e)| {
            w == &ws && (e.source_entity_id.as_str() == id || e.target_entity_id.as_str() == id)
        })
        .map(|(_, e)| e)
        .collect();
    Ok(json_status(200, &edges))
}
