// Tenant-scoped calls of every other service, with and without a pipeline id.
// Built, never awaited.
use grag_client::types::{
    ChatRequest, CompletionRequest, ConvertRequest, CreateConversation, CreateKb, ScoreRequest,
    SearchRequest, SpendGrouping, UploadDocument, UpsertPoints,
};
use grag_client::{
    Config, ConversationId, ConversionId, Created, DocumentId, Grag, JobId, JobUpdate, KbId,
    Progress, SessionId, TenantId, TurnUpdate,
};

async fn calls(grag: &Grag) -> Result<(), Box<dyn std::error::Error>> {
    let kb = KbId::parse("kb-methodik")?;
    let document = DocumentId::parse("doc-1")?;
    let conversation = ConversationId::parse("c-1")?;

    let _health = grag.workspaces().health().await?;
    let _kbs = grag.workspaces().list_kbs().await?;
    let created = grag
        .workspaces()
        .create_kb(&CreateKb::new(kb.clone(), "Methodik".to_owned()))
        .await?;
    if let Created::New(made) = created {
        let _: KbId = made.kb_id;
    }
    let _docs = grag.workspaces().list_documents(&kb).await?;
    let _upload = grag
        .workspaces()
        .upload_document(
            &kb,
            &UploadDocument::new(
                document.clone(),
                "a.pdf".to_owned(),
                "application/pdf".to_owned(),
                String::new(),
            ),
        )
        .await?;
    let _conversation = grag
        .workspaces()
        .create_conversation(
            &CreateConversation::new(conversation.clone()).with_kb_ids(vec![kb.clone()]),
        )
        .await?;
    let existing = grag
        .workspaces()
        .ensure_conversation(&CreateConversation::new(conversation.clone()))
        .await?;
    let settings = grag.workspaces().get_settings().await?;
    let _ = grag.workspaces().put_settings(&settings).await?;

    let pipeline = grag_client::PipelineId::parse("run-7")?;
    // The ai-gateway calls exist only as part of a run (X-Pipeline-Id).
    let ai = grag.ai_gateway(&pipeline);
    let _hits = ai
        .search_rerank(&kb, &SearchRequest::new("Gutachten".to_owned(), 5))
        .await?;
    let _completion = ai.complete(&CompletionRequest::new(Vec::new())).await?;
    let _totals = grag.ledger().totals(&pipeline).await?;
    let _spend = grag.ledger().spend(&SpendGrouping::Provider).await?;
    let _score = grag
        .groundedness()
        .score(&ScoreRequest::new(String::new(), Vec::new()))
        .await?;
    let job = grag
        .docfold()
        .convert(
            &ConvertRequest::new(
                document,
                "a.pdf".to_owned(),
                "application/pdf".to_owned(),
                String::new(),
            )
            .with_kb_id(kb.clone()),
        )
        .await?;
    let conversion: ConversionId = job.conversion_id;
    if let Progress::Ready(result) = grag.docfold().result(&conversion).await? {
        let _ = result.content;
    }
    let _ack = grag
        .voyager()
        .upsert_points(&kb, &UpsertPoints::new(Vec::new()))
        .await?;

    let job = JobId::parse("job-1")?;
    let _status = grag.bff().pipeline_status(&job).await?;
    let mut progress = grag
        .bff()
        .orchestrator_events(&job)
        .expecting(std::time::Duration::from_secs(60));
    while let Some(update) = progress.next().await {
        if let JobUpdate::Completed(_) = update? {
            break;
        }
    }
    let mut chat = grag
        .bff()
        .chat_stream(
            &existing,
            &ChatRequest::new(conversation, "Hallo".to_owned()),
        )
        .await?;
    while let Some(update) = chat.next().await {
        if let TurnUpdate::Degraded(stage) = update? {
            let _ = stage.stage;
        }
    }
    let _agent = grag
        .bff()
        .agent_session_stream(&SessionId::parse("s-1")?)
        .await?;
    Ok(())
}

fn main() {
    let tenant = TenantId::parse("knoll").unwrap();
    let grag = Grag::new(Config::new("http://127.0.0.1:1", "key", tenant)).unwrap();
    drop(calls(&grag));
}
