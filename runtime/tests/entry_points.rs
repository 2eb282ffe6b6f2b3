//! `impl Client` blocks outside `client.rs` hold only short public entry
//! points: a method there hands the call to its module's own functions, so
//! the client's type stays a list of what a caller can do. (The runtime's
//! module graph, its facade and the layers that may name the client are
//! checked with the rest of the house, in `xtask/tests/house.rs`.)

use std::collections::BTreeMap;
use std::path::Path;

/// The longest public entry point an `impl Client` outside `client.rs` may
/// hold: a few lines that hand the call to the module's own functions.
const ENTRY_POINT_LINES: usize = 15;

/// Every module of `src/` (as `a::b`) and its source without its unit tests.
fn modules() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(&root).unwrap().with_extension("");
            let mut name = rel.to_string_lossy().replace('/', "::");
            if let Some(parent) = name.strip_suffix("::mod") {
                name = parent.to_string();
            }
            let source = std::fs::read_to_string(&path).unwrap();
            let code = match source.find("#[cfg(test)]\nmod tests") {
                Some(at) => source[..at].to_string(),
                None => source,
            };
            out.insert(name, code);
        }
    }
    out
}

/// The functions of every `impl Client` block in `code` that are not a
/// public entry point of at most [`ENTRY_POINT_LINES`] lines, as
/// `name (lines)`. A block's items are read by indentation, as rustfmt
/// writes them: `fn` lines at four spaces, bodies deeper.
fn not_entry_points(code: &str) -> Vec<String> {
    let lines: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    let mut at = 0;
    while at < lines.len() {
        if !lines[at].starts_with("impl Client {") {
            at += 1;
            continue;
        }
        at += 1;
        while at < lines.len() && lines[at] != "}" {
            let line = lines[at];
            let item = line.strip_prefix("    ").filter(|l| !l.starts_with(' '));
            let Some(item) = item.filter(|l| l.contains("fn ")) else {
                at += 1;
                continue;
            };
            let start = at;
            while at < lines.len() && lines[at] != "    }" {
                at += 1;
            }
            let length = at - start + 1;
            let public = item.starts_with("pub fn ") || item.starts_with("pub async fn ");
            if !public || length > ENTRY_POINT_LINES {
                let name = item.split("fn ").nth(1).unwrap_or(item);
                let name = name.split(['(', '<']).next().unwrap_or(name);
                out.push(format!("{name} ({length} lines)"));
            }
            at += 1;
        }
    }
    out
}

#[test]
fn impl_client_outside_client_rs_holds_only_public_entry_points() {
    let mut found = Vec::new();
    let mut blocks = 0;
    for (module, code) in modules() {
        blocks += code.matches("\nimpl Client {").count();
        if module != "client" {
            let offenders = not_entry_points(&code);
            found.extend(offenders.into_iter().map(|o| format!("{module}: {o}")));
        }
    }
    assert!(blocks >= 5, "the scan found {blocks} impl Client blocks");
    assert!(
        found.is_empty(),
        "not a short public entry point: {found:?}"
    );
}

/// The scan itself: a private method or a long public one in an
/// `impl Client` is seen, a short public one passes.
#[test]
fn the_entry_point_scan_sees_private_and_long_methods() {
    let body = "        x();\n".repeat(ENTRY_POINT_LINES);
    let code = format!(
        "impl Client {{\n    pub fn short(&self) {{\n        x();\n    }}\n\n    fn hidden(&self) {{\n    }}\n\n    pub async fn long(&self) {{\n{body}    }}\n}}\n"
    );
    let found = not_entry_points(&code);
    let long = format!("long ({} lines)", ENTRY_POINT_LINES + 2);
    assert_eq!(found, ["hidden (2 lines)".to_string(), long]);
}
