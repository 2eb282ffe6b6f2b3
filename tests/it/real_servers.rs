//! The client against what real servers do that a server written from the
//! spec would not, on the simulator: streams that end cleanly
//! before their terminal event, uvicorn closing the connection after an
//! unhandled error and after its keep-alive timeout, sse-starlette's CRLF
//! lines and pings. (The pydantic 422 that quotes the request is in
//! `logs.rs`, which owns the process's tracing capture.)

use std::time::Duration;

use crate::kit::sim::{Kit, upload_for_job};
use grag_client::types::{
    ChatMessage, ChatRequest, ChatRole, CompletionRequest, CreateConversation, JobStatus,
    OrchestratorEvent,
};
use grag_client::{ConversationId, Existing, Grag, SessionId};
use grag_sim::embedded;
use grag_sim::{Fault, Rule, SimConfig};
use sdk_runtime::{Error, JobProgress, StreamEvent, Turn, TurnUpdate};

/// Only bounds a test that would otherwise hang; never an assertion about speed.
const HANG_GUARD: Duration = Duration::from_secs(10);

/// A simulator whose jobs run quickly, each held until its first progress
/// subscriber (so what a stream sees does not depend on the machine's
/// speed), and a client at 1/100.
async fn kit() -> Kit {
    let mut sim = embedded::sim_config(1000).with_held_jobs();
    sim.job_queue = Duration::from_millis(20);
    sim.job_node_pace = Duration::from_millis(5);
    Kit::start(sim, embedded::policy(100)).await
}

/// Reads a turn to its end: its event names, and how it ended (`None`: cleanly).
async fn drain<E: StreamEvent>(
    turn: &mut Turn<E>,
    name: impl Fn(&E) -> &str,
) -> (Vec<String>, Option<Error>) {
    tokio::time::timeout(HANG_GUARD, async {
        let mut names = Vec::new();
        while let Some(next) = turn.next().await {
            match next {
                Ok(TurnUpdate::Event(e)) => names.push(name(&e).to_owned()),
                Ok(TurnUpdate::Degraded(s)) => names.push(format!("degraded {}", s.stage)),
                Err(e) => return (names, Some(e)),
            }
        }
        (names, None)
    })
    .await
    .expect("the stream ends")
}

/// A conversation that exists, proven by creating it.
async fn conversation(grag: &Grag) -> Existing<ConversationId> {
    grag.workspaces()
        .ensure_conversation(&CreateConversation::new(
            ConversationId::parse("conv-1").unwrap(),
        ))
        .await
        .unwrap()
}

fn chat() -> ChatRequest {
    ChatRequest::new(
        ConversationId::parse("conv-1").unwrap(),
        "Wie oft werden Tragwerke geprüft?",
    )
}

type Progress = JobProgress<OrchestratorEvent, JobStatus>;

async fn follow(progress: &mut Progress) -> (Vec<String>, Option<Error>) {
    crate::kit::sim::follow(progress, HANG_GUARD).await
}

/// A drop: the connection row, with what happened in the detail.
fn assert_drop(error: &Error, endpoint: &str) {
    assert_eq!(
        (error.row(), error.class_name(), error.endpoint()),
        ("T1", "connection", endpoint),
        "{error}"
    );
    assert_eq!(
        error.detail(),
        Some("the stream ended before its terminal event")
    );
}

#[tokio::test]
async fn a_progress_stream_that_ends_before_its_terminal_event_is_a_drop_and_the_job_is_polled() {
    let kit = kit().await;
    let job = upload_for_job(&kit.grag, "doc-1").await;
    kit.sim.faults().push(
        Rule::new(Fault::SseEndsEarly { after_events: 2 })
            .on("orchestrator_events")
            .once(),
    );
    let mut progress = kit.grag.bff().orchestrator_events(&job);
    let (seen, end) = follow(&mut progress).await;
    assert!(end.is_none(), "the job completed: {end:?}");
    assert_eq!(
        seen[..3],
        ["subscribed", "node_start", "fell back: connection"]
    );
    assert_eq!(
        seen.last().map(String::as_str),
        Some("completed"),
        "{seen:?}"
    );
    assert!(kit.sim.log().of("orchestrator_events")[0].has_fault("sse_ends_early"));
    assert!(
        kit.sim.log().count("pipeline_status") >= 1,
        "the job was polled"
    );

    // Another job's stream, without the fault, ends with its terminal event.
    let job = upload_for_job(&kit.grag, "doc-2").await;
    let polls = kit.sim.log().count("pipeline_status");
    let (seen, end) = follow(&mut kit.grag.bff().orchestrator_events(&job)).await;
    assert!(end.is_none(), "{end:?}");
    assert_eq!(
        seen.last().map(String::as_str),
        Some("completed"),
        "{seen:?}"
    );
    assert!(!seen.iter().any(|s| s.starts_with("fell back")), "{seen:?}");
    assert_eq!(kit.sim.log().count("pipeline_status"), polls, "no poll");
}

#[tokio::test]
async fn a_chat_stream_that_stops_mid_answer_is_a_drop_offering_a_resend() {
    let kit = kit().await;
    kit.sim.faults().push(
        Rule::new(Fault::SseEndsEarly { after_events: 6 })
            .on("chat_stream")
            .once(),
    );
    let existing = conversation(&kit.grag).await;
    let mut turn = kit
        .grag
        .bff()
        .chat_stream(&existing, &chat())
        .await
        .unwrap();
    let (names, end) = drain(&mut turn, |e| e.name()).await;
    assert_eq!(
        names,
        ["trace", "trace", "trace", "trace", "delta", "delta"],
        "the answer stopped after two pieces"
    );
    let error = end.expect("not a normal end: the answer was cut");
    assert_drop(&error, "chat_stream");
    assert!(error.answer_lost(), "the caller offers „Erneut senden“");
    assert_eq!(
        kit.sim.log().count("chat_stream"),
        1,
        "a chat turn is never re-sent by the client"
    );
}

