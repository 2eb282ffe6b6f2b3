//! Broken specs get clear errors: file, line, column, field and what is wrong.
//! Each case edits one line of the real GRAG spec in memory.

use std::path::{Path, PathBuf};

use sdk_codegen::model::CLIENT_METHODS;
use sdk_codegen::{SpecError, model};

fn spec_files() -> Vec<(PathBuf, String)> {
    spec_files_of("grag")
}

fn spec_files_of(api: &str) -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    sdk_codegen::load::read_dir(&root.join("spec").join(api))
        .unwrap()
        .into_iter()
        .map(|(p, text)| (p.strip_prefix(root).unwrap().to_path_buf(), text))
        .collect()
}

/// Replaces the `nth` (0-based) occurrence of `from` in `file` and returns the errors.
fn broken(file: &str, from: &str, to: &str, nth: usize) -> Vec<SpecError> {
    broken_in("grag", file, from, to, nth)
}

/// [`broken`] on the spec of `api`.
fn broken_in(api: &str, file: &str, from: &str, to: &str, nth: usize) -> Vec<SpecError> {
    let mut files = spec_files_of(api);
    let (_, text) = files
        .iter_mut()
        .find(|(p, _)| p.ends_with(file))
        .unwrap_or_else(|| panic!("no spec file {file}"));
    let at = text
        .match_indices(from)
        .nth(nth)
        .unwrap_or_else(|| panic!("`{from}` not found in {file}"))
        .0;
    text.replace_range(at..at + from.len(), to);
    match model(&files) {
        Ok(_) => panic!("the broken spec was accepted"),
        Err(errors) => errors.0,
    }
}

/// The single error, checked for file, line and field.
fn one(errors: Vec<SpecError>, file: &str, line: usize, field: &str) -> SpecError {
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let e = errors.into_iter().next().unwrap();
    assert!(e.file.ends_with(file), "{e}");
    assert_eq!(e.line, line, "{e}");
    assert_eq!(e.field, field, "{e}");
    assert!(e.column > 0, "{e}");
    e
}

fn line_of(file: &str, needle: &str, nth: usize) -> usize {
    line_of_in("grag", file, needle, nth)
}

fn line_of_in(api: &str, file: &str, needle: &str, nth: usize) -> usize {
    let text = &spec_files_of(api)
        .into_iter()
        .find(|(p, _)| p.ends_with(file))
        .unwrap()
        .1;
    let at = text.match_indices(needle).nth(nth).unwrap().0;
    text[..at].lines().count() + usize::from(text[..at].ends_with('\n'))
}

#[test]
fn the_real_spec_is_valid() {
    let m = model(&spec_files()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.api.name, "grag");
    assert!(m.routes().count() >= 25);
}

#[test]
fn unknown_timeout_class() {
    let file = "services/ai-gateway.yaml";
    let line = line_of(file, "timeout: search", 0);
    let e = one(
        broken(file, "timeout: search", "timeout: glacial", 0),
        file,
        line,
        "routes.search_rerank.timeout",
    );
    assert!(e.message.contains("unknown timeout class `glacial`"), "{e}");
    assert!(
        e.message.contains("`search`"),
        "lists the known classes: {e}"
    );
    assert_eq!(e.column, 14, "{e}");
}

#[test]
fn workspace_service_route_without_workspace() {
    let file = "services/kg-service.yaml";
    let errors = broken(file, "scope: workspace", "scope: tenant", 0);
    // Every route of the service is now missing its workspace: one error each.
    assert!(errors.len() >= 4, "{errors:#?}");
    for e in &errors {
        assert!(e.file.ends_with(file), "{e}");
        assert_eq!(e.line, 8, "{e}");
        assert!(e.field.ends_with(".scope"), "{e}");
        assert!(e.message.contains("workspace service (policy §3.2)"), "{e}");
    }
}

#[test]
fn path_parameter_missing_from_template() {
    let file = "services/kg-service.yaml";
    let line = line_of(file, "path_params:", 0) + 1;
    let errors = broken(file, "path: /entities/{entity_id}", "path: /entities", 0);
    let e = errors
        .iter()
        .find(|e| e.field == "routes.upsert_entity.path_params.entity_id")
        .unwrap_or_else(|| panic!("{errors:#?}"));
    assert_eq!(e.line, line, "{e}");
    assert!(
        e.message
            .contains("missing from the path template `/entities`"),
        "{e}"
    );
}

#[test]
fn placeholder_without_parameter() {
    let file = "services/kg-service.yaml";
    let line = line_of(file, "path: /entities/{entity_id}", 0);
    let e = one(
        broken(
            file,
            "path: /entities/{entity_id}",
            "path: /entities/{entity_id}/{rev}",
            0,
        ),
        file,
        line,
        "routes.upsert_entity.path",
    );
    assert!(
        e.message
            .contains("placeholder `{rev}` has no entry in `path_params`"),
        "{e}"
    );
}

#[test]
fn duplicate_method_name() {
    let file = "services/kg-service.yaml";
    let line = line_of(file, "get_entity:", 0);
    let e = one(
        broken(file, "get_entity:", "upsert_entity:", 0),
        file,
        line,
        "",
    );
    assert!(e.message.contains("duplicate key `upsert_entity`"), "{e}");
}

#[test]
fn duplicate_handle_across_services() {
    let file = "services/voyager.yaml";
    let line = line_of(file, "handle: voyager", 0);
    // Routes named `voyager.*` elsewhere now dangle too; the duplicate is the first error.
    let errors = broken(file, "handle: voyager", "handle: kg", 0);
    let e = errors
        .iter()
        .find(|e| e.file.ends_with(file))
        .unwrap_or_else(|| panic!("{errors:#?}"));
    assert_eq!((e.line, e.field.as_str()), (line, "handle"), "{e}");
    assert!(
        e.message
            .contains("duplicate method name: service `kg-service` already has handle `kg`"),
        "{e}"
    );
}

#[test]
fn taxonomy_row_naming_an_unknown_class() {
    let file = "taxonomy.yaml";
    let line = line_of(file, "retry: R3", 0);
    let e = one(
        broken(file, "retry: R3", "retry: R9", 0),
        file,
        line,
        "rows.T11.retry",
    );
    assert!(e.message.contains("unknown retry class `R9`"), "{e}");
}

#[test]
fn unknown_keys_are_refused() {
    let file = "policy.yaml";
    let errors = broken(file, "timeouts:", "timeouts_typo:", 0);
    let e = &errors[0];
    assert!(e.file.ends_with(file), "{e}");
    assert!(e.message.contains("Unknown field `timeouts_typo`"), "{e}");
}

#[test]
fn bad_duration() {
    let file = "policy.yaml";
    let errors = broken(file, "per_attempt: 30s", "per_attempt: 30 seconds", 0);
    let e = &errors[0];
    assert!(e.field.ends_with(".per_attempt"), "{e}");
    assert!(e.message.contains("is not a duration"), "{e}");
}

#[test]
fn malformed_yaml_names_the_line() {
    let file = "streams.yaml";
    let errors = broken(file, "streams:", "streams: [", 0);
    let e = &errors[0];
    assert!(e.file.ends_with(file), "{e}");
    assert!(e.line > 0 && e.message.contains("not valid YAML"), "{e}");
}

#[test]
fn errors_read_file_line_column_field() {
    let file = "services/ai-gateway.yaml";
    let errors = broken(file, "timeout: search", "timeout: glacial", 0);
    let text = errors[0].to_string();
    let line = line_of(file, "timeout: search", 0);
    assert!(
        text.starts_with(&format!("spec/grag/services/ai-gateway.yaml:{line}:14: `routes.search_rerank.timeout`: unknown timeout class")),
        "{text}"
    );
}

#[test]
fn output_is_deterministic() {
    let files = spec_files();
    let a = sdk_codegen::generate(&files).unwrap();
    let b = sdk_codegen::generate(&files).unwrap();
    assert_eq!(a, b);
}

