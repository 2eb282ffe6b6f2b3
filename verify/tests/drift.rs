//! Drift on synthetic documents (one test per kind of change, each judged
//! breaking or compatible), and against the simulator's own documents.

use grag_sim::{Sim, SimConfig};
use grag_verify::Exit;
use grag_verify::drift::shape::read;
use grag_verify::drift::{self, Finding, Kind, Override};
use grag_verify::progress::Progress;
use serde_json::{Value, json};

/// The spec's side: one read and one write route, 3.1 spellings.
fn ours() -> Value {
    let item = json!({"$ref": "#/components/schemas/Item"});
    json!({
        "openapi": "3.1.0",
        "paths": {
            "/svc/items/{id}": {"get": {
                "parameters": [
                    {"name": "id", "in": "path", "required": true, "schema": {"type": "string"}},
                    {"name": "view", "in": "query", "required": false,
                     "schema": {"type": "string", "enum": ["full", "short"]}}
                ],
                "responses": {"200": {"content": {"application/json": {"schema": item}}}}
            }},
            "/svc/items": {"post": {
                "requestBody": {"required": true, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/NewItem"}}}},
                "responses": {"201": {"content": {"application/json": {"schema": item}}}}
            }}
        },
        "components": {"schemas": {
            "Item": {"type": "object", "required": ["id", "state", "count"], "properties": {
                "id": {"type": "string"},
                "state": {"$ref": "#/components/schemas/State"},
                "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "count": {"type": "integer"},
                "score": {"type": "number"}
            }},
            "State": {"type": "string", "enum": ["open", "done"]},
            "NewItem": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string"},
                "kind": {"type": "string", "enum": ["a", "b"]},
                "tag": {"anyOf": [{"type": "string"}, {"type": "null"}]}
            }}
        }}
    })
}

/// The platform's side: [`ours`] with `edit` applied.
fn drift_after(edit: impl FnOnce(&mut Value)) -> Vec<Finding> {
    let mut theirs = ours();
    edit(&mut theirs);
    let (ours, theirs) = (
        read(&ours(), "", None).unwrap(),
        read(&theirs, "", None).unwrap(),
    );
    drift::diff::compare(&ours, &theirs)
}

/// The one finding, checked for kind, place and judgement.
fn one(findings: Vec<Finding>, kind: Kind, at: &str, breaking: bool) -> Finding {
    assert_eq!(findings.len(), 1, "{findings:#?}");
    let f = findings.into_iter().next().unwrap();
    assert_eq!(
        (f.kind, f.at.as_str(), f.breaking),
        (kind, at, breaking),
        "{f:#?}"
    );
    f
}

fn schema<'d>(doc: &'d mut Value, name: &str) -> &'d mut Value {
    &mut doc["components"]["schemas"][name]
}

#[test]
fn the_same_document_in_3_0_spellings_has_no_drift() {
    let findings = drift_after(|d| {
        d["openapi"] = json!("3.0.3");
        schema(d, "Item")["properties"]["note"] = json!({"type": "string", "nullable": true});
        schema(d, "NewItem")["properties"]["tag"] = json!({"type": "string", "nullable": true});
        // A renamed placeholder is the same route.
        let get = d["paths"]["/svc/items/{id}"].take();
        d["paths"]["/svc/items/{item_id}"] = get;
        d["paths"]["/svc/items/{item_id}"]["get"]["parameters"][0]["name"] = json!("item_id");
    });
    assert_eq!(findings, [], "{findings:#?}");
}

#[test]
fn a_route_the_platform_lacks_is_breaking_and_one_it_added_is_not() {
    let f = one(
        drift_after(|d| {
            d["paths"].as_object_mut().unwrap().remove("/svc/items");
        }),
        Kind::RouteRemoved,
        "",
        true,
    );
    assert_eq!(f.route, "POST /svc/items");
    let f = one(
        drift_after(|d| d["paths"]["/svc/other"] = json!({"get": {}})),
        Kind::RouteAdded,
        "",
        false,
    );
    assert_eq!(f.route, "GET /svc/other");
}

