//! Streams against the simulator (real loopback HTTP, compressed time): job
//! progress through a stall, the ceiling's `timeout`, an `error` event and a
//! reconnect; chat turns through stage failures, a stall and a drop; agent
//! sessions' error frames and a dark agent plane; a turn past the overall
//! deadline under paused time, at the spec's own durations. Faults
//! are driven by event and request counts; what is asserted never depends
//! on how fast the machine runs (the exact delays are the paused-time tests
//! of `sdk-runtime`'s `follow` and `turn` modules).

use std::time::Duration;

use crate::kit::sim::{Kit, upload_for_job};
use grag_client::types::{
    AgentEvent, ChatEvent, ChatRequest, CreateConversation, JobStatus, OrchestratorEvent,
};
use grag_client::{ConversationId, Existing, Grag, SessionId};
use grag_sim::embedded;
use grag_sim::{Fault, Rule, SimConfig};
use sdk_runtime::{Error, JobProgress, JobUpdate, TurnUpdate};

/// Only bounds a test that would otherwise hang; never an assertion about speed.
const HANG_GUARD: Duration = Duration::from_secs(30);

/// The simulator at 1/1000 (keepalive 20 ms, ceiling 1.8 s) with jobs held
/// until their first subscriber, the client at 1/100 (watchdog 450 ms,
/// polling every 50 ms).
async fn kit_with(adjust: impl FnOnce(&mut SimConfig)) -> Kit {
    kit_at(100, adjust).await
}

/// Like [`kit_with`], the client at 1/`divisor`. Tests that assert a stream
/// did *not* stall take 10 (watchdog 4.5 s, polling every 500 ms): a
/// keepalive every 20 ms is then 225 times faster than the watchdog, however
/// busy the machine.
async fn kit_at(divisor: u32, adjust: impl FnOnce(&mut SimConfig)) -> Kit {
    let mut sim = embedded::sim_config(1000).with_held_jobs();
    sim.job_queue = Duration::from_millis(20);
    sim.job_node_pace = Duration::from_millis(5);
    adjust(&mut sim);
    Kit::start(sim, embedded::policy(divisor)).await
}

/// What following a job yielded, in words, and how it ended.
async fn follow(
    mut progress: JobProgress<OrchestratorEvent, JobStatus>,
) -> (Vec<String>, Option<Error>) {
    crate::kit::sim::follow(&mut progress, HANG_GUARD).await
}

fn fallbacks(grag: &Grag) -> usize {
    grag.runtime()
        .metrics_text()
        .lines()
        .find_map(|l| l.strip_prefix("knoll_sse_fallback_total{stream=\"orchestrator\"} "))
        .map_or(0, |n| n.parse().unwrap())
}

fn fell_back(seen: &[String]) -> Vec<&str> {
    seen.iter()
        .filter_map(|s| s.strip_prefix("fell back: "))
        .collect()
}

#[tokio::test]
async fn keepalives_longer_than_the_watchdog_are_no_stall() {
    // The job waits 6 s in the queue: longer than the watchdog (4.5 s), with
    // nothing but keepalives (every 20 ms). The sim's ceiling (1.8 s) is
    // raised past it.
    let kit = kit_at(10, |s| {
        s.job_queue = Duration::from_secs(6);
        s.stream_ceiling = Duration::from_secs(60);
    })
    .await;
    let job = upload_for_job(&kit.grag, "doc-1").await;
    let (seen, end) = follow(kit.grag.bff().orchestrator_events(&job)).await;
    assert!(end.is_none(), "{end:?}");
    assert!(fell_back(&seen).is_empty(), "{seen:?}");
    assert_eq!(seen.first().map(String::as_str), Some("subscribed"));
    assert_eq!(seen.last().map(String::as_str), Some("completed"));
    assert_eq!(kit.sim.log().count("pipeline_status"), 0);
    assert_eq!(fallbacks(&kit.grag), 0);
}

