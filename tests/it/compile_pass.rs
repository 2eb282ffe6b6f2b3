//! The right calls of the generated client, which must compile: each
//! `ui/pass/<case>.rs` is compiled into this test binary as module `<case>`
//! (a case that stops compiling fails the build) and its `main` is run by the
//! test `<case>::run`. They are not trybuild cases: with only compile-fail
//! cases trybuild type-checks instead of building (see `compile_fail.rs`).

/// `ui/pass/<case>.rs` as module `<case>`, with a test that runs its `main`.
macro_rules! pass_case {
    ($case:ident) => {
        mod $case {
            include!(concat!("../ui/pass/", stringify!($case), ".rs"));

            #[test]
            fn run() {
                main();
            }
        }
    };
}

pass_case!(scope_types);
pass_case!(tenant_scoped_calls);
pass_case!(two_clients);
pass_case!(workspace_scoped_calls);

/// Every file under `ui/pass/` is one of the cases above.
#[test]
fn every_pass_case_is_compiled() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ui/pass");
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .expect("ui/pass exists")
        .map(|e| {
            e.expect("a directory entry")
                .file_name()
                .into_string()
                .unwrap()
        })
        .collect();
    found.sort();
    assert_eq!(
        found,
        [
            "scope_types.rs",
            "tenant_scoped_calls.rs",
            "two_clients.rs",
            "workspace_scoped_calls.rs"
        ]
    );
}
