//! Policy §10.2: one JSON log line per attempt with the policy's fields, and
//! never a body: a secret marker sent in a request body (and echoed in the
//! answer's body and `detail`) appears in no line, and neither does the API key.

use std::io::Write;
use std::sync::{Arc, Mutex};

use crate::kit::recorder::Recorder;
use axum::response::IntoResponse;
use grag_client::types::{Entity, UploadDocument};
use grag_client::{Config, DocumentId, EntityId, Grag, KbId, TenantId, WorkspaceId};
use serde_json::{Value, json};

const SECRET: &str = "MANDANT-GEHEIM-4711";

/// Collects everything the subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines(&self) -> Vec<Value> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }

    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

/// The capturing subscriber as this thread's default, one test at a time:
/// `tracing` caches each callsite's interest process-wide, so a test that
/// sets or drops its subscriber while another logs can leave the other's
/// callsites disabled. Held for the whole test.
fn capture(
    captured: &Captured,
) -> (
    std::sync::MutexGuard<'static, ()>,
    tracing::subscriber::DefaultGuard,
) {
    static SERIAL: Mutex<()> = Mutex::new(());
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let default = crate::kit::capture::set_default(subscriber(captured));
    (serial, default)
}

fn subscriber(captured: &Captured) -> impl tracing::Subscriber + Send + Sync {
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish()
}

#[tokio::test]
async fn one_json_line_per_attempt_with_the_policy_fields_and_never_a_body() {
    let captured = Captured::default();
    let _guard = capture(&captured);
    // The server echoes the body back, so the secret is in both directions.
    let server = Recorder::start(|r| {
        if r.method == "POST" {
            (
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                axum::Json(json!({"detail": format!("bad body {SECRET}")})),
            )
                .into_response()
        } else {
            axum::Json(json!({"entity_id": "e-1", "entity_type": "person", "name": SECRET}))
                .into_response()
        }
    })
    .await;
    let grag = Grag::new(Config::new(
        server.url(),
        "api-key-should-not-leak",
        TenantId::parse("knoll").unwrap(),
    ))
    .unwrap();
    let workspace = WorkspaceId::parse("ws-7").unwrap();

    let entity = Entity::new(EntityId::parse("e-1").unwrap(), "person", SECRET)
        .with_properties(json!({"note": SECRET}));
    grag.kg(&workspace)
        .upsert_entity(&entity.entity_id, &entity)
        .await
        .unwrap();
    let upload = UploadDocument::new(
        DocumentId::parse("doc-1").unwrap(),
        format!("{SECRET}.pdf"),
        "application/pdf",
        SECRET,
    );
    // The backend's own context (analyse_id, ai_run_id) rides on a span.
    let span = tracing::info_span!("analyse", analyse_id = "a-42", ai_run_id = "run-7");
    let error = tracing::Instrument::instrument(
        grag.workspaces()
            .upload_document(&KbId::parse("kb-1").unwrap(), &upload),
        span,
    )
    .await
    .unwrap_err();
    assert_eq!(error.row(), "T10", "{error}");
    server.stop().await;

    let text = captured.text();
    assert!(!text.contains(SECRET), "a body reached the log:\n{text}");
    assert!(
        !text.contains("api-key-should-not-leak"),
        "the API key reached the log"
    );

    let attempts: Vec<Value> = captured
        .lines()
        .into_iter()
        .filter(|l| l["message"] == "attempt")
        .collect();
    assert_eq!(attempts.len(), 2, "one line per attempt: {attempts:#?}");
    for line in &attempts {
        for field in [
            "timestamp",
            "level",
            "request_id",
            "tenant",
            "grag_service",
            "method",
            "path",
            "error_class",
            "attempt",
            "latency_ms",
            "circuit_state",
            "body_len",
            "body_sha256",
        ] {
            assert!(line.get(field).is_some(), "field {field} missing in {line}");
        }
        assert_eq!(line["tenant"], "knoll");
        assert_eq!(line["circuit_state"], "closed");
        assert!(uuid::Uuid::parse_str(line["request_id"].as_str().unwrap()).is_ok());
        assert_eq!(line["body_sha256"].as_str().unwrap().len(), 64);
    }
    let put = &attempts[0];
    assert_eq!(
        put["path"], "/kg-service/api/v1/entities/{entity_id}",
        "templated, no IDs"
    );
    assert_eq!(put["workspace_id"], "ws-7");
    assert_eq!(put["status"], 200);
    assert_eq!(put["error_class"], "ok");
    let post = &attempts[1];
    assert_eq!(post["status"], 422);
    assert_eq!(post["error_class"], "validation");
    assert_eq!(post["row"], "T10");
    assert_eq!(post["kb_id"], "kb-1");
    // The backend's context span is around the call's own (`spans`, the
    // OpenTelemetry fields): the JSON formatter lists both, outermost first.
    let spans = post["spans"].as_array().expect("the span list");
    assert_eq!(spans[0]["analyse_id"], "a-42", "{post}");
    assert_eq!(spans[0]["ai_run_id"], "run-7", "{post}");
    assert_eq!(post["span"]["name"], "call", "{post}");
    assert_eq!(post["span"]["url.template"], post["path"], "{post}");
    assert!(
        put.get("kb_id").is_none(),
        "no kb in the entity route: {put}"
    );
    // The 422 raised its alert; the alert line carries the detail's digest only.
    let alert = captured
        .lines()
        .into_iter()
        .find(|l| l["message"] == "alert")
        .expect("the 422 raises contract_drift");
    assert_eq!(alert["alert"], "contract_drift");
    assert_eq!(
        alert["severity"], "page",
        "the default sink logs the severity"
    );
    assert!(alert["detail_len"].as_u64().unwrap() > 0);
}

