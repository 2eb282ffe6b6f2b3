//! `cargo xtask codegen` must build and run when `generated/` does not
//! compile: the code that repairs the tree cannot depend on it. A copy of
//! the workspace with a broken generated file is regenerated back to the
//! spec's output.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace")
        .to_path_buf()
}

/// Copies the tracked files of the workspace (no target/, no .git) to `to`.
fn copy_tree(from: &Path, to: &Path) {
    let listed = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(from)
        .output()
        .expect("git ls-files");
    assert!(listed.status.success(), "git ls-files failed");
    for file in listed.stdout.split(|&b| b == 0).filter(|f| !f.is_empty()) {
        let relative = Path::new(std::str::from_utf8(file).expect("UTF-8 paths"));
        let source = from.join(relative);
        if !source.is_file() {
            continue; // deleted in the working tree
        }
        let target = to.join(relative);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(&source, &target).unwrap();
    }
}

#[test]
fn codegen_regenerates_a_tree_whose_generated_crate_does_not_compile() {
    let root = root();
    let copy = std::env::temp_dir().join(format!("xtask-broken-tree-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&copy);
    copy_tree(&root, &copy);
    let broken = copy.join("generated/grag-client/src/policy.rs");
    let original = std::fs::read_to_string(&broken).unwrap();
    std::fs::write(&broken, "this is not Rust {").unwrap();
    // Its own target dir under ours: reused across runs, apart from the
    // build that is running this test.
    let target = root.join("target/xtask-broken-tree");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "run",
            "--quiet",
            "--offline",
            "--package",
            "xtask",
            "--",
            "codegen",
        ])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(&copy)
        .output()
        .expect("cargo run");
    let repaired = std::fs::read_to_string(&broken).unwrap();
    let _ = std::fs::remove_dir_all(&copy);
    assert!(
        output.status.success(),
        "xtask codegen did not run on a broken tree:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(repaired, original, "the broken file was not regenerated");
}
