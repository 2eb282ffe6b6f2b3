//! ai-gateway search and completion, and the groundedness score.

use grag_client::DocumentId;
use grag_client::types::{
    ChatRole, Completion, CompletionRequest, Score, ScoreRequest, SearchHit, SearchRequest,
    SearchResults,
};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::ctx::Ctx;
use super::ctx::charge;
use super::reply::Answer;
use super::reply::{detail, json_status};
use crate::state::{Platform, Tenant, chunks, overlap, words};

/// Hits for `query` in the given KBs: chunks of indexed documents and points
/// with a `text` payload, best first.
pub(super) fn search(
    tenant: &Tenant,
    kb_ids: &[String],
    query: &str,
    top_k: usize,
) -> Vec<SearchHit> {
    let now = Instant::now();
    let q = words(query);
    let mut hits = Vec::new();
    for kb_id in kb_ids {
        let Some(kb) = tenant.kbs.get(kb_id) else {
            continue;
        };
        for (doc_id, doc) in &kb.documents {
            let indexed = tenant
                .jobs
                .values()
                .find(|j| &j.kb_id == kb_id && &j.document_id == doc_id)
                .is_none_or(|j| j.document_status(now) == "indexed");
            if !indexed {
                continue;
            }
            for (i, chunk) in chunks(&doc.text).into_iter().enumerate() {
                let score = overlap(&q, &chunk);
                if score > 0.0 {
                    let mut hit = SearchHit::new(format!("{doc_id}-{i}"), chunk, score)
                        .with_metadata(json!({
                            "kb_id": kb_id,
                            "filename": doc.document.filename,
                        }));
                    hit.document_id = DocumentId::parse(doc_id).ok();
                    hits.push(hit);
                }
            }
        }
        for (id, point) in &kb.points {
            let text = point
                .payload
                .as_ref()
                .and_then(|p| p.get("text"))
                .and_then(Value::as_str);
            if let Some(text) = text {
                let score = overlap(&q, text);
                if score > 0.0 {
                    hits.push(
                        SearchHit::new(id.clone(), text.to_owned(), score)
                            .with_metadata(json!({ "kb_id": kb_id })),
                    );
                }
            }
        }
    }
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(a.chunk_id.cmp(&b.chunk_id))
    });
    hits.truncate(top_k);
    hits
}

pub(super) fn search_rerank(p: &mut Platform, ctx: &Ctx) -> Answer {
    let body: SearchRequest = ctx.json()?;
    // The spec types `top_k` as any integer: the simulator answers at most
    // 100 hits, and none for a `top_k` below 1.
    let top_k = body.top_k.clamp(0, 100);
    let kb = ctx.param("kb").to_owned();
    let tenant = p.tenant(&ctx.tenant);
    if !tenant.kbs.contains_key(&kb) {
        return Err(detail(404, format!("collection '{kb}' not found")));
    }
    let results = search(tenant, &[kb], &body.query_text, top_k as usize);
    charge(tenant, ctx, "ai-gateway", "sim-rerank", 0.0004);
    Ok(json_status(200, &SearchResults::new(results)))
}

pub(super) fn complete(p: &mut Platform, ctx: &Ctx) -> Answer {
    let body: CompletionRequest = ctx.json()?;
    // pydantic refuses a role outside its enum.
    if let Some(m) = body
        .messages
        .iter()
        .find(|m| matches!(m.role, ChatRole::Unknown(_)))
    {
        return Err(super::reply::unprocessable(
            &["body", "messages", "role"],
            format!(
                "Input should be 'system', 'user' or 'assistant', not '{}'",
                m.role.as_str()
            ),
        ));
    }
    // Without a user message (the spec allows none) the prompt is empty.
    let last = body
        .messages
        .iter()
        .rev()
        .find(|m| m.role == ChatRole::User);
    let prompt: String = last
        .map_or("", |m| m.content.as_str())
        .chars()
        .take(200)
        .collect();
    let content = format!("(simulated completion) You asked: {prompt}");
    let model = body.model.clone().unwrap_or_else(|| "sim-llm".into());
    let prompt_tokens: usize = body.messages.iter().map(|m| words(&m.content).len()).sum();
    let usage = json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": words(&content).len(),
    });
    charge(p.tenant(&ctx.tenant), ctx, "ai-gateway", "sim-llm", 0.002);
    Ok(json_status(
        200,
        &Completion::new(content).with_model(model).with_usage(usage),
    ))
}

pub(super) fn score(p: &mut Platform, ctx: &Ctx) -> Answer {
    let body: ScoreRequest = ctx.json()?;
    let context: String = body
        .chunks
        .iter()
        .map(|c| c.text.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    let response = words(&body.response_text);
    let score = overlap(&response, &context);
    charge(
        p.tenant(&ctx.tenant),
        ctx,
        "groundedness",
        "sim-nli",
        0.0002,
    );
    Ok(json_status(
        200,
        &Score::new(score)
            .with_grounded(score >= 0.5)
            .with_details(json!({ "response_words": response.len(), "chunks": body.chunks.len() })),
    ))
}
