// The ways to get a scope ID are the validating ones: parse, FromStr, serde.
use grag_client::{Config, Grag, InvalidId, TenantId, WorkspaceId};

fn build() -> Result<Grag, Box<dyn std::error::Error>> {
    let tenant: TenantId = "knoll".parse()?;
    let config = Config::new("http://127.0.0.1:8080", "key", tenant);
    assert_eq!(config.tenant().as_str(), "knoll");
    Ok(Grag::new(config)?)
}

fn from_json(text: &str) -> Result<WorkspaceId, serde_json::Error> {
    serde_json::from_str(text)
}

fn main() {
    let grag = build().unwrap();
    let workspace = WorkspaceId::parse("ws-7").unwrap();
    let _kg = grag.kg(&workspace);
    let _links = grag.entity_linking(&workspace);
    let refused: Result<TenantId, InvalidId> = TenantId::parse("system");
    assert!(refused.is_err());
    assert!(from_json("\"WS 7\"").is_err());
    let _ = Config::from_env;
}
