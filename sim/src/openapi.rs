//! Each service's own OpenAPI document, as a FastAPI app behind the
//! platform's router serves it: the generated document's operations of that
//! service, paths relative to the service's mount (`servers: [{url: mount}]`,
//! FastAPI's `root_path`), only the schemas they reach. With
//! [`SimConfig::drifted_documents`](crate::SimConfig::drifted_documents) a
//! few things are moved ([`drift`]).

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use grag_client::policy::{OPENAPI, OPENAPI_DOCUMENTS};
use serde_json::{Map, Value, json};

use crate::shared::Shared;

/// The router with a `GET` of every service's document added.
pub(crate) fn routes(router: Router<Arc<Shared>>) -> Router<Arc<Shared>> {
    OPENAPI_DOCUMENTS
        .iter()
        .fold(router, |router, (service, path)| {
            router.route(
                path,
                get(move |State(shared): State<Arc<Shared>>| async move {
                    let drifted = shared.config.drifted_documents;
                    axum::Json(document(service, drifted).unwrap_or(Value::Null))
                }),
            )
        })
}

fn generated() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| serde_json::from_str(OPENAPI).expect("the generated document is JSON"))
}

/// `service`'s document, `None` when the spec gives it none.
pub fn document(service: &str, drifted: bool) -> Option<Value> {
    let (_, path) = OPENAPI_DOCUMENTS.iter().find(|(s, _)| *s == service)?;
    let mount = path.rsplit_once('/').map_or("", |(m, _)| m);
    let full = generated();
    let mut paths = Map::new();
    for (p, item) in full["paths"].as_object()? {
        let Some(ops) = item.as_object() else {
            continue;
        };
        let mine: Map<String, Value> = ops
            .iter()
            .filter(|(_, op)| {
                op["tags"]
                    .as_array()
                    .is_some_and(|t| t.iter().any(|t| t == service))
            })
            .map(|(m, op)| (m.clone(), op.clone()))
            .collect();
        if let (false, Some(rel)) = (mine.is_empty(), p.strip_prefix(mount)) {
            paths.insert(rel.to_owned(), Value::Object(mine));
        }
    }
    let mut doc = json!({
        "openapi": full["openapi"],
        "info": {"title": service, "version": full["info"]["version"]},
        "servers": [{"url": mount}],
        "paths": paths,
    });
    let schemas = reached(&doc, &full["components"]["schemas"]);
    doc["components"] =
        json!({ "schemas": schemas, "securitySchemes": full["components"]["securitySchemes"] });
    if drifted {
        drift(service, &mut doc);
    }
    Some(doc)
}

/// The schemas `doc` refers to, directly or through each other.
fn reached(doc: &Value, all: &Value) -> Map<String, Value> {
    let mut names = BTreeSet::new();
    let mut todo = refs(doc);
    while let Some(name) = todo.pop() {
        if names.insert(name.clone())
            && let Some(schema) = all.get(&name)
        {
            todo.extend(refs(schema));
        }
    }
    names
        .into_iter()
        .filter_map(|n| all.get(&n).map(|s| (n, s.clone())))
        .collect()
}

fn refs(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(m) => {
                if let Some(name) = m
                    .get("$ref")
                    .and_then(Value::as_str)
                    .and_then(|r| r.strip_prefix("#/components/schemas/"))
                {
                    out.push(name.to_owned());
                }
                stack.extend(m.values());
            }
            Value::Array(a) => stack.extend(a),
            _ => {}
        }
    }
    out
}

/// The moves of the `drifted` scenario: one of each kind a platform makes.
fn drift(service: &str, doc: &mut Value) {
    match service {
        "workspaces" => {
            // A route gone, a method moved, a route added.
            if let Some(settings) = doc["paths"]["/api/v1/settings"].as_object_mut() {
                settings.remove("get");
            }
            doc["paths"]["/api/v1/kbs/{kb_id}"] = json!({"delete": {"tags": ["workspaces"],
                "responses": {"204": {"description": "Deleted"}}}});
            let schemas = &mut doc["components"]["schemas"];
            // An answer field retyped; a request field added as required; an answer field added.
            schemas["Document"]["properties"]["status"] = json!({"type": "integer"});
            schemas["CreateKb"]["properties"]["owner"] = json!({"type": "string"});
            push(&mut schemas["CreateKb"]["required"], "owner");
            schemas["Kb"]["properties"]["archived"] = json!({"type": "boolean"});
        }
        "ledger" => {
            // An enum value the client sends, gone; one it never sends, added.
            doc["components"]["schemas"]["SpendGrouping"]["enum"] = json!(["service", "pipeline"]);
        }
        "ai-gateway" => {
            // A required query parameter the client never sends; an answer field added.
            if let Some(op) =
                doc["paths"]["/api/v1/retrieval/collections/{kb}/search/rerank"]["post"]
                    .as_object_mut()
            {
                let params = op.entry("parameters").or_insert_with(|| json!([]));
                if let Some(params) = params.as_array_mut() {
                    params.push(json!({"name": "lang", "in": "query", "required": true, "schema": {"type": "string"}}));
                }
            }
            doc["components"]["schemas"]["SearchHit"]["properties"]["page"] =
                json!({"type": "integer"});
        }
        _ => {}
    }
}

fn push(list: &mut Value, name: &str) {
    match list.as_array_mut() {
        Some(a) => a.push(json!(name)),
        None => *list = json!([name]),
    }
}
