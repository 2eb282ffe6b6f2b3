//! The answers every stage and handler builds: the platform's
//! `{"detail": ...}` errors, FastAPI's 422s, the edge proxy's plain text.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A handler's answer: the error side is an answer too, returned early.
pub(crate) type Answer = Result<Response, Response>;

/// `{"detail": ...}` with a status.
pub(crate) fn detail(status: u16, detail: impl Into<Value>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(json!({ "detail": detail.into() }))).into_response()
}

/// A FastAPI-style 422: `detail` is a list of validation errors.
pub(crate) fn unprocessable(loc: &[&str], msg: impl Into<String>) -> Response {
    detail(
        422,
        json!([{ "type": "value_error", "loc": loc, "msg": msg.into() }]),
    )
}

/// A plain-text answer, as the edge proxy (Traefik) gives it.
pub(crate) fn plain(status: u16, text: &'static str) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text,
    )
        .into_response()
}

/// A JSON answer with a status.
pub(crate) fn json_status<T: serde::Serialize>(status: u16, value: &T) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    (status, axum::Json(value)).into_response()
}

/// The 404 of a knowledge base the tenant does not have.
pub(crate) fn kb_not_found(kb: &str) -> Response {
    detail(404, format!("knowledge base '{kb}' not found"))
}
