//! Scope rules checked at run time (policy §3, row T22).
//!
//! What the type system already rules out (a kg-service call without a
//! workspace, a tenant or workspace from a raw string, one ID where another is
//! expected, a request assembled outside the pipeline) is pinned by the
//! compile-fail cases in `ui/fail/`; see `compile_time_rules_have_cases`. What
//! is left for run time: the validation inside every `parse`, the reserved
//! tenants, and the pipeline refusing a hand-built `Call` whose scope is
//! incomplete before a byte is sent.

use std::path::Path;

use crate::kit::recorder::Recorder;
use axum::response::IntoResponse;
use grag_client::policy::{ENDPOINTS, POLICY};
use grag_client::{
    Config, ConversationId, ConversionId, DocumentId, EdgeId, EntityId, Grag, InvalidId, JobId,
    KbId, PipelineId, SessionId, TenantId, WorkspaceId,
};
use sdk_runtime::policy::IdRules;
use sdk_runtime::{Call, ClientConfig, ConfigError, Id, IdKind, OutcomeKind, ScopeNeed};
use serde_json::json;

const RESERVED: [&str; 3] = ["default", "system", "canary"];

/// Strings no ID accepts, with the reason each is refused.
fn bad_ids() -> Vec<(String, &'static str)> {
    let mut bad: Vec<(String, &str)> = [
        "-leading-dash",
        "Upper",
        "KNOLL",
        "under_score",
        "dot.ted",
        "sl/ash",
        "..",
        "sp ace",
        " knoll",
        "knoll\n",
        "ümlaut",
        "a%2Fb",
        "a?b=c",
        "a#b",
        "x-tenant-id:evil",
        "knoll\r\nX-Tenant-ID: system",
    ]
    .into_iter()
    .map(|s| (s.to_owned(), "pattern"))
    .collect();
    bad.push((String::new(), "empty"));
    bad.push(("a".repeat(64), "too long"));
    bad
}

/// Strings every ID accepts (tenants also refuse the reserved names).
fn good_ids() -> Vec<String> {
    [
        "a",
        "0",
        "knoll",
        "kb-methodik",
        "ws-7",
        "trailing-",
        "9lives",
    ]
    .into_iter()
    .map(str::to_owned)
    .chain([format!("a{}", "-".repeat(62)), "z".repeat(63)])
    .collect()
}

fn check_refusal(kind: &str, value: &str, reason: &str, err: &InvalidId) {
    let ok = match reason {
        "empty" => matches!(err, InvalidId::Empty { kind: k } if *k == kind),
        "too long" => matches!(err, InvalidId::TooLong { kind: k, .. } if *k == kind),
        _ => matches!(err, InvalidId::Pattern { kind: k, .. } if *k == kind),
    };
    assert!(
        ok,
        "{kind}::parse({value:?}) refused for the wrong reason: {err:?}"
    );
    assert!(
        err.to_string().starts_with(kind),
        "the error names the type: {err}"
    );
}

/// Runs the same checks over every ID type of the generated crate.
macro_rules! check_id_types {
    ($($ty:ident),+ $(,)?) => {{
        let mut checked = Vec::new();
        $(
            let kind = stringify!($ty);
            for (value, reason) in bad_ids() {
                let err = $ty::parse(&value)
                    .expect_err(&format!("{kind}::parse({value:?}) must fail"));
                check_refusal(kind, &value, reason, &err);
                assert!(value.parse::<$ty>().is_err(), "{kind} FromStr {value:?}");
                assert!(
                    serde_json::from_value::<$ty>(json!(value)).is_err(),
                    "{kind} deserialized from {value:?}"
                );
            }
            for value in good_ids() {
                let id = $ty::parse(&value)
                    .unwrap_or_else(|e| panic!("{kind}::parse({value:?}): {e}"));
                assert_eq!(id.as_str(), value);
                assert_eq!(id.to_string(), value);
                assert_eq!(value.parse::<$ty>().unwrap(), id);
                let back: $ty = serde_json::from_value(serde_json::to_value(&id).unwrap()).unwrap();
                assert_eq!(back, id);
            }
            checked.push(kind);
        )+
        checked
    }};
}

