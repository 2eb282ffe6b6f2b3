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
            assert_eq!(op["x-timeout"]["class"], model.timeouts[route.timeout].name);
            assert_eq!(op["x-retry"]["class"], model.retries[route.retry].name);
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
                rules.contains(&format!("- alert: \"{}\"\n", alert.name)),
                "{}",
                alert.name
            );
            for case in ["fires", "stays silent"] {
                assert!(
                    tests.contains(&format!("- name: \"{} {case}", alert.name)),
                    "{} {case}",
                    alert.name
                );
            }
            assert!(
                tests.contains(&format!("- name: \"{} fires", alert.name))
                    && tests.lines().any(|l| l
                        .starts_with(&format!("  - name: \"{} fires", alert.name))
                        && l.contains("resolves")),
                "{}: a case that shows it resolving",
                alert.name
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
