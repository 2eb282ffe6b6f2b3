//! One handler per route of the generated client, on the per-tenant state.
//! Bodies are the generated client's own types, so the two cannot drift.
// Handlers answer early with `Err(response)`: the error side is the answer
// itself, returned one level up, so its size does not matter.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::response::Response;
use base64::Engine;
use grag_client::types::{
    Completion, CompletionRequest, Conversation, ConversionJob, ConversionResult, ConvertRequest,
    CreateConversation, CreateKb, Document, Edge, Entity, EntityLink, Health, Kb, LedgerTotals,
    LinkRequest, Score, ScoreRequest, SearchHit, SearchRequest, SearchResults, Spend,
    SpendGrouping, SpendLine, UploadDocument, UpsertPoints, UpsertResult,
};
use grag_client::{ConversionId, DocumentId, JobId};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::Shared;
use crate::faults::Fault;
use crate::platform::{Ctx, detail, json_status, unprocessable};
use crate::sse::{SseOut, sse_response};
use crate::state::{
    Charge, ConversationState, Conversion, DocState, Job, KbState, Platform, Tenant, chunks,
    now_rfc3339, overlap, words,
};

type Answer = Result<Response, Response>;

/// Runs the route's handler.
pub(crate) async fn dispatch(shared: &Arc<Shared>, ctx: Ctx) -> Response {
    let answer = match ctx.endpoint.operation {
        "health" => Ok(json_status(
            200,
            &Health {
                status: "ok".into(),
            },
        )),
        "list_kbs" => with(shared, |p| list_kbs(p, &ctx)),
        "create_kb" => with(shared, |p| create_kb(p, &ctx)),
        "list_documents" => with(shared, |p| list_documents(p, &ctx)),
        "upload_document" => with(shared, |p| upload_document(shared, p, &ctx)),
        "create_conversation" => with(shared, |p| create_conversation(p, &ctx)),
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

fn charge(
    tenant: &mut Tenant,
    ctx: &Ctx,
    service: &'static str,
    provider: &'static str,
    cost: f64,
) {
    tenant.ledger.push(Charge {
        service,
        provider,
        pipeline_id: ctx.pipeline_id.clone(),
        cost,
    });
}

fn kb_not_found(kb: &str) -> Response {
    detail(404, format!("knowledge base '{kb}' not found"))
}

// ---- workspaces -------------------------------------------------------------

fn list_kbs(p: &mut Platform, ctx: &Ctx) -> Answer {
    let kbs: Vec<Kb> = p
        .tenant(&ctx.tenant)
        .kbs
        .values()
        .map(|k| k.kb.clone())
        .collect();
    Ok(json_status(200, &kbs))
}

fn create_kb(p: &mut Platform, ctx: &Ctx) -> Answer {
    let body: CreateKb = ctx.json()?;
    if body.name.trim().is_empty() {
        return Err(unprocessable(&["body", "name"], "name must not be empty"));
    }
    let tenant = p.tenant(&ctx.tenant);
    let id = body.kb_id.as_str().to_owned();
    if tenant.kbs.contains_key(&id) {
        return Err(detail(409, format!("knowledge base '{id}' already exists")));
    }
    let kb = Kb {
        kb_id: body.kb_id,
        name: Some(body.name),
        description: body.description,
        created_at: Some(now_rfc3339()),
    };
    tenant.kbs.insert(
        id,
        KbState {
            kb: kb.clone(),
            documents: BTreeMap::new(),
            points: BTreeMap::new(),
        },
    );
    Ok(json_status(201, &kb))
}

fn list_documents(p: &mut Platform, ctx: &Ctx) -> Answer {
    let kb_id = ctx.param("kb");
    let now = Instant::now();
    let tenant = p.tenant(&ctx.tenant);
    let kb = tenant.kbs.get(kb_id).ok_or_else(|| kb_not_found(kb_id))?;
    let docs: Vec<Document> = kb
        .documents
        .values()
        .map(|d| {
            let mut doc = d.document.clone();
            let job = tenant
                .jobs
                .values()
                .find(|j| j.kb_id == kb_id && j.document_id == doc.document_id.as_str());
            if let Some(job) = job {
                doc.status = Some(job.document_status(now).into());
            }
            doc
        })
        .collect();
    Ok(json_status(200, &docs))
}

fn upload_document(shared: &Shared, p: &mut Platform, ctx: &Ctx) -> Answer {
    let body: UploadDocument = ctx.json()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(body.content_base64.as_bytes())
        .map_err(|e| unprocessable(&["body", "content_base64"], e.to_string()))?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let kb_id = ctx.param("kb").to_owned();
    let config = &shared.config;
    let fail_at = match &ctx.fault {
        Some(Fault::JobFails { node }) => config.job_nodes.iter().position(|n| n == node),
        _ => None,
    };
    let job_number = p.next_id();
    let tenant = p.tenant(&ctx.tenant);
    let doc_id = body.document_id.as_str().to_owned();
    {
        let kb = tenant.kbs.get(&kb_id).ok_or_else(|| kb_not_found(&kb_id))?;
        if kb.documents.contains_key(&doc_id) {
            return Err(detail(
                409,
                format!("document '{doc_id}' already exists in knowledge base '{kb_id}'"),
            ));
        }
    }
    // The ingest job is named after the document (unless that name is taken).
    let job_id = if tenant.jobs.contains_key(&doc_id) {
        let suffix = format!("-{job_number}");
        format!("{}{suffix}", &doc_id[..doc_id.len().min(63 - suffix.len())])
    } else {
        doc_id.clone()
    };
    let document = Document {
        document_id: body.document_id,
        filename: body.filename,
        content_type: Some(body.content_type),
        status: Some("queued".into()),
        created_at: Some(now_rfc3339()),
        job_id: JobId::parse(&job_id).ok(),
    };
    let chunk_count = chunks(&text).len();
    tenant.jobs.insert(
        job_id.clone(),
        Job {
            id: job_id.clone(),
            document_id: doc_id.clone(),
            kb_id: kb_id.clone(),
            created: Instant::now(),
            queue: config.job_queue,
            pace: config.job_node_pace,
            nodes: config.job_nodes.clone(),
            fail_at,
            chunks: chunk_count,
        },
    );
    if let Some(kb) = tenant.kbs.get_mut(&kb_id) {
        kb.documents.insert(
            doc_id,
            DocState {
                document: document.clone(),
                text,
            },
        );
    }
    charge(
        tenant,
        ctx,
        "workspaces",
        "sim-embed",
        0.0001 * chunk_count as f64,
    );
    Ok(json_status(201, &document))
}

fn create_conversation(p: &mut Platform, ctx: &Ctx) -> Answer {
    let body: CreateConversation = ctx.json()?;
    let tenant = p.tenant(&ctx.tenant);
    let id = body.conversation_id.as_str().to_owned();
    if tenant.conversations.contains_key(&id) {
        return Err(detail(409, format!("conversation '{id}' already exists")));
    }
    let conversation = Conversation {
        conversation_id: body.conversation_id,
        title: body.title,
        kb_ids: body.kb_ids,
        created_at: Some(now_rfc3339()),
    };
    tenant.conversations.insert(
        id,
        ConversationState {
            conversation: conversation.clone(),
            messages: Vec::new(),
        },
    );
    Ok(json_status(201, &conversation))
}

fn get_settings(p: &mut Platform, ctx: &Ctx) -> Answer {
    let settings = p.tenant(&ctx.tenant).settings.clone();
    Ok(json_status(200, &settings.unwrap_or_else(|| json!({}))))
}

fn put_settings(p: &mut Platform, ctx: &Ctx) -> Answer {
    let body: Value = ctx.json()?;
    if !body.is_object() {
        return Err(unprocessable(&["body"], "settings must be a JSON object"));
    }
    p.tenant(&ctx.tenant).settings = Some(body.clone());
    Ok(json_status(200, &body))
}

// ---- ai-gateway, groundedness, entity-linking --------------------------------

/// Hits for `query` in the given KBs: chunks of indexed documents and points
/// with a `text` payload, best first.
pub(crate) fn search(
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
                    hits.push(SearchHit {
                        chunk_id: format!("{doc_id}-{i}"),
                        document_id: DocumentId::parse(doc_id).ok(),
                        text: chunk,
                        score,
                        metadata: Some(json!({
                            "kb_id": kb_id,
                            "filename": doc.document.filename,
                        })),
                    });
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
                    hits.push(SearchHit {
                        chunk_id: id.clone(),
                        document_id: None,
                        text: text.to_owned(),
                        score,
                        metadata: Some(json!({ "kb_id": kb_id })),
                    });
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

fn search_rerank(p: &mut Platform, ctx: &Ctx) -> Answer {
    let body: SearchRequest = ctx.json()?;
    if !(1..=100).contains(&body.top_k) {
        return Err(unprocessable(
            &["body", "top_k"],
            "top_k must be between 1 and 100",
        ));
    }
    let kb = ctx.param("kb").to_owned();
    let tenant = p.tenant(&ctx.tenant);
    if !tenant.kbs.contains_key(&kb) {
        return Err(detail(404, format!("collection '{kb}' not found")));
    }
    let results = search(tenant, &[kb], &body.query_text, body.top_k as usize);
    charge(tenant, ctx, "ai-gateway", "sim-rerank", 0.0004);
    Ok(json_status(200, &SearchResults { results }))
}

fn complete(p: &mut Platform, ctx: &Ctx) -> Answer {
    let body: CompletionRequest = ctx.json()?;
    let Some(last) = body.messages.iter().rev().find(|m| m.role == "user") else {
        return Err(unprocessable(
            &["body", "messages"],
            "at least one user message is required",
        ));
    };
    let prompt: String = last.content.chars().take(200).collect();
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
        &Completion {
            content,
            model: Some(model),
            usage: Some(usage),
        },
    ))
}

fn score(p: &mut Platform, ctx: &Ctx) -> Answer {
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
        &Score {
            score,
            grounded: Some(score >= 0.5),
            details: Some(json!({ "response_words": response.len(), "chunks": body.chunks.len() })),
        },
    ))
}

