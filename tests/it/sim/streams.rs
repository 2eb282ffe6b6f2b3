//! The three SSE streams (ingest progress, chat, agent session) and the SSE
//! faults, over real HTTP on loopback.

use std::time::Duration;

use crate::kit::document::{TEXT, b64};
use crate::kit::sim::{self as kit, client, event_names, raw, read_all, scoped};
use grag_client::bff::{AGENT_SESSION_STREAM, CHAT_STREAM, ORCHESTRATOR_EVENTS};
use grag_client::types::{ChatRequest, CreateConversation, CreateKb, JobState, UploadDocument};
use grag_client::{ConversationId, DocumentId, Grag, JobId, KbId, SessionId};
use grag_sim::embedded;
use grag_sim::{Fault, Rule, Sim, SimConfig};
use reqwest::Method;
use sdk_runtime::{Call, Events};
use serde_json::Value;
use tokio::time::Instant;

/// Jobs held until their first subscriber, which therefore sees every node
/// however long it took to subscribe.
fn ingest_config() -> SimConfig {
    let mut c = kit::config().with_held_jobs();
    c.job_queue = Duration::from_millis(60);
    c.job_node_pace = Duration::from_millis(10);
    c
}

async fn kb_with_document(grag: &Grag, kb: &str, doc: &str) {
    let kb_id = KbId::parse(kb).unwrap();
    grag.workspaces()
        .create_kb(&CreateKb::new(kb_id.clone(), kb))
        .await
        .unwrap();
    grag.workspaces()
        .upload_document(
            &kb_id,
            &UploadDocument::new(
                DocumentId::parse(doc).unwrap(),
                format!("{doc}.txt"),
                "text/plain",
                b64(TEXT),
            ),
        )
        .await
        .unwrap();
}

/// The raw events of a stream route: the client's parser and watchdog, none
/// of its recovery (these tests check what the simulator sends).
async fn open(grag: &Grag, call: Call<'_>) -> Result<Events, sdk_runtime::Error> {
    grag.runtime().open_stream(call).await
}

async fn raw_job(grag: &Grag, job: &JobId) -> Result<Events, sdk_runtime::Error> {
    open(grag, Call::new(&ORCHESTRATOR_EVENTS).path(job.as_str())).await
}

async fn raw_chat(grag: &Grag, body: &ChatRequest) -> Result<Events, sdk_runtime::Error> {
    open(grag, Call::new(&CHAT_STREAM).json(body)).await
}

async fn raw_agent(grag: &Grag, session: &SessionId) -> Result<Events, sdk_runtime::Error> {
    open(
        grag,
        Call::new(&AGENT_SESSION_STREAM).path(session.as_str()),
    )
    .await
}

/// Every event of a stream through the client, and the error that ended it.
async fn collect(mut events: Events) -> (Vec<(String, Value)>, Option<sdk_runtime::Error>) {
    let mut out = Vec::new();
    while let Some(item) = events.next().await {
        match item {
            Ok(e) => out.push((
                e.event,
                serde_json::from_str(&e.data).unwrap_or(Value::Null),
            )),
            Err(e) => return (out, Some(e)),
        }
    }
    (out, None)
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(n, _)| n.as_str()).collect()
}