#[tokio::test]
async fn a_relay_without_a_terminal_event_may_end_cleanly() {
    let kit = kit().await;
    kit.sim.faults().push(
        Rule::new(Fault::SseEndsEarly { after_events: 1 })
            .on("agent_session_stream")
            .once(),
    );
    let session = SessionId::parse("session-1").unwrap();
    let mut relay = kit.grag.bff().agent_session_stream(&session).await.unwrap();
    let (names, end) = drain(&mut relay, |e| e.name()).await;
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(end.is_none(), "the relay has no terminal event: {end:?}");
}

#[tokio::test]
async fn an_sse_starlette_stream_with_crlf_and_pings_reads_like_any_other() {
    let kit = kit().await;
    let job = upload_for_job(&kit.grag, "doc-1").await;
    let plain = follow(&mut kit.grag.bff().orchestrator_events(&job)).await;
    assert!(plain.1.is_none(), "{:?}", plain.1);

    // A second job of the same shape, streamed as sse-starlette writes it.
    let job = upload_for_job(&kit.grag, "doc-2").await;
    kit.sim.faults().push(
        Rule::new(Fault::SseStarlette { ping_ms: 5 })
            .on("orchestrator_events")
            .once(),
    );
    let mut progress = kit.grag.bff().orchestrator_events(&job);
    let (names, end) = follow(&mut progress).await;
    assert!(progress.keepalives() >= 1, "the pings are keepalives");
    assert!(end.is_none(), "{end:?}");
    assert_eq!(names, plain.0, "CRLF and pings change no event");
    assert!(kit.sim.log().of("orchestrator_events")[1].has_fault("sse_starlette"));
}

fn completion() -> CompletionRequest {
    CompletionRequest::new(vec![ChatMessage::new(
        ChatRole::User,
        "Fasse den Prüfbericht zusammen.",
    )])
}

/// A run against uvicorn saw 4 of 20 completions failing right after a 500 on
/// uvicorn, which closes the connection after an unhandled error without
/// `Connection: close`. Each of the 20 here follows such a 500 at once.
#[tokio::test]
async fn completions_right_after_an_unhandled_500_all_go_through() {
    let kit = kit().await;
    let pipeline = grag_sim::embedded::pipeline();
    let ai = kit.grag.ai_gateway(&pipeline);
    for round in 0..20 {
        kit.sim
            .faults()
            .push(Rule::new(Fault::Unhandled).on("complete").once());
        let error = ai.complete(&completion()).await.unwrap_err();
        assert_eq!(error.status(), Some(500), "round {round}: {error}");
        assert_eq!(error.attempts(), 1, "a completion is never re-sent");
        ai.complete(&completion())
            .await
            .unwrap_or_else(|e| panic!("round {round}: the completion after the 500: {e}"));
    }
    let log = kit.sim.log();
    assert_eq!(
        log.count("complete"),
        40,
        "every completion reached it once"
    );
    // Each 500 was uvicorn's (a close follows it). Whether the simulator
    // or the client closes that connection first depends on the client: a
    // 500 sent while the replacement pool is still being built (on a
    // blocking thread) went out on a connection the client keeps no longer
    // than its answer.
    let unhandled = log
        .of("complete")
        .iter()
        .filter(|e| e.has_fault("unhandled"))
        .count();
    assert_eq!(unhandled, 20, "each round's first completion met the fault");
}

/// uvicorn's and Node's keep-alive timeout (5 s) closes idle connections;
/// a request the client writes onto one just as it closes fails although
/// the server never saw it. The client lets go first (pool_idle 4 s): a
/// connection idle longer than that is never used again, so no request can
/// meet the server's close. At a tenth of real time: 400 ms and 500 ms.
#[tokio::test]
async fn a_connection_idle_past_pool_idle_is_never_reused_so_the_keep_alive_close_is_never_met() {
    let policy = embedded::policy(10);
    let keep_alive = Duration::from_millis(500);
    assert_eq!(policy.pool_idle, Duration::from_millis(400));
    let sim = SimConfig::scaled(0.001).with_keep_alive_timeout(keep_alive);
    let kit = Kit::start(sim, policy).await;
    let workspaces = kit.grag.workspaces();
    workspaces.list_kbs().await.unwrap();
    workspaces.list_kbs().await.unwrap();
    // Idle between the two timeouts: the server would still take it, 50 ms
    // before it closes it (the race of a real network); the client does not.
    tokio::time::sleep(Duration::from_millis(450)).await;
    workspaces.list_kbs().await.unwrap();
    // Idle past the server's timeout: it closed the connection meanwhile.
    tokio::time::sleep(Duration::from_millis(600)).await;
    workspaces.list_kbs().await.unwrap();

    let log = kit.sim.log().of("list_kbs");
    let connections: Vec<u64> = log.iter().map(|e| e.connection).collect();
    assert_eq!(log.len(), 4, "no request was re-sent");
    assert_eq!(connections[0], connections[1], "back to back: reused");
    assert_ne!(
        connections[2], connections[1],
        "idle 450 ms, past pool_idle: a new connection ({connections:?})"
    );
    assert_ne!(connections[3], connections[2], "{connections:?}");
}
