//! Generated docs say only what their API's own spec says: a section
//! reference comes from that spec, and a crate whose spec has no breaker,
//! warm-up or deploy window offers no knob or text for one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// Every file under `dir`, with its text (binary files skipped).
fn files(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if let Ok(text) = std::fs::read_to_string(&path) {
                out.push((path, text));
            }
        }
    }
    out
}

/// What a reader of the file reads as prose: a Rust file's comments, any
/// other file whole.
fn prose(path: &Path, text: &str) -> String {
    if path.extension().is_some_and(|e| e == "rs") {
        text.lines()
            .map(str::trim_start)
            .filter(|l| l.starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        text.to_owned()
    }
}

/// `§5.2`, `§10.4`, `§3`: every section reference in `text`.
fn sections(text: &str) -> BTreeSet<String> {
    text.match_indices('§')
        .map(|(at, s)| {
            let rest = &text[at + s.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(rest.len());
            format!("§{}", rest[..end].trim_end_matches('.'))
        })
        .collect()
}

/// Each API's spec folder, its generated crate, and the spec's own text.
fn apis() -> Vec<(String, PathBuf, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root().join("spec")).unwrap() {
        let dir = entry.unwrap().path();
        let spec = sdk_codegen::load::read_dir(&dir).unwrap();
        let model = sdk_codegen::model(&spec).unwrap_or_else(|e| panic!("{e}"));
        let text: String = spec.into_iter().map(|(_, t)| t).collect();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        out.push((
            name,
            root().join("generated").join(&model.api.crate_name),
            text,
        ));
    }
    assert!(out.len() >= 2, "both APIs: {out:?}");
    out
}

#[test]
fn every_section_reference_in_generated_docs_is_one_its_own_spec_makes() {
    for (api, crate_dir, spec) in apis() {
        let own = sections(&spec);
        for (path, text) in files(&crate_dir) {
            let foreign: Vec<_> = sections(&prose(&path, &text))
                .into_iter()
                .filter(|s| !own.contains(s))
                .collect();
            assert!(
                foreign.is_empty(),
                "{}: {foreign:?} are not sections of spec/{api}/",
                path.display()
            );
        }
    }
}

#[test]
fn core_client_docs_name_no_grag_section_and_no_knob_its_spec_lacks() {
    let (_, crate_dir, spec) = apis().into_iter().find(|(api, ..)| api == "core").unwrap();
    // The premise: the Core spec has none of these.
    for absent in ["§", "breaker:", "warm_up", "deploy_suspected"] {
        assert!(!spec.contains(absent), "spec/core/ has `{absent}`");
    }
    let forbidden = [
        "§",
        "warm-up",
        "warm_up",
        "deploy-suspected",
        "deploy_suspected",
        "deploy window",
        "GRAG",
        "Knoll",
        "ai_runs",
    ];
    let mut checked = 0;
    for (path, text) in files(&crate_dir) {
        let prose = prose(&path, &text);
        for word in forbidden {
            assert!(
                !prose.contains(word),
                "{} says `{word}`, which spec/core/ does not",
                path.display()
            );
        }
        // Rust docs: no breaker (POLICY.md says there is none).
        if path.extension().is_some_and(|e| e == "rs") {
            assert!(!prose.contains("breaker"), "{}", path.display());
        }
        checked += 1;
    }
    assert!(checked >= 8, "the crate's files were read: {checked}");
    let client = std::fs::read_to_string(crate_dir.join("src/client.rs")).unwrap();
    assert!(
        !client.contains("fn warm_up"),
        "no warm-up knob without warm-up calls"
    );
}

/// The rustdoc a caller reads first: the crate root builds the client from
/// the environment, makes one call and matches its error's class, and
/// links the policy tables; the constructor has a doc line; every method
/// lists the error classes its route can end in, with their rows.
#[test]
fn the_crate_docs_show_from_env_a_class_match_the_policy_and_each_methods_error_classes() {
    for (api, crate_dir, _) in apis() {
        let lib = std::fs::read_to_string(crate_dir.join("src/lib.rs")).unwrap();
        for needed in [
            "Config::from_env()?",
            "e.class() == ErrorClass::",
            "[`POLICY.md`](policy_tables)",
            "#[doc = include_str!(\"../POLICY.md\")]",
        ] {
            assert!(lib.contains(needed), "{api}: the crate root has `{needed}`");
        }
        let client = std::fs::read_to_string(crate_dir.join("src/client.rs")).unwrap();
        let new = client.find("pub fn new(config: Config)").unwrap();
        assert!(
            client[..new]
                .trim_end()
                .lines()
                .last()
                .unwrap()
                .trim_start()
                .starts_with("///"),
            "{api}: `new` has a doc line"
        );
        let mut methods = 0;
        for (path, text) in files(&crate_dir.join("src")) {
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                let line = line.trim_start();
                let is_call = (line.starts_with("pub async fn ") || line.starts_with("pub fn "))
                    && lines[..i]
                        .iter()
                        .rev()
                        .take_while(|l| l.trim_start().starts_with("///"))
                        .any(|l| l.contains("- Route: `"));
                if !is_call {
                    continue;
                }
                methods += 1;
                let errors = lines[..i]
                    .iter()
                    .rev()
                    .take_while(|l| l.trim_start().starts_with("///"))
                    .find(|l| l.contains("- Errors ("))
                    .unwrap_or_else(|| {
                        panic!("{}: {line} lists its error classes", path.display())
                    });
                assert!(errors.contains("](crate::ErrorClass::"), "{errors}");
            }
        }
        assert!(methods > 5, "{api}: the methods are found ({methods})");
    }
}