fn link(p: &mut Platform, ctx: &Ctx) -> Answer {
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
            links.push(EntityLink {
                entity_id: entity.entity_id.clone(),
                mention: body
                    .text
                    .chars()
                    .skip(start as usize)
                    .take(name.chars().count())
                    .collect(),
                start,
                end: start + name.chars().count() as i64,
                score: Some(1.0),
            });
        }
    }
    links.sort_by_key(|l| l.start);
    Ok(json_status(200, &links))
}

// ---- kg-service --------------------------------------------------------------

fn upsert_entity(p: &mut Platform, ctx: &Ctx) -> Answer {
    let body: Entity = ctx.json()?;
    let id = ctx.param("entity_id");
    if body.entity_id.as_str() != id {
        return Err(unprocessable(
            &["body", "entity_id"],
            format!(
                "entity_id {} does not match the path ({id})",
                body.entity_id
            ),
        ));
    }
    let key = (ctx.workspace.clone().unwrap_or_default(), id.to_owned());
    let entities = &mut p.tenant(&ctx.tenant).entities;
    // MERGE: properties of an existing entity are kept unless overwritten.
    let merged = match entities.get(&key) {
        Some(old) => {
            let mut props = old.properties.clone().unwrap_or_else(|| json!({}));
            if let (Some(into), Some(Value::Object(new))) =
                (props.as_object_mut(), &body.properties)
            {
                for (k, v) in new {
                    into.insert(k.clone(), v.clone());
                }
            }
            Entity {
                properties: Some(props),
                kb_id: body.kb_id.clone().or_else(|| old.kb_id.clone()),
                ..body
            }
        }
        None => body,
    };
    entities.insert(key, merged.clone());
    Ok(json_status(200, &merged))
}

