// The kg-service handle borrows its workspace: it cannot outlive it.
use grag_client::{Grag, Kg, WorkspaceId};

fn handle(grag: &Grag) -> Kg<'_> {
    let workspace = WorkspaceId::parse("ws-7").unwrap();
    grag.kg(&workspace)
}

fn main() {}