/// A 2xx whose body does not decode is logged as T24,
/// not as `error_class: "ok"`: the line is written once the body is decoded.
#[tokio::test]
async fn the_attempt_line_of_a_2xx_that_does_not_decode_says_t24() {
    let captured = Captured::default();
    let _guard = capture(&captured);
    let server = Recorder::start(|_| json!({"not": "a list"}).to_string().into_response()).await;
    let tenant = TenantId::parse("knoll").unwrap();
    let grag = Grag::new(Config::new(server.url(), "key", tenant)).unwrap();
    let e = grag.workspaces().list_kbs().await.unwrap_err();
    assert_eq!(e.row(), "T24", "{e}");
    let attempts: Vec<Value> = captured
        .lines()
        .into_iter()
        .filter(|l| l["message"] == "attempt")
        .collect();
    assert_eq!(attempts.len(), 1, "{}", captured.text());
    assert_eq!(attempts[0]["error_class"], "decode");
    assert_eq!(attempts[0]["row"], "T24");
    assert_eq!(attempts[0]["status"], 200);
    server.stop().await;
}

/// Pydantic's 422 quotes the rejected value (`input`, `ctx`), which
/// for GRAG is Mandanten content. Of such a detail only `type`, `loc` and
/// `msg` go anywhere: not the marker the request carried, in no Display,
/// Debug, `detail()`, log line, alert or metric.
#[tokio::test]
async fn a_pydantic_422_that_quotes_the_request_leaks_it_nowhere() {
    use crate::kit::sim::Kit;
    use grag_client::types::SearchRequest;
    use grag_sim::embedded;
    use grag_sim::{Fault, Rule};

    let captured = Captured::default();
    let _guard = capture(&captured);
    let kit = Kit::start(embedded::sim_config(1000), embedded::policy(100)).await;
    kit.sim.faults().push(
        Rule::new(Fault::ValidationEcho { max_length: 200 })
            .on("search_rerank")
            .once(),
    );
    let query_text = format!("{SECRET} {}", "Prüfbericht der Brücke ".repeat(10));
    let error = kit
        .grag
        .ai_gateway(&grag_sim::embedded::pipeline())
        .search_rerank(
            &KbId::parse("kb-1").unwrap(),
            &SearchRequest::new(query_text, 3),
        )
        .await
        .unwrap_err();
    assert_eq!(error.row(), "T10", "{error}");
    assert_eq!(error.status(), Some(422));
    let log = kit.sim.log().of("search_rerank");
    assert_eq!(log.len(), 1, "a 422 is never re-sent");
    assert!(log[0].has_fault("validation_echo"));

    // What an operator still sees.
    let detail = error.detail().expect("the 422 has a detail");
    let shown: Value = serde_json::from_str(detail).unwrap();
    assert_eq!(
        shown,
        json!([{
            "type": "string_too_long",
            "loc": ["body", "query_text"],
            "msg": "String should have at most 200 characters",
        }]),
        "{detail}"
    );
    // Everywhere the error and its detail go.
    let alerts = kit.alerts.taken();
    assert!(
        alerts.iter().any(|a| a.name == "contract_drift"),
        "{alerts:?}"
    );
    let places = [
        ("Display", error.to_string()),
        ("Debug", format!("{error:?}")),
        ("detail()", detail.to_owned()),
        ("alerts", format!("{alerts:?}")),
        ("metrics", kit.grag.runtime().metrics_text()),
        ("logs", captured.text()),
    ];
    for (place, text) in places {
        assert!(
            !text.contains(SECRET),
            "the quoted input reached {place}:\n{text}"
        );
        assert!(!text.contains("max_length"), "ctx reached {place}:\n{text}");
    }
    assert!(
        captured.lines().iter().any(|l| l["status"] == 422),
        "the attempt was logged: {}",
        captured.text()
    );
    kit.sim.stop().await;
}