fn get_entity(p: &mut Platform, ctx: &Ctx) -> Answer {
    let id = ctx.param("entity_id");
    let key = (ctx.workspace.clone().unwrap_or_default(), id.to_owned());
    match p.tenant(&ctx.tenant).entities.get(&key) {
        Some(e) => Ok(json_status(200, e)),
        None => Err(detail(404, format!("entity '{id}' not found"))),
    }
}

fn upsert_edge(p: &mut Platform, ctx: &Ctx) -> Answer {
    let body: Edge = ctx.json()?;
    let id = ctx.param("edge_id");
    if body.edge_id.as_str() != id {
        return Err(unprocessable(
            &["body", "edge_id"],
            format!("edge_id {} does not match the path ({id})", body.edge_id),
        ));
    }
    let key = (ctx.workspace.clone().unwrap_or_default(), id.to_owned());
    p.tenant(&ctx.tenant).edges.insert(key, body.clone());
    Ok(json_status(200, &body))
}

fn list_edges(p: &mut Platform, ctx: &Ctx) -> Answer {
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

// ---- ledger ------------------------------------------------------------------

fn totals(p: &mut Platform, ctx: &Ctx) -> Answer {
    let Some(pipeline) = ctx.query("pipeline_id").filter(|v| !v.is_empty()) else {
        return Err(unprocessable(&["query", "pipeline_id"], "Field required"));
    };
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
    Ok(json_status(
        200,
        &LedgerTotals {
            pipeline_id: grag_client::PipelineId::parse(pipeline).ok(),
            total_cost: Some(total),
            currency: Some("EUR".into()),
            calls: Some(calls),
            breakdown: Some(json!(breakdown)),
        },
    ))
}

fn spend(p: &mut Platform, ctx: &Ctx) -> Answer {
    let group_by = match ctx.query("group_by") {
        Some("service") => SpendGrouping::Service,
        Some("provider") => SpendGrouping::Provider,
        Some(_) => {
            return Err(unprocessable(
                &["query", "group_by"],
                "Input should be 'service' or 'provider'",
            ));
        }
        None => return Err(unprocessable(&["query", "group_by"], "Field required")),
    };
    let mut sums = BTreeMap::<&str, f64>::new();
    for c in &p.tenant(&ctx.tenant).ledger {
        let key = match group_by {
            SpendGrouping::Service => c.service,
            SpendGrouping::Provider => c.provider,
        };
        *sums.entry(key).or_default() += c.cost;
    }
    let items = sums
        .into_iter()
        .map(|(key, cost)| SpendLine {
            key: key.to_owned(),
            cost,
            currency: Some("EUR".into()),
        })
        .collect();
    Ok(json_status(
        200,
        &Spend {
            group_by: Some(group_by),
            items,
        },
    ))
}

// ---- voyager, docfold ------------------------------------------------------------

fn upsert_points(shared: &Shared, p: &mut Platform, ctx: &Ctx) -> Answer {
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
        &UpsertResult {
            status: Some("ok".into()),
            upserted: Some(n as i64),
        },
    ))
}