/// §6.1 ("…"): an event the platform adds later reaches the caller as it
/// was sent, `OrchestratorEvent::Other`, and ends nothing: the stream goes
/// on to the job's end without a fallback.
#[tokio::test]
async fn an_unknown_orchestrator_event_passes_through_verbatim_and_ends_nothing() {
    let kit = kit_with(|_| {}).await;
    let job = upload_for_job(&kit.grag, "doc-1").await;
    let data = serde_json::json!({"job_id": job.as_str(), "node": "embed", "shard": 3});
    kit.sim.faults().push(
        Rule::new(Fault::SseExtraEvent {
            after_events: 2,
            event: "node_retry".into(),
            data: data.clone(),
        })
        .on("orchestrator_events")
        .once(),
    );
    let mut progress = kit.grag.bff().orchestrator_events(&job);
    let (mut seen, mut other) = (Vec::new(), None);
    let end = tokio::time::timeout(HANG_GUARD, async {
        while let Some(next) = progress.next().await {
            match next {
                Ok(JobUpdate::Event(OrchestratorEvent::Other(e))) => {
                    seen.push(e.event.clone());
                    other = Some(e);
                }
                Ok(JobUpdate::Event(e)) => seen.push(e.name().to_owned()),
                Ok(JobUpdate::Completed(_)) => {
                    seen.push("completed".to_owned());
                    return None;
                }
                Ok(update) => panic!("{update:?} after {seen:?}"),
                Err(e) => return Some(e),
            }
        }
        panic!("the follow ended without the job's end: {seen:?}")
    })
    .await
    .expect("the job is followed to its end");
    assert!(end.is_none(), "{end:?}");
    assert_eq!(
        seen[..3],
        ["subscribed", "node_start", "node_retry"],
        "{seen:?}"
    );
    assert_eq!(
        seen.last().map(String::as_str),
        Some("completed"),
        "{seen:?}"
    );
    let other = other.expect("the unknown event came through");
    let sent: serde_json::Value = serde_json::from_str(&other.data).unwrap();
    assert_eq!(sent, data, "its data as it was sent");
    assert_eq!(kit.sim.log().count("pipeline_status"), 0, "no fallback");
    assert_eq!(fallbacks(&kit.grag), 0);
}

#[tokio::test]
async fn a_stall_falls_back_to_polling_and_the_result_still_arrives() {
    let kit = kit_with(|_| {}).await;
    let job = upload_for_job(&kit.grag, "doc-1").await;
    kit.sim.faults().push(
        Rule::new(Fault::SseStall { after_events: 2 })
            .on("orchestrator_events")
            .once(),
    );
    let (seen, end) = follow(kit.grag.bff().orchestrator_events(&job)).await;
    assert!(end.is_none(), "{end:?}");
    assert_eq!(
        seen[..3],
        ["subscribed", "node_start", "fell back: stream_stalled"]
    );
    assert_eq!(
        seen.last().map(String::as_str),
        Some("completed"),
        "{seen:?}"
    );
    assert!(kit.sim.log().count("pipeline_status") >= 1);
    assert_eq!(fallbacks(&kit.grag), 1);
}

#[tokio::test]
async fn the_ceiling_s_timeout_event_is_polled_through_not_a_failed_job() {
    // The job outlasts the stream's ceiling (1.8 s at this scale).
    let kit = kit_at(10, |s| s.job_queue = Duration::from_millis(2500)).await;
    let job = upload_for_job(&kit.grag, "doc-1").await;
    let (seen, end) = follow(kit.grag.bff().orchestrator_events(&job)).await;
    assert!(end.is_none(), "not failed: {end:?}");
    assert_eq!(
        fell_back(&seen).first(),
        Some(&"stream_timeout"),
        "{seen:?}"
    );
    assert!(
        seen.contains(&"status queued".to_owned()) || seen.contains(&"status running".to_owned()),
        "{seen:?}"
    );
    assert_eq!(
        seen.last().map(String::as_str),
        Some("completed"),
        "{seen:?}"
    );
}