/// Core "Operational Recommendations": retry exhaustion is logged "with
/// request/session context": the line carries the session, tenant and last
/// request id, like the call's attempt lines; on GRAG the workspace and the
/// path's IDs.
#[tokio::test]
async fn the_retry_exhaustion_line_carries_the_calls_context() {
    let captured = Captured::default();
    let _guard = capture(&captured);
    let server = Recorder::start(|_| {
        (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(json!({"detail": "boom"})),
        )
            .into_response()
    })
    .await;
    let core = core_at(&server.url());
    let error = core
        .sessions()
        .get_session(&core_client::SessionId::parse("s-77").unwrap())
        .await
        .unwrap_err();
    assert_eq!(error.attempts(), 2, "{error}");

    let grag = grag_at(&server.url());
    let workspace = WorkspaceId::parse("ws-7").unwrap();
    let e = grag
        .kg(&workspace)
        .get_entity(&EntityId::parse("e-9").unwrap())
        .await
        .unwrap_err();
    assert_eq!(e.row(), "T23", "{e}");
    server.stop().await;

    let exhausted: Vec<Value> = captured
        .lines()
        .into_iter()
        .filter(|l| l["message"] == "retry exhausted")
        .collect();
    assert_eq!(exhausted.len(), 2, "{}", captured.text());
    let core_line = &exhausted[0];
    assert_eq!(core_line["target"], "core_client::retry");
    assert_eq!(core_line["session_id"], "s-77", "{core_line}");
    assert_eq!(core_line["tenant"], "tenant-1");
    assert_eq!(core_line["operation"], "get_session");
    assert_eq!(core_line["row"], "C2");
    assert_eq!(core_line["status"], 500);
    assert_eq!(core_line["attempts"], 2);
    assert_eq!(core_line["request_id"], error.request_id().unwrap());
    let grag_line = &exhausted[1];
    assert_eq!(grag_line["target"], "grag_client::retry");
    assert_eq!(grag_line["workspace_id"], "ws-7", "{grag_line}");
    assert_eq!(grag_line["tenant"], "knoll");
    assert_eq!(grag_line["attempts"], 3);
    assert_eq!(grag_line["request_id"], e.request_id().unwrap());
}