fn convert(shared: &Shared, p: &mut Platform, ctx: &Ctx) -> Answer {
    let body: ConvertRequest = ctx.json()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(body.content_base64.as_bytes())
        .map_err(|e| unprocessable(&["body", "content_base64"], e.to_string()))?;
    let n = p.next_id();
    let id = format!("conv-{n}");
    let tenant = p.tenant(&ctx.tenant);
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
        &ConversionJob {
            conversion_id,
            status: "processing".into(),
        },
    ))
}

fn conversion_result(p: &mut Platform, ctx: &Ctx) -> Answer {
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
        &ConversionResult {
            conversion_id,
            status: "completed".into(),
            content: Some(c.text.clone()),
            pages: Some(1 + c.text.len() as i64 / 3000),
            metadata: Some(json!({ "converter": "grag-sim" })),
        },
    ))
}

// ---- bff ---------------------------------------------------------------------

fn pipeline_status(p: &mut Platform, ctx: &Ctx) -> Answer {
    let id = ctx.param("job_id");
    match p.tenant(&ctx.tenant).jobs.get(id) {
        Some(job) => Ok(json_status(200, &job.status(Instant::now()))),
        None => Err(detail(404, format!("job '{id}' not found"))),
    }
}

fn orchestrator_events(shared: &Arc<Shared>, ctx: Ctx) -> Answer {
    let id = ctx.param("job_id").to_owned();
    let job = with_platform(shared, |p| p.tenant(&ctx.tenant).jobs.get(&id).cloned())
        .ok_or_else(|| detail(404, format!("job '{id}' not found")))?;
    let (out, response) = sse_response(shared.shutdown.clone(), ctx.fault.clone());
    let keepalive = shared
        .config
        .keepalive
        .max(std::time::Duration::from_millis(1));
    let ceiling = shared.config.stream_ceiling;
    tokio::spawn(orchestrator_stream(out, job, keepalive, ceiling));
    Ok(response)
}