#[test]
fn a_yaml_change_changes_the_generated_code() {
    let mut files = spec_files();
    let before = sdk_codegen::generate(&files).unwrap();
    let policy = files
        .iter_mut()
        .find(|(p, _)| p.ends_with("policy.yaml"))
        .unwrap();
    policy.1 = policy
        .1
        .replacen("per_attempt: 150s", "per_attempt: 170s", 1);
    let after = sdk_codegen::generate(&files).unwrap();
    let file = |files: &[sdk_codegen::emit::File], name: &str| {
        files
            .iter()
            .find(|f| f.path.ends_with(name))
            .unwrap()
            .contents
            .clone()
    };
    let (old, new) = (
        file(&before, "src/policy.rs"),
        file(&after, "src/policy.rs"),
    );
    let llm = |secs: u32| {
        format!("name: \"llm\",\n        per_attempt: ::std::time::Duration::from_secs({secs}),")
    };
    assert!(old.contains(&llm(150)) && !old.contains(&llm(170)), "{old}");
    assert!(new.contains(&llm(170)) && !new.contains(&llm(150)), "{new}");
    // The rustdoc of every llm route follows too.
    assert!(file(&after, "src/groundedness.rs").contains("timeout::LLM), 170 s per attempt"));
    assert!(file(&after, "POLICY.md").contains("| llm | 170 s |"));
}

#[test]
fn a_caller_budget_must_not_shadow_a_client_method() {
    let file = "policy.yaml";
    let line = line_of(file, "  backfill:", 0);
    let e = one(
        broken(file, "  backfill:", "  kg:", 0),
        file,
        line,
        "throttle.budgets.kg",
    );
    assert!(e.message.contains("the client already has `kg`"), "{e}");
    for method in CLIENT_METHODS {
        let e = one(
            broken(file, "  backfill:", &format!("  {method}:"), 0),
            file,
            line,
            &format!("throttle.budgets.{method}"),
        );
        assert!(e.message.contains("the client already has"), "{e}");
    }
}

/// The names a caller's budget may not take are every method the generated
/// client type has apart from its service handles and budget modes: read
/// off the generated GRAG client, so a method added to the emitter and not
/// to `CLIENT_METHODS` fails here.
#[test]
fn the_client_methods_a_budget_may_not_take_are_all_of_them() {
    let model = model(&spec_files()).expect("the real spec");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let client = std::fs::read_to_string(root.join("generated/grag-client/src/client.rs")).unwrap();
    let body = &client[client.find("impl Grag {").expect("the client's impl")..];
    let own: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("    pub fn "))
        .map(|l| l.split(['(', '<']).next().unwrap())
        .filter(|name| {
            !model.services.iter().any(|s| s.handle == *name)
                && !model.throttle.budgets.iter().any(|b| b.name == *name)
        })
        .collect();
    assert_eq!(own, CLIENT_METHODS, "the client's own methods");
}

#[test]
fn a_taxonomy_that_is_not_total_is_refused() {
    // Without the 1xx/6xx catch-all (T29), 100–199 and 600–999 match no row.
    let file = "taxonomy.yaml";
    // Reported at the first row: the gap belongs to no single row.
    let line = line_of(file, "  - row: ", 0);
    let errors = broken(
        file,
        "match: { outcome: status, status_range: [100, 999] }",
        "match: { outcome: status, status_range: [100, 101] }",
        0,
    );
    let e = one(errors, file, line, "rows");
    assert!(e.message.contains("not total"), "{e}");
    assert!(e.message.contains("statuses 102–199"), "{e}");
    assert!(e.message.contains("statuses 600–999"), "{e}");
    assert!(!e.message.contains("status 100"), "{e}");
}

#[test]
fn a_client_side_outcome_without_a_row_is_refused() {
    let file = "taxonomy.yaml";
    let errors = broken(
        file,
        "match: { outcome: too_large }",
        "match: { outcome: decode }",
        0,
    );
    let e = errors
        .iter()
        .find(|e| e.field == "rows")
        .unwrap_or_else(|| panic!("{errors:#?}"));
    assert!(e.message.contains("outcome `too_large`"), "{e}");
}

#[test]
fn a_row_narrowed_by_detail_does_not_close_a_gap() {
    // The catch-all T29 narrowed to a detail: a 1xx or 6xx without it has no row.
    let file = "taxonomy.yaml";
    let errors = broken(
        file,
        "match: { outcome: status, status_range: [100, 999] }",
        "match: { outcome: status, status_range: [100, 999], detail: dark }",
        0,
    );
    let e = errors
        .iter()
        .find(|e| e.field == "rows")
        .unwrap_or_else(|| panic!("{errors:#?}"));
    assert!(e.message.contains("statuses 100–199"), "{e}");
    assert!(e.message.contains("statuses 600–999"), "{e}");
}

#[test]
fn a_stream_route_needs_a_budget_that_bounds_open_streams() {
    let file = "services/bff.yaml";
    let line = line_of(file, "budget: streams", 0);
    let e = one(
        broken(file, "budget: streams", "budget: global", 0),
        file,
        line,
        "routes.orchestrator_events.budget",
    );
    assert!(e.message.contains("bounds open streams"), "{e}");
}

#[test]
fn a_size_names_its_unit() {
    let file = "policy.yaml";
    let line = line_of(file, "response: 16 MiB", 0);
    let e = one(
        broken(file, "response: 16 MiB", "response: 16 megs", 0),
        file,
        line,
        "limits.response",
    );
    assert!(e.message.contains("not a size"), "{e}");
}

#[test]
fn an_error_class_without_german_copy_is_refused() {
    let file = "degradation.yaml";
    let errors = broken(file, "  redirect:\n", "  redirected:\n", 0);
    assert!(
        errors
            .iter()
            .any(|e| e.message.contains("class `redirect` (row T26)")),
        "{errors:#?}"
    );
}

#[test]
fn the_bff_lane_switch_decides_whether_the_lane_sends_the_key() {
    let files = |on: bool| {
        let mut files = spec_files();
        let (_, text) = files
            .iter_mut()
            .find(|(p, _)| p.ends_with("api.yaml"))
            .unwrap();
        *text = text.replace("    bff: false", &format!("    bff: {on}"));
        model(&files).unwrap_or_else(|e| panic!("{e}"))
    };
    let lane =
        |m: &sdk_codegen::model::Model| m.services.iter().find(|s| s.handle == "bff").unwrap().lane;
    assert_eq!(lane(&files(false)), sdk_codegen::model::Lane::Keyless);
    assert_eq!(lane(&files(true)), sdk_codegen::model::Lane::Key);
}

#[test]
fn a_fresh_pool_is_asked_for_after_server_errors_only() {
    let file = "policy.yaml";
    let line = line_of(file, "fresh_after: [500]", 0);
    let e = one(
        broken(file, "fresh_after: [500]", "fresh_after: [404]", 0),
        file,
        line,
        "connections.fresh_after",
    );
    assert!(e.message.contains("5xx"), "{e}");
}

#[test]
fn the_core_spec_is_valid() {
    if let Err(e) = model(&spec_files_of("core")) {
        panic!("{e}");
    }
}

#[test]
fn a_breaker_open_alert_without_a_breaker_is_refused() {
    let file = "policy.yaml";
    let line = line_of_in("core", file, "retry_exhausted: retry_exhausted", 0);
    let e = one(
        broken_in(
            "core",
            file,
            "  retry_exhausted: retry_exhausted",
            "  breaker_open: retry_exhausted\n  retry_exhausted: retry_exhausted",
            0,
        ),
        file,
        line,
        "alerts.breaker_open",
    );
    assert!(e.message.contains("no breaker"), "{e}");
}

#[test]
fn without_a_breaker_circuit_open_needs_no_row_but_with_one_it_does() {
    // Core has neither a breaker nor a circuit_open row and is valid (above);
    // GRAG has a breaker: dropping its circuit_open row breaks totality.
    let errors = broken(
        "taxonomy.yaml",
        "match: { outcome: circuit_open }",
        "match: { outcome: invalid_scope }",
        0,
    );
    assert!(
        errors
            .iter()
            .any(|e| e.message.contains("outcome `circuit_open`")),
        "{errors:#?}"
    );
}