#[tokio::test]
async fn an_error_event_falls_back_to_polling() {
    let kit = kit_with(|_| {}).await;
    let job = upload_for_job(&kit.grag, "doc-1").await;
    kit.sim.faults().push(
        Rule::new(Fault::SseError {
            after_events: 1,
            detail: "relay lost its redis subscription".into(),
        })
        .on("orchestrator_events")
        .once(),
    );
    let (seen, end) = follow(kit.grag.bff().orchestrator_events(&job)).await;
    assert!(end.is_none(), "{end:?}");
    assert_eq!(seen[..2], ["subscribed", "fell back: stream_error"]);
    assert_eq!(
        seen.last().map(String::as_str),
        Some("completed"),
        "{seen:?}"
    );
    assert_eq!(fallbacks(&kit.grag), 1);
}

#[tokio::test]
async fn a_reconnect_is_resynced_by_exactly_one_poll() {
    // The drop comes with the first node (after 20 ms); the job then runs
    // 8 s, through the six fallback polls (3 s). The sim's ceiling (1.8 s)
    // is raised past it.
    let kit = kit_at(10, |s| {
        s.job_node_pace = Duration::from_secs(2);
        s.stream_ceiling = Duration::from_secs(60);
    })
    .await;
    let job = upload_for_job(&kit.grag, "doc-1").await;
    kit.sim.faults().push(
        Rule::new(Fault::SseDrop { after_events: 1 })
            .on("orchestrator_events")
            .once(),
    );
    let (seen, end) = follow(kit.grag.bff().orchestrator_events(&job)).await;
    assert!(end.is_none(), "{end:?}");
    let log = kit.sim.log().entries();
    let ops: Vec<&str> = log.iter().filter_map(|r| r.operation).collect();
    let opens: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, op)| **op == "orchestrator_events")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        opens.len(),
        2,
        "dropped once, reopened once: {ops:?} {seen:?}"
    );
    let polls = |range: std::ops::Range<usize>| {
        ops[range]
            .iter()
            .filter(|op| **op == "pipeline_status")
            .count()
    };
    let reopen = opens[1];
    assert_eq!(polls(opens[0]..reopen), 6, "status.reopen_after: {ops:?}");
    assert_eq!(polls(reopen..ops.len()), 1, "one resync poll: {ops:?}");
    assert_eq!(
        seen.iter().filter(|s| *s == "subscribed").count(),
        2,
        "{seen:?}"
    );
    assert_eq!(
        seen.last().map(String::as_str),
        Some("completed"),
        "{seen:?}"
    );
    assert_eq!(fell_back(&seen), ["connection"]);
}

#[tokio::test]
async fn a_failed_job_ends_in_job_failed_with_the_re_upload_copy() {
    let kit = kit_with(|_| {}).await;
    kit.sim.faults().push(
        Rule::new(Fault::JobFails {
            node: "embed".into(),
        })
        .on("upload_document")
        .once(),
    );
    let job = upload_for_job(&kit.grag, "doc-1").await;
    let (seen, end) = follow(kit.grag.bff().orchestrator_events(&job)).await;
    let error = end.expect("a failed job is an error");
    assert_eq!(
        (error.row(), error.class_name()),
        ("T32", "job_failed"),
        "{error}"
    );
    assert!(error.detail().unwrap().contains("embed"), "{error}");
    assert!(error.message().unwrap().contains("Angefordert"), "{error}");
    assert_eq!(seen.last().map(String::as_str), Some("failed"), "{seen:?}");
}

// ---- chat ----------------------------------------------------------------------------------

async fn conversation(grag: &Grag) -> Existing<ConversationId> {
    grag.workspaces()
        .ensure_conversation(&CreateConversation::new(
            ConversationId::parse("conv-1").unwrap(),
        ))
        .await
        .unwrap()
}

fn question(conversation: &Existing<ConversationId>) -> ChatRequest {
    ChatRequest::new(conversation.id().clone(), "Wie oft werden Brücken geprüft?")
}