#[test]
fn every_id_type_refuses_bad_ids() {
    // The IDs Knoll chooses follow the spec's pattern (§3.3).
    let checked = check_id_types!(
        TenantId,
        WorkspaceId,
        KbId,
        ConversationId,
        DocumentId,
        EdgeId,
        EntityId,
        PipelineId,
    );
    assert_eq!(checked.len(), 8);
}

/// IDs the platform mints (api.yaml `rule: opaque`) are held only to what
/// keeps a path safe: a job id with `_` or a capital is no contract drift.
macro_rules! check_opaque_id_types {
    ($($ty:ident),+ $(,)?) => {{
        let mut checked = Vec::new();
        $(
            let kind = stringify!($ty);
            let longest = "J".repeat(POLICY.ids.opaque_max_len);
            for value in ["Job_7", "ABC.def", "a~b", "ä-1", longest.as_str()] {
                let id = $ty::parse(value).unwrap_or_else(|e| panic!("{kind}::parse({value:?}): {e}"));
                assert_eq!(id.as_str(), value);
                let back: $ty = serde_json::from_value(json!(value)).unwrap();
                assert_eq!(back, id);
            }
            let too_long = format!("{longest}J");
            for value in ["", "a/b", ".", "..", "a\nb", "a\rb", "a\u{7f}", too_long.as_str()] {
                let err = $ty::parse(value).expect_err(&format!("{kind}::parse({value:?}) must fail"));
                assert!(err.to_string().starts_with(kind), "the error names the type: {err}");
                assert!(serde_json::from_value::<$ty>(json!(value)).is_err(), "{kind} deserialized from {value:?}");
            }
            checked.push(kind);
        )+
        checked
    }};
}

#[test]
fn platform_minted_ids_need_only_be_path_safe() {
    let checked = check_opaque_id_types!(JobId, ConversionId, SessionId);
    assert_eq!(checked, ["JobId", "ConversionId", "SessionId"]);
    // The choice is spec data: exactly these types are opaque.
    assert_eq!(POLICY.ids.opaque, ["JobId", "ConversionId", "SessionId"]);
}

#[test]
fn reserved_tenants_are_refused() {
    for reserved in RESERVED {
        assert_eq!(
            TenantId::parse(reserved),
            Err(InvalidId::ReservedTenant {
                value: reserved.to_owned()
            }),
            "TenantId::parse({reserved:?})"
        );
        assert!(reserved.parse::<TenantId>().is_err());
        let err = serde_json::from_value::<TenantId>(json!(reserved)).unwrap_err();
        assert!(err.to_string().contains("reserved"), "{err}");
        // Reserved only as tenants: the same label names a workspace or a KB.
        assert_eq!(WorkspaceId::parse(reserved).unwrap().as_str(), reserved);
        assert_eq!(KbId::parse(reserved).unwrap().as_str(), reserved);
    }
    assert_eq!(POLICY.ids.reserved_tenants, RESERVED);
    // Case does not sneak a reserved name through: upper case is no ID at all.
    assert!(matches!(
        TenantId::parse("Default"),
        Err(InvalidId::Pattern { .. })
    ));
    assert!(TenantId::parse("default-2").is_ok());
    assert!(TenantId::parse("knoll").is_ok());
}

#[test]
fn the_pipeline_id_is_validated_too() {
    for (bad, _) in bad_ids() {
        assert!(
            grag_client::PipelineId::parse(&bad).is_err(),
            "pipeline id {bad:?}"
        );
    }
    assert!(grag_client::PipelineId::parse("run-7").is_ok());
}

#[test]
fn the_runtime_client_takes_only_a_tenant_as_tenant() {
    let workspace = WorkspaceId::parse("ws-7").unwrap();
    let config = ClientConfig::new("http://127.0.0.1:9", "key", workspace.id().clone());
    match sdk_runtime::Client::new(&POLICY, config) {
        Err(ConfigError::NotATenant(kind)) => assert_eq!(kind, "WorkspaceId"),
        Err(e) => panic!("wrong refusal: {e}"),
        Ok(_) => panic!("a WorkspaceId was accepted as the tenant"),
    }
    let tenant = TenantId::parse("knoll").unwrap();
    let config = ClientConfig::new("http://127.0.0.1:9", "key", tenant.id().clone());
    assert!(sdk_runtime::Client::new(&POLICY, config).is_ok());
}