/// Policy §10.1/§10.2: the request ID is logged when the request leaves and
/// when its answer arrives, with the platform's echo beside it when the echo
/// differs; the error then carries the echo (the ID the platform's logs know,
/// for `grag_refs.last_error`). The attempt line has `retry_after_s` and the
/// `pipeline_id` of a pipeline route.
#[tokio::test]
async fn the_request_id_is_logged_on_send_and_on_receive_with_a_differing_echo() {
    use grag_client::PipelineId;
    use grag_client::types::SearchRequest;

    let captured = Captured::default();
    let _guard = capture(&captured);
    let server = Recorder::start(|r| {
        let mut response = if r.path.ends_with("/search/rerank") {
            // WAL backpressure through a gateway that stamps its own ID.
            let mut response =
                axum::Json(json!({"detail": "write-ahead log is full"})).into_response();
            *response.status_mut() = axum::http::StatusCode::SERVICE_UNAVAILABLE;
            let headers = response.headers_mut();
            headers.insert("retry-after", "7".parse().unwrap());
            headers.insert("x-request-id", "gw-4711".parse().unwrap());
            response
        } else {
            json!([]).to_string().into_response()
        };
        // A platform that echoes what it got leaves the line without an echo field.
        if let Some(sent) = r.header_values("x-request-id").first()
            && !r.path.ends_with("/search/rerank")
        {
            response
                .headers_mut()
                .insert("x-request-id", sent.parse().unwrap());
        }
        response
    })
    .await;
    let grag = grag_at(&server.url());
    // A job queue's client: the server's wait ends the call instead of being slept.
    let run = grag.deferring_server_waits();
    let pipeline = PipelineId::parse("gutachten-a-042-run-7").unwrap();
    let query = SearchRequest::new("Brücke", 3);
    let e = run
        .ai_gateway(&pipeline)
        .search_rerank(&KbId::parse("kb-1").unwrap(), &query)
        .await
        .unwrap_err();
    assert_eq!(e.row(), "T15", "{e}");
    assert_eq!(
        e.request_id(),
        Some("gw-4711"),
        "the echo joins GRAG's logs"
    );
    run.workspaces().list_kbs().await.unwrap();
    let seen = server.stop().await;
    assert_eq!(seen.len(), 2);

    let lines = captured.lines();
    let of = |message: &str| -> Vec<&Value> {
        lines.iter().filter(|l| l["message"] == message).collect()
    };
    let (sent, attempts) = (of("sent"), of("attempt"));
    assert_eq!((sent.len(), attempts.len()), (2, 2), "{lines:#?}");
    for ((sent, attempt), request) in sent.iter().zip(&attempts).zip(&seen) {
        let ours = request.header_values("x-request-id")[0].clone();
        assert_eq!(sent["request_id"], ours.as_str(), "{sent}");
        assert_eq!(attempt["request_id"], ours.as_str(), "{attempt}");
        assert_eq!(sent["operation"], attempt["operation"]);
        assert_eq!(sent["attempt"], 1);
    }
    let (rerank, list) = (attempts[0], attempts[1]);
    // The rerank: echo, Retry-After and the pipeline.
    assert_eq!(rerank["status"], 503);
    assert_eq!(rerank["echoed_request_id"], "gw-4711", "{rerank}");
    assert_eq!(rerank["retry_after_s"], 7, "{rerank}");
    assert_eq!(rerank["pipeline_id"], "gutachten-a-042-run-7", "{rerank}");
    assert_eq!(sent[0]["pipeline_id"], "gutachten-a-042-run-7");
    // list_kbs: echoed as sent, no pipeline header on a workspaces route.
    assert_eq!(list["status"], 200);
    assert!(list.get("echoed_request_id").is_none(), "{list}");
    assert!(list.get("retry_after_s").is_none(), "{list}");
    assert!(list.get("pipeline_id").is_none(), "{list}");
    assert!(seen[1].header_values("x-pipeline-id").is_empty());
    assert_eq!(
        seen[0].header_values("x-pipeline-id"),
        ["gutachten-a-042-run-7"]
    );
}

