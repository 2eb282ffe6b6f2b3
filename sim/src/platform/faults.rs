//! The fault stage: the first live scripted rule matching the route, and
//! what it does to the request: a wait before it is served, an answer in
//! place of the route's, a fault the handler applies, and what becomes of
//! the connection afterwards.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use sdk_runtime::Endpoint;
use serde_json::{Value, json};

use super::notes::{Aftermath, HandlerFault, shaped};
use super::route::{BODY_LIMIT, route_of};
use crate::faults::Fault;
use crate::handlers::reply::{detail, plain};
use crate::shared::Shared;
use crate::sse::channel_body;

/// What a scripted fault does to the request it matched.
enum Effect {
    /// The request is served as usual after a while (a slow answer, a
    /// cold start).
    Wait(Duration),
    /// This answer instead of the route's.
    Answer(Response),
    /// pydantic's 422 quoting the body, for a string over `max_length`.
    EchoValidation { max_length: u32 },
    /// The handler applies it (SSE faults, stage and job failures, a
    /// reset mid-body, a write that is then lost).
    Handler(Fault),
}

/// The effect of `fault` on a request of `endpoint`.
fn effect(endpoint: &Endpoint, fault: Fault, cold_start: Duration) -> Effect {
    match fault {
        Fault::Delay { ms } => Effect::Wait(Duration::from_millis(ms)),
        Fault::ColdStart => Effect::Wait(cold_start),
        Fault::ValidationEcho { max_length } => Effect::EchoValidation { max_length },
        // A stream is cut between events, not in the middle of a JSON body.
        Fault::ResetMidBody if endpoint.stream.is_some() => {
            Effect::Handler(Fault::SseDrop { after_events: 1 })
        }
        fault => match status_fault(endpoint, &fault) {
            Some(answer) => Effect::Answer(answer),
            None => Effect::Handler(fault),
        },
    }
}

impl Aftermath {
    /// What `fault` does to the connection once its request is answered.
    fn of(fault: &Fault) -> Option<Aftermath> {
        match fault {
            Fault::Unhandled => Some(Aftermath::CloseAfterAnswer),
            Fault::AppliedThenLost => Some(Aftermath::DropUnanswered),
            _ => None,
        }
    }
}

/// The stage.
pub(super) async fn faults(
    State(shared): State<Arc<Shared>>,
    mut req: Request,
    next: Next,
) -> Response {
    let route = match route_of(&req) {
        Ok(route) => route,
        Err(answer) => return answer,
    };
    let Some(fault) = shared.faults.take(route.endpoint) else {
        return next.run(req).await;
    };
    let label = fault.name();
    let aftermath = Aftermath::of(&fault);
    let mut response = match effect(route.endpoint, fault, shared.config.cold_start) {
        Effect::Wait(d) => {
            wait(&shared, d).await;
            next.run(req).await
        }
        Effect::Answer(answer) => answer,
        Effect::EchoValidation { max_length } => {
            let body = axum::body::to_bytes(req.into_body(), BODY_LIMIT).await;
            validation_echo(&body.unwrap_or_default(), max_length)
        }
        Effect::Handler(fault) => {
            req.extensions_mut().insert(HandlerFault(fault));
            next.run(req).await
        }
    };
    if let Some(aftermath) = aftermath {
        response.extensions_mut().insert(aftermath);
    }
    shaped(response, label)
}

/// Sleeps `d`, or until the simulator stops.
async fn wait(shared: &Shared, d: Duration) {
    let mut shutdown = shared.shutdown.clone();
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = crate::shared::stopped(&mut shutdown) => {}
    }
}

fn with_retry_after(mut response: Response, value: Option<String>) -> Response {
    if let Some(v) = value
        && let Ok(v) = HeaderValue::from_str(&v)
    {
        response.headers_mut().insert(header::RETRY_AFTER, v);
    }
    response
}

/// The answer of a fault that replaces the route's answer, if it is one.
fn status_fault(endpoint: &Endpoint, fault: &Fault) -> Option<Response> {
    Some(match fault {
        Fault::RateLimited { retry_after } => with_retry_after(
            plain(429, "Too Many Requests"),
            retry_after.map(|r| r.header_value()),
        ),
        Fault::Budget => detail(
            402,
            "budget exhausted: the tenant's AI budget for this period is used up",
        ),
        Fault::AdminGate => detail(403, "admin role required for this operation"),
        Fault::BadGateway => plain(502, "Bad Gateway"),
        // Starlette's ServerErrorMiddleware answers plain text with its
        // length; the connection is closed after it (see `CloseConn`).
        Fault::Unhandled => {
            let text = "Internal Server Error";
            let mut response = plain(500, text);
            response
                .headers_mut()
                .insert(header::CONTENT_LENGTH, HeaderValue::from(text.len()));
            response
        }
        Fault::Dark => detail(
            503,
            format!(
                "{} is disabled by feature flag {}_enabled",
                endpoint.service,
                endpoint.operation.replace('-', "_")
            ),
        ),
        Fault::Safety => detail(
            503,
            "fail-closed safety check: admission refused, try again later",
        ),
        Fault::Backpressure { retry_after } => with_retry_after(
            detail(503, "write-ahead log backpressure: ingest paused"),
            Some(retry_after.header_value()),
        ),
        Fault::Status {
            status,
            detail: text,
            retry_after,
        } => with_retry_after(
            detail(*status, text.clone()),
            retry_after.map(|r| r.header_value()),
        ),
        _ => return None,
    })
}