#[tokio::test]
async fn ingest_progress_on_the_orchestrator_stream_and_the_status_route() {
    let sim = embedded::start(ingest_config()).await;
    let grag = client(&sim, "knoll");
    kb_with_document(&grag, "kb-1", "doc-1").await;
    let job = JobId::parse("doc-1").unwrap();
    let status = grag.bff().pipeline_status(&job).await.unwrap();
    assert_eq!((status.status.as_str(), status.progress), ("queued", 0.0));
    let stream = raw_job(&grag, &job).await.unwrap();
    let (events, error) = collect(stream).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(
        names(&events),
        [
            "subscribed",
            "node_start",
            "node_complete",
            "node_start",
            "node_complete",
            "node_start",
            "node_complete",
            "node_start",
            "node_complete",
            "completed"
        ]
    );
    let nodes: Vec<_> = events
        .iter()
        .filter(|(n, _)| n == "node_start")
        .map(|(_, d)| d["node"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(nodes, sim.config().job_nodes);
    assert_eq!(events[9].1["results"]["chunks"], 3);
    let status = grag.bff().pipeline_status(&job).await.unwrap();
    assert_eq!(
        (status.status.as_str(), status.progress),
        ("completed", 1.0)
    );
    let docs = grag
        .workspaces()
        .list_documents(&KbId::parse("kb-1").unwrap())
        .await
        .unwrap();
    assert_eq!(docs[0].status.as_deref(), Some("indexed"));
}

#[tokio::test]
async fn keepalives_every_interval_then_timeout_at_the_ceiling() {
    let mut config = kit::config();
    config.keepalive = Duration::from_millis(20);
    config.stream_ceiling = Duration::from_millis(210);
    let sim = embedded::start(config).await;
    let grag = client(&sim, "knoll");
    kb_with_document(&grag, "kb-1", "doc-1").await;
    tokio::time::sleep(sim.config().job_duration() + Duration::from_millis(10)).await;
    // The job is over: pub/sub does not replay, so only keepalives remain.
    let opened = Instant::now();
    let response = scoped(
        &raw(),
        Method::GET,
        format!("{}/next/api/orchestrator/events/doc-1", sim.url()),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let (chunks, error) = read_all(response).await;
    assert!(error.is_none());
    let text: String = chunks.iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(event_names(&text), ["subscribed", "timeout"]);
    let keepalives = text.matches(": keepalive\n\n").count();
    assert!(
        (9..=11).contains(&keepalives),
        "{keepalives} keepalives:\n{text}"
    );
    let ended = chunks.last().unwrap().0 - opened;
    assert!(ended >= Duration::from_millis(200), "{ended:?}");
    // Never early: the first keepalive comes one interval after subscribing.
    let first = chunks
        .iter()
        .find(|(_, c)| c.starts_with(": keepalive"))
        .unwrap();
    assert!(first.0 - opened >= Duration::from_millis(20));

    // Through the client: the keepalives are counted, the ceiling is T18.
    let mut events = grag
        .runtime()
        .open_stream(Call::new(&ORCHESTRATOR_EVENTS).path("doc-1"))
        .await
        .unwrap();
    assert_eq!(events.next().await.unwrap().unwrap().event, "subscribed");
    let timeout = events.next().await.unwrap().unwrap_err();
    assert_eq!(
        (timeout.row(), timeout.class_name()),
        ("T18", "stream_timeout")
    );
    assert!(events.keepalives() >= 8);
}

#[tokio::test]
async fn a_failing_node_fails_the_job_on_stream_and_status() {
    let sim = embedded::start(ingest_config()).await;
    sim.faults().once(
        "upload_document",
        Fault::JobFails {
            node: "embed".into(),
        },
    );
    let grag = client(&sim, "knoll");
    kb_with_document(&grag, "kb-1", "doc-1").await;
    let job = JobId::parse("doc-1").unwrap();
    let (events, error) = collect(raw_job(&grag, &job).await.unwrap()).await;
    assert!(error.is_none());
    let names = names(&events);
    assert_eq!(&names[names.len() - 2..], ["node_fail", "failed"]);
    assert_eq!(events[events.len() - 2].1["node"], "embed");
    let status = grag.bff().pipeline_status(&job).await.unwrap();
    assert_eq!(status.status, JobState::Failed);
    assert!(status.error.unwrap().contains("embed"));
    assert!(sim.log().of("upload_document")[0].has_fault("job_fails"));
}

#[tokio::test]
async fn event_error_on_the_orchestrator_stream_is_t17() {
    let sim = embedded::start(ingest_config()).await;
    sim.faults().once(
        "orchestrator_events",
        Fault::SseError {
            after_events: 1,
            detail: "redis subscription lost".into(),
        },
    );
    let grag = client(&sim, "knoll");
    kb_with_document(&grag, "kb-1", "doc-1").await;
    let job = JobId::parse("doc-1").unwrap();
    let (events, error) = collect(raw_job(&grag, &job).await.unwrap()).await;
    assert_eq!(names(&events), ["subscribed"]);
    let error = error.unwrap();
    assert_eq!((error.row(), error.class_name()), ("T17", "stream_error"));
    assert!(error.detail().unwrap().contains("redis subscription lost"));
}

async fn chat_setup(sim: &Sim) -> Grag {
    let grag = client(sim, "knoll");
    kb_with_document(&grag, "kb-1", "doc-1").await;
    grag.workspaces()
        .create_conversation(
            &CreateConversation::new(ConversationId::parse("conv-1").unwrap())
                .with_title("Prüfung")
                .with_kb_ids(vec![KbId::parse("kb-1").unwrap()]),
        )
        .await
        .unwrap();
    tokio::time::sleep(sim.config().job_duration() + Duration::from_millis(10)).await;
    grag
}

fn question(conversation: &str) -> ChatRequest {
    ChatRequest::new(
        ConversationId::parse(conversation).unwrap(),
        "Wie oft werden Tragwerke geprüft?",
    )
}

fn stages(events: &[(String, Value)]) -> Vec<(String, String)> {
    events
        .iter()
        .filter(|(n, _)| n == "trace")
        .map(|(_, d)| {
            (
                d["stage"].as_str().unwrap().to_owned(),
                d["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_chat_turn_traces_its_stages_and_answers_in_pieces() {
    let sim = kit::sim().await;
    let grag = chat_setup(&sim).await;
    let stream = raw_chat(&grag, &question("conv-1")).await.unwrap();
    let (events, error) = collect(stream).await;
    assert!(error.is_none(), "{error:?}");
    let ok = |s: &str| (s.to_owned(), "ok".to_owned());
    assert_eq!(
        stages(&events),
        [
            ok("retrieval"),
            ok("rerank"),
            ok("generate"),
            ok("groundedness"),
            ok("persist")
        ]
    );
    let answer: String = events
        .iter()
        .filter(|(n, _)| n == "delta")
        .map(|(_, d)| d["text"].as_str().unwrap())
        .collect();
    let pieces = events.iter().filter(|(n, _)| n == "delta").count();
    assert!(pieces > 3, "the answer comes in pieces");
    let (last, done) = events.last().unwrap();
    assert_eq!(last, "done");
    assert_eq!(done["answer"], answer.as_str());
    assert!(answer.contains("DIN 1076"), "{answer}");
    assert_eq!(done["persisted"], true);
    let roles: Vec<_> = sim
        .messages("knoll", "conv-1")
        .into_iter()
        .map(|(role, _)| role)
        .collect();
    assert_eq!(roles, ["user", "assistant"]);
}

#[tokio::test]
async fn the_chat_stream_is_silent_before_the_answer_and_has_no_keepalives() {
    let mut config = kit::config();
    config.chat_silence = Duration::from_millis(150);
    let sim = embedded::start(config).await;
    chat_setup(&sim).await;
    let response = scoped(
        &raw(),
        Method::POST,
        format!("{}/next/api/chat/stream", sim.url()),
    )
    .json(&question("conv-1"))
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    let (chunks, error) = read_all(response).await;
    assert!(error.is_none());
    let text: String = chunks.iter().map(|(_, c)| c.as_str()).collect();
    assert!(
        !text.lines().any(|l| l.starts_with(':')),
        "no comments on the chat stream:\n{text}"
    );
    let rerank = chunks
        .iter()
        .position(|(_, c)| c.contains("\"rerank\""))
        .unwrap();
    let silence = chunks[rerank + 1].0 - chunks[rerank].0;
    assert!(silence >= Duration::from_millis(140), "{silence:?}");
    assert!(chunks[rerank + 1].1.contains("\"generate\""));
}

#[tokio::test]
async fn chat_stages_fail_open_except_generate_which_ends_the_turn() {
    let sim = kit::sim().await;
    let grag = chat_setup(&sim).await;
    sim.faults().once(
        "chat_stream",
        Fault::StageFails {
            stage: "rerank".into(),
        },
    );
    let (events, error) = collect(raw_chat(&grag, &question("conv-1")).await.unwrap()).await;
    assert!(error.is_none());
    assert_eq!(stages(&events)[1], ("rerank".into(), "failed".into()));
    assert_eq!(events.last().unwrap().0, "done");

    sim.faults().once(
        "chat_stream",
        Fault::StageFails {
            stage: "generate".into(),
        },
    );
    let (events, error) = collect(raw_chat(&grag, &question("conv-1")).await.unwrap()).await;
    let error = error.unwrap();
    assert_eq!((error.row(), error.class_name()), ("T17", "stream_error"));
    assert_eq!(
        stages(&events).last().unwrap(),
        &("generate".into(), "failed".into())
    );
    assert!(events.iter().all(|(n, _)| n != "delta"), "no answer");
    // Two user turns, one answer: the failed turn's question is kept, no answer.
    let roles: Vec<_> = sim
        .messages("knoll", "conv-1")
        .into_iter()
        .map(|(role, _)| role)
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert_eq!(
        sim.log().count("chat_stream"),
        2,
        "a chat turn is never resent"
    );
}

#[tokio::test]
async fn a_chat_turn_in_a_conversation_that_does_not_exist_is_not_saved() {
    let sim = kit::sim().await;
    let grag = chat_setup(&sim).await;
    let (events, error) = collect(raw_chat(&grag, &question("conv-nope")).await.unwrap()).await;
    assert!(error.is_none());
    assert_eq!(
        stages(&events).last().unwrap(),
        &("persist".into(), "failed".into())
    );
    let (_, done) = events.last().unwrap();
    assert_eq!(done["persisted"], false);
    assert!(sim.messages("knoll", "conv-nope").is_empty());
}

#[tokio::test]
async fn the_agent_stream_relays_steps_and_is_503_when_the_plane_is_dark() {
    let mut config = kit::config();
    config.stream_ceiling = Duration::from_millis(80);
    let sim = embedded::start(config).await;
    let grag = client(&sim, "knoll");
    let session = SessionId::parse("s-1").unwrap();
    let (events, error) = collect(raw_agent(&grag, &session).await.unwrap()).await;
    assert_eq!(names(&events), ["session", "step", "step", "step"]);
    assert_eq!(error.unwrap().row(), "T18");

    sim.faults().once(
        "agent_session_stream",
        Fault::SseError {
            after_events: 2,
            detail: "tool call failed".into(),
        },
    );
    let (events, error) = collect(raw_agent(&grag, &session).await.unwrap()).await;
    assert_eq!(names(&events), ["session", "step"]);
    assert_eq!(error.unwrap().row(), "T17");

    sim.faults().set_agent_plane(false);
    let Err(dark) = grag.bff().agent_session_stream(&session).await else {
        panic!("the agent plane is dark");
    };
    assert_eq!(
        (dark.status(), dark.class_name()),
        (Some(503), "feature_dark")
    );
    assert!(dark.detail().unwrap().contains("not running"));
}

#[tokio::test]
async fn a_stalled_stream_sends_no_byte_and_trips_the_watchdog() {
    let mut config = ingest_config();
    config.keepalive = Duration::from_millis(20);
    let sim = embedded::start(config).await;
    sim.faults()
        .push(Rule::new(Fault::SseStall { after_events: 1 }).on("orchestrator_events"));
    let grag = client(&sim, "knoll");
    kb_with_document(&grag, "kb-1", "doc-1").await;
    let mut response = scoped(
        &raw(),
        Method::GET,
        format!("{}/next/api/orchestrator/events/doc-1", sim.url()),
    )
    .send()
    .await
    .unwrap();
    let first = response.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).starts_with("event: subscribed"));
    // Ten keepalive intervals and the job's whole life: not one byte.
    let silent = tokio::time::timeout(Duration::from_millis(200), response.chunk()).await;
    assert!(silent.is_err(), "no byte while stalled: {silent:?}");

    // The client's watchdog (45 s, 450 ms at 1/100) calls it T19.
    let started = Instant::now();
    let job = JobId::parse("doc-1").unwrap();
    let (events, error) = collect(raw_job(&grag, &job).await.unwrap()).await;
    assert_eq!(names(&events), ["subscribed"]);
    assert_eq!(error.unwrap().row(), "T19");
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert!(
        sim.log()
            .of("orchestrator_events")
            .iter()
            .all(|e| e.has_fault("sse_stall"))
    );
}

#[tokio::test]
async fn a_stream_dropped_mid_event_is_a_connection_failure() {
    let sim = embedded::start(ingest_config()).await;
    sim.faults()
        .push(Rule::new(Fault::SseDrop { after_events: 2 }).on("orchestrator_events"));
    let grag = client(&sim, "knoll");
    kb_with_document(&grag, "kb-1", "doc-1").await;
    let response = scoped(
        &raw(),
        Method::GET,
        format!("{}/next/api/orchestrator/events/doc-1", sim.url()),
    )
    .send()
    .await
    .unwrap();
    let (chunks, error) = read_all(response).await;
    assert!(error.is_some(), "the body ends in an error");
    let text: String = chunks.iter().map(|(_, c)| c.as_str()).collect();
    assert!(text.starts_with("event: subscribed"));
    assert!(!text.ends_with("\n\n"), "cut inside an event: {text:?}");

    sim.reset();
    sim.faults()
        .push(Rule::new(Fault::SseDrop { after_events: 1 }).on("orchestrator_events"));
    kb_with_document(&grag, "kb-2", "doc-2").await;
    let job = JobId::parse("doc-2").unwrap();
    let (events, error) = collect(raw_job(&grag, &job).await.unwrap()).await;
    assert_eq!(names(&events), ["subscribed"]);
    let error = error.unwrap();
    assert_eq!((error.row(), error.class_name()), ("T1", "connection"));
}

#[tokio::test]
async fn a_buffered_stream_arrives_in_one_burst_at_the_end() {
    let mut config = kit::config();
    config.chat_silence = Duration::from_millis(100);
    let sim = embedded::start(config).await;
    chat_setup(&sim).await;
    sim.faults().once("chat_stream", Fault::SseBuffered);
    let sent = Instant::now();
    let response = scoped(
        &raw(),
        Method::POST,
        format!("{}/next/api/chat/stream", sim.url()),
    )
    .json(&question("conv-1"))
    .send()
    .await
    .unwrap();
    let (chunks, error) = read_all(response).await;
    assert!(error.is_none());
    assert_eq!(chunks.len(), 1, "one burst");
    let (arrived, text) = &chunks[0];
    assert!(*arrived - sent >= Duration::from_millis(100));
    let names = event_names(text);
    assert_eq!(names.first().map(String::as_str), Some("trace"));
    assert_eq!(names.last().map(String::as_str), Some("done"));
    assert!(sim.log().of("chat_stream")[0].has_fault("sse_buffered"));
}

#[tokio::test]
async fn stopping_ends_open_streams() {
    let mut config = ingest_config();
    config.shutdown_grace = Duration::from_secs(3600);
    let sim = embedded::start(config).await;
    let grag = client(&sim, "knoll");
    kb_with_document(&grag, "kb-1", "doc-1").await;
    let response = scoped(
        &raw(),
        Method::GET,
        format!("{}/next/api/orchestrator/events/doc-1", sim.url()),
    )
    .send()
    .await
    .unwrap();
    let reader = tokio::spawn(read_all(response));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let url = sim.url();
    // Stopping ends the stream instead of waiting out the grace (an hour).
    tokio::time::timeout(Duration::from_secs(60), sim.stop())
        .await
        .expect("stop ends open streams, it does not wait for them");
    let (chunks, _) = tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .expect("the stream ended")
        .unwrap();
    assert!(!chunks.is_empty());
    assert!(
        raw()
            .get(format!("{url}/workspaces/health"))
            .send()
            .await
            .is_err()
    );
}