/// A turn in words (`trace rerank failed`, `delta`, `degraded rerank`,
/// `done`) and how it ended.
async fn ask(grag: &Grag, conversation: &Existing<ConversationId>) -> (Vec<String>, Option<Error>) {
    let mut turn = grag
        .bff()
        .chat_stream(conversation, &question(conversation))
        .await
        .expect("the turn opens");
    tokio::time::timeout(HANG_GUARD, async {
        let mut seen = Vec::new();
        while let Some(update) = turn.next().await {
            seen.push(match update {
                Ok(TurnUpdate::Event(ChatEvent::Trace(t))) => {
                    format!("trace {} {}", t.stage, t.status)
                }
                Ok(TurnUpdate::Event(e)) => e.name().to_owned(),
                Ok(TurnUpdate::Degraded(s)) => format!("degraded {}", s.stage),
                Err(e) => return (seen, Some(e)),
            });
        }
        (seen, None)
    })
    .await
    .expect("the turn ends")
}

/// §4.1 on the real path: a turn is one interactive call, held to the
/// overall deadline after its head too. The spec's own times under paused
/// tokio time: an event every 50 s keeps the 150 s watchdog quiet, and the
/// 180 s deadline still ends the turn, as T20 with the German copy.
#[tokio::test(start_paused = true)]
async fn a_turn_trickling_past_the_overall_deadline_ends_in_t20() {
    let policy = embedded::policy(1);
    // The chat stream: the one that carries an answer.
    let chat = policy.streams.iter().find(|s| s.lost_copy.is_some());
    let watchdog = chat.expect("the chat stream").watchdog;
    let pace = Duration::from_secs(50);
    assert!(pace < watchdog && 3 * pace < policy.deadline && policy.deadline < 4 * pace);
    let mut sim = embedded::sim_config(1);
    (sim.chat_stage_pace, sim.chat_silence, sim.chat_piece_pace) = (pace, pace, pace);
    let kit = Kit::start(sim, policy).await;
    let conversation = conversation(&kit.grag).await;

    let asked = tokio::time::Instant::now();
    let mut turn = kit
        .grag
        .bff()
        .chat_stream(&conversation, &question(&conversation))
        .await
        .expect("the turn opens");
    let mut seen = Vec::new();
    let error = loop {
        match turn.next().await {
            Some(Ok(TurnUpdate::Event(e))) => seen.push(e.name().to_owned()),
            Some(Ok(TurnUpdate::Degraded(s))) => panic!("degraded {}: {seen:?}", s.stage),
            Some(Err(e)) => break e,
            None => panic!("the turn ended without its deadline: {seen:?}"),
        }
    };
    assert_eq!(asked.elapsed(), policy.deadline, "exactly the deadline");
    assert_eq!(
        seen,
        ["trace", "trace", "trace"],
        "three stages, 50 s apart"
    );
    assert_eq!(
        (error.row(), error.class_name()),
        ("T20", "deadline"),
        "{error}"
    );
    assert!(error.answer_lost(), "{error}");
    let copy = error.message().unwrap_or_default();
    assert!(copy.contains("Erneut senden"), "the German copy: {copy}");
    assert_eq!(kit.sim.log().count("chat_stream"), 1, "never sent twice");
}

/// The turn failed with its answer lost, and the simulator saw one POST.
fn assert_lost_once(kit: &Kit, end: Option<Error>, class: &str) {
    let error = end.expect("the turn failed");
    assert_eq!(error.class_name(), class, "{error}");
    assert!(error.answer_lost(), "{error}");
    assert!(
        error.message().unwrap().contains("Erneut senden"),
        "{error:?}"
    );
    assert_eq!(kit.sim.log().count("chat_stream"), 1, "never sent twice");
}