#[test]
fn a_workspace_service_needs_the_workspace_header() {
    let file = "api.yaml";
    let errors = broken(file, "  workspace: X-Workspace-ID\n", "", 0);
    assert!(
        errors
            .iter()
            .any(|e| e.field == "scope" && e.message.contains("headers.workspace")),
        "{errors:#?}"
    );
}

#[test]
fn a_reconcile_read_must_be_a_get_of_the_same_service() {
    let file = "sessions.yaml";
    let line = line_of_in("core", file, "reconcile: get_session", 0);
    let e = one(
        broken_in(
            "core",
            file,
            "reconcile: get_session",
            "reconcile: advance",
            0,
        ),
        file,
        line,
        "routes.accept.reconcile",
    );
    assert!(e.message.contains("not a GET route"), "{e}");
}

#[test]
fn only_a_linear_class_is_configurable_and_never_below_its_own_minimums() {
    let file = "policy.yaml";
    let errors = broken_in("core", file, "min_attempts: 1", "min_attempts: 3", 0);
    assert!(
        errors
            .iter()
            .any(|e| e.field == "retries.C1.configurable" && e.message.contains("below")),
        "{errors:#?}"
    );
}

#[test]
fn a_retry_maximum_below_the_class_s_own_attempts_is_refused() {
    let errors = broken_in(
        "core",
        "policy.yaml",
        "max_attempts: 5",
        "max_attempts: 1",
        0,
    );
    let e = errors
        .iter()
        .find(|e| e.field == "retries.C1.configurable.max_attempts")
        .unwrap_or_else(|| panic!("{errors:#?}"));
    assert!(e.message.contains("below the class's own attempts"), "{e}");
    assert!(e.file.ends_with("policy.yaml") && e.line > 1, "{e}");
}

#[test]
fn a_handle_that_clashes_with_the_client_is_refused() {
    let file = "engine.yaml";
    let line = line_of_in("core", file, "handle: engine", 0);
    let e = one(
        broken_in("core", file, "handle: engine", "handle: core", 0),
        file,
        line,
        "handle",
    );
    assert!(e.message.contains("clash"), "{e}");
}

#[test]
fn a_stream_fallback_needs_the_status_it_reads() {
    let file = "streams.yaml";
    let status = "    status:\n      field: status\n      completed: [completed]\n      failed: [failed, cancelled]\n      error_field: error\n      # After a fallback, 6 polls (30 s at 5 s) of a running job, then the stream\n      # is tried again; a reopened stream is trusted only after one resync poll.\n      reopen_after: 6\n";
    let line = line_of(file, "fallback: bff.pipeline_status", 0);
    let e = one(
        broken(file, status, "", 0),
        file,
        line,
        "streams.orchestrator.status",
    );
    assert!(e.message.contains("needs `status`"), "{e}");
}

#[test]
fn a_typed_event_names_a_type_with_fields() {
    let file = "streams.yaml";
    let line = line_of(file, "node_start: NodeEvent", 0);
    let e = one(
        broken(file, "node_start: NodeEvent", "node_start: NoSuchEvent", 0),
        file,
        line,
        "streams.orchestrator.events.node_start",
    );
    assert!(e.message.contains("names no type"), "{e}");
}

#[test]
fn a_stage_trace_names_a_feature_of_degradation_yaml() {
    let file = "streams.yaml";
    let line = line_of(file, "feature: chat", 0);
    let e = one(
        broken(file, "feature: chat", "feature: chatbot", 0),
        file,
        line,
        "streams.chat.stages.feature",
    );
    assert!(e.message.contains("no feature"), "{e}");
}

#[test]
fn an_existence_proof_is_a_create_route_whose_409_means_already_there() {
    let file = "services/bff.yaml";
    let line = line_of(file, "proven_by: workspaces.create_conversation", 0);
    let e = one(
        broken(
            file,
            "proven_by: workspaces.create_conversation",
            "proven_by: workspaces.create_kb",
            0,
        ),
        file,
        line,
        "routes.chat_stream.exists.proven_by",
    );
    assert!(e.message.contains("conflict: success"), "{e}");
}

#[test]
fn a_replay_lease_must_outlast_the_deadline() {
    let file = "policy.yaml";
    let line = line_of(file, "lease: 5m", 0);
    let e = one(
        broken(file, "lease: 5m", "lease: 2m", 0),
        file,
        line,
        "replay.lease",
    );
    assert!(e.message.contains("outlast `deadline.interactive`"), "{e}");
}

#[test]
fn replays_run_in_a_budget_that_bounds_them() {
    let file = "policy.yaml";
    let line = line_of(file, "budget: ingest\n  # A worker", 0);
    let e = one(
        broken(
            file,
            "budget: ingest\n  # A worker",
            "budget: global\n  # A worker",
            0,
        ),
        file,
        line,
        "replay.budget",
    );
    assert!(e.message.contains("max_in_flight"), "{e}");
}

#[test]
fn a_replay_alert_must_be_one_of_the_alerts() {
    let file = "policy.yaml";
    let line = line_of(file, "failure_alert: replay_failures", 0);
    one(
        broken(
            file,
            "failure_alert: replay_failures",
            "failure_alert: replay_fails",
            0,
        ),
        file,
        line,
        "replay.failure_alert",
    );
}

#[test]
fn a_route_that_is_not_idempotent_is_replayed_only_with_its_read() {
    let file = "services/docfold.yaml";
    let line = line_of(file, "  convert:\n", 0);
    let e = one(
        broken(file, "    reconcile: conversion_of\n", "", 0),
        file,
        line,
        "routes.convert.reconcile",
    );
    assert!(e.message.contains("reconcile"), "{e}");
}

#[test]
fn an_auth_scheme_is_a_token() {
    let file = "api.yaml";
    let line = line_of(file, "scheme: Bearer", 0);
    let e = one(
        broken(file, "scheme: Bearer", "scheme: Bearer token", 0),
        file,
        line,
        "auth.scheme",
    );
    assert!(e.message.contains("token"), "{e}");
}

#[test]
fn a_service_on_a_lane_the_auth_section_does_not_name() {
    let errors = broken("bff.yaml", "lane: bff", "lane: edge", 0);
    let e = one(
        errors,
        "bff.yaml",
        line_of("bff.yaml", "lane: bff", 0),
        "lane",
    );
    assert!(e.message.contains("`key`, `bff`"), "{e}");
}

#[test]
fn key_is_not_a_lane_of_the_auth_section() {
    let mut errors = broken("api.yaml", "    bff: false", "    key: false", 0);
    // The BFF service's lane is then unknown too: a second error, in bff.yaml.
    errors.retain(|e| e.file.ends_with("api.yaml"));
    let e = one(
        errors,
        "api.yaml",
        line_of("api.yaml", "    bff: false", 0),
        "auth.lanes_authenticated.key",
    );
    assert!(e.message.contains("other than `key`"), "{e}");
}

#[test]
fn stream_error_and_timeout_events_differ() {
    let errors = broken(
        "streams.yaml",
        "stream_timeout: timeout",
        "stream_timeout: error",
        0,
    );
    let e = one(
        errors,
        "streams.yaml",
        line_of("streams.yaml", "stream_timeout: timeout", 0),
        "error_events.stream_timeout",
    );
    assert!(e.message.contains("different events"), "{e}");
}

#[test]
fn a_header_name_with_a_space_is_refused() {
    let errors = broken("api.yaml", "tenant: X-Tenant-ID", "tenant: X Tenant", 0);
    let e = one(
        errors,
        "api.yaml",
        line_of("api.yaml", "tenant: X-Tenant-ID", 0),
        "headers.tenant",
    );
    assert!(e.message.contains("RFC 9110 token"), "{e}");
}