/// The 422 pydantic gives a string over its `max_length`: it quotes the
/// rejected value. Which value: the body's first top-level string field
/// (`loc: ["body", <field>]`); without one, the whole body (`loc: ["body"]`).
fn validation_echo(body: &[u8], max_length: u32) -> Response {
    let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let field = parsed.as_object().and_then(|o| {
        o.iter()
            .find_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
    });
    let (loc, input) = match field {
        Some((name, value)) => (json!(["body", name]), Value::String(value)),
        None => (json!(["body"]), parsed),
    };
    detail(
        422,
        json!([{
            "type": "string_too_long",
            "loc": loc,
            "msg": format!("String should have at most {max_length} characters"),
            "input": input,
            "ctx": { "max_length": max_length },
        }]),
    )
}

/// Sends the status line and half the body, then cuts the connection.
pub(super) async fn cut_mid_body(response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, BODY_LIMIT)
        .await
        .unwrap_or_default();
    parts.headers.remove(header::CONTENT_LENGTH);
    let (tx, body) = channel_body(2);
    let half = bytes.slice(..bytes.len() / 2);
    tokio::spawn(async move {
        let _ = tx.send(Ok(half)).await;
        // Give the first half a moment on the wire before the cut.
        tokio::time::sleep(Duration::from_millis(5)).await;
        let _ = tx
            .send(Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "simulated reset mid-body",
            )))
            .await;
    });
    Response::from_parts(parts, body)
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use grag_client::policy::ENDPOINTS;

    use super::*;

    fn endpoint(operation: &str) -> &'static Endpoint {
        ENDPOINTS
            .iter()
            .copied()
            .find(|e| e.operation == operation)
            .unwrap_or_else(|| panic!("no route {operation}"))
    }

    fn effect_on(operation: &str, fault: Fault) -> Effect {
        effect(endpoint(operation), fault, Duration::from_millis(7))
    }

    #[test]
    fn a_reset_cuts_a_body_mid_way_and_a_stream_between_events() {
        assert!(matches!(
            effect_on("list_kbs", Fault::ResetMidBody),
            Effect::Handler(Fault::ResetMidBody)
        ));
        assert!(matches!(
            effect_on("chat_stream", Fault::ResetMidBody),
            Effect::Handler(Fault::SseDrop { after_events: 1 })
        ));
    }

    #[test]
    fn slow_answers_wait_and_status_faults_answer() {
        assert!(matches!(
            effect_on("list_kbs", Fault::ColdStart),
            Effect::Wait(d) if d == Duration::from_millis(7)
        ));
        assert!(matches!(
            effect_on("list_kbs", Fault::delay(Duration::from_millis(30))),
            Effect::Wait(d) if d == Duration::from_millis(30)
        ));
        let Effect::Answer(unhandled) = effect_on("list_kbs", Fault::Unhandled) else {
            panic!("an unhandled error is an answer");
        };
        assert_eq!(unhandled.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(unhandled.headers()[header::CONTENT_LENGTH], "21");
        let Effect::Answer(limited) = effect_on("list_kbs", Fault::rate_limited_secs(2)) else {
            panic!("a rate limit is an answer");
        };
        assert_eq!(limited.headers()[header::RETRY_AFTER], "2");
        assert!(matches!(
            effect_on("list_kbs", Fault::ValidationEcho { max_length: 9 }),
            Effect::EchoValidation { max_length: 9 }
        ));
    }

    #[test]
    fn only_two_faults_outlive_their_answer() {
        assert_eq!(
            Aftermath::of(&Fault::Unhandled),
            Some(Aftermath::CloseAfterAnswer)
        );
        assert_eq!(
            Aftermath::of(&Fault::AppliedThenLost),
            Some(Aftermath::DropUnanswered)
        );
        assert!(matches!(
            effect_on("create_kb", Fault::AppliedThenLost),
            Effect::Handler(Fault::AppliedThenLost)
        ));
        assert_eq!(Aftermath::of(&Fault::BadGateway), None);
        assert_eq!(Aftermath::of(&Fault::ResetMidBody), None);
    }
}