#[test]
fn a_moved_method_is_the_old_route_removed_naming_the_new_one_and_the_new_one_added() {
    let findings = drift_after(|d| {
        let post = d["paths"]["/svc/items"]["post"].take();
        d["paths"]["/svc/items"] = json!({"put": post});
    });
    assert_eq!(findings.len(), 2, "{findings:#?}");
    assert_eq!(
        (findings[0].kind, findings[0].breaking),
        (Kind::RouteRemoved, true)
    );
    assert!(findings[0].detail.contains("only PUT"), "{findings:#?}");
    assert_eq!(
        (
            findings[1].kind,
            findings[1].breaking,
            findings[1].route.as_str()
        ),
        (Kind::RouteAdded, false, "PUT /svc/items")
    );
}

fn params(d: &mut Value) -> &mut Vec<Value> {
    d["paths"]["/svc/items/{id}"]["get"]["parameters"]
        .as_array_mut()
        .unwrap()
}

#[test]
fn query_and_header_parameters() {
    one(
        drift_after(|d| {
            params(d).remove(1);
        }),
        Kind::ParameterRemoved,
        "query.view",
        true,
    );
    one(
        drift_after(|d| params(d).push(json!({"name": "lang", "in": "query", "required": true}))),
        Kind::ParameterAdded,
        "query.lang",
        true,
    );
    one(
        drift_after(|d| params(d).push(json!({"name": "page", "in": "query"}))),
        Kind::ParameterAdded,
        "query.page",
        false,
    );
    one(
        drift_after(|d| {
            params(d).push(json!({"name": "X-Region", "in": "header", "required": true}))
        }),
        Kind::ParameterAdded,
        "header.x-region",
        true,
    );
    one(
        drift_after(|d| params(d)[1]["required"] = json!(true)),
        Kind::RequiredChanged,
        "query.view",
        true,
    );
    one(
        drift_after(|d| params(d)[0]["schema"] = json!({"type": "integer"})),
        Kind::FieldRetyped,
        "path.id",
        true,
    );
}

#[test]
fn request_fields() {
    one(
        drift_after(|d| {
            schema(d, "NewItem")["properties"]["owner"] = json!({"type": "string"});
            schema(d, "NewItem")["required"] = json!(["name", "owner"]);
        }),
        Kind::FieldAdded,
        "request.owner",
        true,
    );
    one(
        drift_after(|d| schema(d, "NewItem")["properties"]["colour"] = json!({"type": "string"})),
        Kind::FieldAdded,
        "request.colour",
        false,
    );
    one(
        drift_after(|d| {
            schema(d, "NewItem")["properties"]
                .as_object_mut()
                .unwrap()
                .remove("tag");
        }),
        Kind::FieldRemoved,
        "request.tag",
        false,
    );
    one(
        drift_after(|d| schema(d, "NewItem")["required"] = json!(["name", "kind"])),
        Kind::RequiredChanged,
        "request.kind",
        true,
    );
    one(
        drift_after(|d| schema(d, "NewItem")["properties"]["name"] = json!({"type": "integer"})),
        Kind::FieldRetyped,
        "request.name",
        true,
    );
    one(
        drift_after(|d| {
            d["paths"]["/svc/items"]["post"]
                .as_object_mut()
                .unwrap()
                .remove("requestBody");
        }),
        Kind::BodyChanged,
        "request",
        true,
    );
}

/// Item is the answer of both routes: every answer finding comes twice.
fn twice(findings: Vec<Finding>, kind: Kind, at: &str, breaking: bool) {
    assert_eq!(findings.len(), 2, "{findings:#?}");
    let routes: Vec<&str> = findings.iter().map(|f| f.route.as_str()).collect();
    assert_eq!(routes, ["GET /svc/items/{id}", "POST /svc/items"]);
    for f in &findings {
        assert_eq!(
            (f.kind, f.at.as_str(), f.breaking),
            (kind, at, breaking),
            "{f:#?}"
        );
    }
}