#[test]
fn two_roles_may_not_share_a_header() {
    let errors = broken(
        "api.yaml",
        "retry_after: Retry-After",
        "retry_after: x-request-id",
        0,
    );
    let e = one(
        errors,
        "api.yaml",
        line_of("api.yaml", "retry_after: Retry-After", 0),
        "headers.retry_after",
    );
    assert!(e.message.contains("already the request_id header"), "{e}");
}

#[test]
fn an_alert_severity_outside_the_severities_is_refused() {
    let errors = broken("degradation.yaml", "severity: page", "severity: pager", 0);
    let e = one(
        errors,
        "degradation.yaml",
        line_of("degradation.yaml", "severity: page", 0),
        "alerts.breaker_open_long.severity",
    );
    assert!(e.message.contains("`page`, `ops`"), "{e}");
}

/// `ids.pattern` of the GRAG spec replaced by `pattern`: the one error.
fn broken_pattern(pattern: &str) -> SpecError {
    let file = "api.yaml";
    let real = r#"pattern: "^[a-z0-9][a-z0-9-]{0,62}$""#;
    let line = line_of(file, real, 0);
    let errors = broken(file, real, &format!("pattern: {pattern:?}"), 0);
    one(errors, file, line, "ids.pattern")
}

#[test]
fn an_id_pattern_outside_the_supported_shape_is_refused() {
    for (pattern, says) in [
        ("^[a-z0-9]+$", "expected a class"),
        ("^[a-z0-9][a-z0-9-]*$", "expected a bound"),
        ("^[a-z0-9][a-z0-9-]{0,62}", "end with `$`"),
        ("^(kb|ws)-[a-z0-9]{0,62}$", "expected a class"),
        ("^[a-z0-9][\\w-]{0,62}$", "`\\`"),
        ("^[^/][a-z0-9-]{0,62}$", "negated"),
        ("^[a-z0-9][a-z0-9/]{0,62}$", "`/`"),
    ] {
        let e = broken_pattern(pattern);
        assert!(e.message.contains(says), "{pattern}: {e}");
    }
}

#[test]
fn an_id_pattern_with_an_empty_class_is_refused() {
    for pattern in ["^[][a-z0-9-]{0,62}$", "^[a-z0-9][]{0,62}$"] {
        let e = broken_pattern(pattern);
        assert!(e.message.contains("empty"), "{pattern}: {e}");
    }
}

#[test]
fn an_id_pattern_bound_must_be_ordered_and_small() {
    let e = broken_pattern("^[a-z0-9][a-z0-9-]{9,2}$");
    assert!(e.message.contains("inverted"), "{e}");
    let e = broken_pattern("^[a-z0-9][a-z0-9-]{0,4096}$");
    assert!(e.message.contains("at most 256"), "{e}");
    let e = broken_pattern("^[9-0][a-z0-9-]{0,62}$");
    assert!(e.message.contains("inverted"), "{e}");
}

