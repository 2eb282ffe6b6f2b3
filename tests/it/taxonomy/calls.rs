//! The calls the taxonomy cases make, and the bodies they send.

use grag_client::types::{
    ChatMessage, ChatRole, Chunk, CompletionRequest, CreateKb, Point, ScoreRequest, SearchRequest,
    SpendGrouping, UploadDocument, UpsertPoints,
};
use grag_client::{DocumentId, EntityId, Error, KbId, PipelineId, SessionId, WorkspaceId};
use grag_sim::Fault;
use sdk_runtime::Call;

use crate::kit::resilience::{Env, policy};

/// The call a case makes; every one of them ends in a final error.
#[derive(Clone, Copy, Debug)]
pub enum Route {
    ListKbs,
    GetSettings,
    PutSettings,
    CreateKb,
    /// On a knowledge base that does not exist.
    ListDocuments,
    UploadDocument,
    /// 257 points, one over the spec's limit.
    UpsertPoints,
    Complete,
    Score,
    SearchRerank,
    GetEntity,
    Spend,
    AgentSessionStream,
    /// A body serde_json refuses (object keys that are not strings).
    Unencodable,
    /// A kg-service route without its workspace.
    NoWorkspace,
    /// A path value that would fold onto another route.
    DotDotPath,
    /// A workspace on a tenant route.
    StrayWorkspace,
}

impl Route {
    /// The simulator's name of the route, whose requests a case counts.
    pub fn operation(self) -> &'static str {
        use Route::*;
        match self {
            ListKbs | StrayWorkspace => "list_kbs",
            GetSettings => "get_settings",
            PutSettings => "put_settings",
            CreateKb => "create_kb",
            ListDocuments | DotDotPath => "list_documents",
            UploadDocument => "upload_document",
            UpsertPoints => "upsert_points",
            Complete | Unencodable => "complete",
            Score => "score",
            SearchRerank => "search_rerank",
            GetEntity | NoWorkspace => "get_entity",
            Spend => "spend",
            AgentSessionStream => "agent_session_stream",
        }
    }

    /// Makes the call and returns its final error.
    pub async fn fail(self, env: &Env) -> Error {
        use Route::*;
        let grag = &env.grag;
        let run = grag_sim::embedded::pipeline();
        let ws = WorkspaceId::parse("ws-7").unwrap();
        let result = match self {
            ListKbs => grag.workspaces().list_kbs().await.err(),
            GetSettings => grag.workspaces().get_settings().await.err(),
            PutSettings => grag.workspaces().put_settings(&settings()).await.err(),
            CreateKb => grag.workspaces().create_kb(&create_kb()).await.err(),
            ListDocuments => grag.workspaces().list_documents(&missing()).await.err(),
            UploadDocument => grag
                .workspaces()
                .upload_document(&missing(), &upload())
                .await
                .err(),
            UpsertPoints => grag
                .voyager()
                .upsert_points(&kb("kb-1"), &points())
                .await
                .err(),
            Complete => grag.ai_gateway(&run).complete(&completion()).await.err(),
            Score => grag.groundedness().score(&score_request()).await.err(),
            SearchRerank => grag
                .ai_gateway(&run)
                .search_rerank(&kb("kb-methodik"), &search())
                .await
                .err(),
            GetEntity => grag
                .kg(&ws)
                .get_entity(&EntityId::parse("e-1").unwrap())
                .await
                .err(),
            Spend => grag.ledger().spend(&SpendGrouping::Provider).await.err(),
            AgentSessionStream => grag.bff().agent_session_stream(&session()).await.err(),
            Unencodable | NoWorkspace | DotDotPath | StrayWorkspace => {
                return grag
                    .runtime()
                    .send(self.raw_call(&run, &ws))
                    .await
                    .unwrap_err()
                    .into();
            }
        };
        result.unwrap_or_else(|| panic!("{self:?} fails"))
    }

    /// The calls the generated client cannot make, sent through the runtime.
    fn raw_call<'a>(self, run: &'a PipelineId, ws: &'a WorkspaceId) -> Call<'a> {
        let complete = policy().routes.iter().find(|e| e.operation == "complete");
        match self {
            Route::Unencodable => Call::new(complete.expect("the spec has complete"))
                .pipeline(run.id())
                .json(&std::collections::BTreeMap::from([((1, 2), "value")])),
            Route::NoWorkspace => Call::new(&grag_client::kg_service::GET_ENTITY).path("e-1"),
            Route::DotDotPath => Call::new(&grag_client::workspaces::LIST_DOCUMENTS).path(".."),
            _ => Call::new(&grag_client::workspaces::LIST_KBS).workspace(ws.id()),
        }
    }
}

pub fn kb(id: &str) -> KbId {
    KbId::parse(id).expect("a valid KB id")
}

pub fn missing() -> KbId {
    kb("kb-missing")
}

pub fn status(status: u16, detail: &str) -> Fault {
    Fault::Status {
        status,
        detail: detail.into(),
        retry_after: None,
    }
}

pub fn completion() -> CompletionRequest {
    CompletionRequest::new(vec![ChatMessage::new(
        ChatRole::User,
        "Fasse das Gutachten zusammen.",
    )])
}

pub fn score_request() -> ScoreRequest {
    let text = "Die Brücke ist standsicher.";
    ScoreRequest::new(text, vec![Chunk::new("c1", text)])
}

pub fn search() -> SearchRequest {
    SearchRequest::new("Standsicherheit", 3)
}

pub fn create_kb() -> CreateKb {
    CreateKb::new(kb("kb-1"), "Methodik")
}

pub fn settings() -> serde_json::Value {
    serde_json::json!({"locale": "de"})
}

pub fn upload() -> UploadDocument {
    UploadDocument::new(
        DocumentId::parse("doc-1").unwrap(),
        "gutachten.txt",
        "text/plain",
        "R3V0YWNodGVu",
    )
}

pub fn points() -> UpsertPoints {
    UpsertPoints::new(
        (0..257)
            .map(|i| Point::new(format!("p-{i}"), vec![0.0, 1.0]))
            .collect::<Vec<_>>(),
    )
}

pub fn session() -> SessionId {
    SessionId::parse("session-1").unwrap()
}