#[test]
fn answer_fields() {
    let remove = |field: &'static str| {
        move |d: &mut Value| {
            schema(d, "Item")["properties"]
                .as_object_mut()
                .unwrap()
                .remove(field);
        }
    };
    twice(
        drift_after(remove("count")),
        Kind::FieldRemoved,
        "answer.count",
        true,
    );
    twice(
        drift_after(remove("note")),
        Kind::FieldRemoved,
        "answer.note",
        false,
    );
    twice(
        drift_after(|d| schema(d, "Item")["properties"]["extra"] = json!({"type": "boolean"})),
        Kind::FieldAdded,
        "answer.extra",
        false,
    );
    twice(
        drift_after(|d| schema(d, "Item")["properties"]["count"] = json!({"type": "string"})),
        Kind::FieldRetyped,
        "answer.count",
        true,
    );
    twice(
        drift_after(|d| schema(d, "Item")["required"] = json!(["id", "state"])),
        Kind::RequiredChanged,
        "answer.count",
        true,
    );
    twice(
        drift_after(|d| {
            schema(d, "Item")["properties"]["count"] =
                json!({"anyOf": [{"type": "integer"}, {"type": "null"}]})
        }),
        Kind::NullableChanged,
        "answer.count",
        true,
    );
    // The same in a 3.0 document's spelling.
    twice(
        drift_after(|d| {
            d["openapi"] = json!("3.0.3");
            schema(d, "Item")["properties"]["count"] = json!({"type": "integer", "nullable": true})
        }),
        Kind::NullableChanged,
        "answer.count",
        true,
    );
    // An integer where the spec reads a number decodes; the other way not.
    assert_eq!(
        drift_after(|d| schema(d, "Item")["properties"]["score"] = json!({"type": "integer"})),
        []
    );
    twice(
        drift_after(|d| schema(d, "Item")["properties"]["count"] = json!({"type": "number"})),
        Kind::FieldRetyped,
        "answer.count",
        true,
    );
}

#[test]
fn enum_values() {
    // Sent by the client: a value gone is breaking, one added is not.
    one(
        drift_after(|d| schema(d, "NewItem")["properties"]["kind"]["enum"] = json!(["a"])),
        Kind::EnumValueRemoved,
        "request.kind=b",
        true,
    );
    one(
        drift_after(|d| {
            schema(d, "NewItem")["properties"]["kind"]["enum"] = json!(["a", "b", "c"])
        }),
        Kind::EnumValueAdded,
        "request.kind=c",
        false,
    );
    one(
        drift_after(|d| params(d)[1]["schema"]["enum"] = json!(["full"])),
        Kind::EnumValueRemoved,
        "query.view=short",
        true,
    );
    // Decoded by the client: a new value is breaking unless the enum is open.
    twice(
        drift_after(|d| schema(d, "State")["enum"] = json!(["open", "done", "archived"])),
        Kind::EnumValueAdded,
        "answer.state=archived",
        true,
    );
    let mut open = ours();
    schema(&mut open, "State")["x-open-enum"] = json!(true);
    let mut theirs = open.clone();
    schema(&mut theirs, "State")["enum"] = json!(["open", "done", "archived"]);
    let findings = drift::diff::compare(
        &read(&open, "", None).unwrap(),
        &read(&theirs, "", None).unwrap(),
    );
    assert!(findings.iter().all(|f| !f.breaking), "{findings:#?}");
    twice(
        drift_after(|d| schema(d, "State")["enum"] = json!(["open"])),
        Kind::EnumValueRemoved,
        "answer.state=done",
        false,
    );
}

async fn sim_drift(drifted: bool, overrides: &[Override]) -> drift::DriftReport {
    let mut config = SimConfig::scaled(0.01);
    config.drifted_documents = drifted;
    let sim = Sim::start(config).await.unwrap();
    let report = drift::run(&sim.url(), overrides, None, &Progress::quiet())
        .await
        .unwrap();
    sim.stop().await;
    report
}