#[test]
fn a_reserved_tenant_must_match_the_id_pattern() {
    // `system` and the other reserved tenants are lowercase: under a pattern
    // of upper-case IDs they could never be sent, so listing them is an error.
    let file = "api.yaml";
    let real = r#"pattern: "^[a-z0-9][a-z0-9-]{0,62}$""#;
    let errors = broken(file, real, r#"pattern: "^[A-Z][A-Z0-9]{0,62}$""#, 0);
    assert!(errors.iter().any(|e| e.field == "ids.reserved_tenants"));
    for e in &errors {
        // The warm-up's pipeline id is an ID the spec names too.
        let fields = ["ids.reserved_tenants", "breaker.warm_up.0.pipeline_id"];
        assert!(fields.contains(&e.field.as_str()), "{e}");
        assert!(e.message.contains("ids.pattern"), "{e}");
    }
}

#[test]
fn a_warm_up_call_of_a_pipeline_route_needs_its_own_valid_pipeline_id() {
    let file = "policy.yaml";
    let line = "      pipeline_id: breaker-warm-up\n";
    let missing = broken(file, line, "", 0);
    let e = one(missing, file, 110, "breaker.warm_up.0.pipeline_id");
    assert!(e.message.contains("give the warm-up call its own"), "{e}");
    let invalid = broken(file, line, "      pipeline_id: Warm_Up\n", 0);
    assert!(
        invalid[0].message.contains("does not match `ids.pattern`"),
        "{invalid:#?}"
    );
    let score = "    - route: groundedness.score\n";
    let stray = broken(
        file,
        score,
        &format!("{score}      pipeline_id: run-1\n"),
        0,
    );
    assert!(
        stray
            .iter()
            .any(|e| e.field == "breaker.warm_up.1.pipeline_id"
                && e.message.contains("carries no pipeline header")),
        "{stray:#?}"
    );
}

/// The line of a `ledger.yaml` enum value; the spec lists them on one line.
const GROUPINGS: &str = "values: [service, provider]";

#[test]
fn an_enum_lists_values() {
    let file = "services/ledger.yaml";
    let line = line_of(file, "  SpendGrouping:", 0);
    let e = one(
        broken(file, GROUPINGS, "values: []", 0),
        file,
        line,
        "types.SpendGrouping",
    );
    assert!(e.message.contains("non-empty `values`"), "{e}");
}

#[test]
fn an_enum_lists_a_value_once() {
    let file = "services/ledger.yaml";
    let line = line_of(file, GROUPINGS, 0);
    let e = one(
        broken(file, GROUPINGS, "values: [service, provider, service]", 0),
        file,
        line,
        "types.SpendGrouping.values",
    );
    assert!(e.message.contains("`service` is listed twice"), "{e}");
    assert!(e.column > GROUPINGS.len(), "points at the second one: {e}");
}

#[test]
fn two_enum_values_cannot_make_one_variant() {
    let file = "services/ledger.yaml";
    let line = line_of(file, GROUPINGS, 0);
    let e = one(
        broken(file, GROUPINGS, "values: [service, provider, Provider]", 0),
        file,
        line,
        "types.SpendGrouping.values",
    );
    assert!(
        e.message
            .contains("`provider` and `Provider` both make the variant `Provider`"),
        "{e}"
    );
}

#[test]
fn an_enum_value_cannot_be_the_unknown_variant() {
    let file = "services/ledger.yaml";
    let line = line_of(file, GROUPINGS, 0);
    let e = one(
        broken(file, GROUPINGS, "values: [service, provider, unknown]", 0),
        file,
        line,
        "types.SpendGrouping.values",
    );
    assert!(e.message.contains("would be the variant `Unknown`"), "{e}");
}

#[test]
fn an_enum_value_makes_a_variant_name() {
    let file = "services/ledger.yaml";
    let line = line_of(file, GROUPINGS, 0);
    let e = one(
        broken(file, GROUPINGS, "values: [service, provider, 2xx]", 0),
        file,
        line,
        "types.SpendGrouping.values",
    );
    assert!(
        e.message.contains("`2xx` makes no Rust variant name"),
        "{e}"
    );
}

#[test]
fn an_enum_value_in_long_form_has_known_keys_and_a_source_when_inferred() {
    let file = "services/bff.yaml";
    let e = one(
        broken(file, "doc: Done; `results`", "docs: Done; `results`", 0),
        file,
        line_of(file, "doc: Done; `results`", 0),
        "types.JobState.values",
    );
    assert!(e.message.contains("unknown key `docs`"), "{e}");

    let errors = broken(file, "- value: completed", "- wire: completed", 0);
    let line = line_of(file, "- value: completed", 0);
    // The value is gone, so streams.yaml's `completed` is refused too.
    let at: Vec<(&str, usize)> = errors
        .iter()
        .filter(|e| e.field == "types.JobState.values")
        .map(|e| (e.message.as_str(), e.line))
        .collect();
    assert_eq!(at.len(), 2, "{errors:#?}");
    assert!(at[0].0.contains("unknown key `wire`"), "{errors:#?}");
    assert!(at[1].0.contains("needs `value`"), "{errors:#?}");
    assert!(at.iter().all(|(_, l)| *l == line), "{errors:#?}");

    let line = line_of(file, "- value: running", 0);
    let e = one(
        broken(
            file,
            "        source: \"§6.1\"\n        inferred: true",
            "        inferred: true",
            0,
        ),
        file,
        line,
        "types.JobState.values",
    );
    assert!(
        e.message
            .contains("`running` is `inferred` but names no `source`"),
        "{e}"
    );
}

#[test]
fn an_enum_name_is_not_an_id_type() {
    let file = "services/ledger.yaml";
    let line = line_of(file, "  SpendGrouping:", 0);
    // Its users now name a type that is gone: only the clash is checked here.
    let errors = broken(file, "  SpendGrouping:", "  KbId:", 0);
    let e = errors
        .iter()
        .find(|e| e.field == "types.KbId")
        .unwrap_or_else(|| panic!("{errors:#?}"));
    assert_eq!(e.line, line, "{e}");
    assert!(e.message.contains("already an ID type"), "{e}");
}

#[test]
fn an_enum_name_is_not_another_type_s() {
    let file = "services/ledger.yaml";
    let line = line_of(file, "  SpendGrouping:", 0);
    // In one file the YAML loader refuses the duplicate key; across files, lowering does.
    let errors = broken(file, "  SpendGrouping:", "  JobStatus:", 0);
    let e = errors
        .iter()
        .find(|e| e.field == "types.JobStatus")
        .unwrap_or_else(|| panic!("{errors:#?}"));
    assert_eq!(e.line, line, "{e}");
    assert!(
        e.message.contains("already defined by service `bff`"),
        "{e}"
    );
}

#[test]
fn a_field_names_an_existing_enum() {
    let file = "services/ledger.yaml";
    let line = line_of(file, "group_by: SpendGrouping?", 0);
    let e = one(
        broken(file, "group_by: SpendGrouping?", "group_by: SpendGroup?", 0),
        file,
        line,
        "types.Spend.fields.group_by",
    );
    assert!(e.message.contains("unknown type `SpendGroup`"), "{e}");
}

#[test]
fn a_job_state_the_stream_reads_is_a_value_of_its_enum() {
    let file = "streams.yaml";
    let line = line_of(file, "failed: [failed, cancelled]", 0);
    let e = one(
        broken(
            file,
            "failed: [failed, cancelled]",
            "failed: [failed, aborted]",
            0,
        ),
        file,
        line,
        "streams.orchestrator.status",
    );
    assert!(
        e.message
            .contains("`aborted` is no value of `JobState`, the type of `JobStatus.status`"),
        "{e}"
    );
}

#[test]
fn a_chat_stage_the_stream_reads_is_a_value_of_its_enum() {
    let file = "streams.yaml";
    let line = line_of(file, "fail_closed: [generate]", 0);
    let e = one(
        broken(
            file,
            "fail_closed: [generate]",
            "fail_closed: [generation]",
            0,
        ),
        file,
        line,
        "streams.chat.stages",
    );
    assert!(e.message.contains("no value of `ChatStage`"), "{e}");
}

#[test]
fn streams_without_error_events_are_refused() {
    let errors = broken(
        "streams.yaml",
        "error_events:\n  stream_error: error       # `event: error` with a JSON `detail` (§6.2, §6.3)\n  stream_timeout: timeout   # STREAM_TIMEOUT_MS reached (§6.1)\n",
        "",
        0,
    );
    let e = one(
        errors,
        "streams.yaml",
        // The three removed lines stood above it.
        line_of("streams.yaml", "  orchestrator:", 0) - 3,
        "error_events",
    );
    assert!(e.message.contains("stream_timeout"), "{e}");
}

#[test]
fn two_classes_may_not_share_an_error_class_variant() {
    let mut files = spec_files();
    let (_, text) = files
        .iter_mut()
        .find(|(p, _)| p.ends_with("taxonomy.yaml"))
        .unwrap();
    *text = text
        .replace("class: invalid_scope", "class: x1")
        .replace("class: deadline", "class: x_1");
    let errors = model(&files).expect_err("a clash is refused").0;
    assert!(
        errors
            .iter()
            .any(|e| e.field.ends_with(".class")
                && e.message.contains("would both be `ErrorClass::X1`")),
        "{errors:#?}"
    );
}

#[test]
fn an_enum_value_may_not_make_the_variant_self() {
    let errors = broken("ai-gateway.yaml", "- value: system", "- value: self", 0);
    assert!(
        errors
            .iter()
            .any(|e| e.message.contains("`Self`, a Rust keyword")),
        "{errors:#?}"
    );
}

// What the spec mutation fuzz (tests/spec_fuzz.rs) found, one
// case per class, each refused with file, line and field (or generated).

/// A copy of the spec of `api` in a temporary root, as `root/spec/<api>/`.
fn tree_copy(api: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for (path, text) in spec_files_of(api) {
        let to = tmp.path().join(&path);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::write(to, text).unwrap();
    }
    tmp
}

#[test]
fn a_client_name_that_is_no_type_name_is_refused() {
    let line = line_of("api.yaml", "client: Grag", 0);
    let e = one(
        broken(
            "api.yaml",
            "client: Grag",
            "client: A sentence, not a name",
            0,
        ),
        "api.yaml",
        line,
        "client",
    );
    assert!(e.message.contains("CamelCase type name"), "{e}");
    let e = one(
        broken("api.yaml", "client: Grag", "client: Config", 0),
        "api.yaml",
        line,
        "client",
    );
    assert!(e.message.contains("already uses"), "{e}");
}

#[test]
fn keyword_field_names_are_raw_identifiers_with_their_wire_name() {
    let mut files = spec_files();
    let (_, text) = files
        .iter_mut()
        .find(|(p, _)| p.ends_with("voyager.yaml"))
        .unwrap();
    *text = text
        .replacen(
            "      vector: list<number>",
            "      typeof: list<number>",
            1,
        )
        .replacen("      payload: json?", "      self: json?", 1);
    let out = sdk_codegen::generate(&files).unwrap_or_else(|e| panic!("{e}"));
    let types = &out
        .iter()
        .find(|f| f.path.ends_with("types.rs"))
        .unwrap()
        .contents;
    assert!(types.contains("pub r#typeof: Vec<f64>"), "{types}");
    assert!(
        types.contains("#[serde(rename = \"self\")]\n    pub self_: Option<serde_json::Value>"),
        "{types}"
    );
}

#[test]
fn a_keyword_no_identifier_may_be_is_refused_as_a_name() {
    let file = "services/voyager.yaml";
    let line = line_of(file, "handle: voyager", 0);
    let errors = broken(file, "handle: voyager", "handle: self", 0);
    let e = errors
        .iter()
        .find(|e| e.field == "handle")
        .unwrap_or_else(|| panic!("{errors:#?}"));
    assert_eq!(e.line, line, "{e}");
    assert!(e.message.contains("Rust keyword"), "{e}");
}

#[test]
fn a_bare_cr_in_a_doc_is_refused_at_its_line() {
    let file = "services/voyager.yaml";
    let line = line_of(file, "doc: One chunk embedding", 0);
    let doc = "doc: One chunk embedding with its payload.";
    let e = one(
        broken(file, doc, "doc: \"One\\rchunk embedding\"", 0),
        file,
        line,
        "types.Point.doc",
    );
    assert!(e.message.contains("control character '\\r'"), "{e}");
    // Written raw, the YAML parser already refuses it, at its line.
    let e = one(broken(file, doc, "doc: \"One\rchunk\"", 0), file, line, "");
    assert!(e.message.contains("not valid YAML"), "{e}");
    let file = "policy.yaml";
    let line = line_of(file, "source: \"", 0);
    let e = one(
        broken(file, "source: \"", "source: \"\\u202e", 0),
        file,
        line,
        "timeouts.default.source",
    );
    assert!(e.message.contains("control character"), "{e}");
}

#[test]
fn a_service_name_longer_than_a_name_is_refused() {
    let file = "services/voyager.yaml";
    let line = line_of(file, "service: voyager", 0);
    let long = format!("service: {}", "v".repeat(1 << 20));
    let errors = broken(file, "service: voyager", &long, 0);
    let e = errors
        .iter()
        .find(|e| e.file.ends_with(file) && e.field == "service")
        .unwrap_or_else(|| panic!("{errors:#?}"));
    assert_eq!(e.line, line, "{e}");
    assert!(e.message.contains("at most"), "{e}");
}

#[test]
fn two_service_files_with_one_service_are_refused() {
    let mut files = spec_files();
    let voyager = files
        .iter()
        .find(|(p, _)| p.ends_with("voyager.yaml"))
        .unwrap()
        .clone();
    let copy = voyager.0.with_file_name("voyager-again.yaml");
    files.push((copy, voyager.1.clone()));
    let errors = model(&files).expect_err("a second voyager is refused").0;
    let e = errors
        .iter()
        .find(|e| e.field == "service")
        .unwrap_or_else(|| panic!("{errors:#?}"));
    assert!(e.file.ends_with("voyager-again.yaml"), "{e}");
    assert_eq!(
        e.line,
        line_of("services/voyager.yaml", "service:", 0),
        "{e}"
    );
    assert!(
        e.message
            .contains("another service file already defines the service `voyager`"),
        "{e}"
    );
}

#[test]
fn a_type_nested_10000_deep_is_refused_before_it_reaches_syn() {
    let file = "services/voyager.yaml";
    let line = line_of(file, "returns: UpsertResult", 0);
    let deep = format!(
        "returns: \"{}UpsertResult{}\"",
        "list<".repeat(10_000),
        ">".repeat(10_000)
    );
    // A small stack: neither lowering nor anything after it recurses by depth.
    let errors = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || broken(file, "returns: UpsertResult", &deep, 0))
        .unwrap()
        .join()
        .unwrap();
    let e = one(errors, file, line, "routes.upsert_points.returns");
    assert!(e.message.contains("deeper than 8 levels"), "{e}");
}

