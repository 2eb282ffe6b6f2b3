//! One resolved platform request, as a handler sees it, and what the
//! handlers check and bill on it.
// Handlers answer early with `Err(response)`: the error side is the answer
// itself, returned one level up, so its size does not matter.
#![allow(clippy::result_large_err)]

use axum::response::Response;
use bytes::Bytes;
use sdk_runtime::Endpoint;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::reply::unprocessable;
use crate::faults::Fault;
use crate::state::{Charge, Tenant};

/// One resolved platform request, as a handler sees it.
pub(crate) struct Ctx {
    pub endpoint: &'static Endpoint,
    pub params: Vec<(&'static str, String)>,
    pub query: Vec<(String, String)>,
    pub body: Bytes,
    pub tenant: String,
    pub workspace: Option<String>,
    pub pipeline_id: Option<String>,
    /// A fault the handler itself applies (SSE faults, stage and job failures).
    pub fault: Option<Fault>,
}

impl Ctx {
    /// A path parameter by its template name (`kb`).
    pub fn param(&self, name: &str) -> &str {
        self.params
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    }

    pub fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body decoded into the route's request type, or the 422 FastAPI gives.
    /// A number with a zero fraction (`3.0`) is an integer, as JSON Schema
    /// and pydantic's lax mode read it.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Response> {
        let fail = |e: serde_json::Error| unprocessable(&["body"], e.to_string());
        let mut value: Value = serde_json::from_slice(&self.body).map_err(fail)?;
        integral_floats_as_integers(&mut value);
        serde_json::from_value(value).map_err(fail)
    }
}

/// Bills the tenant for a call its request made, under the request's pipeline.
pub(crate) fn charge(
    tenant: &mut Tenant,
    ctx: &Ctx,
    service: &'static str,
    provider: &'static str,
    cost: f64,
) {
    tenant.ledger.push(Charge {
        service,
        provider,
        pipeline_id: ctx.pipeline_id.clone(),
        cost,
    });
}

/// Turns every float with a zero fraction within `i64` into that integer.
fn integral_floats_as_integers(value: &mut Value) {
    match value {
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            if f.fract() == 0.0 && f > i64::MIN as f64 && f < i64::MAX as f64 {
                *value = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_floats_as_integers),
        Value::Object(fields) => fields.values_mut().for_each(integral_floats_as_integers),
        _ => {}
    }
}

/// `^[a-z0-9][a-z0-9-]{0,62}$`, the platform's ID charset.
pub(crate) fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}
