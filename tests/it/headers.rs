//! Every generated route, called through the generated client against a local
//! recording server, carries exactly the headers the spec requires (policy
//! §2, §3.4): Authorization on non-public key-lane routes, X-Tenant-ID on every
//! non-public route, X-Workspace-ID on workspace routes only, a fresh UUIDv4
//! X-Request-ID on every request, X-Pipeline-Id on every pipeline route (the
//! handle of such a route exists only behind a pipeline id).
//!
//! The walk must reach every route of `grag_client::policy::ENDPOINTS`: the
//! recorded requests are matched back to their templates and the set is
//! compared with the spec's, so a route added to the spec and not called here
//! fails the test.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use crate::kit::recorder::{Recorded, Recorder, routes_matching};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use grag_client::policy::ENDPOINTS;
use grag_client::types::{
    ChatMessage, ChatRequest, Completion, CompletionRequest, Conversation, ConversionJob,
    ConversionResult, ConvertRequest, CreateConversation, CreateKb, Document, Edge, Entity,
    EntityLink, Health, JobStatus, Kb, LedgerTotals, LinkRequest, Score, ScoreRequest, SearchHit,
    SearchRequest, SearchResults, Spend, SpendGrouping, SpendLine, UploadDocument, UpsertPoints,
    UpsertResult,
};
use grag_client::{
    Config, ConversationId, ConversionId, Created, DocumentId, EdgeId, EntityId, Grag, JobId, KbId,
    Progress, SessionId, TenantId, WorkspaceId,
};
use sdk_runtime::{Endpoint, JobDone, JobProgress, JobUpdate, Lane, ScopeNeed, Turn, TurnUpdate};
use serde_json::json;
use uuid::Uuid;

const TENANT: &str = "knoll";
const WORKSPACE: &str = "ws-7";
const API_KEY: &str = "test-key-7f3a";
const PIPELINE: &str = "run-7";

fn pipeline() -> grag_client::PipelineId {
    grag_client::PipelineId::parse(PIPELINE).expect("a valid pipeline id")
}

/// The value each path placeholder of the spec is called with.
const PLACEHOLDERS: &[(&str, &str)] = &[
    ("kb", "kb-methodik"),
    ("entity_id", "e-1"),
    ("edge_id", "edge-1"),
    ("job_id", "job-1"),
    ("session_id", "s-1"),
    ("conversion_id", "conv-1"),
    ("document_id", "doc-1"),
    ("conversation_id", "c-1"),
];

fn placeholder(name: &str) -> &'static str {
    PLACEHOLDERS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("no test value for path placeholder {{{name}}}"))
}

/// Sample answers: the server serializes them, the walk compares the decoded
/// answers with them.
mod sample {
    use super::*;