fn with_platform<T>(shared: &Shared, f: impl FnOnce(&mut Platform) -> T) -> T {
    let mut platform = shared.platform.lock().unwrap_or_else(|e| e.into_inner());
    f(&mut platform)
}

/// `subscribed`, then the job's events from now on (pub/sub: what happened
/// before the subscription is not replayed), `: keepalive` every interval,
/// `event: timeout` at the ceiling.
async fn orchestrator_stream(
    mut out: SseOut,
    job: Job,
    keepalive: std::time::Duration,
    ceiling: std::time::Duration,
) {
    let subscribed = Instant::now();
    if !out.event("subscribed", &json!({ "job_id": job.id })).await {
        return;
    }
    let mut events = job
        .timeline()
        .into_iter()
        .filter(|e| e.at > subscribed)
        .peekable();
    let ceiling_at = subscribed + ceiling;
    let mut next_keepalive = subscribed + keepalive;
    loop {
        let next_event = events.peek().map(|e| e.at);
        let wake = next_event
            .map_or(next_keepalive, |t| t.min(next_keepalive))
            .min(ceiling_at);
        if !out.sleep_until(wake).await {
            return;
        }
        let now = Instant::now();
        if let Some(at) = next_event
            && at <= now
            && at <= ceiling_at
            && let Some(e) = events.next()
        {
            if !out.event(e.name, &e.data).await {
                return;
            }
            if matches!(e.name, "completed" | "failed" | "cancelled") {
                out.finish().await;
                return;
            }
            continue;
        }
        if now >= ceiling_at {
            let data = json!({ "detail": "stream ceiling reached; the job may still be running" });
            if out.event("timeout", &data).await {
                out.finish().await;
            }
            return;
        }
        if now >= next_keepalive {
            if !out.comment("keepalive").await {
                return;
            }
            next_keepalive += keepalive;
        }
    }
}

/// What a chat turn will say, decided when the request arrives.
struct Turn {
    tenant: String,
    conversation_id: String,
    exists: bool,
    hits: Vec<SearchHit>,
    answer: String,
    failing: Option<String>,
}

