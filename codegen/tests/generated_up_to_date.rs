//! `cargo test --workspace` fails when `generated/` drifts from `spec/` or `codegen/`,
//! and so does the runtime's fixture module from `runtime/fixture/`.

use std::path::Path;

#[test]
fn generated_code_matches_the_spec() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let stale = sdk_codegen::sync::stale(root).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        stale.is_empty(),
        "generated code is out of date with its spec (run `cargo xtask codegen`): {stale:#?}"
    );
}