/// Policy §10.1: a successful typed call's request ID reaches the caller (for
/// `ai_runs.refs`) through a handle on the client, while the method returns
/// its plain value; failures are noted too, and a client without the handle
/// notes nothing.
#[tokio::test]
async fn a_handle_on_the_client_collects_the_request_ids_of_its_calls() {
    use grag_client::{RequestRef, RequestRefs};

    let _guard = capture(&Captured::default());

    let server = Recorder::start(|r| {
        if r.path.ends_with("/settings") {
            let mut response = axum::Json(json!({"detail": "field required"})).into_response();
            *response.status_mut() = axum::http::StatusCode::UNPROCESSABLE_ENTITY;
            response
                .headers_mut()
                .insert("x-request-id", "platform-2".parse().unwrap());
            return response;
        }
        let mut response = json!([]).to_string().into_response();
        response
            .headers_mut()
            .insert("x-request-id", "platform-1".parse().unwrap());
        response
    })
    .await;
    let grag = grag_at(&server.url());
    let refs = RequestRefs::new();
    let run = grag.noting_requests(&refs);
    let kbs: Vec<_> = run.workspaces().list_kbs().await.unwrap();
    assert!(kbs.is_empty());
    assert_eq!(
        refs.last(),
        Some(RequestRef {
            service: "workspaces",
            operation: "list_kbs",
            request_id: "platform-1".into(),
            status: Some(200),
            ok: true,
        })
    );
    run.workspaces().get_settings().await.unwrap_err();
    grag.workspaces().list_kbs().await.unwrap();
    let noted = refs.take();
    let ids: Vec<(&str, &str, bool)> = noted
        .iter()
        .map(|r| (r.operation, r.request_id.as_str(), r.ok))
        .collect();
    assert_eq!(
        ids,
        [
            ("list_kbs", "platform-1", true),
            ("get_settings", "platform-2", false)
        ],
        "the client without the handle noted nothing"
    );
    assert!(refs.take().is_empty(), "taken");
    server.stop().await;
}

/// What a 500/502 body in no shape of the platform's looks like in each place
/// an error goes: its text only in `server_text()`, never in Display, Debug,
/// `detail()`, an alert or a log line.
fn assert_withheld(error: &sdk_runtime::Error, alerts: String, logs: String, kind: &str) {
    let detail = error.detail().expect("a summary in place of the text");
    assert!(
        detail.starts_with(&format!("not the platform's error shape: {kind}, ")),
        "{detail}"
    );
    assert!(detail.contains(" bytes, sha256 "), "{detail}");
    let places = [
        ("Display", error.to_string()),
        ("Debug", format!("{error:?}")),
        ("detail()", detail.to_owned()),
        ("alerts", alerts),
        ("logs", logs),
    ];
    for (place, text) in places {
        assert!(!text.contains(SECRET), "the body reached {place}:\n{text}");
    }
    assert!(
        error.server_text().is_some_and(|t| t.contains(SECRET)),
        "the text stays reachable on purpose: {:?}",
        error.server_text()
    );
}

/// A Grag client of tenant `knoll` against `url`.
fn grag_at(url: &str) -> Grag {
    Grag::new(Config::new(url, "key", TenantId::parse("knoll").unwrap())).unwrap()
}

/// A Core client against `url` that retries at once.
fn core_at(url: &str) -> core_client::Core {
    let tenant = core_client::TenantId::parse("tenant-1").unwrap();
    let config = core_client::Config::new(url, "core-key", tenant);
    core_client::Core::new(config.retry_backoff(std::time::Duration::ZERO)).unwrap()
}

fn plain(status: u16, content_type: &str, body: String) -> axum::response::Response {
    axum::response::Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(axum::body::Body::from(body))
        .unwrap()
}