fn chat_stream(shared: &Arc<Shared>, ctx: Ctx) -> Answer {
    let body: grag_client::types::ChatRequest = ctx.json()?;
    if body.message.trim().is_empty() {
        return Err(unprocessable(
            &["body", "message"],
            "message must not be empty",
        ));
    }
    let failing = match &ctx.fault {
        Some(Fault::StageFails { stage }) => Some(stage.clone()),
        _ => None,
    };
    let conversation_id = body.conversation_id.as_str().to_owned();
    let turn = with_platform(shared, |p| {
        let tenant = p.tenant(&ctx.tenant);
        let conversation = tenant.conversations.get_mut(&conversation_id);
        let exists = conversation.is_some();
        let mut kb_ids: Vec<String> = body
            .kb_ids
            .iter()
            .flatten()
            .map(|k| k.as_str().to_owned())
            .collect();
        if let Some(c) = conversation {
            // persist_user: the user turn is saved before anything else.
            c.messages.push(("user".into(), body.message.clone()));
            if kb_ids.is_empty() {
                kb_ids = c
                    .conversation
                    .kb_ids
                    .iter()
                    .flatten()
                    .map(|k| k.as_str().to_owned())
                    .collect();
            }
        }
        let hits = if failing.as_deref() == Some("retrieval") {
            Vec::new()
        } else {
            search(tenant, &kb_ids, &body.message, 5)
        };
        let answer = match hits.first() {
            Some(hit) => {
                let source = hit
                    .metadata
                    .as_ref()
                    .and_then(|m| m.get("filename"))
                    .and_then(Value::as_str)
                    .unwrap_or(&hit.chunk_id);
                format!("According to {source}: {}", hit.text)
            }
            None => "I found nothing on that in the knowledge bases of this conversation.".into(),
        };
        Turn {
            tenant: ctx.tenant.clone(),
            conversation_id: conversation_id.clone(),
            exists,
            hits,
            answer,
            failing,
        }
    });
    let (out, response) = sse_response(shared.shutdown.clone(), ctx.fault.clone());
    tokio::spawn(chat_turn(shared.clone(), out, turn, ctx.pipeline_id));
    Ok(response)
}

fn stage(name: &str, failed: bool, extra: Value) -> Value {
    let mut v = json!({ "stage": name, "status": if failed { "failed" } else { "ok" } });
    if let (Some(obj), Value::Object(extra)) = (v.as_object_mut(), extra) {
        obj.extend(extra);
    }
    v
}

