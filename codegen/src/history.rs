//! A generated crate's version and `CHANGELOG.md`, carried on from the files
//! on disk: a regeneration whose record ([`crate::record`]) differs from the
//! one on disk bumps the version by the worst change and adds an entry.
//!
//! The version is the top entry of the changelog, so a hand-edited
//! `Cargo.toml` version is stale; a regeneration whose record matches the
//! one on disk changes neither.

use std::path::Path;

use crate::emit::File;
use crate::record::{self, Change, Class};

/// The version the emitter writes, before the history sets the real one.
const FIRST: &str = "0.1.0";

/// The version of a crate's first record. The crates were 0.1.0 with plain
/// structs; the first record comes with the evolvable types, which break a
/// consumer's struct literals and exhaustive matches: a minor bump.
const FIRST_RECORDED: &str = "0.2.0";

/// What a crate's history became, and the changes that made it so.
pub struct Settled {
    pub version: String,
    pub changelog: String,
    pub changes: Vec<Change>,
}

/// The version and changelog of the crate at `dir` (under `root`), whose
/// new record is `new_record`.
pub fn settle(root: &Path, dir: &Path, new_record: &str) -> Settled {
    let read = |name: &str| std::fs::read_to_string(root.join(dir).join(name)).ok();
    let changelog = read("CHANGELOG.md").filter(|c| top_version(c).is_some());
    let version = changelog
        .as_deref()
        .and_then(top_version)
        .unwrap_or(FIRST_RECORDED)
        .to_owned();
    let first = format!(
        "## {version}\n\nThe first record of the API (`api.lock`): every later regeneration is compared with it.\n\n\
         ### Breaking\n\n\
         - The generated structs are `#[non_exhaustive]`. To do: build them with `new` and the `with_` setters instead of struct literals.\n\
         - The spec's enums and stream events are `#[non_exhaustive]`. To do: give every match over one a wildcard arm.\n"
    );
    let Some(old_record) = read("api.lock") else {
        return settled(version, changelog, &first, Vec::new());
    };
    let changes = record::diff(&old_record, new_record);
    match record::bump(&version, &changes) {
        None => {
            let changelog = changelog.unwrap_or(first);
            Settled {
                version,
                changelog: with_title(&changelog),
                changes,
            }
        }
        Some(next) => {
            let entry = entry(&next, &changes);
            settled(next, changelog, &entry, changes)
        }
    }
}

fn settled(version: String, old: Option<String>, entry: &str, changes: Vec<Change>) -> Settled {
    let body = old.as_deref().map(entries).unwrap_or("");
    let changelog = with_title(&format!("{entry}\n{body}"));
    Settled {
        version,
        changelog,
        changes,
    }
}

const TITLE: &str = "# Changelog\n\nWritten by `cargo xtask codegen` from the changes of `api.lock`; newest first.\n\n";

fn with_title(changelog: &str) -> String {
    format!("{TITLE}{}", entries(changelog).trim_end()) + "\n"
}

/// The entries of a changelog: from its first `## ` heading on.
fn entries(changelog: &str) -> &str {
    changelog
        .find("## ")
        .map(|at| &changelog[at..])
        .unwrap_or("")
}

/// The version of the newest entry (`## 0.2.1`).
fn top_version(changelog: &str) -> Option<&str> {
    let line = entries(changelog).lines().next()?;
    let version = line.strip_prefix("## ")?.trim();
    let numeric = version.split('.').count() == 3
        && version
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    numeric.then_some(version)
}

/// The entry of `version`: the changes by class, and what to do for each
/// breaking one.
fn entry(version: &str, changes: &[Change]) -> String {
    let mut out = format!("## {version}\n");
    for (class, title) in [
        (Class::Breaking, "Breaking"),
        (Class::Behaviour, "Behaviour"),
        (Class::Compatible, "Compatible"),
    ] {
        let of: Vec<&Change> = changes.iter().filter(|c| c.class == class).collect();
        if of.is_empty() {
            continue;
        }
        out.push_str(&format!("\n### {title}\n\n"));
        for c in of {
            match &c.action {
                Some(action) => out.push_str(&format!("- {}. To do: {action}.\n", c.what)),
                None => out.push_str(&format!("- {}.\n", c.what)),
            }
        }
    }
    out
}

/// Puts `settled` into a crate's rendered files: the version into its
/// `Cargo.toml`, and its `CHANGELOG.md`.
pub fn apply(files: &mut Vec<File>, settled: &Settled) {
    for file in files.iter_mut() {
        if file.path == Path::new("Cargo.toml") {
            file.contents = file.contents.replacen(
                &format!("version = \"{FIRST}\""),
                &format!("version = \"{}\"", settled.version),
                1,
            );
        }
    }
    files.push(File {
        path: "CHANGELOG.md".into(),
        contents: settled.changelog.clone(),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crate_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(tmp.path().join(name), text).unwrap();
        }
        tmp
    }

    #[test]
    fn a_first_record_keeps_the_version_and_starts_the_changelog() {
        let tmp = crate_dir(&[]);
        let s = settle(tmp.path(), Path::new(""), "value Mode.fast -\n");
        assert_eq!(s.version, "0.2.0");
        assert!(s.changelog.contains("## 0.2.0\n\nThe first record"));
        assert!(s.changes.is_empty());
    }

    #[test]
    fn an_optional_field_bumps_the_patch_and_adds_an_entry_above_the_old() {
        let old = "# Changelog\n\n## 0.2.0\n\nThe first record.\n";
        let tmp = crate_dir(&[("CHANGELOG.md", old), ("api.lock", "field A.x string\n")]);
        let s = settle(
            tmp.path(),
            Path::new(""),
            "field A.note string?\nfield A.x string\n",
        );
        assert_eq!(s.version, "0.2.1");
        let at_new = s.changelog.find("## 0.2.1").unwrap();
        let at_old = s.changelog.find("## 0.2.0").unwrap();
        assert!(at_new < at_old, "{}", s.changelog);
        assert!(
            s.changelog
                .contains("### Compatible\n\n- field `A.note` added")
        );
    }

    #[test]
    fn a_removed_enum_value_bumps_the_minor_and_says_what_to_do() {
        let old = "# Changelog\n\n## 0.2.1\n\nx\n";
        let tmp = crate_dir(&[("CHANGELOG.md", old), ("api.lock", "value Mode.slow -\n")]);
        let s = settle(tmp.path(), Path::new(""), "");
        assert_eq!(s.version, "0.3.0");
        assert!(
            s.changelog
                .contains("### Breaking\n\n- enum value `Mode.slow` removed. To do: ")
        );
    }

    #[test]
    fn a_record_unchanged_changes_nothing() {
        let old = "# Changelog\n\nWritten by `cargo xtask codegen` from the changes of `api.lock`; newest first.\n\n## 0.2.1\n\nx\n";
        let tmp = crate_dir(&[("CHANGELOG.md", old), ("api.lock", "value Mode.slow -\n")]);
        let s = settle(tmp.path(), Path::new(""), "value Mode.slow -\n");
        assert_eq!((s.version.as_str(), s.changelog.as_str()), ("0.2.1", old));
    }
}