/// How many `{placeholder}`s a path template has.
fn placeholders(path: &str) -> usize {
    path.matches('{').count()
}

#[tokio::test]
async fn a_workspace_call_without_workspace_is_refused_before_sending() {
    let server = Recorder::start(|_| axum::Json(json!({})).into_response()).await;
    let tenant = TenantId::parse("knoll").unwrap();
    let grag = Grag::new(Config::new(server.url(), "key", tenant)).unwrap();

    let workspace_routes: Vec<_> = ENDPOINTS
        .iter()
        .copied()
        .filter(|e| e.scope == ScopeNeed::Workspace)
        .collect();
    assert!(
        workspace_routes.len() >= 2,
        "kg-service and entity-linking are workspace-scoped"
    );
    for endpoint in workspace_routes {
        let mut call = Call::new(endpoint);
        for _ in 0..placeholders(endpoint.path) {
            call = call.path("e-1");
        }
        let err = grag
            .runtime()
            .send(call)
            .await
            .expect_err("a workspace route without a workspace must be refused");
        let what = format!("{} {}", endpoint.method.as_str(), endpoint.path);
        assert_eq!(err.kind(), OutcomeKind::InvalidScope, "{what}: {err}");
        assert_eq!(err.class_name(), "invalid_scope", "{what}");
        assert_eq!(err.row(), "T22", "{what}");
        assert_eq!(
            err.attempts(),
            0,
            "{what}: refused before the first attempt"
        );
        assert_eq!(err.status(), None, "{what}");
        assert_eq!(err.request_id(), None, "{what}: no request id was minted");
        assert!(
            err.detail().is_some_and(|d| d.contains("X-Workspace-ID")),
            "{what}: the detail names the missing header: {err}"
        );
        assert!(err.message().is_some(), "{what}: T22 has UI copy");
    }
    assert!(
        server.take().is_empty(),
        "a refused call reached the server"
    );

    // The control: the same hand-built call with its workspace goes through,
    // so the refusals above did not come from an unreachable server.
    let workspace = WorkspaceId::parse("ws-7").unwrap();
    let call = Call::new(&grag_client::kg_service::GET_ENTITY)
        .workspace(workspace.id())
        .path("e-1");
    let reply = grag.runtime().send(call).await.expect("control call");
    assert_eq!(reply.status(), 200);
    let seen = server.stop().await;
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/kg-service/api/v1/entities/e-1");
    assert_eq!(seen[0].header("x-workspace-id").as_deref(), Some("ws-7"));
}

/// §10.1: a route that carries X-Pipeline-Id is refused without one, even
/// from a hand-built call, so no ai-gateway cost is booked to no run.
#[tokio::test]
async fn a_pipeline_call_without_a_pipeline_id_is_refused_before_sending() {
    let server = Recorder::start(|_| axum::Json(json!({})).into_response()).await;
    let tenant = TenantId::parse("knoll").unwrap();
    let grag = Grag::new(Config::new(server.url(), "key", tenant)).unwrap();
    let pipeline_routes: Vec<_> = ENDPOINTS.iter().filter(|e| e.pipeline_id).collect();
    assert_eq!(pipeline_routes.len(), 2, "search_rerank and complete");
    for endpoint in pipeline_routes {
        let mut call = Call::new(endpoint);
        for _ in 0..placeholders(endpoint.path) {
            call = call.path("kb-1");
        }
        let err = grag.runtime().send(call).await.unwrap_err();
        let what = endpoint.path;
        assert_eq!((err.row(), err.attempts()), ("T22", 0), "{what}: {err}");
        assert!(
            err.detail()
                .is_some_and(|d| d.contains("needs a pipeline id")),
            "{what}: {err}"
        );
    }
    assert!(
        server.take().is_empty(),
        "a refused call reached the server"
    );

    // The control: with its pipeline id the same call goes out, stamped.
    let run = grag_client::PipelineId::parse("run-7").unwrap();
    let call = Call::new(&grag_client::ai_gateway::COMPLETE).pipeline(run.id());
    grag.runtime().send(call).await.expect("control call");
    let seen = server.stop().await;
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].header("x-pipeline-id").as_deref(), Some("run-7"));
}

