//! The generator's verdicts held to cargo-semver-checks. Each edit of
//! [`rehearsal::CASES`] is made on a scratch copy of `spec/` and `generated/`
//! (`target/conformance/semver/<case>/`), regenerated there, and the
//! regenerated crate is checked against the committed one.
//!
//! The check asserts a release Cargo takes as compatible (`--release-type
//! minor`: on a 0.y.z crate a patch bump is one), so cargo-semver-checks
//! fails exactly when it finds a breaking change; the version the generator
//! wrote does not enter it, since a breaking verdict bumps the minor and
//! that release would pass whatever changed.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::rehearsal::{CASES, Case, Expect};
use super::{run_tool, write};

/// The pinned cargo-semver-checks (crates.io), built for Rust 1.95's rustdoc JSON.
const VERSION: &str = "0.51.0";

/// One rehearsed edit: what we said, what cargo-semver-checks said.
struct Row {
    case: &'static Case,
    ours: bool,
    theirs: Vec<String>,
}

pub(super) fn run(root: &Path, dir: &Path) -> Result<String, String> {
    let tool = install(&dir.join("tools"))?;
    let scratch = dir.join("semver");
    let mut rows = Vec::new();
    for (i, case) in CASES.iter().enumerate() {
        let at = scratch.join(format!(
            "{i:02}-{}-{}",
            case.api,
            case.name.replace(' ', "-")
        ));
        let crate_dir = rehearse(root, &at, case)?;
        let ours = verdict(&at, &crate_dir, case)?;
        let theirs = check(&tool, root, &at, &crate_dir, &scratch.join("build"))?;
        rows.push(Row { case, ours, theirs });
    }
    print_table(&rows);
    let wrong: Vec<String> = rows.iter().filter_map(mismatch).collect();
    if wrong.is_empty() {
        Ok(format!(
            "cargo-semver-checks {VERSION} agrees with the generator on {} spec edits",
            rows.len()
        ))
    } else {
        Err(wrong.join("; "))
    }
}

/// Why a row fails, if it does.
fn mismatch(row: &Row) -> Option<String> {
    let name = format!("{} ({})", row.case.name, row.case.api);
    let theirs = !row.theirs.is_empty();
    if row.ours != row.case.breaking {
        return Some(format!(
            "{name}: the generator says {}, the table {}",
            word(row.ours),
            word(row.case.breaking)
        ));
    }
    match row.case.expect {
        Expect::Same if row.ours != theirs => Some(format!(
            "{name}: the generator says {}, cargo-semver-checks {}",
            word(row.ours),
            word(theirs)
        )),
        Expect::Stricter(_) if theirs && !row.ours => Some(format!(
            "{name}: cargo-semver-checks finds a break the generator does not"
        )),
        _ => None,
    }
}

fn word(breaking: bool) -> &'static str {
    if breaking { "breaking" } else { "compatible" }
}

fn print_table(rows: &[Row]) {
    println!("| edit | api | generator | cargo-semver-checks {VERSION} | relation |");
    println!("|---|---|---|---|---|");
    for row in rows {
        let theirs = if row.theirs.is_empty() {
            "passes".to_owned()
        } else {
            format!("fails: {}", row.theirs.join(", "))
        };
        let relation = match row.case.expect {
            Expect::Same => "same".to_owned(),
            Expect::Stricter(why) => format!("ours ⊇ theirs: {why}"),
        };
        println!(
            "| {} | {} | {} | {theirs} | {relation} |",
            row.case.name,
            row.case.api,
            word(row.ours)
        );
    }
}

/// A fresh scratch tree at `at` with `case` applied and regenerated; the
/// folder of the edited API's crate, relative to `at`.
fn rehearse(root: &Path, at: &Path, case: &Case) -> Result<PathBuf, String> {
    let _ = std::fs::remove_dir_all(at);
    for tree in ["spec", "generated"] {
        copy_tree(&root.join(tree), &at.join(tree))?;
    }
    write(&at.join("Cargo.toml"), &workspace_manifest(root)?)?;
    let file = at.join("spec").join(case.api).join(case.file);
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    if !text.contains(case.from) {
        return Err(format!(
            "{}: spec/{}/{} no longer holds the text the edit replaces",
            case.name, case.api, case.file
        ));
    }
    write(&file, &text.replacen(case.from, case.to, 1))?;
    let files = sdk_codegen::load::read_dir(&at.join("spec").join(case.api))
        .map_err(|e| format!("{}: {e}", case.name))?;
    let model = sdk_codegen::model(&files).map_err(|e| format!("{}: {e}", case.name))?;
    Ok(Path::new("generated").join(&model.api.crate_name))
}

/// Regenerates the scratch tree, printing the generator's changes; whether
/// one of them is breaking.
fn verdict(at: &Path, crate_dir: &Path, case: &Case) -> Result<bool, String> {
    let verdicts = sdk_codegen::sync::verdicts(at).map_err(|e| format!("{}: {e}", case.name))?;
    sdk_codegen::sync::write(at).map_err(|e| format!("{}: {e}", case.name))?;
    let changes = verdicts
        .into_iter()
        .find(|(dir, _)| dir == crate_dir)
        .map(|(_, c)| c)
        .unwrap_or_default();
    if changes.is_empty() {
        return Err(format!("{}: the generator sees no change", case.name));
    }
    println!("-- {} ({}):", case.name, case.api);
    for c in &changes {
        println!("   {:?}: {}", c.class, c.what);
    }
    Ok(changes
        .iter()
        .any(|c| c.class == sdk_codegen::record::Class::Breaking))
}

