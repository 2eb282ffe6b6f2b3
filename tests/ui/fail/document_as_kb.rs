// A DocumentId passed to a route that takes the KbId.
use grag_client::{DocumentId, Grag};

async fn call(grag: &Grag, document: &DocumentId) {
    let _ = grag.workspaces().list_documents(document).await;
}

fn main() {}
