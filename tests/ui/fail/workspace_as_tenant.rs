// A workspace passed where the tenant is expected.
use grag_client::{Config, WorkspaceId};

fn main() {
    let workspace = WorkspaceId::parse("ws-7").unwrap();
    let _ = Config::new("http://127.0.0.1:8080", "key", workspace);
}
