//! Own binary: trybuild runs cargo with CARGO_ENCODED_RUSTFLAGS, set for the whole process.
//!
//! Misuse of the generated client that must not compile. Each `ui/fail/*.rs`
//! case has a committed `.stderr` snapshot taken with the stable toolchain;
//! regenerate with `TRYBUILD=overwrite cargo test -p grag-tests --test
//! compile_fail` and read every changed snapshot before committing it. The
//! right calls that must compile (`ui/pass/*.rs`) are `compile_pass.rs`.
//!
//! What this costs: trybuild builds a project of its own in
//! `target/tests/trybuild` (its own target directory, `--target`, no
//! incremental), so it never reuses the artifacts of this test build. Two
//! things keep it cheap:
//!
//! - only compile-fail cases: trybuild then type-checks (`cargo check`), and
//!   the dependency stack in its directory is metadata only, not code;
//! - one set of rustflags: trybuild checks the dependencies with `--cfg
//!   trybuild --verbose -A dead_code` and then the cases with the same plus
//!   `--diagnostic-width=140`, both as `--config` values. Cargo keys artifacts
//!   by their rustflags, so the whole stack was checked twice.
//!   `CARGO_ENCODED_RUSTFLAGS` outranks those values (and trybuild leaves it
//!   alone), so [`one_set_of_rustflags`] sets it to the cases' flags and both
//!   steps share one set of artifacts.

use std::path::Path;

/// The trybuild whose flags [`CASE_RUSTFLAGS`] repeats (see `rustflags.rs`
/// and `cargo.rs` in its source). Under another version, or when the caller
/// sets rustflags (a coverage run), trybuild's own flags are left alone.
const TRYBUILD: &str = "1.0.122";

/// trybuild's flags for building the cases.
const CASE_RUSTFLAGS: [&str; 6] = [
    "--cfg",
    "trybuild",
    "--verbose",
    "-A",
    "dead_code",
    "--diagnostic-width=140",
];

#[test]
fn ui() {
    one_set_of_rustflags();
    let cases = trybuild::TestCases::new();
    cases.compile_fail("ui/fail/*.rs");
}

/// Gives trybuild's two cargo runs the same rustflags (see the module docs).
fn one_set_of_rustflags() {
    if std::env::var_os("CARGO_ENCODED_RUSTFLAGS").is_some()
        || std::env::var_os("RUSTFLAGS").is_some()
    {
        return;
    }
    let lock = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock");
    let lock = std::fs::read_to_string(&lock).unwrap_or_default();
    let version = locked_version(&lock, "trybuild");
    if version != Some(TRYBUILD) {
        eprintln!(
            "trybuild {version:?} is not {TRYBUILD}, whose flags this test repeats: \
             its dependencies may be checked twice"
        );
        return;
    }
    // SAFETY: `ui` is the only test of this binary, and it sets the variable
    // before trybuild starts any process; no other thread reads or writes the
    // environment meanwhile.
    unsafe { std::env::set_var("CARGO_ENCODED_RUSTFLAGS", CASE_RUSTFLAGS.join("\x1f")) };
}

/// The version of `package` in a `Cargo.lock` text, if it is locked once.
fn locked_version<'a>(lock: &'a str, package: &str) -> Option<&'a str> {
    let name = format!("name = \"{package}\"");
    let mut versions = lock
        .split("[[package]]")
        .filter(|block| block.lines().any(|l| l.trim() == name))
        .filter_map(|block| {
            block
                .lines()
                .find_map(|l| l.trim().strip_prefix("version = \""))
                .and_then(|v| v.strip_suffix('"'))
        });
    let version = versions.next()?;
    versions.next().is_none().then_some(version)
}