#[tokio::test]
async fn a_plain_text_or_html_error_body_reaches_no_display_debug_or_log_line() {
    let html = format!(
        "<html><head><title>502 Bad Gateway</title></head><body><pre>{SECRET}</pre></body></html>"
    );
    for (status, content_type, body, row) in [
        (500, "text/plain", format!("boom {SECRET}"), "T23"),
        (502, "text/html", html, "T12"),
        (
            404,
            "application/json",
            format!(r#"{{"error":"{SECRET}"}}"#),
            "T6",
        ),
    ] {
        let captured = Captured::default();
        let _guard = capture(&captured);
        let sent = body.clone();
        let server = Recorder::start(move |_| plain(status, content_type, sent.clone())).await;
        let alerts = Arc::new(sdk_runtime::alerts::CollectAlerts::default());
        let config = Config::new(server.url(), "key", TenantId::parse("knoll").unwrap())
            .alerts(alerts.clone());
        let error = Grag::new(config)
            .unwrap()
            .workspaces()
            .list_kbs()
            .await
            .unwrap_err();
        server.stop().await;
        assert_eq!(
            (error.row(), error.status()),
            (row, Some(status)),
            "{error}"
        );
        let alerts = format!("{:?}", alerts.taken());
        if content_type == "text/html" {
            // A page is one operator line, its title kept; the rest is withheld.
            let detail = error.detail().unwrap();
            assert!(detail.contains("\"502 Bad Gateway\""), "{detail}");
            for text in [
                error.to_string(),
                format!("{error:?}"),
                alerts,
                captured.text(),
            ] {
                assert!(!text.contains(SECRET), "the page's text leaked:\n{text}");
            }
        } else {
            assert_withheld(&error, alerts, captured.text(), content_type);
        }
    }
}

#[tokio::test]
async fn the_platform_s_json_detail_is_what_display_shows() {
    let server = Recorder::start(|_| {
        plain(
            503,
            "application/json",
            r#"{"detail":"Profile not running"}"#.into(),
        )
    })
    .await;
    let grag = grag_at(&server.url());
    let error = grag.workspaces().list_kbs().await.unwrap_err();
    server.stop().await;
    assert_eq!(error.detail(), Some("Profile not running"));
    assert!(
        error.to_string().contains(": Profile not running"),
        "{error}"
    );
    assert!(format!("{error:?}").contains("Profile not running"));
    assert_eq!(error.server_text(), None, "nothing withheld");
}

#[tokio::test]
async fn a_core_plain_text_error_body_is_withheld_and_its_json_detail_shown() {
    for (status, body, shown) in [
        (500, format!("Traceback: {SECRET}"), None),
        (
            409,
            r#"{"detail":"session is closed"}"#.to_string(),
            Some("session is closed"),
        ),
    ] {
        let captured = Captured::default();
        let _guard = capture(&captured);
        let content_type = if shown.is_some() {
            "application/json"
        } else {
            "text/plain"
        };
        let sent = body.clone();
        let server = Recorder::start(move |_| plain(status, content_type, sent.clone())).await;
        let core = core_at(&server.url());
        let error = core
            .sessions()
            .get_session(&core_client::SessionId::parse("s-1").unwrap())
            .await
            .unwrap_err();
        server.stop().await;
        assert_eq!(error.status(), Some(status), "{error}");
        match shown {
            Some(detail) => {
                assert_eq!(error.detail(), Some(detail));
                assert!(error.to_string().contains(detail), "{error}");
            }
            None => assert_withheld(&error, String::new(), captured.text(), "text/plain"),
        }
    }
}

#[tokio::test]
async fn a_stream_error_frame_not_in_the_platform_s_shape_is_withheld() {
    let server = Recorder::start(|_| {
        plain(
            200,
            "text/event-stream",
            format!("event: error\ndata: tool crashed: {SECRET}\n\n"),
        )
    })
    .await;
    let grag = grag_at(&server.url());
    let session = grag_client::SessionId::parse("session-1").unwrap();
    let mut relay = grag.bff().agent_session_stream(&session).await.unwrap();
    let error = loop {
        match relay.next().await.expect("the error frame ends the relay") {
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    server.stop().await;
    assert_eq!(error.row(), "T17", "{error}");
    let detail = error.detail().unwrap();
    assert!(
        detail.starts_with("not the platform's error shape: an error event's data, "),
        "{detail}"
    );
    for text in [error.to_string(), format!("{error:?}")] {
        assert!(!text.contains(SECRET), "{text}");
    }
    assert!(error.server_text().unwrap().contains(SECRET));
}

/// serde names the values it refused ("invalid type: string \"…\""): a body
/// that does not decode says where and how, its words only in `server_text()`.
#[tokio::test]
async fn a_body_that_does_not_decode_keeps_its_values_out_of_display() {
    let server =
        Recorder::start(|_| plain(200, "application/json", format!(r#""{SECRET}""#))).await;
    let grag = grag_at(&server.url());
    let error = grag.workspaces().list_kbs().await.unwrap_err();
    server.stop().await;
    assert_eq!(error.row(), "T24", "{error}");
    for text in [error.to_string(), format!("{error:?}")] {
        assert!(!text.contains(SECRET), "{text}");
    }
    let mut chain = String::new();
    let mut source = std::error::Error::source(&*error);
    while let Some(s) = source {
        chain.push_str(&s.to_string());
        source = s.source();
    }
    assert_eq!(chain, "JSON of another shape at line 1 column 21");
    assert!(!chain.contains(SECRET), "{chain}");
    assert!(
        error.server_text().is_some(),
        "the decoder's words are kept"
    );
}
