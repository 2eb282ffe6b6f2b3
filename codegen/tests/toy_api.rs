//! A third API, a toy, from a fixture spec (`tests/fixtures/toy/`): other
//! service names, another tenant and workspace header, no breaker, no
//! streams, an exponential retry. It is generated and type-checked as a
//! crate of its own, so no path of the generator or the runtime can depend
//! on which API it serves.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("codegen sits in the workspace")
        .to_path_buf()
}

fn toy_files() -> Vec<(PathBuf, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/toy");
    sdk_codegen::load::read_dir(&dir).expect("the toy spec reads")
}

fn generated() -> Vec<sdk_codegen::emit::File> {
    sdk_codegen::generate(&toy_files()).unwrap_or_else(|e| panic!("the toy spec generates:\n{e}"))
}

fn file<'a>(files: &'a [sdk_codegen::emit::File], path: &str) -> &'a str {
    &files
        .iter()
        .find(|f| f.path == Path::new(path))
        .unwrap_or_else(|| panic!("no {path}"))
        .contents
}

#[test]
fn the_toy_speaks_its_own_names_and_nobody_else_s() {
    let files = generated();
    let policy = file(&files, "src/policy.rs");
    for own in [
        "X-Org-ID",
        "X-Project-ID",
        "X-Trace-ID",
        "toy_requests",
        "breaker: None",
    ] {
        assert!(policy.contains(own), "policy.rs lacks {own}");
    }
    assert!(file(&files, "src/log.rs").contains("project_id = line.workspace"));
    assert!(file(&files, "src/ids.rs").contains("boards calls need a `&WorkspaceId`"));
    for f in &files {
        for other in [
            "grag",
            "knoll",
            "kg-service",
            "kb_id",
            "Workspace-ID",
            "Tenant-ID",
        ] {
            assert!(
                !f.contents.to_lowercase().contains(&other.to_lowercase()),
                "{} names `{other}`",
                f.path.display()
            );
        }
    }
}

/// The toy's ID pattern is lowered like GRAG's, into rules of its own: what
/// one API accepts the other refuses, and the generated policy says so.
#[test]
fn the_toy_ids_follow_the_toy_pattern() {
    let toy = sdk_codegen::model(&toy_files()).unwrap_or_else(|e| panic!("{e}"));
    let grag_files = sdk_codegen::load::read_dir(&root().join("spec/grag")).unwrap();
    let grag = sdk_codegen::model(&grag_files).unwrap_or_else(|e| panic!("{e}"));
    let (toy, grag) = (toy.api.id_rules.pattern, grag.api.id_rules.pattern);
    for only_toy in ["Note_7", "NOTE", "a-B"] {
        assert!(toy.matches(only_toy), "{only_toy}");
        assert!(!grag.matches(only_toy), "{only_toy}");
    }
    for only_grag in ["7-notes", "a", &"a".repeat(63)] {
        assert!(grag.matches(only_grag), "{only_grag}");
        assert!(!toy.matches(only_grag), "{only_grag}");
    }
    let files = generated();
    let policy = file(&files, "src/policy.rs");
    assert!(policy.contains(r#"text: "^[A-Za-z][A-Za-z0-9_-]{1,31}$""#));
    assert!(policy.contains("first: &[(b'A', b'Z'), (b'a', b'z')]"));
    assert!(policy.contains("min_len: 2"));
    assert!(policy.contains("max_len: 32"));
    let ids = file(&files, "src/ids.rs");
    assert!(ids.contains("match `^[A-Za-z][A-Za-z0-9_-]{1,31}$`"));
}

/// A spec enum is a Rust enum: a variant per value (`check-list` is
/// `CheckList`), `Unknown` for the rest, the wire string both ways, and a
/// query parameter that takes it by reference.
#[test]
fn the_toy_enum_is_an_enum_that_keeps_unknown_values() {
    let files = generated();
    let types = file(&files, "src/types.rs");
    let start = types
        .find("pub enum NoteKind {")
        .expect("NoteKind is an enum");
    let decl = &types[start..start + types[start..].find('}').unwrap()];
    let variants: Vec<&str> = decl
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.starts_with("///") && !l.is_empty())
        .collect();
    assert_eq!(variants, ["Plain,", "CheckList,", "Unknown(String),"]);
    assert!(decl.contains("/// A list of items to tick off. Policy toy (inferred)."));
    for wanted in [
        "NoteKind::CheckList => \"check-list\"",
        "\"check-list\" => NoteKind::CheckList",
        "NoteKind::Unknown(value) => value",
        "impl From<&str> for NoteKind",
        "impl std::fmt::Display for NoteKind",
        "impl Serialize for NoteKind",
        "impl<'de> Deserialize<'de> for NoteKind",
        "mod wire {",
        "pub(super) struct Visitor<T>",
    ] {
        assert!(types.contains(wanted), "types.rs lacks {wanted}");
    }
    // Serde's derive would refuse an unknown value: the impls are written out.
    // Open and `#[non_exhaustive]`: a value the spec adds is a compatible change.
    assert!(types.contains(
        "#[derive(Debug, Clone, PartialEq, Eq, Hash)]\n#[non_exhaustive]\npub enum NoteKind {"
    ));
    let notes = file(&files, "src/notes.rs");
    assert!(
        notes.contains("kind: Option<&crate::types::NoteKind>"),
        "{notes}"
    );
    assert!(notes.contains(".query_opt(\"kind\", kind)"), "{notes}");
}

/// Writes the toy crate into its own workspace under `target/` and runs
/// `cargo check` on it, offline, with the main workspace's lock file.
#[test]
fn the_toy_crate_compiles() {
    let root = root();
    let out = root.join("target/toy-api");
    let krate = out.join("toy-client");
    let _ = std::fs::remove_dir_all(krate.join("src"));
    for f in generated() {
        let path = krate.join(&f.path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, f.contents).unwrap();
    }
    std::fs::write(out.join("Cargo.toml"), workspace_manifest(&root)).unwrap();
    std::fs::copy(root.join("Cargo.lock"), out.join("Cargo.lock")).unwrap();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .current_dir(&out)
        .args(["check", "--offline", "--quiet", "--package", "toy-client"])
        .env("CARGO_TARGET_DIR", out.join("target"))
        .env_remove("RUSTFLAGS")
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "the generated toy crate does not compile:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The main workspace's package settings and dependency table, its path
/// dependencies made absolute, for a workspace holding only the toy crate.
fn workspace_manifest(root: &Path) -> String {
    let main = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let section = |name: &str| -> String {
        let start = main
            .find(&format!("[{name}]"))
            .unwrap_or_else(|| panic!("no [{name}]"));
        let rest = &main[start..];
        let end = rest[1..].find("\n[").map_or(rest.len(), |i| i + 1);
        rest[..end].to_string()
    };
    let deps = section("workspace.dependencies")
        .replace("path = \"", &format!("path = \"{}/", root.display()));
    format!(
        "[workspace]\nmembers = [\"toy-client\"]\nresolver = \"3\"\n\n{}\n{deps}",
        section("workspace.package")
    )
}
