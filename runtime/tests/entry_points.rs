//! The runtime's modules import each other as a house is built: no
//! circles, no import back up through the crate's facade (`lib.rs`), and
//! nothing below the pipeline names the client.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Modules that may name `crate::client` (each with the modules inside it):
/// the client itself, the layers that run calls with it and the breaker's
/// life-cycle, which spawns probes and warm-ups with its parts.
const ABOVE_CLIENT: &[&str] = &[
    "client",
    "pipeline",
    "breaker::admit",
    "breaker::probe",
    "events",
    "follow",
    "turn",
    "features",
];

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

/// The `crate::…` paths a module's code names (comments left out), with
/// `use crate::{a, b::c}` groups and `super::` expanded.
fn paths(module: &str, is_dir: bool, code: &str) -> Vec<String> {
    let code: String = code
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let parent = match is_dir {
        true => module.to_string(),
        false => module.rsplit_once("::").map_or("", |(p, _)| p).to_string(),
    };
    let mut out = Vec::new();
    for (prefix, base) in [("crate::", String::new()), ("super::", parent)] {
        let mut rest = code.as_str();
        while let Some(at) = rest.find(prefix) {
            let before = rest[..at].chars().last();
            rest = &rest[at + prefix.len()..];
            if before.is_some_and(|c| c == '$' || c.is_alphanumeric() || c == '_') {
                continue;
            }
            let group = rest.starts_with('{');
            let end = match group {
                true => rest.find('}').map_or(rest.len(), |e| e + 1),
                false => rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(rest.len()),
            };
            let text = &rest[..end];
            let items: Vec<&str> = match group {
                true => text
                    .trim_matches(|c| c == '{' || c == '}')
                    .split(',')
                    .collect(),
                false => vec![text],
            };
            for item in items {
                let item = item.trim().trim_end_matches("::");
                if item.is_empty() {
                    continue;
                }
                out.push(match base.is_empty() {
                    true => item.to_string(),
                    false => format!("{base}::{item}"),
                });
            }
        }
    }
    out
}

/// Each module's imports, resolved to the longest module a path names;
/// a path naming no module goes through the facade (`lib`).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph = BTreeMap::new();
    for (module, code) in &modules {
        let is_dir = root.join(module.replace("::", "/")).join("mod.rs").exists();
        let mut targets = BTreeSet::new();
        for path in paths(module, is_dir, code) {
            let segments: Vec<&str> = path.split("::").collect();
            let target = (1..=segments.len())
                .rev()
                .map(|n| segments[..n].join("::"))
                .find(|m| modules.contains_key(m))
                .unwrap_or_else(|| "lib".to_string());
            if &target != module {
                targets.insert(target);
            }
        }
        graph.insert(module.clone(), targets);
    }
    graph
}

fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, bool>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(node) {
            Some(true) => return None,
            Some(false) => {
                let from = stack.iter().position(|n| n == node).unwrap();
                return Some(stack[from..].to_vec());
            }
            None => {}
        }
        state.insert(node.to_string(), false);
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, state, stack) {
                return Some(found);
            }
        }
        stack.pop();
        state.insert(node.to_string(), true);
        None
    }
    let mut state = BTreeMap::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut state, &mut Vec::new()))
}

#[test]
fn the_module_graph_has_no_circle() {
    let graph = graph();
    assert!(graph.len() > 20, "the scan found {} modules", graph.len());
    assert_eq!(cycle(&graph), None, "a circle of imports");
}

#[test]
fn no_module_imports_through_the_facade() {
    let upward: Vec<_> = graph()
        .into_iter()
        .filter(|(m, targets)| m != "lib" && targets.contains("lib"))
        .map(|(m, _)| m)
        .collect();
    assert!(upward.is_empty(), "import through lib.rs: {upward:?}");
}

#[test]
fn nothing_below_the_pipeline_names_the_client() {
    let below: Vec<_> = graph()
        .into_iter()
        .filter(|(m, targets)| {
            let above = ABOVE_CLIENT
                .iter()
                .any(|a| m == a || m.starts_with(&format!("{a}::")));
            targets.contains("client") && !above
        })
        .map(|(m, _)| m)
        .collect();
    assert!(
        below.is_empty(),
        "below the pipeline, naming the client: {below:?}"
    );
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

/// The scan itself: a circle, an import through the facade and a group
/// import are seen (a check that sees nothing would pass anything).
#[test]
fn the_scan_sees_circles_groups_and_the_facade() {
    let code = "use crate::{a::X, b};\nfn f() { crate::Thing::new(); super::c::d(); }";
    let found = paths("x::y", false, code);
    assert_eq!(found, ["a::X", "b", "Thing::new", "x::c::d"]);
    let mut graph = BTreeMap::new();
    graph.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    graph.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    assert!(cycle(&graph).is_some());
}
