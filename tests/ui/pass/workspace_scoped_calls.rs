// kg-service and entity-linking calls behind a parsed workspace. Built, never
// awaited: nothing here touches a network.
use grag_client::types::{Edge, Entity, LinkRequest};
use grag_client::{Config, EdgeId, EntityId, Error, ErrorClass, Grag, Kg, TenantId, WorkspaceId};

async fn calls(grag: &Grag) -> Result<(), Box<dyn std::error::Error>> {
    let workspace = WorkspaceId::parse("ws-7")?;
    let entity_id = EntityId::parse("e-1")?;
    let edge_id = EdgeId::parse("edge-1")?;
    let kg: Kg<'_> = grag.kg(&workspace);
    let entity: Entity = kg.get_entity(&entity_id).await?;
    let _: Entity = kg.upsert_entity(&entity_id, &entity).await?;
    let edges: Vec<Edge> = kg.list_edges(&entity_id).await?;
    for edge in &edges {
        let _: Edge = kg.upsert_edge(&edge_id, edge).await?;
    }
    let links = grag
        .entity_linking(&workspace)
        .link(&LinkRequest::new("Knoll GmbH".to_owned()))
        .await?;
    let _ = links.len();
    Ok(())
}

async fn typed_error(grag: &Grag, workspace: &WorkspaceId) -> Option<ErrorClass> {
    let entity_id = EntityId::parse("e-1").ok()?;
    let result: Result<Entity, Error> = grag.kg(workspace).get_entity(&entity_id).await;
    result.err().map(|e| e.class())
}

fn main() {
    let tenant = TenantId::parse("knoll").unwrap();
    let grag = Grag::new(Config::new("http://127.0.0.1:1", "key", tenant)).unwrap();
    let workspace = WorkspaceId::parse("ws-7").unwrap();
    // Futures are built to prove the calls type-check; they are dropped unpolled.
    drop(calls(&grag));
    drop(typed_error(&grag, &workspace));
}
