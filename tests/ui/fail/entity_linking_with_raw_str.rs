// A raw string is not a workspace: only a parsed `WorkspaceId` opens the handle.
use grag_client::Grag;
use grag_client::types::LinkRequest;

async fn call(grag: &Grag, request: &LinkRequest) {
    let _ = grag.entity_linking(&"ws-7").link(request).await;
}

fn main() {}