#[test]
fn yaml_nested_too_deep_for_the_parser_is_refused_at_its_line() {
    let file = "services/voyager.yaml";
    let line = line_of(file, "prefix:", 0);
    let deep = format!("deep:\n{}x\nprefix:", "- ".repeat(5_000));
    let errors = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || broken(file, "prefix:", &deep, 0))
        .unwrap()
        .join()
        .unwrap();
    let e = one(errors, file, line + 1, "");
    assert!(e.message.contains("nested deeper than 64 columns"), "{e}");
}

#[test]
fn a_second_yaml_document_is_refused_not_ignored() {
    let file = "policy.yaml";
    let line = line_of(file, "deadline:", 0);
    let e = one(
        broken(file, "deadline:", "---\ndeadline:", 0),
        file,
        line,
        "",
    );
    assert!(e.message.contains("one YAML document"), "{e}");
}

#[test]
fn anchors_and_aliases_are_refused() {
    let file = "policy.yaml";
    let line = line_of(file, "deadline:", 0);
    let errors = broken(
        file,
        "deadline:",
        "bomb: &a [x, x]\nboom: [*a, *a]\ndeadline:",
        0,
    );
    let e = one(errors, file, line, "");
    assert!(
        e.message.contains("anchors and aliases are not allowed"),
        "{e}"
    );
}

#[test]
fn an_api_folder_without_api_yaml_is_an_error_not_skipped() {
    let tmp = tree_copy("core");
    std::fs::remove_file(tmp.path().join("spec/core/api.yaml")).unwrap();
    let err = sdk_codegen::sync::render(tmp.path()).expect_err("no api.yaml is an error");
    let text = err.to_string();
    assert!(
        text.contains("spec/core/api.yaml:1:1: ``: is missing"),
        "{text}"
    );
    // A directory where api.yaml belongs is no better.
    std::fs::create_dir(tmp.path().join("spec/core/api.yaml")).unwrap();
    let text = sdk_codegen::sync::render(tmp.path())
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("spec/core/api.yaml:1:1: ``: is a directory where a YAML file belongs"),
        "{text}"
    );
}

#[test]
fn a_spec_tree_without_an_api_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("spec")).unwrap();
    let text = sdk_codegen::sync::render(tmp.path())
        .unwrap_err()
        .to_string();
    assert!(text.starts_with("spec:1:1: ``: holds no API"), "{text}");
}

#[test]
fn a_generated_crate_whose_spec_is_gone_is_stale() {
    let tmp = tree_copy("core");
    std::fs::create_dir_all(tmp.path().join("generated/grag-client/src")).unwrap();
    let stale = sdk_codegen::sync::stale(tmp.path()).unwrap();
    assert!(
        stale.contains(&PathBuf::from("generated/grag-client")),
        "{stale:#?}"
    );
}

#[test]
fn a_crate_name_is_a_cargo_package_name_never_a_path() {
    let line = line_of("api.yaml", "crate: grag-client", 0);
    for bad in ["../x", "a/b", "self", "sdk-runtime", "9lives", "x y"] {
        let e = one(
            broken(
                "api.yaml",
                "crate: grag-client",
                &format!("crate: \"{bad}\""),
                0,
            ),
            "api.yaml",
            line,
            "crate",
        );
        assert!(e.column > 0, "{e}");
    }
}

#[test]
fn the_api_name_is_its_folder_s_and_the_title_one_line() {
    let line = line_of("api.yaml", "api: grag", 0);
    let e = one(
        broken("api.yaml", "api: grag", "api: ../grag", 0),
        "api.yaml",
        line,
        "api",
    );
    assert!(e.message.contains("lower-case letters"), "{e}");
    let e = one(
        broken("api.yaml", "api: grag", "api: other", 0),
        "api.yaml",
        line,
        "api",
    );
    assert!(e.message.contains("lives in `grag/`"), "{e}");
    let line = line_of("api.yaml", "title:", 0);
    one(
        broken(
            "api.yaml",
            "title: GRAG AI platform",
            "title: \"two\\nlines\"",
            0,
        ),
        "api.yaml",
        line,
        "title",
    );
}