#[tokio::test]
async fn the_simulators_documents_are_the_spec() {
    let report = sim_drift(false, &[]).await;
    assert_eq!(
        report.services.len(),
        grag_client::policy::OPENAPI_DOCUMENTS.len()
    );
    for s in &report.services {
        assert_eq!(s.unavailable, None, "{}", s.service);
        assert!(s.routes > 0, "{}", s.service);
    }
    assert_eq!(report.findings().count(), 0, "{report}");
    assert_eq!(report.exit(), Exit::Ok);
}

#[tokio::test]
async fn the_drifted_scenario_shows_each_of_its_moves_and_exits_1() {
    let report = sim_drift(true, &[]).await;
    let has = |kind: Kind, route: &str, at: &str, breaking: bool| {
        report
            .findings()
            .any(|f| f.kind == kind && f.route == route && f.at == at && f.breaking == breaking)
    };
    let search = "POST /ai-gateway/api/v1/retrieval/collections/{kb}/search/rerank";
    assert!(
        has(Kind::ParameterAdded, search, "query.lang", true),
        "{report}"
    );
    assert!(
        has(Kind::FieldAdded, search, "answer.results[].page", false),
        "{report}"
    );
    let spend = "GET /ledger/api/v1/ledger/spend";
    assert!(
        has(
            Kind::EnumValueRemoved,
            spend,
            "query.group_by=provider",
            true
        ),
        "{report}"
    );
    assert!(
        has(
            Kind::EnumValueAdded,
            spend,
            "query.group_by=pipeline",
            false
        ),
        "{report}"
    );
    assert!(
        has(
            Kind::RouteRemoved,
            "GET /workspaces/api/v1/settings",
            "",
            true
        ),
        "{report}"
    );
    assert!(
        has(
            Kind::RouteAdded,
            "DELETE /workspaces/api/v1/kbs/{kb_id}",
            "",
            false
        ),
        "{report}"
    );
    assert!(
        has(
            Kind::FieldAdded,
            "POST /workspaces/api/v1/kbs",
            "request.owner",
            true
        ),
        "{report}"
    );
    assert!(
        has(
            Kind::FieldRetyped,
            "GET /workspaces/api/v1/kbs/{kb}/documents",
            "answer[].status",
            true
        ),
        "{report}"
    );
    assert_eq!(report.exit(), Exit::Platform);
}

#[tokio::test]
async fn an_override_file_replaces_a_services_document_and_a_missing_one_is_not_compared() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ledger.json");
    let mut doc = grag_sim::openapi::document("ledger", false).unwrap();
    doc["components"]["schemas"]["LedgerTotals"]["properties"]
        .as_object_mut()
        .unwrap()
        .remove("calls");
    std::fs::write(&file, doc.to_string()).unwrap();
    let overrides = [
        format!("ledger={}", file.display())
            .parse::<Override>()
            .unwrap(),
        format!("voyager={}", dir.path().join("absent.json").display())
            .parse::<Override>()
            .unwrap(),
    ];
    let report = sim_drift(false, &overrides).await;
    let ledger = report
        .services
        .iter()
        .find(|s| s.service == "ledger")
        .unwrap();
    assert_eq!(ledger.document, file.display().to_string());
    let found: Vec<(&str, Kind)> = ledger
        .findings
        .iter()
        .map(|f| (f.at.as_str(), f.kind))
        .collect();
    assert_eq!(found, [("answer.calls", Kind::FieldRemoved)], "{report}");
    let voyager = report
        .services
        .iter()
        .find(|s| s.service == "voyager")
        .unwrap();
    assert!(voyager.unavailable.is_some(), "{report}");
    assert_eq!(report.exit(), Exit::Platform);
    assert!("nowhere=/x.json".parse::<Override>().is_err());
}
