//! bff: pipeline status and the SSE streams (orchestrator events, chat, agent sessions).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use grag_client::types::SearchHit;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::ai::search;
use super::ctx::Ctx;
use super::reply::Answer;
use super::reply::{detail, json_status};
use crate::faults::Fault;
use crate::shared::Shared;
use crate::sse::{SseOut, sse_response};
use crate::state::{Charge, Job, Platform, overlap, words};

pub(super) fn pipeline_status(p: &mut Platform, ctx: &Ctx) -> Answer {
    let id = ctx.param("job_id");
    match p.tenant(&ctx.tenant).jobs.get(id) {
        Some(job) => Ok(json_status(200, &job.status(Instant::now()))),
        None => Err(detail(404, format!("job '{id}' not found"))),
    }
}

pub(super) fn orchestrator_events(shared: &Arc<Shared>, ctx: Ctx) -> Answer {
    let id = ctx.param("job_id").to_owned();
    // A held job starts at its first subscription, which then sees every event.
    let subscribed = Instant::now();
    let (job, starts_here) = with_platform(shared, |p| {
        let job = p.tenant(&ctx.tenant).jobs.get_mut(&id)?;
        let starts_here = job.start.is_none();
        if starts_here {
            job.start = Some(subscribed);
        }
        Some((job.clone(), starts_here))
    })
    .ok_or_else(|| detail(404, format!("job '{id}' not found")))?;
    let (out, response) = sse_response(shared.shutdown.clone(), ctx.fault.clone());
    let keepalive = shared
        .config
        .keepalive
        .max(std::time::Duration::from_millis(1));
    let ceiling = shared.config.stream_ceiling;
    tokio::spawn(orchestrator_stream(
        out,
        job,
        subscribed,
        starts_here,
        keepalive,
        ceiling,
    ));
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
    subscribed: Instant,
    starts_here: bool,
    keepalive: std::time::Duration,
    ceiling: std::time::Duration,
) {
    if !out.event("subscribed", &json!({ "job_id": job.id })).await {
        return;
    }
    let mut events = job
        .timeline()
        .into_iter()
        .filter(|e| e.at > subscribed || starts_here)
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
        // A keepalive due before the ceiling goes out even when this task woke
        // late: how many a stream carries follows its schedule, not the load.
        if now >= next_keepalive && next_keepalive < ceiling_at {
            if !out.comment("keepalive").await {
                return;
            }
            next_keepalive += keepalive;
            continue;
        }
        if now >= ceiling_at {
            let data = json!({ "detail": "stream ceiling reached; the job may still be running" });
            if out.event("timeout", &data).await {
                out.finish().await;
            }
            return;
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

pub(super) fn chat_stream(shared: &Arc<Shared>, ctx: Ctx) -> Answer {
    let body: grag_client::types::ChatRequest = ctx.json()?;
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
    let run = TurnRun {
        shared: &shared,
        turn: &turn,
        pipeline_id,
    };
    let pace = shared.config.chat_stage_pace;
    // The upstream completion is not streamed: silence until it returns.
    let asked = traced(&mut out, pace, run.retrieval()).await
        && traced(&mut out, pace, run.rerank()).await
        && out.sleep(shared.config.chat_silence).await;
    if !asked {
        return;
    }
    if run.fails("generate") {
        return generate_failed(out).await;
    }
    run.bill("ai-gateway", "sim-llm", 0.002);
    let generated = stage("generate", false, json!({ "model": "sim-llm" }));
    let answered = out.event("trace", &generated).await
        && traced(&mut out, pace, run.groundedness()).await
        && delivered(&mut out, &turn.answer, shared.config.chat_piece_pace).await;
    if !answered {
        return;
    }
    let (persisted, persist) = run.persist();
    if !traced(&mut out, pace, persist).await {
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

/// A stage's trace event, `pace` after the one before; `false` once the
/// stream is gone.
async fn traced(out: &mut SseOut, pace: std::time::Duration, stage: Value) -> bool {
    out.sleep(pace).await && out.event("trace", &stage).await
}

/// The completion failed: the turn ends with `event: error`, unanswered.
async fn generate_failed(mut out: SseOut) {
    let failed = stage(
        "generate",
        true,
        json!({ "detail": "completion failed upstream" }),
    );
    let error = json!({ "detail": "generate failed: the completion did not return; the turn was not answered" });
    if out.event("trace", &failed).await && out.event("error", &error).await {
        out.finish().await;
    }
}

/// The finished completion as if tokenized: a few words per `delta`.
async fn delivered(out: &mut SseOut, answer: &str, pace: std::time::Duration) -> bool {
    let words: Vec<&str> = answer.split_inclusive(' ').collect();
    for piece in words.chunks(3).map(|w| w.concat()) {
        if !out.sleep(pace).await || !out.event("delta", &json!({ "text": piece })).await {
            return false;
        }
    }
    true
}

/// One chat turn as it runs: which stage fails, and what it bills.
struct TurnRun<'a> {
    shared: &'a Shared,
    turn: &'a Turn,
    pipeline_id: Option<String>,
}

impl TurnRun<'_> {
    fn fails(&self, name: &str) -> bool {
        self.turn.failing.as_deref() == Some(name)
    }

    fn bill(&self, service: &'static str, provider: &'static str, cost: f64) {
        with_platform(self.shared, |p| {
            p.tenant(&self.turn.tenant).ledger.push(Charge {
                service,
                provider,
                pipeline_id: self.pipeline_id.clone(),
                cost,
            })
        })
    }

    fn retrieval(&self) -> Value {
        match self.fails("retrieval") {
            true => stage(
                "retrieval",
                true,
                json!({ "detail": "retrieval failed; answering without context" }),
            ),
            false => stage("retrieval", false, json!({ "hits": self.turn.hits.len() })),
        }
    }

    fn rerank(&self) -> Value {
        if self.fails("rerank") {
            return stage(
                "rerank",
                true,
                json!({ "detail": "rerank failed; using retrieval order" }),
            );
        }
        self.bill("ai-gateway", "sim-rerank", 0.0004);
        let kept = self.turn.hits.len().min(3);
        stage("rerank", false, json!({ "kept": kept }))
    }

    fn groundedness(&self) -> Value {
        if self.fails("groundedness") {
            return stage(
                "groundedness",
                true,
                json!({ "detail": "groundedness check failed; answer not verified" }),
            );
        }
        self.bill("groundedness", "sim-nli", 0.0002);
        let context: String = self
            .turn
            .hits
            .iter()
            .map(|h| h.text.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        let score = overlap(&words(&self.turn.answer), &context);
        let score = (score * 100.0).round() / 100.0;
        stage("groundedness", false, json!({ "score": score }))
    }

    /// Saves the answer in the conversation; whether it was, and the trace.
    fn persist(&self) -> (bool, Value) {
        let turn = self.turn;
        let persisted = turn.exists
            && !self.fails("persist")
            && with_platform(self.shared, |p| {
                let tenant = p.tenant(&turn.tenant);
                match tenant.conversations.get_mut(&turn.conversation_id) {
                    Some(c) => {
                        c.messages.push(("assistant".into(), turn.answer.clone()));
                        true
                    }
                    None => false,
                }
            });
        let trace = if persisted {
            stage("persist", false, json!({}))
        } else if !turn.exists {
            let detail = format!(
                "conversation '{}' does not exist; the turn was not saved",
                turn.conversation_id
            );
            stage("persist", true, json!({ "detail": detail }))
        } else {
            stage(
                "persist",
                true,
                json!({ "detail": "persisting the answer failed" }),
            )
        };
        (persisted, trace)
    }
}

pub(super) fn agent_session_stream(shared: &Arc<Shared>, ctx: Ctx) -> Answer {
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