#[test]
fn a_title_is_escaped_in_cargo_toml() {
    let mut files = spec_files_of("core");
    let (_, text) = files
        .iter_mut()
        .find(|(p, _)| p.ends_with("api.yaml"))
        .unwrap();
    let title = text
        .lines()
        .find(|l| l.starts_with("title:"))
        .unwrap()
        .to_owned();
    *text = text.replace(&title, r#"title: 'A "quoted" \ title'"#);
    let out = sdk_codegen::generate(&files).unwrap_or_else(|e| panic!("{e}"));
    let toml = &out
        .iter()
        .find(|f| f.path.ends_with("Cargo.toml"))
        .unwrap()
        .contents;
    assert!(
        toml.contains(r#"description = "Typed client of the A \"quoted\" \\ title, generated"#),
        "{toml}"
    );
}

#[test]
fn read_errors_name_the_file_and_not_utf_8_names_its_line() {
    let tmp = tree_copy("core");
    let dir = tmp.path().join("spec/core");
    let mut bytes = std::fs::read(dir.join("policy.yaml")).unwrap();
    let third_line = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(1)
        .unwrap()
        .0
        + 1;
    bytes.insert(third_line + 2, 0xff);
    std::fs::write(dir.join("policy.yaml"), bytes).unwrap();
    std::fs::remove_file(dir.join("taxonomy.yaml")).unwrap();
    let engine = dir.join("services/engine.yaml");
    std::fs::remove_file(&engine).unwrap();
    std::fs::create_dir(&engine).unwrap();
    std::fs::write(dir.join("services/sessions.yml"), "").unwrap();
    let errors = sdk_codegen::load::read_dir(&dir).unwrap_err().0;
    let at = |name: &str| {
        errors
            .iter()
            .find(|e| e.file.ends_with(name))
            .unwrap_or_else(|| panic!("nothing about {name}: {errors:#?}"))
    };
    let e = at("policy.yaml");
    assert_eq!((e.line, e.column), (3, 3), "{e}");
    assert!(e.message.contains("not UTF-8: byte 0xff"), "{e}");
    assert!(at("taxonomy.yaml").message.contains("is missing"));
    assert!(at("engine.yaml").message.contains("is a directory"));
    assert!(at("sessions.yml").message.contains("nothing else"));
    assert!(errors.iter().all(|e| e.line >= 1), "{errors:#?}");
}

/// Whatever stray thing sits in services/, its refusal names a file of the
/// tree at line 1: the file itself, or each file in a stray folder.
#[test]
fn a_stray_entry_under_services_is_refused_at_a_file_and_line_1() {
    let tmp = tree_copy("core");
    let dir = tmp.path().join("spec/core");
    let services = dir.join("services");
    std::fs::write(services.join("notes.txt"), "a note\n").unwrap();
    std::fs::create_dir_all(services.join("old/deeper")).unwrap();
    std::fs::write(services.join("old/engine.yaml"), "service: engine\n").unwrap();
    std::fs::write(services.join("old/deeper/x.yaml"), "").unwrap();
    std::fs::create_dir(services.join("empty")).unwrap();
    let errors = sdk_codegen::load::read_dir(&dir).unwrap_err().0;
    let named: Vec<PathBuf> = errors
        .iter()
        .map(|e| e.file.strip_prefix(&services).unwrap().to_path_buf())
        .collect();
    assert_eq!(
        named,
        ["empty", "notes.txt", "old/deeper/x.yaml", "old/engine.yaml"].map(PathBuf::from),
        "{errors:#?}"
    );
    for e in &errors {
        assert_eq!((e.line, e.column), (1, 1), "{e}");
        assert!(e.message.contains("nothing else"), "{e}");
    }
    for e in errors.iter().filter(|e| !e.file.ends_with("empty")) {
        assert!(e.file.is_file(), "names a file of the tree: {e}");
    }
}

#[test]
fn an_emitter_failure_is_an_error_naming_the_spec_item() {
    let mut m = model(&spec_files_of("core")).unwrap();
    m.services[0].routes[0].name = "not a name".into();
    let errors = sdk_codegen::emit::files(&m)
        .expect_err("refused, not a panic")
        .0;
    let e = errors
        .iter()
        .find(|e| e.file.ends_with("services/engine.yaml"))
        .unwrap_or_else(|| panic!("{errors:#?}"));
    assert_eq!(
        e.line,
        line_of_in("core", "services/engine.yaml", "service:", 0)
    );
    assert!(e.message.contains("internal error"), "{e}");
    assert!(e.message.contains("`not a name`"), "{e}");
    assert!(errors.iter().all(|e| e.line >= 1), "{errors:#?}");
}

#[test]
fn a_type_nested_8_deep_generates_and_9_deep_is_refused() {
    let file = "services/voyager.yaml";
    let eight = "returns: list<map<list<map<list<map<list<UpsertResult?>>>>>>>";
    let mut files = spec_files();
    let (_, text) = files.iter_mut().find(|(p, _)| p.ends_with(file)).unwrap();
    *text = text.replacen("returns: UpsertResult", eight, 1);
    let out = sdk_codegen::generate(&files).unwrap_or_else(|e| panic!("{e}"));
    let voyager = &out
        .iter()
        .find(|f| f.path.ends_with("voyager.rs"))
        .unwrap()
        .contents;
    // rustfmt breaks the type over lines, with trailing commas: compared without either.
    let map = "std::collections::BTreeMap<String";
    let rust = format!("Vec<{map}Vec<{map}Vec<{map}Vec<Option<crate::types::UpsertResult>>>>>>>>");
    let compact: String = voyager
        .chars()
        .filter(|c| !c.is_whitespace() && *c != ',')
        .collect();
    assert!(compact.contains(&rust), "{voyager}");
    let policy = &out
        .iter()
        .find(|f| f.path.ends_with("POLICY.md"))
        .unwrap()
        .contents;
    let text = "list<map<list<map<list<map<list<UpsertResult?>>>>>>>";
    let escaped = text.replace('<', "&lt;").replace('>', "&gt;");
    assert!(policy.contains(&escaped), "{policy}");
    let nine = eight
        .replacen("list<", "list<list<", 1)
        .replacen('>', ">>", 1);
    let line = line_of(file, "returns: UpsertResult", 0);
    let e = one(
        broken(file, "returns: UpsertResult", &nine, 0),
        file,
        line,
        "routes.upsert_points.returns",
    );
    assert!(e.message.contains("deeper than 8"), "{e}");
}

#[test]
fn a_route_that_is_not_idempotent_must_name_its_reconcile_read() {
    let file = "services/ai-gateway.yaml";
    let line = line_of(file, "  complete:", 0);
    let e = one(
        broken(file, "    reconcile: ledger.totals\n", "", 0),
        file,
        line,
        "routes.complete.reconcile",
    );
    assert!(e.message.contains("not idempotent"), "{e}");
    // The Core workflow actions too.
    let file = "sessions.yaml";
    let line = line_of_in("core", file, "  accept:", 0);
    one(
        broken_in("core", file, "    reconcile: get_session\n", "", 0),
        file,
        line,
        "routes.accept.reconcile",
    );
}

#[test]
fn a_reconcile_read_of_another_service_must_be_a_get_route() {
    let file = "services/ai-gateway.yaml";
    let line = line_of(file, "reconcile: ledger.totals", 0);
    let e = one(
        broken(
            file,
            "reconcile: ledger.totals",
            "reconcile: ai_gateway.search_rerank",
            0,
        ),
        file,
        line,
        "routes.complete.reconcile",
    );
    assert!(e.message.contains("not a GET route"), "{e}");
    let e = one(
        broken(
            file,
            "reconcile: ledger.totals",
            "reconcile: ledger.nothing",
            0,
        ),
        file,
        line,
        "routes.complete.reconcile",
    );
    assert!(e.message.contains("names no route"), "{e}");
}

#[test]
fn a_client_side_outcome_is_never_unknown() {
    let file = "taxonomy.yaml";
    let line = line_of(file, "- row: T22", 0);
    let e = one(
        broken(
            file,
            "match: { outcome: invalid_scope }\n",
            "match: { outcome: invalid_scope }\n    outcome_unknown: true\n",
            0,
        ),
        file,
        line,
        "rows.T22.outcome_unknown",
    );
    assert!(e.message.contains("before anything is sent"), "{e}");
}

#[test]
fn a_row_that_leaves_an_outcome_unknown_needs_the_copy_for_it() {
    let file = "degradation.yaml";
    let text = &spec_files()
        .into_iter()
        .find(|(p, _)| p.ends_with(file))
        .unwrap()
        .1;
    let block = &text[text.find("unknown_outcome:\n").unwrap()..];
    let block = &block[..block.find("\n\n").unwrap()];
    let errors = broken(file, block, "", 0);
    assert!(
        errors.iter().any(|e| e.field.ends_with(".outcome_unknown")
            && e.file.ends_with("taxonomy.yaml")
            && e.message.contains("unknown_outcome.copy")),
        "{errors:#?}"
    );
}

/// The docs of every route that is not idempotent name its reconcile read,
/// as a link that resolves (rustdoc checks the link; here the text).
#[test]
fn the_generated_docs_name_every_reconcile_read() {
    for api in ["grag", "core"] {
        let files = spec_files_of(api);
        let m = model(&files).unwrap_or_else(|e| panic!("{e}"));
        let generated = sdk_codegen::generate(&files).unwrap_or_else(|e| panic!("{e}"));
        let mut named = 0;
        for (service, route) in m.routes().filter(|(_, r)| !r.idempotent) {
            let read = route.reconcile.as_ref().unwrap_or_else(|| {
                panic!("{}.{} has no reconcile read", service.handle, route.name)
            });
            let link = sdk_codegen::emit::services::reconcile_link(&m, route, read);
            let module = sdk_codegen::emit::services::module_name(service);
            let file = generated
                .iter()
                .find(|f| f.path.ends_with(format!("src/{module}.rs")))
                .unwrap_or_else(|| panic!("no file for {module}"));
            let line = format!("read the state with {link} before sending it again");
            let method = format!("pub async fn {}(", route.name);
            let at = file
                .contents
                .find(&method)
                .unwrap_or_else(|| panic!("{method}"));
            let doc_start = file.contents[..at].rfind("\n\n").unwrap_or(0);
            assert!(
                file.contents[doc_start..at].contains(&line),
                "{api}: the docs of {}.{} do not name {link}",
                service.handle,
                route.name
            );
            named += 1;
        }
        assert!(named >= 3, "{api}: {named} routes");
    }
}

#[test]
fn every_route_of_a_pipeline_service_carries_the_pipeline_header() {
    // §10.1: X-Pipeline-Id on every ai-gateway call; a route that forgets it is refused.
    let file = "services/ai-gateway.yaml";
    let line = line_of(file, "  complete:", 0);
    let e = one(
        broken(
            file,
            "    pipeline_id: true\n    source: \"§4.1",
            "    source: \"§4.1",
            0,
        ),
        file,
        line,
        "routes.complete.pipeline_id",
    );
    assert!(e.message.contains("pipeline_services"), "{e}");
    // A service the list names must exist.
    let e = one(
        broken(
            "api.yaml",
            "services: [ai-gateway]",
            "services: [ai-gateways]",
            0,
        ),
        "api.yaml",
        1,
        "pipeline_services",
    );
    assert!(e.message.contains("ai-gateways"), "{e}");
}

#[test]
fn a_row_narrowed_to_routes_names_real_routes_and_does_not_close_a_gap() {
    let file = "taxonomy.yaml";
    let line = line_of(file, "routes: [bff.agent_session_stream]", 0);
    let e = one(
        broken(
            file,
            "routes: [bff.agent_session_stream]",
            "routes: [bff.agent_sessions]",
            0,
        ),
        file,
        line,
        "rows.T33.match.routes",
    );
    assert!(e.message.contains("names no route"), "{e}");
}

#[test]
fn a_workspace_service_without_a_file_is_refused_at_its_entry() {
    let file = "api.yaml";
    let mut files: Vec<(PathBuf, String)> = sdk_codegen::load::read_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/toy"),
    )
    .unwrap();
    let (_, text) = files.iter_mut().find(|(p, _)| p.ends_with(file)).unwrap();
    let at = text.find("services: [boards]").unwrap();
    let line = text[..at].lines().count() + usize::from(text[..at].ends_with('\n'));
    *text = text.replace("services: [boards]", "services: [boards, cards]");
    let errors = model(&files).expect_err("`cards` has no file").0;
    let e = one(errors, file, line, "workspace_services.services");
    assert!(e.message.contains("no service file defines `cards`"), "{e}");
    assert_eq!(e.column, 22, "{e}");
}

/// One edit of the `fleet` section, refused at its line and field.
fn fleet_refused(from: &str, to: &str, field: &str) -> SpecError {
    let file = "policy.yaml";
    let line = line_of(file, from, 0);
    one(broken(file, from, to, 0), file, line, field)
}

#[test]
fn an_unknown_fleet_backend_is_refused() {
    let e = fleet_refused("backend: local", "backend: memcached", "fleet.backend");
    assert!(e.message.contains("`local` or `redis`"), "{e}");
}

#[test]
fn an_unknown_degraded_rule_is_refused() {
    let e = fleet_refused("fail: open", "fail: maybe", "fleet.fail");
    assert!(e.message.contains("`open` or `closed`"), "{e}");
}

#[test]
fn a_redis_deadline_that_hides_an_outage_past_1_s_is_refused() {
    let e = fleet_refused("deadline: 5ms", "deadline: 500ms", "fleet.deadline");
    assert!(e.message.contains("within 1 s"), "{e}");
    fleet_refused("deadline: 5ms", "deadline: soon", "fleet.deadline");
}

#[test]
fn a_redis_breaker_span_that_hides_an_outage_past_1_s_is_refused() {
    let e = fleet_refused("over: 250ms", "over: 1s", "fleet.breaker.over");
    assert!(e.message.contains("within 1 s"), "{e}");
}

#[test]
fn a_redis_retry_of_2_s_or_more_is_refused() {
    let e = fleet_refused("retry: 1s", "retry: 2s", "fleet.breaker.retry");
    assert!(e.message.contains("within 2 s"), "{e}");
}

#[test]
fn a_heartbeat_over_half_the_lease_is_refused() {
    let e = fleet_refused("heartbeat: 500ms", "heartbeat: 3s", "fleet.heartbeat");
    assert!(e.message.contains("half the lease"), "{e}");
}

#[test]
fn a_margin_that_is_not_a_percentage_below_100_is_refused() {
    for bad in ["margin: 5", "margin: 100%", "margin: lots%"] {
        let e = fleet_refused("margin: 5%", bad, "fleet.margin");
        assert!(e.message.contains("percentage"), "{e}");
    }
}

#[test]
fn a_per_replica_budget_must_exist_have_a_limit_and_be_named_once() {
    let from = "per_replica: [fanout, streams]";
    fleet_refused(from, "per_replica: [fanout, stream]", "fleet.per_replica");
    let e = fleet_refused(from, "per_replica: [global]", "fleet.per_replica");
    assert!(e.message.contains("no limit"), "{e}");
    let e = fleet_refused(from, "per_replica: [fanout, fanout]", "fleet.per_replica");
    assert!(e.message.contains("twice"), "{e}");
}

#[test]
fn a_fleet_url_variable_is_an_environment_name() {
    fleet_refused(
        "url_env: GRAG_REDIS_URL",
        "url_env: grag-redis",
        "fleet.url_env",
    );
}

#[test]
fn a_fleet_alert_must_be_one_of_the_alerts() {
    fleet_refused("alert: fleet_degraded", "alert: fleet_down", "fleet.alert");
}

#[test]
fn a_fleet_metric_name_is_checked() {
    fleet_refused(
        "degraded: grag_client_fleet_degraded",
        "degraded: grag-fleet",
        "fleet.metrics.degraded",
    );
}

#[test]
fn with_a_replay_queue_every_row_says_what_it_means_for_a_queued_write() {
    let file = "taxonomy.yaml";
    let line = line_of(file, "row: T21", 0);
    let e = one(
        broken(
            file,
            "class: circuit_open\n    replay: outage",
            "class: circuit_open",
            0,
        ),
        file,
        line,
        "rows.T21.replay",
    );
    assert!(e.message.contains("outage | later | deploy | never"), "{e}");
}

#[test]
fn a_replay_value_outside_the_four_is_refused() {
    let file = "taxonomy.yaml";
    let line = line_of(file, "replay: later", 0);
    let e = one(
        broken(file, "replay: later", "replay: soon", 0),
        file,
        line,
        "rows.T11.replay",
    );
    assert!(e.message.contains("unknown replay `soon`"), "{e}");
}

#[test]
fn without_a_replay_queue_a_row_has_no_replay() {
    let file = "taxonomy.yaml";
    let line = line_of_in("core", file, "class: transport", 0) + 1;
    let e = one(
        broken_in(
            "core",
            file,
            "class: transport",
            "class: transport\n    replay: outage",
            0,
        ),
        file,
        line,
        "rows.C1.replay",
    );
    assert!(e.message.contains("no replay queue"), "{e}");
}

#[test]
fn an_openapi_document_path_with_a_placeholder_is_refused() {
    let file = "services/ledger.yaml";
    let line = line_of(file, "openapi: /ledger/openapi.json", 0);
    let e = one(
        broken(
            file,
            "openapi: /ledger/openapi.json",
            "openapi: /{svc}/openapi.json",
            0,
        ),
        file,
        line,
        "openapi",
    );
    assert!(
        e.message.contains("no query, fragment or placeholder"),
        "{e}"
    );
}
