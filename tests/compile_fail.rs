//! Misuse of the generated client that must not compile, and the right calls
//! that must. Each `ui/fail/*.rs` case has a committed `.stderr` snapshot taken
//! with the stable toolchain; regenerate with
//! `TRYBUILD=overwrite cargo test -p grag-tests --test compile_fail` and read
//! every changed snapshot before committing it.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("ui/fail/*.rs");
    cases.pass("ui/pass/*.rs");
}
