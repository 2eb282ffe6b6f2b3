//! A spec that grows, on a scratch copy of GRAG's tree: each regeneration
//! prints its verdict, bumps the crate's version by it and writes a
//! changelog entry; a spec edit that was not regenerated is stale.

use std::path::Path;

use sdk_codegen::record::Class;

const CRATE: &str = "generated/grag-client";

/// `spec/grag/` and the committed history of its crate, copied.
fn scratch() -> tempfile::TempDir {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    for (path, text) in sdk_codegen::load::read_dir(&root.join("spec/grag")).unwrap() {
        let to = tmp.path().join(path.strip_prefix(root).unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::write(to, text).unwrap();
    }
    std::fs::create_dir_all(tmp.path().join(CRATE)).unwrap();
    for name in ["api.lock", "CHANGELOG.md", "Cargo.toml"] {
        let from = root.join(CRATE).join(name);
        std::fs::copy(from, tmp.path().join(CRATE).join(name)).unwrap();
    }
    sdk_codegen::sync::write(tmp.path()).unwrap();
    tmp
}

fn edit(root: &Path, file: &str, from: &str, to: &str) {
    let path = root.join("spec/grag").join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{file} has no {from:?}");
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

fn read(root: &Path, name: &str) -> String {
    std::fs::read_to_string(root.join(CRATE).join(name)).unwrap()
}

/// The version in the crate's `Cargo.toml`.
fn version(root: &Path) -> String {
    let toml = read(root, "Cargo.toml");
    let line = toml.lines().find(|l| l.starts_with("version = ")).unwrap();
    line.trim_start_matches("version = ")
        .trim_matches('"')
        .to_owned()
}

/// `x.y.z` and the version one patch and one minor above it.
fn next(version: &str) -> (String, String) {
    let n: Vec<u64> = version.split('.').map(|p| p.parse().unwrap()).collect();
    (
        format!("{}.{}.{}", n[0], n[1], n[2] + 1),
        format!("{}.{}.0", n[0], n[1] + 1),
    )
}

/// The one change regenerating `root` would make, of `class`, naming `what`.
fn only_change(root: &Path, class: Class, what: &str) -> sdk_codegen::record::Change {
    let mut verdicts = sdk_codegen::sync::verdicts(root).unwrap();
    let changes = verdicts.remove(0).1;
    assert_eq!(changes.len(), 1, "{changes:?}");
    let change = changes.into_iter().next().unwrap();
    assert_eq!(change.class, class, "{change:?}");
    assert!(change.what.contains(what), "{change:?}");
    change
}

#[test]
fn an_optional_answer_field_is_a_patch_and_a_removed_enum_value_a_minor() {
    let tmp = scratch();
    let root = tmp.path();
    assert!(sdk_codegen::sync::stale(root).unwrap().is_empty());
    let start = version(root);
    let (patch, _) = next(&start);

    edit(
        root,
        "services/ai-gateway.yaml",
        "      metadata: json?\n",
        "      metadata: json?\n      note: string?\n",
    );
    let stale = sdk_codegen::sync::stale(root).unwrap();
    assert!(stale.iter().any(|p| p.ends_with("api.lock")), "{stale:?}");
    only_change(root, Class::Compatible, "`SearchHit.note`");
    sdk_codegen::sync::write(root).unwrap();
    assert_eq!(version(root), patch);
    let changelog = read(root, "CHANGELOG.md");
    assert!(
        changelog.contains(&format!(
            "## {patch}\n\n### Compatible\n\n- field `SearchHit.note` added"
        )),
        "{changelog}"
    );
    assert!(sdk_codegen::sync::stale(root).unwrap().is_empty());

    let (_, minor) = next(&patch);
    edit(
        root,
        "services/ai-gateway.yaml",
        "      - value: system\n        doc: Instructions the model follows.\n",
        "",
    );
    let change = only_change(root, Class::Breaking, "`ChatRole.system` removed");
    assert!(change.action.is_some());
    sdk_codegen::sync::write(root).unwrap();
    assert_eq!(version(root), minor);
    let changelog = read(root, "CHANGELOG.md");
    assert!(
        changelog.contains(&format!(
            "## {minor}\n\n### Breaking\n\n- enum value `ChatRole.system` removed. To do: "
        )),
        "{changelog}"
    );
    assert!(changelog.find(&format!("## {minor}")) < changelog.find(&format!("## {patch}")));
}

#[test]
fn a_hand_edited_version_is_stale() {
    let tmp = scratch();
    let root = tmp.path();
    let toml = read(root, "Cargo.toml");
    let edited = toml.replacen(
        &format!("version = \"{}\"", version(root)),
        "version = \"9.9.9\"",
        1,
    );
    std::fs::write(root.join(CRATE).join("Cargo.toml"), edited).unwrap();
    let stale = sdk_codegen::sync::stale(root).unwrap();
    assert!(stale.iter().any(|p| p.ends_with("Cargo.toml")), "{stale:?}");
}

/// An optional request field is compatible only because no consumer can
/// build the request by a struct literal: the regenerated type is sealed and
/// gets a setter, and `new` keeps its arguments.
#[test]
fn an_optional_request_field_is_a_patch_the_emitted_request_can_absorb() {
    let tmp = scratch();
    let root = tmp.path();
    let (patch, _) = next(&version(root));
    edit(
        root,
        "services/ai-gateway.yaml",
        "      top_k: integer\n",
        "      top_k: integer\n      filter: string?\n",
    );
    only_change(root, Class::Compatible, "`SearchRequest.filter`");
    sdk_codegen::sync::write(root).unwrap();
    assert_eq!(version(root), patch);
    let types = read(root, "src/types.rs");
    let at = types.find("pub struct SearchRequest {").unwrap();
    assert!(
        types[..at].ends_with("#[non_exhaustive]\n"),
        "{}",
        &types[at.saturating_sub(200)..at]
    );
    assert!(
        types
            .contains("pub fn new(query_text: impl Into<String>, top_k: impl Into<i64>) -> Self {")
    );
    assert!(types.contains("pub fn with_filter(mut self, filter: impl Into<String>) -> Self {"));
}