    pub fn kb_id() -> KbId {
        KbId::parse(placeholder("kb")).unwrap()
    }
    pub fn document_id() -> DocumentId {
        DocumentId::parse(placeholder("document_id")).unwrap()
    }
    pub fn entity_id() -> EntityId {
        EntityId::parse(placeholder("entity_id")).unwrap()
    }
    pub fn edge_id() -> EdgeId {
        EdgeId::parse(placeholder("edge_id")).unwrap()
    }
    pub fn conversation_id() -> ConversationId {
        ConversationId::parse(placeholder("conversation_id")).unwrap()
    }
    pub fn conversion_id() -> ConversionId {
        ConversionId::parse(placeholder("conversion_id")).unwrap()
    }
    pub fn search_results() -> SearchResults {
        SearchResults::new(vec![
            SearchHit::new("chunk-1", "Methodik", 0.75).with_document_id(document_id()),
        ])
    }
    pub fn completion() -> Completion {
        Completion::new("Antwort")
            .with_model("m")
            .with_usage(json!({"tokens": 3}))
    }
    pub fn job_status() -> JobStatus {
        JobStatus::new("running", 0.5)
    }
    pub fn conversion_job() -> ConversionJob {
        ConversionJob::new(conversion_id(), "queued")
    }
    pub fn conversion_result() -> ConversionResult {
        ConversionResult::new(conversion_id(), "done")
            .with_content("# Text")
            .with_pages(2)
    }
    pub fn links() -> Vec<EntityLink> {
        vec![EntityLink::new(entity_id(), "Knoll", 0, 5).with_score(0.5)]
    }
    pub fn score() -> Score {
        Score::new(0.5).with_grounded(true)
    }
    pub fn entity() -> Entity {
        Entity::new(entity_id(), "org", "Knoll GmbH").with_kb_id(kb_id())
    }
    pub fn edge() -> Edge {
        Edge::new(edge_id(), entity_id(), entity_id(), "self")
    }
    pub fn totals() -> LedgerTotals {
        LedgerTotals::new()
            .with_pipeline_id(pipeline())
            .with_total_cost(1.25)
            .with_currency("EUR")
            .with_calls(3)
    }
    pub fn spend() -> Spend {
        Spend::new(vec![SpendLine::new("provider-a", 2.5).with_currency("EUR")])
            .with_group_by(SpendGrouping::Provider)
    }
    pub fn upsert_result() -> UpsertResult {
        UpsertResult::new().with_status("ok").with_upserted(0)
    }
    pub fn health() -> Health {
        Health::new("ok")
    }
    pub fn kb() -> Kb {
        Kb::new(kb_id()).with_name("Methodik")
    }
    pub fn document() -> Document {
        Document::new(document_id(), "a.pdf")
            .with_content_type("application/pdf")
            .with_status("stored")
            .with_job_id(JobId::parse("job-1").unwrap())
    }
    pub fn conversation() -> Conversation {
        Conversation::new(conversation_id())
            .with_title("Gutachten")
            .with_kb_ids(vec![kb_id()])
    }
    pub fn settings() -> serde_json::Value {
        json!({"language": "de"})
    }

    pub const ORCHESTRATOR_SSE: &str = "event: subscribed\ndata: {\"job_id\":\"job-1\"}\n\n: keepalive\n\n\
        event: node_complete\ndata: {\"job_id\":\"job-1\",\"node\":\"convert\"}\n\n\
        event: completed\ndata: {\"job_id\":\"job-1\",\"results\":{}}\n\n";
    pub const CHAT_SSE: &str = "event: retrieve\ndata: {}\n\nevent: done\ndata: {}\n\n";
    pub const AGENT_SSE: &str = "event: message\ndata: hello\n\n";
}

/// What the recording server answers for `endpoint`: a JSON body that decodes
/// as the route's response type, or an event stream ending in a terminal event.
fn answer(endpoint: &Endpoint) -> Response {
    fn json(value: impl serde::Serialize) -> Response {
        axum::Json(serde_json::to_value(value).expect("sample serializes")).into_response()
    }
    fn sse(text: &'static str) -> Response {
        ([(header::CONTENT_TYPE, "text/event-stream")], text).into_response()
    }
    match (endpoint.service, endpoint.operation) {
        ("ai-gateway", "search_rerank") => json(sample::search_results()),
        ("ai-gateway", "complete") => json(sample::completion()),
        ("bff", "orchestrator_events") => sse(sample::ORCHESTRATOR_SSE),
        ("bff", "pipeline_status") => json(sample::job_status()),
        ("bff", "chat_stream") => sse(sample::CHAT_SSE),
        ("bff", "agent_session_stream") => sse(sample::AGENT_SSE),
        ("docfold", "convert") => json(sample::conversion_job()),
        ("docfold", "conversion_of") => json(sample::conversion_job()),
        ("docfold", "result") => json(sample::conversion_result()),
        ("entity-linking", "link") => json(sample::links()),
        ("groundedness", "score") => json(sample::score()),
        ("kg-service", "upsert_entity" | "get_entity") => json(sample::entity()),
        ("kg-service", "upsert_edge") => json(sample::edge()),
        ("kg-service", "list_edges") => json(vec![sample::edge()]),
        ("ledger", "totals") => json(sample::totals()),
        ("ledger", "spend") => json(sample::spend()),
        ("voyager", "upsert_points") => json(sample::upsert_result()),
        ("workspaces", "health") => json(sample::health()),
        ("workspaces", "list_kbs") => json(vec![sample::kb()]),
        ("workspaces", "create_kb") => json(sample::kb()),
        ("workspaces", "list_documents") => json(vec![sample::document()]),
        ("workspaces", "upload_document") => json(sample::document()),
        ("workspaces", "create_conversation") => json(sample::conversation()),
        ("workspaces", "conversation_messages") => json(Vec::<ChatMessage>::new()),
        ("workspaces", "get_settings" | "put_settings") => json(sample::settings()),
        (service, operation) => (
            StatusCode::NOT_IMPLEMENTED,
            axum::Json(json!({
                "detail": format!("headers.rs has no sample answer for {service}.{operation}")
            })),
        )
            .into_response(),
    }
}

