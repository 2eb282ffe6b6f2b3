//! workspaces: knowledge bases, documents, conversations and settings.

use std::collections::BTreeMap;

use base64::Engine;
use grag_client::JobId;
use grag_client::types::{
    Conversation, CreateConversation, CreateKb, Document, Kb, UploadDocument,
};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::ctx::Ctx;
use super::ctx::charge;
use super::reply::{Answer, kb_not_found};
use super::reply::{detail, json_status};
use crate::config::JobStart;
use crate::faults::Fault;
use crate::shared::Shared;
use crate::state::{ConversationState, DocState, Job, KbState, Platform, chunks, now_rfc3339};

pub(super) fn list_kbs(p: &mut Platform, ctx: &Ctx) -> Answer {
    let kbs: Vec<Kb> = p
        .tenant(&ctx.tenant)
        .kbs
        .values()
        .map(|k| k.kb.clone())
        .collect();
    Ok(json_status(200, &kbs))
}

pub(super) fn create_kb(p: &mut Platform, ctx: &Ctx) -> Answer {
    let body: CreateKb = ctx.json()?;
    let tenant = p.tenant(&ctx.tenant);
    let id = body.kb_id.as_str().to_owned();
    if tenant.kbs.contains_key(&id) {
        return Err(detail(409, format!("knowledge base '{id}' already exists")));
    }
    let mut kb = Kb::new(body.kb_id)
        .with_name(body.name)
        .with_created_at(now_rfc3339());
    kb.description = body.description;
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

pub(super) fn list_documents(p: &mut Platform, ctx: &Ctx) -> Answer {
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

pub(super) fn upload_document(shared: &Shared, p: &mut Platform, ctx: &Ctx) -> Answer {
    let body: UploadDocument = ctx.json()?;
    // The spec types `content_base64` as a string: one that is not base64 is
    // kept as its own bytes rather than refused.
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(body.content_base64.as_bytes())
        .unwrap_or_else(|_| body.content_base64.clone().into_bytes());
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
    let mut document = Document::new(body.document_id, body.filename)
        .with_content_type(body.content_type)
        .with_status("queued")
        .with_created_at(now_rfc3339());
    document.job_id = JobId::parse(&job_id).ok();
    let chunk_count = chunks(&text).len();
    tenant.jobs.insert(
        job_id.clone(),
        Job {
            id: job_id.clone(),
            document_id: doc_id.clone(),
            kb_id: kb_id.clone(),
            start: match config.job_start {
                JobStart::AtUpload => Some(Instant::now()),
                JobStart::Held => None,
            },
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

pub(super) fn create_conversation(p: &mut Platform, ctx: &Ctx) -> Answer {
    let body: CreateConversation = ctx.json()?;
    let tenant = p.tenant(&ctx.tenant);
    let id = body.conversation_id.as_str().to_owned();
    if tenant.conversations.contains_key(&id) {
        return Err(detail(409, format!("conversation '{id}' already exists")));
    }
    let mut conversation = Conversation::new(body.conversation_id).with_created_at(now_rfc3339());
    conversation.title = body.title;
    conversation.kb_ids = body.kb_ids;
    tenant.conversations.insert(
        id,
        ConversationState {
            conversation: conversation.clone(),
            messages: Vec::new(),
        },
    );
    Ok(json_status(201, &conversation))
}

/// The saved turns of a conversation, as the chat stream persisted them.
pub(super) fn conversation_messages(p: &mut Platform, ctx: &Ctx) -> Answer {
    let id = ctx.param("conversation_id");
    let tenant = p.tenant(&ctx.tenant);
    let conversation = tenant
        .conversations
        .get(id)
        .ok_or_else(|| detail(404, format!("conversation '{id}' not found")))?;
    let messages: Vec<Value> = conversation
        .messages
        .iter()
        .map(|(role, content)| json!({ "role": role, "content": content }))
        .collect();
    Ok(json_status(200, &messages))
}

pub(super) fn get_settings(p: &mut Platform, ctx: &Ctx) -> Answer {
    let settings = p.tenant(&ctx.tenant).settings.clone();
    Ok(json_status(200, &settings.unwrap_or_else(|| json!({}))))
}

pub(super) fn put_settings(p: &mut Platform, ctx: &Ctx) -> Answer {
    // Any JSON, as the spec types it (`body: json`).
    let body: Value = ctx.json()?;
    p.tenant(&ctx.tenant).settings = Some(body.clone());
    Ok(json_status(200, &body))
}
