// The pipeline id is a validated PipelineId, not any string.
use grag_client::Grag;
use grag_client::types::CompletionRequest;

async fn call(grag: &Grag, request: &CompletionRequest) {
    let _ = grag.ai_gateway(&"run-7").complete(request).await;
}

fn main() {}