/// cargo-semver-checks on the crate regenerated under `at` against the one
/// committed under `root`: the breaking lints it reports (none: it passes).
fn check(
    tool: &Path,
    root: &Path,
    at: &Path,
    crate_dir: &Path,
    build: &Path,
) -> Result<Vec<String>, String> {
    let mut command = Command::new(tool);
    command
        .args(["semver-checks", "check-release", "--manifest-path"])
        .arg(at.join(crate_dir).join("Cargo.toml"))
        .arg("--baseline-root")
        .arg(root.join(crate_dir))
        // Named, as cargo-semver-checks skips a `publish = false` crate otherwise.
        .arg("--package")
        .arg(crate_dir.file_name().expect("a crate folder"))
        .args(["--release-type", "minor", "--color", "never"])
        // One build folder for every case: the dependencies build once.
        .env("CARGO_TARGET_DIR", build)
        .env("CARGO_INCREMENTAL", "0");
    let shown = format!("{command:?}");
    let output = command.output().map_err(|e| format!("{shown}: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    write(
        &at.join("semver-checks.txt"),
        &format!("{shown}\n{stdout}{stderr}"),
    )?;
    let lints: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("--- failure "))
        .filter_map(|l| l.split(':').next())
        .map(str::to_owned)
        .collect();
    if output.status.success() == lints.is_empty() {
        return Ok(lints);
    }
    Err(format!("{shown}: {}\n{stdout}{stderr}", output.status))
}

/// The root workspace's manifest for a scratch tree: its members the
/// generated crates, its path dependencies the root's own.
fn workspace_manifest(root: &Path) -> Result<String, String> {
    let path = root.join("Cargo.toml");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let absolute = format!("path = \"{}/", root.display());
    Ok(text
        .lines()
        .map(|line| {
            if line.starts_with("members = ") {
                "members = [\"generated/*\"]".to_owned()
            } else {
                line.replace("path = \"", &absolute)
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n")
}

/// `bin/cargo-semver-checks` under `tools`, installed at [`VERSION`] when
/// absent or another version.
fn install(tools: &Path) -> Result<PathBuf, String> {
    let bin = tools.join("bin/cargo-semver-checks");
    let installed = Command::new(&bin)
        .args(["semver-checks", "--version"])
        .output()
        .is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim_end()
                .ends_with(VERSION)
        });
    if !installed {
        println!(
            "installing cargo-semver-checks {VERSION} from crates.io into {}",
            tools.display()
        );
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        run_tool(
            Command::new(cargo)
                .args([
                    "install",
                    "--locked",
                    "cargo-semver-checks",
                    "--version",
                    VERSION,
                ])
                .arg("--root")
                .arg(tools)
                .env("CARGO_INCREMENTAL", "0"),
        )?;
    }
    Ok(bin)
}

/// Copies the files under `from` to `to`, folders made as needed.
fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    let entries = std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))?;
    for entry in entries {
        let path = entry
            .map_err(|e| format!("{}: {e}", from.display()))?
            .path();
        let target = to.join(path.file_name().expect("an entry has a name"));
        if path.is_dir() {
            copy_tree(&path, &target)?;
        } else {
            std::fs::copy(&path, &target).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(case: &'static Case, ours: bool, theirs: &[&str]) -> Row {
        let theirs = theirs.iter().map(|l| (*l).to_owned()).collect();
        Row { case, ours, theirs }
    }

    fn case(breaking: bool, expect: Expect) -> &'static Case {
        Box::leak(Box::new(Case {
            name: "edit",
            api: "grag",
            file: "f.yaml",
            from: "a",
            to: "b",
            breaking,
            expect,
        }))
    }

    #[test]
    fn a_row_fails_when_the_tool_disagrees_or_the_generator_leaves_the_table() {
        let same = case(false, Expect::Same);
        assert!(mismatch(&row(same, false, &[])).is_none());
        let e = mismatch(&row(same, false, &["constructible_struct_adds_field"])).unwrap();
        assert!(e.contains("cargo-semver-checks breaking"), "{e}");
        let e = mismatch(&row(same, true, &["x"])).unwrap();
        assert!(e.contains("the table compatible"), "{e}");
        let breaking = case(true, Expect::Same);
        assert!(mismatch(&row(breaking, true, &[])).is_some());
    }

    #[test]
    fn a_stricter_row_lets_the_tool_miss_a_break_but_not_the_generator() {
        let stricter = case(true, Expect::Stricter("why"));
        assert!(mismatch(&row(stricter, true, &[])).is_none());
        assert!(mismatch(&row(stricter, true, &["lint"])).is_none());
        assert!(mismatch(&row(stricter, false, &[])).is_some());
        let unbroken = case(false, Expect::Stricter("why"));
        assert!(mismatch(&row(unbroken, false, &["lint"])).is_some());
    }

    #[test]
    fn every_table_edit_names_its_file_and_changes_something() {
        for c in &CASES {
            assert_ne!(c.from, c.to, "{}", c.name);
            let file = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../spec")
                .join(c.api)
                .join(c.file);
            let text = std::fs::read_to_string(&file).unwrap();
            assert_eq!(
                text.matches(c.from).count(),
                1,
                "{}: {}",
                c.name,
                file.display()
            );
        }
    }
}
