//! What real servers do that a server written from the spec would not
//!, on the wire: pydantic's 422 quoting the request, uvicorn
//! closing the connection after an unhandled error and after its keep-alive
//! timeout, streams that end cleanly before their terminal event, and
//! sse-starlette's CRLF lines and pings.

use std::time::Duration;

use crate::kit::document::{TEXT, b64};
use crate::kit::sim::{self as kit, event_names, raw, read_all, scoped};
use grag_client::types::ChatRequest;
use grag_client::{ConversationId, JobId};
use grag_sim::embedded;
use grag_sim::{Fault, Rule, Sim, SimConfig};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Only bounds a test that would otherwise hang; never an assertion about speed.
const HANG_GUARD: Duration = Duration::from_secs(10);

fn admin(sim: &Sim, path: &str) -> String {
    format!("{}/_sim/{path}", sim.url())
}

async fn push_json(sim: &Sim, rule: Value) {
    let r = raw()
        .post(admin(sim, "faults"))
        .json(&rule)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{rule}");
}

#[tokio::test]
async fn a_validation_echo_is_pydantic_s_422_quoting_the_request() {
    let sim = kit::sim().await;
    push_json(
        &sim,
        json!({ "route": "search_rerank", "fault": { "kind": "validation_echo" }, "times": 1 }),
    )
    .await;
    let url = format!(
        "{}/ai-gateway/api/v1/retrieval/collections/kb-1/search/rerank",
        sim.url()
    );
    let marker = "QUOTED-4711 ".repeat(20);
    let r = scoped(&raw(), Method::POST, url.clone())
        .json(&json!({ "query_text": marker, "top_k": 3 }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({ "detail": [{
            "type": "string_too_long",
            "loc": ["body", "query_text"],
            "msg": "String should have at most 200 characters",
            "input": marker,
            "ctx": { "max_length": 200 },
        }]})
    );
    assert!(sim.log().of("search_rerank")[0].has_fault("validation_echo"));

    // From Rust, with another limit; a body without a string field is quoted whole.
    sim.faults().push(
        Rule::new(Fault::ValidationEcho { max_length: 8 })
            .on("search_rerank")
            .once(),
    );
    let r = scoped(&raw(), Method::POST, url)
        .json(&json!({ "top_k": 3 }))
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["detail"][0]["loc"], json!(["body"]));
    assert_eq!(body["detail"][0]["input"], json!({ "top_k": 3 }));
    assert_eq!(body["detail"][0]["ctx"], json!({ "max_length": 8 }));
}

/// One GET of the KB list, as a client writes it on a kept-alive connection.
const GET_KBS: &[u8] = b"GET /workspaces/api/v1/kbs HTTP/1.1\r\nhost: sim\r\n\
    authorization: Bearer test-key\r\nx-tenant-id: knoll\r\n\r\n";

/// Reads one response (headers and a `content-length` or chunked body) off `socket`.
async fn read_response(socket: &mut TcpStream) -> String {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map(|v| v.trim().parse::<usize>().unwrap());
            let total = match length {
                Some(n) => (seen.len() >= end + 4 + n).then_some(end + 4 + n),
                None => seen
                    .windows(5)
                    .position(|w| w == b"0\r\n\r\n")
                    .filter(|&p| p >= end + 4)
                    .map(|p| p + 5),
            };
            if let Some(total) = total {
                return String::from_utf8_lossy(&seen[..total]).into_owned();
            }
        }
        let n = socket.read(&mut buf).await.unwrap();
        assert!(n > 0, "the connection closed inside a response");
        seen.extend_from_slice(&buf[..n]);
    }
}

/// Whether the peer closes `socket` (EOF) without sending another byte.
async fn closes_silently(socket: &mut TcpStream) -> bool {
    let mut rest = Vec::new();
    match tokio::time::timeout(HANG_GUARD, socket.read_to_end(&mut rest)).await {
        Ok(Ok(_)) => rest.is_empty(),
        // A reset also closes, but uvicorn closes cleanly.
        Ok(Err(_)) | Err(_) => false,
    }
}