#[tokio::test]
async fn a_failed_stage_degrades_the_turn_and_the_answer_still_arrives() {
    let kit = kit_with(|_| {}).await;
    let conversation = conversation(&kit.grag).await;
    kit.sim.faults().push(
        Rule::new(Fault::StageFails {
            stage: "rerank".into(),
        })
        .on("chat_stream")
        .once(),
    );
    let (seen, end) = ask(&kit.grag, &conversation).await;
    assert!(end.is_none(), "{end:?}");
    let at = seen
        .iter()
        .position(|s| s == "trace rerank failed")
        .expect("{seen:?}");
    assert_eq!(seen[at + 1], "degraded rerank");
    assert!(seen.contains(&"delta".to_owned()), "{seen:?}");
    assert_eq!(seen.last().map(String::as_str), Some("done"));
    let state = kit.grag.runtime().feature_state("chat").unwrap();
    assert_eq!(
        (state.state, state.stage.as_deref()),
        ("degraded", Some("rerank"))
    );
    assert_eq!(kit.sim.log().count("chat_stream"), 1);
}

#[tokio::test]
async fn a_failed_generate_ends_the_turn_sent_once() {
    let kit = kit_with(|_| {}).await;
    let conversation = conversation(&kit.grag).await;
    kit.sim.faults().push(
        Rule::new(Fault::StageFails {
            stage: "generate".into(),
        })
        .on("chat_stream")
        .once(),
    );
    let (seen, end) = ask(&kit.grag, &conversation).await;
    assert!(!seen.contains(&"delta".to_owned()), "{seen:?}");
    assert_lost_once(&kit, end, "stream_error");
}

#[tokio::test]
async fn a_chat_stall_aborts_the_turn_sent_once() {
    let kit = kit_with(|_| {}).await;
    let conversation = conversation(&kit.grag).await;
    kit.sim.faults().push(
        Rule::new(Fault::SseStall { after_events: 2 })
            .on("chat_stream")
            .once(),
    );
    let (seen, end) = ask(&kit.grag, &conversation).await;
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_lost_once(&kit, end, "stream_stalled");
}

#[tokio::test]
async fn a_drop_mid_answer_ends_the_turn_sent_once() {
    let kit = kit_with(|_| {}).await;
    let conversation = conversation(&kit.grag).await;
    // Retrieval, rerank, generate, groundedness, one piece of the answer.
    kit.sim.faults().push(
        Rule::new(Fault::SseDrop { after_events: 5 })
            .on("chat_stream")
            .once(),
    );
    let (seen, end) = ask(&kit.grag, &conversation).await;
    assert_eq!(seen.last().map(String::as_str), Some("delta"), "{seen:?}");
    assert_lost_once(&kit, end, "connection");
    // The read the docs of `chat_stream` name: the user message was saved,
    // the answer was not (§6.2) — what a reload shows before „Erneut senden“.
    let saved = kit
        .grag
        .workspaces()
        .conversation_messages(conversation.id())
        .await
        .unwrap();
    let saved: Vec<(&str, &str)> = saved
        .iter()
        .map(|m| (m.role.as_str(), m.content.as_str()))
        .collect();
    assert_eq!(saved, [("user", "Wie oft werden Brücken geprüft?")]);
    assert_eq!(
        kit.sim.log().count("chat_stream"),
        1,
        "the read sent nothing twice"
    );
}

