// An ai-gateway call outside a run: the handle only exists behind a pipeline id
// (X-Pipeline-Id, the join key of the run's cost).
use grag_client::Grag;
use grag_client::types::CompletionRequest;

async fn call(grag: &Grag, request: &CompletionRequest) {
    let _ = grag.ai_gateway().complete(request).await;
}

fn main() {}
