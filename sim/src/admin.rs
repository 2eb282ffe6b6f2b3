//! Admin routes under `/_sim/`: the same scripting as [`crate::Faults`] and
//! [`crate::RequestLog`], over HTTP. They are never platform routes and never
//! appear in the request log.
//!
//! | route | does |
//! |---|---|
//! | `GET /_sim/log` | `{"requests": [...], "notes": [...]}` |
//! | `DELETE /_sim/log` | forget the log |
//! | `GET /_sim/faults` | the live rules with their counters |
//! | `POST /_sim/faults` | add a [`crate::Rule`] (or a list of them): `{"route": "list_kbs", "fault": {"kind": "bad_gateway"}, "times": 2}` |
//! | `DELETE /_sim/faults` | remove every rule, end a churn, restart the agent plane |
//! | `DELETE /_sim/faults/{id}` | remove one rule |
//! | `POST /_sim/churn` | start a deploy: `{"refused_ms": .., "flaky_ms": .., "delay_ms": 50}`, all optional |
//! | `POST /_sim/agent-plane` | `{"running": false}` darkens the agent plane |
//! | `POST /_sim/cold-start` | the next call of each model route is slow |
//! | `GET /_sim/config` | the timings in force, in milliseconds |
//! | `POST /_sim/reset` | empty state, no rules, empty log |

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::faults::Rule;
use crate::scripting::Faults;
use crate::shared::Shared;
use crate::state::Platform;

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/_sim/log", get(log).delete(clear_log))
        .route(
            "/_sim/faults",
            get(rules).post(push_rules).delete(clear_rules),
        )
        .route("/_sim/faults/{id}", delete(remove_rule))
        .route("/_sim/churn", post(churn))
        .route("/_sim/agent-plane", post(agent_plane))
        .route("/_sim/cold-start", post(cold_start))
        .route("/_sim/config", get(config))
        .route("/_sim/reset", post(reset))
}

fn faults(shared: &Arc<Shared>) -> Faults {
    Faults {
        shared: shared.clone(),
    }
}

async fn log(State(shared): State<Arc<Shared>>) -> Json<Value> {
    Json(json!({
        "requests": shared.log.entries(),
        "notes": shared.log.notes(),
    }))
}

async fn clear_log(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.log.clear();
    StatusCode::NO_CONTENT
}

async fn rules(State(shared): State<Arc<Shared>>) -> Json<Value> {
    Json(json!(faults(&shared).rules()))
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(Rule),
    Many(Vec<Rule>),
}

async fn push_rules(State(shared): State<Arc<Shared>>, body: axum::body::Bytes) -> Response {
    let rules = match serde_json::from_slice::<OneOrMany>(&body) {
        Ok(OneOrMany::One(r)) => vec![r],
        Ok(OneOrMany::Many(rs)) => rs,
        Err(e) => {
            return (
                StatusCode::UNPROCESSABLE_ENTITY,
                Json(json!({ "detail": format!("not a rule: {e}") })),
            )
                .into_response();
        }
    };
    let f = faults(&shared);
    let ids: Vec<u64> = rules.into_iter().map(|r| f.push(r)).collect();
    (StatusCode::CREATED, Json(json!({ "ids": ids }))).into_response()
}

async fn clear_rules(State(shared): State<Arc<Shared>>) -> StatusCode {
    faults(&shared).clear();
    StatusCode::NO_CONTENT
}

async fn remove_rule(State(shared): State<Arc<Shared>>, Path(id): Path<u64>) -> StatusCode {
    if faults(&shared).remove(id) {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::NOT_FOUND
    }
}

#[derive(Deserialize, Default)]
struct ChurnBody {
    refused_ms: Option<u64>,
    flaky_ms: Option<u64>,
    /// Lets this answer leave before the listener closes (default 50 ms).
    delay_ms: Option<u64>,
}

async fn churn(State(shared): State<Arc<Shared>>, body: axum::body::Bytes) -> Response {
    let body: ChurnBody = if body.is_empty() {
        ChurnBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(b) => b,
            Err(e) => {
                return (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    Json(json!({ "detail": e.to_string() })),
                )
                    .into_response();
            }
        }
    };
    let refused = body
        .refused_ms
        .map_or(shared.config.churn_refused, Duration::from_millis);
    let flaky = body
        .flaky_ms
        .map_or(shared.config.churn_flaky, Duration::from_millis);
    let delay = Duration::from_millis(body.delay_ms.unwrap_or(50));
    let f = faults(&shared);
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        f.deploy_churn_for(refused, flaky).await;
    });
    (
        StatusCode::ACCEPTED,
        Json(json!({
            "refused_ms": refused.as_millis() as u64,
            "flaky_ms": flaky.as_millis() as u64,
            "starts_in_ms": delay.as_millis() as u64,
        })),
    )
        .into_response()
}

#[derive(Deserialize)]
struct PlaneBody {
    running: bool,
}

async fn agent_plane(State(shared): State<Arc<Shared>>, Json(body): Json<PlaneBody>) -> StatusCode {
    faults(&shared).set_agent_plane(body.running);
    StatusCode::NO_CONTENT
}

async fn cold_start(State(shared): State<Arc<Shared>>) -> StatusCode {
    faults(&shared).cold_start();
    StatusCode::NO_CONTENT
}

async fn config(State(shared): State<Arc<Shared>>) -> Json<Value> {
    let c = &shared.config;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Json(json!({
        "keepalive_ms": ms(c.keepalive),
        "stream_ceiling_ms": ms(c.stream_ceiling),
        "churn_refused_ms": ms(c.churn_refused),
        "churn_flaky_ms": ms(c.churn_flaky),
        "job_nodes": c.job_nodes,
        "job_queue_ms": ms(c.job_queue),
        "job_node_pace_ms": ms(c.job_node_pace),
        "conversion_time_ms": ms(c.conversion_time),
        "chat_stage_pace_ms": ms(c.chat_stage_pace),
        "chat_silence_ms": ms(c.chat_silence),
        "chat_piece_pace_ms": ms(c.chat_piece_pace),
        "agent_step_pace_ms": ms(c.agent_step_pace),
        "cold_start_ms": ms(c.cold_start),
        "max_points": c.max_points,
        "keep_alive_timeout_ms": ms(c.keep_alive_timeout),
        "unhandled_close_after_ms": ms(c.unhandled_close_after),
    }))
}

async fn reset(State(shared): State<Arc<Shared>>) -> StatusCode {
    faults(&shared).clear();
    shared.log.clear();
    *shared.platform.lock().unwrap_or_else(|e| e.into_inner()) = Platform::default();
    StatusCode::NO_CONTENT
}
