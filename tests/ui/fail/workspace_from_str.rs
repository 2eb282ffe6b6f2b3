// A WorkspaceId cannot come from a raw string without validation.
use grag_client::WorkspaceId;

fn main() {
    let raw = String::from("ws-7");
    let _workspace: WorkspaceId = raw.into();
}
