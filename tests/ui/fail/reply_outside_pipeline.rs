// A successful answer cannot be forged: only the pipeline builds a Reply.
use sdk_runtime::Reply;

fn main() {
    let _ = Reply::new(
        &grag_client::policy::POLICY,
        &grag_client::workspaces::LIST_KBS,
        200,
        Default::default(),
        String::new(),
    );
}