#[tokio::test]
async fn an_unhandled_error_is_a_plain_500_then_the_connection_closes_unannounced() {
    let sim = kit::sim().await;
    push_json(
        &sim,
        json!({ "route": "list_kbs", "fault": { "kind": "unhandled" }, "skip": 1, "times": 1 }),
    )
    .await;
    let mut socket = TcpStream::connect(sim.addr()).await.unwrap();
    // The first answer keeps the connection: the second request uses it.
    socket.write_all(GET_KBS).await.unwrap();
    let first = read_response(&mut socket).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    socket.write_all(GET_KBS).await.unwrap();
    let second = read_response(&mut socket).await;
    assert!(
        second.starts_with("HTTP/1.1 500 Internal Server Error"),
        "{second}"
    );
    let lower = second.to_ascii_lowercase();
    assert!(lower.contains("content-type: text/plain"), "{second}");
    assert!(
        second.ends_with("\r\n\r\nInternal Server Error"),
        "{second}"
    );
    assert!(
        !lower.contains("connection:"),
        "uvicorn does not announce the close: {second}"
    );
    assert!(
        closes_silently(&mut socket).await,
        "then the connection is closed"
    );
    let log = sim.log().of("list_kbs");
    assert_eq!(log.len(), 2);
    assert_eq!(log[0].connection, log[1].connection);
    assert!(log[1].has_fault("unhandled"));
    assert!(
        sim.log()
            .notes()
            .iter()
            .any(|n| n.what.starts_with("unhandled error: connection")),
        "{:?}",
        sim.log().notes()
    );
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_timeout() {
    assert_eq!(
        SimConfig::default().keep_alive_timeout,
        Duration::from_secs(5),
        "uvicorn's and Node's default"
    );
    assert_eq!(
        kit::config().keep_alive_timeout,
        Duration::from_secs(5),
        "scaling keeps it: a client's pool_idle has a scale of its own"
    );
    let sim =
        embedded::start(kit::config().with_keep_alive_timeout(Duration::from_millis(30))).await;
    let mut socket = TcpStream::connect(sim.addr()).await.unwrap();
    socket.write_all(GET_KBS).await.unwrap();
    let answer = read_response(&mut socket).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(!answer.to_ascii_lowercase().contains("connection: close"));
    // Nothing more is sent: the simulator closes the idle connection itself.
    assert!(closes_silently(&mut socket).await);
    assert!(
        sim.log()
            .notes()
            .iter()
            .any(|n| n.what.starts_with("keep-alive timeout: connection")),
        "{:?}",
        sim.log().notes()
    );
    assert_eq!(sim.log().count("list_kbs"), 1);
}

/// Held jobs: the first subscriber sees every event of its job.
fn stream_config() -> SimConfig {
    let mut c = kit::config().with_held_jobs();
    c.job_queue = Duration::from_millis(20);
    c.job_node_pace = Duration::from_millis(5);
    c
}

async fn upload(sim: &Sim) {
    let http = raw();
    let r = scoped(
        &http,
        Method::POST,
        format!("{}/workspaces/api/v1/kbs", sim.url()),
    )
    .json(&json!({ "kb_id": "kb-1", "name": "kb-1" }))
    .send()
    .await
    .unwrap();
    assert!(r.status().is_success());
    let r = scoped(
        &http,
        Method::POST,
        format!("{}/workspaces/api/v1/kbs/kb-1/documents", sim.url()),
    )
    .json(&json!({
        "document_id": "doc-1",
        "filename": "doc-1.txt",
        "content_type": "text/plain",
        "content_base64": b64(TEXT),
    }))
    .send()
    .await
    .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
}

async fn orchestrator_body(sim: &Sim) -> String {
    let job = JobId::parse("doc-1").unwrap();
    let url = format!(
        "{}/next/api/orchestrator/events/{}",
        sim.url(),
        job.as_str()
    );
    let response = scoped(&raw(), Method::GET, url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let (chunks, error) = read_all(response).await;
    assert!(error.is_none(), "the body ends cleanly: {error:?}");
    chunks.into_iter().map(|(_, c)| c).collect()
}

fn chat() -> ChatRequest {
    ChatRequest::new(
        ConversationId::parse("conv-1").unwrap(),
        "Wie oft werden Tragwerke geprüft?",
    )
}

#[tokio::test]
async fn streams_can_end_cleanly_before_their_terminal_event() {
    let sim = embedded::start(stream_config()).await;
    upload(&sim).await;
    sim.faults().push(
        Rule::new(Fault::SseEndsEarly { after_events: 2 })
            .on("orchestrator_events")
            .once(),
    );
    let text = orchestrator_body(&sim).await;
    assert_eq!(event_names(&text), ["subscribed", "node_start"]);
    assert!(text.ends_with("\n\n"), "the last event is whole: {text:?}");

    // Over HTTP: the chat's four stage traces and two pieces, no `done`.
    push_json(
        &sim,
        json!({ "route": "chat_stream", "fault": { "kind": "sse_ends_early", "after_events": 6 }, "times": 1 }),
    )
    .await;
    let response = scoped(
        &raw(),
        Method::POST,
        format!("{}/next/api/chat/stream", sim.url()),
    )
    .json(&chat())
    .send()
    .await
    .unwrap();
    let (chunks, error) = read_all(response).await;
    assert!(error.is_none(), "{error:?}");
    let text: String = chunks.into_iter().map(|(_, c)| c).collect();
    assert_eq!(
        event_names(&text),
        ["trace", "trace", "trace", "trace", "delta", "delta"]
    );
    assert!(sim.log().of("chat_stream")[0].has_fault("sse_ends_early"));
}

#[tokio::test]
async fn an_sse_starlette_stream_has_crlf_lines_and_pings_and_the_same_events() {
    let mut config = stream_config();
    config.job_nodes = vec!["convert".into(), "index".into()];
    let sim = embedded::start(config).await;
    upload(&sim).await;
    let lf = orchestrator_body(&sim).await;
    assert!(!lf.contains('\r'));

    // A second job of the same shape, streamed as sse-starlette writes it.
    sim.reset();
    upload(&sim).await;
    push_json(
        &sim,
        json!({ "route": "orchestrator_events", "fault": { "kind": "sse_starlette", "ping_ms": 5 }, "times": 1 }),
    )
    .await;
    let crlf = orchestrator_body(&sim).await;
    assert!(crlf.starts_with(": ping - "), "{crlf:?}");
    assert!(crlf.contains("\r\n"));
    assert_eq!(
        crlf.matches('\n').count(),
        crlf.matches("\r\n").count(),
        "every line ends in CRLF: {crlf:?}"
    );
    let names = event_names(&crlf.replace("\r\n", "\n"));
    assert_eq!(names, event_names(&lf));
    assert_eq!(names.last().map(String::as_str), Some("completed"));
}
