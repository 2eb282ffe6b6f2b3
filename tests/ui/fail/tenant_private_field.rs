// The tuple field of TenantId is private: no way around `TenantId::parse`.
use grag_client::TenantId;

fn main() {
    let id = sdk_runtime::Id::parse(
        &grag_client::policy::POLICY.ids,
        sdk_runtime::IdKind::Tenant,
        "knoll",
    )
    .unwrap();
    let _tenant = TenantId(id);
}
