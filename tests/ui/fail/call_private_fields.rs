// A Call cannot be written field by field: its parts are private to the runtime.
use sdk_runtime::Call;

fn main() {
    let _ = Call {
        endpoint: &grag_client::kg_service::GET_ENTITY,
        workspace: None,
        path: vec!["e-1"],
        query: Vec::new(),
        body: None,
    };
}
