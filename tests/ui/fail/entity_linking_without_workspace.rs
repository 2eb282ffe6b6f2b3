// An entity-linking call without a workspace.
use grag_client::Grag;
use grag_client::types::LinkRequest;

async fn call(grag: &Grag, request: &LinkRequest) {
    let _ = grag.entity_linking().link(request).await;
}

fn main() {}
