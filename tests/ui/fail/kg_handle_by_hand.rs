// The kg-service handle cannot be built by hand without going through `Grag::kg`.
use grag_client::{Grag, Kg};

fn main() {
    let tenant = grag_client::TenantId::parse("knoll").unwrap();
    let grag = Grag::new(grag_client::Config::new(
        "http://127.0.0.1:1",
        "key",
        tenant,
    ))
    .unwrap();
    let _ = Kg::new(grag.runtime(), grag.runtime().tenant());
}