/// retrieval → rerank → (silence) generate → groundedness → the answer in
/// pieces → persist → done. Every stage but `generate` fails open.
async fn chat_turn(shared: Arc<Shared>, mut out: SseOut, turn: Turn, pipeline_id: Option<String>) {
    let c = &shared.config;
    let fails = |s: &str| turn.failing.as_deref() == Some(s);
    let bill = |service: &'static str, provider: &'static str, cost: f64| {
        with_platform(&shared, |p| {
            p.tenant(&turn.tenant).ledger.push(Charge {
                service,
                provider,
                pipeline_id: pipeline_id.clone(),
                cost,
            })
        })
    };
    let retrieval = if fails("retrieval") {
        stage(
            "retrieval",
            true,
            json!({ "detail": "retrieval failed; answering without context" }),
        )
    } else {
        stage("retrieval", false, json!({ "hits": turn.hits.len() }))
    };
    if !out.sleep(c.chat_stage_pace).await || !out.event("trace", &retrieval).await {
        return;
    }
    let rerank = if fails("rerank") {
        stage(
            "rerank",
            true,
            json!({ "detail": "rerank failed; using retrieval order" }),
        )
    } else {
        bill("ai-gateway", "sim-rerank", 0.0004);
        stage("rerank", false, json!({ "kept": turn.hits.len().min(3) }))
    };
    if !out.sleep(c.chat_stage_pace).await || !out.event("trace", &rerank).await {
        return;
    }
    // The upstream completion is not streamed: silence until it returns.
    if !out.sleep(c.chat_silence).await {
        return;
    }
    if fails("generate") {
        let failed = stage(
            "generate",
            true,
            json!({ "detail": "completion failed upstream" }),
        );
        if out.event("trace", &failed).await
            && out
                .event(
                    "error",
                    &json!({ "detail": "generate failed: the completion did not return; the turn was not answered" }),
                )
                .await
        {
            out.finish().await;
        }
        return;
    }
    bill("ai-gateway", "sim-llm", 0.002);
    if !out
        .event(
            "trace",
            &stage("generate", false, json!({ "model": "sim-llm" })),
        )
        .await
    {
        return;
    }
    let groundedness = if fails("groundedness") {
        stage(
            "groundedness",
            true,
            json!({ "detail": "groundedness check failed; answer not verified" }),
        )
    } else {
        bill("groundedness", "sim-nli", 0.0002);
        let context: String = turn
            .hits
            .iter()
            .map(|h| h.text.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        let score = overlap(&words(&turn.answer), &context);
        let score = (score * 100.0).round() / 100.0;
        stage("groundedness", false, json!({ "score": score }))
    };
    if !out.sleep(c.chat_stage_pace).await || !out.event("trace", &groundedness).await {
        return;
    }
    // Fake tokenization of the finished completion: a few words per piece.
    let pieces: Vec<String> = turn
        .answer
        .split_inclusive(' ')
        .collect::<Vec<_>>()
        .chunks(3)
        .map(|w| w.concat())
        .collect();
    for piece in pieces {
        if !out.sleep(c.chat_piece_pace).await
            || !out.event("delta", &json!({ "text": piece })).await
        {
            return;
        }
    }
    let persisted = turn.exists
        && !fails("persist")
        && with_platform(&shared, |p| {
            let tenant = p.tenant(&turn.tenant);
            match tenant.conversations.get_mut(&turn.conversation_id) {
                Some(c) => {
                    c.messages.push(("assistant".into(), turn.answer.clone()));
                    true
                }
                None => false,
            }
        });
    let persist = if persisted {
        stage("persist", false, json!({}))
    } else if !turn.exists {
        stage(
            "persist",
            true,
            json!({ "detail": format!("conversation '{}' does not exist; the turn was not saved", turn.conversation_id) }),
        )
    } else {
        stage(
            "persist",
            true,
            json!({ "detail": "persisting the answer failed" }),
        )
    };
    if !out.sleep(c.chat_stage_pace).await || !out.event("trace", &persist).await {
        return;
    }
    let done = json!({
        "conversation_id": turn.conversation_id,
        "answer": turn.answer,
        "persisted": persisted,
    });
    if out.event("done", &done).await {
        out.finish().await;
    }
}

fn agent_session_stream(shared: &Arc<Shared>, ctx: Ctx) -> Answer {
    if !shared.agent_plane.load(Ordering::SeqCst) {
        return Err(detail(
            503,
            "agent plane is not running (profile agents disabled)",
        ));
    }
    let session = ctx.param("session_id").to_owned();
    let (out, response) = sse_response(shared.shutdown.clone(), ctx.fault.clone());
    tokio::spawn(agent_stream(shared.clone(), out, session));
    Ok(response)
}

/// A session's relayed events, then silence until the ceiling.
async fn agent_stream(shared: Arc<Shared>, mut out: SseOut, session: String) {
    let c = &shared.config;
    let start = Instant::now();
    if !out
        .event(
            "session",
            &json!({ "session_id": session, "state": "running" }),
        )
        .await
    {
        return;
    }
    for (n, action) in ["plan", "search", "answer"].into_iter().enumerate() {
        let step = json!({ "session_id": session, "step": n + 1, "action": action });
        if !out.sleep(c.agent_step_pace).await || !out.event("step", &step).await {
            return;
        }
    }
    if !out.sleep_until(start + c.stream_ceiling).await {
        return;
    }
    let data = json!({ "detail": "stream ceiling reached" });
    if out.event("timeout", &data).await {
        out.finish().await;
    }
}
