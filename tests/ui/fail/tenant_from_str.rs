// A TenantId cannot come from a raw string without validation.
use grag_client::TenantId;

fn main() {
    let _tenant: TenantId = "knoll".into();
}
