// AsWorkspace is sealed: a caller's own type cannot pose as a workspace.
use grag_client::AsWorkspace;

struct MyWorkspace(sdk_runtime::Id);

impl AsWorkspace for MyWorkspace {
    fn workspace_id(&self) -> &sdk_runtime::Id {
        &self.0
    }
}

fn main() {}