/// §10.3: failures after a stream's head are counted per stream
/// (`knoll_sse_fallback_total{stream="chat"}`) and logged, and the request
/// metrics count the failed turn by its class, never as `ok`.
#[tokio::test]
async fn a_turn_that_fails_after_its_head_is_counted_and_logged_not_ok() {
    #[derive(Clone, Default)]
    struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = crate::kit::capture::set_default(subscriber);

    let kit = kit_with(|_| {}).await;
    let conversation = conversation(&kit.grag).await;
    kit.sim.faults().push(
        Rule::new(Fault::SseDrop { after_events: 5 })
            .on("chat_stream")
            .once(),
    );
    let (_, end) = ask(&kit.grag, &conversation).await;
    let error = end.expect("the turn failed");
    assert_eq!(error.class_name(), "connection", "{error}");
    assert!(
        error.request_id().is_some(),
        "the head's request id: {error}"
    );
    let text = kit.grag.runtime().metrics_text();
    assert!(
        text.contains(r#"knoll_sse_fallback_total{stream="chat"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"grag_client_requests_total{service="bff",error_class="connection",retried="false"} 1"#),
        "{text}"
    );
    assert!(
        !text.contains(r#"grag_client_requests_total{service="bff",error_class="ok""#),
        "a failed turn is not an ok call: {text}"
    );
    // A clean turn afterwards is one ok call.
    let (_, end) = ask(&kit.grag, &conversation).await;
    assert!(end.is_none(), "{end:?}");
    let text = kit.grag.runtime().metrics_text();
    assert!(
        text.contains(
            r#"grag_client_requests_total{service="bff",error_class="ok",retried="false"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"knoll_sse_fallback_total{stream="chat"} 1"#),
        "{text}"
    );

    let logged: Vec<serde_json::Value> = String::from_utf8(lines.0.lock().unwrap().clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|l: &serde_json::Value| l["message"] == "stream failed")
        .collect();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(logged[0]["target"], "grag_client::stream");
    assert_eq!(logged[0]["stream"], "chat");
    assert_eq!(logged[0]["error_class"], "connection");
    assert_eq!(logged[0]["request_id"], error.request_id().unwrap());
    assert_eq!(logged[0]["tenant"], "knoll");
}

#[tokio::test]
async fn a_turn_for_another_conversation_than_the_proven_one_is_refused_unsent() {
    let kit = kit_with(|_| {}).await;
    let conversation = conversation(&kit.grag).await;
    let mut body = question(&conversation);
    body.conversation_id = ConversationId::parse("conv-unknown").unwrap();
    let error = kit
        .grag
        .bff()
        .chat_stream(&conversation, &body)
        .await
        .err()
        .expect("refused");
    assert_eq!(error.class_name(), "invalid_scope", "{error}");
    assert_eq!(kit.sim.log().count("chat_stream"), 0, "nothing sent");
}

// ---- agent sessions ------------------------------------------------------------------------

#[tokio::test]
async fn an_agent_error_frame_is_a_typed_error() {
    let kit = kit_with(|_| {}).await;
    kit.sim.faults().push(
        Rule::new(Fault::SseError {
            after_events: 2,
            detail: "tool call failed".into(),
        })
        .on("agent_session_stream")
        .once(),
    );
    let session = SessionId::parse("session-1").unwrap();
    let mut relay = kit.grag.bff().agent_session_stream(&session).await.unwrap();
    let mut seen = Vec::new();
    let error = tokio::time::timeout(HANG_GUARD, async {
        loop {
            match relay.next().await.expect("an error before the end") {
                Ok(TurnUpdate::Event(AgentEvent::Session(s))) => {
                    seen.push(format!("session {}", s.session_id))
                }
                Ok(TurnUpdate::Event(AgentEvent::Step(s))) => {
                    seen.push(format!("step {}", s.action.unwrap_or_default()))
                }
                Ok(other) => panic!("unexpected {other:?}"),
                Err(e) => break e,
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(seen, ["session session-1", "step plan"]);
    assert_eq!(
        (error.row(), error.class_name()),
        ("T17", "stream_error"),
        "{error}"
    );
    assert_eq!(error.detail(), Some("tool call failed"));
    assert!(!error.answer_lost(), "a session carries no answer to lose");
    assert!(relay.next().await.is_none(), "the relay is over");
}

#[tokio::test]
async fn a_503_on_opening_an_agent_session_means_the_agent_plane_is_dark() {
    let kit = kit_with(|s| s.agent_plane = false).await;
    let session = SessionId::parse("session-1").unwrap();
    let error = kit
        .grag
        .bff()
        .agent_session_stream(&session)
        .await
        .err()
        .expect("refused");
    assert_eq!(
        (error.row(), error.class_name(), error.status()),
        ("T33", "feature_dark", Some(503)),
        "the route's row decides (§6.3): {error}"
    );
    assert_eq!(
        kit.grag.runtime().feature_state("agents").unwrap().state,
        "dark"
    );
}

// ---- proxy buffering (§6.4) ----------------------------------------------------------------

#[tokio::test]
async fn a_buffering_proxy_is_confirmed_then_jobs_are_polled_and_chat_answers_arrive_whole() {
    // Each job runs 1 s: longer than the rule's silence (5 s / 10), shorter
    // than the watchdog (4.5 s), so a buffered stream arrives whole at its end.
    let kit = kit_at(10, |s| s.job_queue = Duration::from_secs(1)).await;
    kit.sim.faults().push(
        Rule::new(Fault::SseBuffered)
            .on("orchestrator_events")
            .times(2),
    );
    let first = upload_for_job(&kit.grag, "doc-1").await;
    let (seen, end) = follow(kit.grag.bff().orchestrator_events(&first)).await;
    assert!(end.is_none(), "{end:?}");
    assert_eq!(
        seen.last().map(String::as_str),
        Some("completed"),
        "the result arrives"
    );
    assert!(
        kit.alerts.names().is_empty(),
        "one buffered stream is no proof"
    );
    assert!(!kit.grag.runtime().polling_only());

    let second = upload_for_job(&kit.grag, "doc-2").await;
    let (_, end) = follow(kit.grag.bff().orchestrator_events(&second)).await;
    assert!(end.is_none(), "{end:?}");
    assert_eq!(kit.alerts.names(), ["sse_fallbacks_sustained"], "confirmed");
    assert!(kit.grag.runtime().polling_only());
    assert!(
        kit.grag
            .runtime()
            .metrics_text()
            .contains("knoll_sse_buffered_total{stream=\"orchestrator\"} 2")
    );

    // From now on jobs are followed by polling alone.
    let streams = kit.sim.log().count("orchestrator_events");
    let third = upload_for_job(&kit.grag, "doc-3").await;
    kit.sim.start_job(embedded::TENANT, third.as_str());
    let (seen, end) = follow(kit.grag.bff().orchestrator_events(&third)).await;
    assert!(end.is_none(), "{end:?}");
    assert_eq!(
        seen.last().map(String::as_str),
        Some("completed"),
        "{seen:?}"
    );
    assert!(
        seen[..seen.len() - 1]
            .iter()
            .all(|s| s.starts_with("status")),
        "{seen:?}"
    );
    assert_eq!(
        kit.sim.log().count("orchestrator_events"),
        streams,
        "no stream opened"
    );
}

#[tokio::test]
async fn a_buffered_chat_turn_still_delivers_its_whole_answer() {
    // The completion takes 1 s: past the rule's silence (5 s / 10).
    let kit = kit_at(10, |s| s.chat_silence = Duration::from_secs(1)).await;
    let conversation = conversation(&kit.grag).await;
    kit.sim
        .faults()
        .push(Rule::new(Fault::SseBuffered).on("chat_stream").once());
    let mut turn = kit
        .grag
        .bff()
        .chat_stream(&conversation, &question(&conversation))
        .await
        .unwrap();
    let mut answer = String::new();
    let mut done = false;
    tokio::time::timeout(HANG_GUARD, async {
        while let Some(update) = turn.next().await {
            match update.expect("no error") {
                TurnUpdate::Event(ChatEvent::Delta(d)) => answer.push_str(&d.text),
                TurnUpdate::Event(ChatEvent::Done(_)) => done = true,
                _ => {}
            }
        }
    })
    .await
    .unwrap();
    assert!(done, "the turn ended with `done`");
    assert!(!answer.is_empty(), "the answer arrived whole");
    assert!(turn.was_buffered(), "the whole turn came in one burst");
    assert_eq!(kit.sim.log().count("chat_stream"), 1);
}