/// The recorder's responder: the one route a request matches decides the answer.
fn respond(request: &Recorded) -> Response {
    match routes_matching(&ENDPOINTS, &request.method, &request.path)[..] {
        [endpoint] => answer(endpoint),
        ref matched => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({
                "detail": format!(
                    "{} {} matches {} routes",
                    request.method,
                    request.path,
                    matched.len()
                )
            })),
        )
            .into_response(),
    }
}

/// Reads a stream to its end and returns its event names.
async fn drain_turn<E: sdk_runtime::StreamEvent>(
    operation: &str,
    mut turn: Turn<E>,
    name: impl Fn(&E) -> String,
) -> Vec<String> {
    let mut names = Vec::new();
    let read = async {
        while let Some(update) = turn.next().await {
            match update.unwrap_or_else(|e| panic!("{operation}: stream event: {e}")) {
                TurnUpdate::Event(e) => names.push(name(&e)),
                TurnUpdate::Degraded(s) => panic!("{operation}: degraded {s:?}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .unwrap_or_else(|_| panic!("{operation}: the stream did not end within 10 s"));
    names
}

/// Follows a job to its end: the event names of its live stream.
async fn follow(
    mut progress: JobProgress<grag_client::types::OrchestratorEvent, grag_client::types::JobStatus>,
) -> Vec<String> {
    use grag_client::types::OrchestratorEvent as E;
    let mut names = Vec::new();
    let read = async {
        while let Some(update) = progress.next().await {
            let event = match update.unwrap_or_else(|e| panic!("orchestrator_events: {e}")) {
                JobUpdate::Event(e) | JobUpdate::Completed(JobDone::Event(e)) => e,
                other => panic!("orchestrator_events: not a live event: {other:?}"),
            };
            names.push(match event {
                E::Subscribed(_) => "subscribed",
                E::NodeComplete(_) => "node_complete",
                E::Completed(_) => "completed",
                other => panic!("orchestrator_events: unexpected {other:?}"),
            });
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("orchestrator_events: the job did not end within 10 s");
    names.into_iter().map(str::to_owned).collect()
}

/// `unwrap_or_else` argument naming the call that failed.
fn expect<T>(what: &'static str) -> impl FnOnce(grag_client::Error) -> T {
    move |e| panic!("{what}: {e}")
}

/// Calls every route of the generated client once, the ai-gateway ones as
/// part of `run`, and checks each typed answer.
async fn walk(grag: &Grag, run: &grag_client::PipelineId) {
    let workspace = WorkspaceId::parse(WORKSPACE).unwrap();
    let kb = sample::kb_id();
    let entity_id = sample::entity_id();

    // workspaces
    let w = grag.workspaces();
    assert_eq!(
        w.health().await.unwrap_or_else(expect("health")),
        sample::health()
    );
    assert_eq!(
        w.list_kbs().await.unwrap_or_else(expect("list_kbs")),
        vec![sample::kb()]
    );
    let create = CreateKb::new(kb.clone(), "Methodik");
    assert_eq!(
        w.create_kb(&create)
            .await
            .unwrap_or_else(expect("create_kb")),
        Created::New(sample::kb())
    );
    assert_eq!(
        w.list_documents(&kb)
            .await
            .unwrap_or_else(expect("list_documents")),
        vec![sample::document()]
    );
    let upload = UploadDocument::new(
        sample::document_id(),
        "a.pdf",
        "application/pdf",
        "JVBERi0=",
    );
    assert_eq!(
        w.upload_document(&kb, &upload)
            .await
            .unwrap_or_else(expect("upload_document")),
        Created::New(sample::document())
    );
    let conversation = CreateConversation::new(sample::conversation_id())
        .with_title("Gutachten")
        .with_kb_ids(vec![kb.clone()]);
    // create_conversation, and the proof a chat turn needs (its answer
    // decodes as a `Conversation` or the call fails).
    let existing = w
        .ensure_conversation(&conversation)
        .await
        .unwrap_or_else(expect("ensure_conversation"));
    assert_eq!(existing.id(), &sample::conversation_id());
    assert!(
        w.conversation_messages(&sample::conversation_id())
            .await
            .unwrap_or_else(expect("conversation_messages"))
            .is_empty()
    );
    assert_eq!(
        w.get_settings()
            .await
            .unwrap_or_else(expect("get_settings")),
        sample::settings()
    );
    assert_eq!(
        w.put_settings(&sample::settings())
            .await
            .unwrap_or_else(expect("put_settings")),
        sample::settings()
    );

    // ai-gateway
    let search = SearchRequest::new("Methodik", 3);
    assert_eq!(
        grag.ai_gateway(run)
            .search_rerank(&kb, &search)
            .await
            .unwrap_or_else(expect("search_rerank")),
        sample::search_results()
    );
    let completion = CompletionRequest::new(Vec::new()).with_max_tokens(16);
    assert_eq!(
        grag.ai_gateway(run)
            .complete(&completion)
            .await
            .unwrap_or_else(expect("complete")),
        sample::completion()
    );

    // groundedness
    let score = ScoreRequest::new("Antwort", Vec::new());
    assert_eq!(
        grag.groundedness()
            .score(&score)
            .await
            .unwrap_or_else(expect("score")),
        sample::score()
    );

    // ledger
    assert_eq!(
        grag.ledger()
            .totals(&pipeline())
            .await
            .unwrap_or_else(expect("totals")),
        sample::totals()
    );
    assert_eq!(
        grag.ledger()
            .spend(&SpendGrouping::Provider)
            .await
            .unwrap_or_else(expect("spend")),
        sample::spend()
    );

    // docfold
    let convert = ConvertRequest::new(
        sample::document_id(),
        "a.pdf",
        "application/pdf",
        "JVBERi0=",
    )
    .with_kb_id(kb.clone());
    assert_eq!(
        grag.docfold()
            .convert(&convert)
            .await
            .unwrap_or_else(expect("convert")),
        sample::conversion_job()
    );
    assert_eq!(
        grag.docfold()
            .conversion_of(&sample::document_id())
            .await
            .unwrap_or_else(expect("conversion_of")),
        sample::conversion_job()
    );
    assert_eq!(
        grag.docfold()
            .result(&sample::conversion_id())
            .await
            .unwrap_or_else(expect("result")),
        Progress::Ready(sample::conversion_result())
    );

    // voyager
    assert_eq!(
        grag.voyager()
            .upsert_points(&kb, &UpsertPoints::new(Vec::new()))
            .await
            .unwrap_or_else(expect("upsert_points")),
        sample::upsert_result()
    );

    // kg-service, behind the workspace
    let kg = grag.kg(&workspace);
    assert_eq!(
        kg.upsert_entity(&entity_id, &sample::entity())
            .await
            .unwrap_or_else(expect("upsert_entity")),
        sample::entity()
    );
    assert_eq!(
        kg.get_entity(&entity_id)
            .await
            .unwrap_or_else(expect("get_entity")),
        sample::entity()
    );
    assert_eq!(
        kg.upsert_edge(&sample::edge_id(), &sample::edge())
            .await
            .unwrap_or_else(expect("upsert_edge")),
        sample::edge()
    );
    assert_eq!(
        kg.list_edges(&entity_id)
            .await
            .unwrap_or_else(expect("list_edges")),
        vec![sample::edge()]
    );

    // entity-linking, behind the workspace
    let link = LinkRequest::new("Knoll GmbH").with_kb_id(kb.clone());
    assert_eq!(
        grag.entity_linking(&workspace)
            .link(&link)
            .await
            .unwrap_or_else(expect("link")),
        sample::links()
    );

    // bff lane
    let job = JobId::parse(placeholder("job_id")).unwrap();
    assert_eq!(
        grag.bff()
            .pipeline_status(&job)
            .await
            .unwrap_or_else(expect("pipeline_status")),
        sample::job_status()
    );
    let progress = grag.bff().orchestrator_events(&job);
    assert_eq!(
        follow(progress).await,
        ["subscribed", "node_complete", "completed"]
    );
    let chat = ChatRequest::new(sample::conversation_id(), "Hallo");
    let turn = grag
        .bff()
        .chat_stream(&existing, &chat)
        .await
        .unwrap_or_else(expect("chat_stream"));
    assert_eq!(
        drain_turn("chat_stream", turn, |e| e.name().to_owned()).await,
        ["retrieve", "done"]
    );
    let session = SessionId::parse(placeholder("session_id")).unwrap();
    let relay = grag
        .bff()
        .agent_session_stream(&session)
        .await
        .unwrap_or_else(expect("agent_session_stream"));
    assert_eq!(
        drain_turn("agent_session_stream", relay, |e| e.name().to_owned()).await,
        ["message"]
    );
}

/// `METHOD /templated/path`, the key a route is known by.
fn route_key(endpoint: &Endpoint) -> String {
    format!("{} {}", endpoint.method.as_str(), endpoint.path)
}

/// Checks one walk's requests; `pipeline` is the walk's pipeline id.
fn check_walk(requests: &[Recorded], pipeline: &str, request_ids: &mut HashSet<Uuid>) {
    let mut called = BTreeSet::new();
    for request in requests {
        let what = format!("{} {}", request.method, request.path);
        let endpoint = match routes_matching(&ENDPOINTS, &request.method, &request.path)[..] {
            [endpoint] => endpoint,
            ref matched => panic!("{what} matches {} routes of the spec", matched.len()),
        };
        assert!(
            called.insert(route_key(endpoint)),
            "{what}: {} was called more than once in one walk",
            route_key(endpoint)
        );
        check_path_values(endpoint, request);

        let public = endpoint.scope == ScopeNeed::Public;
        let expected_auth =
            (!public && endpoint.lane == Lane::Key).then(|| format!("Bearer {API_KEY}"));
        assert_eq!(
            request.header("authorization"),
            expected_auth,
            "{what}: Authorization (scope {:?}, lane {:?})",
            endpoint.scope,
            endpoint.lane
        );
        assert_eq!(
            request.header("x-tenant-id").as_deref(),
            (!public).then_some(TENANT),
            "{what}: X-Tenant-ID (scope {:?})",
            endpoint.scope
        );
        assert_eq!(
            request.header("x-workspace-id").as_deref(),
            (endpoint.scope == ScopeNeed::Workspace).then_some(WORKSPACE),
            "{what}: X-Workspace-ID (scope {:?})",
            endpoint.scope
        );
        assert_eq!(
            request.header("x-pipeline-id").as_deref(),
            endpoint.pipeline_id.then_some(pipeline),
            "{what}: X-Pipeline-Id (route pipeline_id {}, walk's pipeline {pipeline:?})",
            endpoint.pipeline_id
        );

        let request_id = request
            .header("x-request-id")
            .unwrap_or_else(|| panic!("{what}: no X-Request-ID"));
        let uuid = Uuid::parse_str(&request_id)
            .unwrap_or_else(|e| panic!("{what}: X-Request-ID {request_id:?} is not a UUID: {e}"));
        assert_eq!(
            uuid.get_version_num(),
            4,
            "{what}: X-Request-ID {request_id} is not a UUIDv4"
        );
        assert_eq!(
            uuid.get_variant(),
            uuid::Variant::RFC4122,
            "{what}: X-Request-ID {request_id} is not an RFC 4122 UUID"
        );
        assert_eq!(
            uuid.hyphenated().to_string(),
            request_id,
            "{what}: X-Request-ID is not in the canonical lowercase hyphenated form"
        );
        assert!(
            request_ids.insert(uuid),
            "{what}: X-Request-ID {request_id} was already used by another request"
        );
    }

    let spec: BTreeSet<String> = ENDPOINTS.iter().map(|e| route_key(e)).collect();
    let skipped: Vec<&String> = spec.difference(&called).collect();
    let unknown: Vec<&String> = called.difference(&spec).collect();
    assert!(
        skipped.is_empty() && unknown.is_empty(),
        "the walk must call every route of ENDPOINTS exactly once;\n  not called: {skipped:#?}\n  not in the spec: {unknown:#?}"
    );
    assert_eq!(requests.len(), ENDPOINTS.len(), "one request per route");
}

/// The concrete path carries the IDs the walk passed, in their placeholders;
/// the query parameters the two ledger routes take are on the URL.
fn check_path_values(endpoint: &Endpoint, request: &Recorded) {
    for (template, concrete) in endpoint.path.split('/').zip(request.path.split('/')) {
        if let Some(name) = template.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
            assert_eq!(
                concrete,
                placeholder(name),
                "{} {}: value of {{{name}}}",
                request.method,
                request.path
            );
        }
    }
    let expected_query = match (endpoint.service, endpoint.operation) {
        ("ledger", "totals") => Some(format!("pipeline_id={PIPELINE}")),
        ("ledger", "spend") => Some("group_by=provider".to_owned()),
        _ => None,
    };
    assert_eq!(
        request.query, expected_query,
        "{} {}: query",
        request.method, request.path
    );
}

#[tokio::test]
async fn every_route_carries_exactly_the_required_headers() {
    // The walk is only meaningful if the spec exercises every rule.
    assert!(ENDPOINTS.iter().any(|e| e.scope == ScopeNeed::Public));
    assert!(ENDPOINTS.iter().any(|e| e.scope == ScopeNeed::Tenant));
    assert!(ENDPOINTS.iter().any(|e| e.scope == ScopeNeed::Workspace));
    assert!(ENDPOINTS.iter().any(|e| e.lane == Lane::Keyless));
    assert!(ENDPOINTS.iter().any(|e| e.pipeline_id));
    assert!(ENDPOINTS.iter().any(|e| e.stream.is_some()));
    let keys: BTreeSet<String> = ENDPOINTS.iter().map(|e| route_key(e)).collect();
    assert_eq!(
        keys.len(),
        ENDPOINTS.len(),
        "two routes share a method and path"
    );

    let server = Recorder::start(respond).await;
    let tenant = TenantId::parse(TENANT).unwrap();
    let grag = Grag::new(Config::new(server.url(), API_KEY, tenant)).expect("client");
    let mut request_ids = HashSet::new();

    // Every ai-gateway call carries the id of the run it belongs to.
    walk(&grag, &pipeline()).await;
    check_walk(&server.take(), PIPELINE, &mut request_ids);
    let other = grag_client::PipelineId::parse("run-8").unwrap();
    walk(&grag, &other).await;
    check_walk(&server.take(), "run-8", &mut request_ids);

    drop(grag);
    let late = server.stop().await;
    assert!(late.is_empty(), "requests after the walks: {late:?}");
    assert_eq!(request_ids.len(), 2 * ENDPOINTS.len());
}

#[test]
fn route_matching_is_exact() {
    let matched = |method: &str, path: &str| -> Vec<String> {
        routes_matching(&ENDPOINTS, method, path)
            .into_iter()
            .map(route_key)
            .collect()
    };
    assert_eq!(
        matched("GET", "/kg-service/api/v1/entities/e-1"),
        ["GET /kg-service/api/v1/entities/{entity_id}"]
    );
    assert_eq!(
        matched("GET", "/kg-service/api/v1/entities/e-1/edges"),
        ["GET /kg-service/api/v1/entities/{entity_id}/edges"]
    );
    assert_eq!(
        matched("POST", "/workspaces/api/v1/kbs"),
        ["POST /workspaces/api/v1/kbs"]
    );
    assert!(matched("GET", "/kg-service/api/v1/entities/").is_empty());
    assert!(matched("GET", "/kg-service/api/v1/entities").is_empty());
    assert!(matched("DELETE", "/workspaces/api/v1/kbs").is_empty());
    assert!(matched("GET", "/workspaces/api/v1/kbs/kb-1/documents/x").is_empty());
}