#[tokio::test]
async fn a_call_with_missing_or_extra_path_values_is_refused_before_sending() {
    let server = Recorder::start(|_| axum::Json(json!([])).into_response()).await;
    let tenant = TenantId::parse("knoll").unwrap();
    let grag = Grag::new(Config::new(server.url(), "key", tenant)).unwrap();
    let documents = &grag_client::workspaces::LIST_DOCUMENTS;
    let calls = [
        ("no value", Call::new(documents)),
        ("empty value", Call::new(documents).path("")),
        (
            "extra value",
            Call::new(documents).path("kb-1").path("kb-2"),
        ),
        (
            "value on a route without placeholders",
            Call::new(&grag_client::workspaces::LIST_KBS).path("kb-1"),
        ),
    ];
    for (what, call) in calls {
        let err = grag.runtime().send(call).await.expect_err(what);
        assert_eq!(err.kind(), OutcomeKind::InvalidScope, "{what}: {err}");
        assert_eq!(err.class_name(), "invalid_scope", "{what}");
        assert_eq!(err.row(), "T22", "{what}");
        assert_eq!(err.attempts(), 0, "{what}");
    }
    let seen = server.stop().await;
    assert!(
        seen.is_empty(),
        "a refused call reached the server: {seen:?}"
    );
}

/// The rules the type system enforces have their compile-fail case, and each
/// case its committed snapshot.
#[test]
fn compile_time_rules_have_cases() {
    let fail = Path::new(env!("CARGO_MANIFEST_DIR")).join("ui/fail");
    for case in [
        "kg_without_workspace",
        "kg_with_tenant",
        "entity_linking_without_workspace",
        "entity_linking_with_raw_str",
        "config_without_tenant",
        "config_struct_literal",
        "tenant_from_str",
        "tenant_private_field",
        "workspace_from_str",
        "workspace_as_tenant",
        "kb_as_document_id",
        "document_as_kb",
        "call_header",
        "call_private_fields",
        "reply_outside_pipeline",
        "pipeline_private_module",
        "kg_handle_by_hand",
        "kg_outlives_workspace",
        "as_workspace_sealed",
        "ai_gateway_without_pipeline",
        "ai_gateway_with_raw_str",
    ] {
        for ext in ["rs", "stderr"] {
            let file = fail.join(format!("{case}.{ext}"));
            assert!(file.is_file(), "missing {}", file.display());
        }
    }
}

// The runtime's own guards, for callers that bypass the generated typed API
// through the public `Call` / `Client::send` / `Id::parse`.

#[tokio::test]
async fn a_hand_built_call_cannot_send_another_kind_of_id_as_workspace() {
    let server = Recorder::start(|_| axum::Json(json!({})).into_response()).await;
    let tenant = TenantId::parse("knoll").unwrap();
    let grag = Grag::new(Config::new(server.url(), "key", tenant.clone())).unwrap();
    let call = Call::new(&grag_client::kg_service::GET_ENTITY)
        .workspace(tenant.id())
        .path("e-1");
    let result = grag.runtime().send(call).await;
    let seen = server.stop().await;
    assert!(seen.is_empty(), "sent: {seen:?}");
    let err = result.expect_err("a TenantId is not a workspace");
    assert_eq!(err.class_name(), "invalid_scope");
}

