// A kg-service call without a workspace: the handle only exists behind one.
use grag_client::{EntityId, Grag};

async fn call(grag: &Grag, entity: &EntityId) {
    let _ = grag.kg().get_entity(entity).await;
}

fn main() {}
