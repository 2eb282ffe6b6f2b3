// A tenant passed where a workspace is expected: TenantId is not AsWorkspace.
use grag_client::{EntityId, Grag, TenantId};

async fn call(grag: &Grag, tenant: &TenantId, entity: &EntityId) {
    let _ = grag.kg(tenant).get_entity(entity).await;
}

fn main() {}
