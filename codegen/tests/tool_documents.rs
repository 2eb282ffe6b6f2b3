//! The documents for the tools around the client (`openapi.json`,
//! `alerts.rules.yml`, `alerts.test.yml`) cover the spec whole, and follow
//! it: a route changed in the spec is changed in the OpenAPI document. The
//! third-party validator, promtool and Schemathesis run in
//! `cargo xtask conformance` (they come from registries); these checks need
//! no network.

use std::path::{Path, PathBuf};

use sdk_codegen::emit::File;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Every API of spec/ with its model and its rendered files.
fn apis() -> Vec<(sdk_codegen::Model, Vec<File>)> {
    let root = root();
    ["grag", "core"]
        .iter()
        .map(|api| {
            let files = sdk_codegen::load::read_dir(&root.join("spec").join(api)).unwrap();
            let model = sdk_codegen::model(&files).unwrap_or_else(|e| panic!("{e}"));
            let out = sdk_codegen::generate(&files).unwrap_or_else(|e| panic!("{e}"));
            (model, out)
        })
        .collect()
}

fn file<'a>(files: &'a [File], path: &str) -> &'a str {
    &files
        .iter()
        .find(|f| f.path == Path::new(path))
        .unwrap_or_else(|| panic!("no {path}"))
        .contents
}

