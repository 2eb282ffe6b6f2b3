// A request assembled outside the pipeline: a Call has no way to set a header.
use grag_client::Grag;
use sdk_runtime::Call;

async fn call(grag: &Grag) {
    let call = Call::new(&grag_client::workspaces::LIST_KBS).header("X-Tenant-ID", "system");
    let _ = grag.runtime().send(call).await;
}

fn main() {}