#[tokio::test]
async fn x_workspace_id_goes_only_to_workspace_routes() {
    let server = Recorder::start(|_| axum::Json(json!({"status": "ok"})).into_response()).await;
    let tenant = TenantId::parse("knoll").unwrap();
    let grag = Grag::new(Config::new(server.url(), "key", tenant)).unwrap();
    let workspace = WorkspaceId::parse("ws-7").unwrap();
    for endpoint in [
        &grag_client::workspaces::HEALTH,
        &grag_client::workspaces::LIST_KBS,
    ] {
        let call = Call::new(endpoint).workspace(workspace.id());
        // Either refused (T22) or sent without the header; never sent with it.
        let _ = grag.runtime().send(call).await;
    }
    for request in server.stop().await {
        assert_eq!(
            request.header("x-workspace-id"),
            None,
            "{} {} carried X-Workspace-ID",
            request.method,
            request.path
        );
    }
}

#[tokio::test]
async fn the_runtime_client_refuses_a_reserved_tenant_validated_under_other_rules() {
    let no_reserved = IdRules {
        reserved_tenants: &[],
        ..POLICY.ids.clone()
    };
    let system = Id::parse(&no_reserved, IdKind::Tenant, "system").unwrap();
    let config = ClientConfig::new("http://127.0.0.1:9", "key", system);
    assert!(
        sdk_runtime::Client::new(&POLICY, config).is_err(),
        "a client for the reserved tenant `system` was built"
    );
}

#[tokio::test]
async fn a_path_value_cannot_leave_its_placeholder() {
    let server = Recorder::start(|_| axum::Json(json!([])).into_response()).await;
    let tenant = TenantId::parse("knoll").unwrap();
    let grag = Grag::new(Config::new(server.url(), "key", tenant)).unwrap();
    for value in ["..", ".", "%2e%2e"] {
        let call = Call::new(&grag_client::workspaces::LIST_DOCUMENTS).path(value);
        let _ = grag.runtime().send(call).await;
    }
    for request in server.stop().await {
        assert!(
            crate::kit::recorder::routes_matching(&ENDPOINTS, &request.method, &request.path)
                .iter()
                .any(|e| e.path == grag_client::workspaces::LIST_DOCUMENTS.path),
            "the call for {} reached {} {}",
            grag_client::workspaces::LIST_DOCUMENTS.path,
            request.method,
            request.path
        );
    }
}

/// A hand-made descriptor naming a class the policy lacks, another API's
/// route, or a plain route opened as a stream, is a typed refusal, never a
/// panic, and sends nothing. The refusal is GRAG's: read as GRAG's class,
/// never as the other API's.
#[tokio::test]
async fn a_hand_made_endpoint_outside_the_policy_is_refused() {
    static STRAY: sdk_runtime::Endpoint = sdk_runtime::Endpoint {
        budget: sdk_runtime::policy::BudgetIx::new(99),
        ..grag_client::workspaces::LIST_KBS
    };
    let server = Recorder::start(|_| axum::Json(json!([])).into_response()).await;
    let grag = Grag::new(Config::new(
        server.url(),
        "key",
        TenantId::parse("knoll").unwrap(),
    ))
    .unwrap();
    let err = grag.runtime().send(Call::new(&STRAY)).await.unwrap_err();
    assert_eq!(
        (err.row(), err.class_name()),
        ("T22", "invalid_scope"),
        "{err}"
    );
    let err = grag_client::Error::from(err);
    assert_eq!(err.class(), grag_client::ErrorClass::InvalidScope, "{err}");
    let core_route = Call::new(&core_client::engine::ANALYSE);
    let err = grag.runtime().send(core_route).await.unwrap_err();
    assert_eq!((err.row(), err.class_name()), ("T22", "invalid_scope"));
    let as_core = core_client::Error::from(err);
    assert_eq!(
        as_core.class(),
        core_client::ErrorClass::Unclassified,
        "GRAG's refusal read as a Core class"
    );
    let as_grag = grag_client::Error::from(as_core.into_inner());
    assert_eq!(as_grag.class(), grag_client::ErrorClass::InvalidScope);
    let err = grag
        .runtime()
        .open_stream(Call::new(&grag_client::workspaces::LIST_KBS))
        .await
        .err()
        .expect("list_kbs is no stream");
    assert_eq!(err.class_name(), "invalid_scope", "{err}");
    let seen = server.stop().await;
    assert!(seen.is_empty(), "sent: {seen:?}");
}