#[test]
fn the_openapi_document_is_3_1_and_has_every_route_of_the_spec() {
    for (model, files) in apis() {
        let text = file(&files, "openapi.json");
        let doc = oas3::from_json(text).expect("oas3 reads the document back");
        doc.validate_version().expect("an OpenAPI 3.1 version");
        let value: serde_json::Value = serde_json::from_str(text).unwrap();
        let mut operations = 0;
        for (service, route) in model.routes() {
            let method = route.method.as_str().to_lowercase();
            let op = &value["paths"][&route.path][&method];
            assert_eq!(
                op["operationId"],
                format!("{}.{}", service.handle, route.name),
                "{} {}",
                method,
                route.path
            );
            assert_eq!(op["x-timeout"]["class"], model.timeout(route.timeout).name);
            assert_eq!(op["x-retry"]["class"], model.retry(route.retry).name);
            assert_eq!(op["x-idempotent"], route.idempotent);
            let tenant = &model.api.headers.tenant;
            let has_tenant = op["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == *tenant && p["in"] == "header" && p["required"] == true);
            assert_eq!(
                has_tenant,
                route.scope != sdk_codegen::model::ScopeNeed::Public,
                "{}: the tenant header",
                route.name
            );
            operations += 1;
        }
        let declared: usize = value["paths"]
            .as_object()
            .unwrap()
            .values()
            .map(|item| item.as_object().unwrap().len())
            .sum();
        assert_eq!(declared, operations, "no operation the spec does not have");
        let rows = value["x-taxonomy"].as_array().unwrap();
        assert_eq!(rows.len(), model.rows.len(), "every taxonomy row");
    }
}

#[test]
fn every_alert_has_a_rule_and_a_firing_resolving_and_a_silent_test() {
    for (model, files) in apis() {
        let rules = file(&files, "alerts.rules.yml");
        let tests = file(&files, "alerts.test.yml");
        for alert in &model.alerts {
            assert!(
                rules.contains(&format!("- alert: \"{}\"\n", alert.alert)),
                "{}",
                alert.alert
            );
            for case in ["fires", "stays silent"] {
                assert!(
                    tests.contains(&format!("- name: \"{} {case}", alert.alert)),
                    "{} {case}",
                    alert.alert
                );
            }
            assert!(
                tests.contains(&format!("- name: \"{} fires", alert.alert))
                    && tests.lines().any(|l| l
                        .starts_with(&format!("  - name: \"{} fires", alert.alert))
                        && l.contains("resolves")),
                "{}: a case that shows it resolving",
                alert.alert
            );
        }
        // The client exports every series a rule reads at 0 from its start:
        // a test series starting above 0 would hide a first raise that
        // `increase()` cannot see.
        for values in tests
            .lines()
            .filter_map(|l| l.trim().strip_prefix("values: "))
        {
            assert!(
                values.starts_with("\"0 ") || values.starts_with("\"0+"),
                "a series starts at 0: {values}"
            );
        }
        assert_eq!(
            rules.matches("- alert: ").count(),
            model.alerts.len(),
            "one rule per alert"
        );
    }
}

#[test]
fn a_route_changed_in_the_spec_changes_the_openapi_document() {
    let dir = root().join("codegen/tests/fixtures/toy");
    let files = sdk_codegen::load::read_dir(&dir).unwrap();
    let before = sdk_codegen::generate(&files).unwrap();
    let moved: Vec<(PathBuf, String)> = files
        .iter()
        .map(|(p, text)| {
            let text = if p.ends_with("services/notes.yaml") {
                text.replace("path: /v1/{note_id}", "path: /v2/{note_id}")
            } else {
                text.clone()
            };
            (p.clone(), text)
        })
        .collect();
    let after = sdk_codegen::generate(&moved).unwrap();
    let (old, new) = (file(&before, "openapi.json"), file(&after, "openapi.json"));
    assert_ne!(old, new);
    assert!(old.contains("/v1/{note_id}") && !old.contains("/v2/{note_id}"));
    assert!(new.contains("/v2/{note_id}") && !new.contains("/v1/{note_id}"));
}

/// Every schema under `value` as (JSON pointer, schema): the values of
/// `schema`, `items`, `additionalProperties`, `contentSchema`, of an object
/// schema's `properties`, of `components.schemas`, and the members of
/// `anyOf`/`oneOf`/`allOf`.
fn schemas<'v>(
    value: &'v serde_json::Value,
    at: String,
    out: &mut Vec<(String, &'v serde_json::Value)>,
) {
    let serde_json::Value::Object(map) = value else {
        if let serde_json::Value::Array(items) = value {
            for (i, v) in items.iter().enumerate() {
                schemas(v, format!("{at}/{i}"), out);
            }
        }
        return;
    };
    let object_schema = map.get("type").is_some_and(|t| t == "object");
    for (k, v) in map {
        let here = format!("{at}/{k}");
        let members = match k.as_str() {
            "schema" | "items" | "additionalProperties" | "contentSchema" => vec![v],
            "properties" if object_schema => {
                v.as_object().into_iter().flat_map(|m| m.values()).collect()
            }
            "schemas" if at == "/components" => {
                v.as_object().into_iter().flat_map(|m| m.values()).collect()
            }
            "anyOf" | "oneOf" | "allOf" => v.as_array().into_iter().flatten().collect(),
            _ => Vec::new(),
        };
        out.extend(members.into_iter().map(|m| (here.clone(), m)));
        schemas(v, here, out);
    }
}

#[test]
fn the_openapi_documents_are_what_other_generators_read() {
    let (mut enums_seen, mut open_seen) = (0, 0);
    for (model, files) in apis() {
        let doc: serde_json::Value = serde_json::from_str(file(&files, "openapi.json")).unwrap();
        let mut found = Vec::new();
        schemas(&doc, String::new(), &mut found);
        assert!(
            found.len() > 50,
            "{}: the walk finds the schemas",
            model.api.name
        );
        for (at, schema) in &found {
            // openapi-python-client and Redocly take `{}`, not the boolean `true`.
            assert!(
                schema.is_object(),
                "{}: a boolean schema at {at}",
                model.api.name
            );
        }
        let info = &doc["info"];
        assert!(info["license"]["identifier"].is_string(), "{info}");
        assert!(info["contact"]["name"].is_string(), "{info}");
        // A create route's 409 is marked a success.
        for (_, route) in model.routes() {
            let method = route.method.as_str().to_lowercase();
            let conflict = &doc["paths"][&route.path][&method]["responses"]["409"];
            let success = route.conflict == sdk_codegen::model::Conflict::Success;
            assert_eq!(
                conflict["x-success"].as_bool() == Some(true),
                success,
                "{}",
                route.name
            );
        }
        // An enum only the platform sends is open; one a request carries is closed.
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let enums: Vec<_> = schemas
            .iter()
            .filter(|(_, s)| s["x-extensible-enum"].is_array())
            .collect();
        enums_seen += enums.len();
        for (name, s) in enums {
            let open = s["anyOf"].as_array().is_some_and(|a| {
                a.iter().any(|b| b["enum"].is_array())
                    && a.iter()
                        .any(|b| b == &serde_json::json!({"type": "string"}))
            });
            let closed = s["enum"].is_array();
            assert!(open != closed, "{name}: open or closed: {s}");
            open_seen += usize::from(open);
        }
    }
    assert!(enums_seen > 0, "the documents have enums");
    assert!(
        open_seen > 0 && open_seen < enums_seen,
        "enums only the platform sends are open, those a request carries closed"
    );
}

#[test]
fn policy_md_lists_every_metric_the_client_and_its_replay_queue_export() {
    for (model, files) in apis() {
        let md = file(&files, "POLICY.md");
        let section = md
            .split("\n## ")
            .find(|s| s.starts_with("Metrics\n"))
            .expect("a Metrics section");
        let m = &model.metrics;
        let mut names = vec![m.requests, m.duration, m.alerts, m.rate_limited];
        names.extend(
            [
                m.circuit_state,
                m.circuit_open_seconds,
                m.sse_fallback,
                m.sse_buffered,
            ]
            .into_iter()
            .flatten(),
        );
        if let Some(f) = &model.fleet {
            let f = &f.metrics;
            names.extend([f.admission, f.decisions, f.degraded, f.share]);
        }
        match &model.replay {
            Some(r) => names.extend([
                r.depth_metric,
                r.failures_metric,
                r.store_rows_metric,
                r.store_bytes_metric,
            ]),
            None => assert!(
                section.contains("no job store runs beside this client"),
                "{section}"
            ),
        }
        let rows = section.lines().filter(|l| l.starts_with("| `")).count();
        assert_eq!(rows, names.len(), "one row a metric: {section}");
        for name in names {
            assert!(
                section.contains(&format!("| `{name}")),
                "{name} in {section}"
            );
        }
    }
}
