//! The vocabulary's modules import each other one way only: no circle, and
//! none through the crate's facade (`lib.rs`). A derive counts as an import
//! of the module its expansion names (`Bake` of `bake`, `Scale` of `scale`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every module of `src/` (as `a::b`) and its code, without its unit tests
/// and comments.
fn modules() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for path in std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()) {
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(&root).unwrap().with_extension("");
                let name = rel.to_string_lossy().replace('/', "::");
                let name = name.strip_suffix("::mod").unwrap_or(&name).to_string();
                let source = std::fs::read_to_string(&path).unwrap();
                let code = source.split("#[cfg(test)]\nmod tests").next().unwrap();
                let code: Vec<&str> = code
                    .lines()
                    .map(|l| l.split("//").next().unwrap())
                    .collect();
                out.insert(name, code.join("\n"));
            }
        }
    }
    out
}

/// The module paths `code` names: `crate::a::B`, each item of a
/// `crate::{a, b::C}` group, and the modules its derives expand to.
fn paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        if code[..at].ends_with(|c: char| c == '$' || c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[at + "crate::".len()..];
        let text = match rest.strip_prefix('{') {
            Some(group) => &group[..group.find('}').unwrap()],
            None => {
                &rest[..rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .unwrap()]
            }
        };
        out.extend(
            text.split(',')
                .map(|i| i.trim().trim_end_matches("::").to_string()),
        );
    }
    for derive in code.match_indices("derive(").map(|(at, _)| &code[at..]) {
        let list = &derive[..derive.find(')').unwrap()];
        for (word, module) in [("Bake", "bake"), ("Scale", "scale")] {
            if list
                .split(|c: char| !c.is_alphanumeric())
                .any(|w| w == word)
            {
                out.push(module.to_string());
            }
        }
    }
    out.retain(|p| !p.is_empty());
    out
}

/// Each module's imports, resolved to the longest module a path names; a
/// path naming no module goes through the facade (`lib`).
fn graph(modules: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let resolve = |path: &str| {
        let segments: Vec<&str> = path.split("::").collect();
        (1..=segments.len())
            .rev()
            .map(|n| segments[..n].join("::"))
            .find(|m| modules.contains_key(m))
            .unwrap_or_else(|| "lib".to_string())
    };
    (modules.iter())
        .map(|(module, code)| {
            let targets = paths(code).into_iter().map(|p| resolve(&p));
            (module.clone(), targets.filter(|t| t != module).collect())
        })
        .collect()
}

/// A circle of `graph`, if it has one: the modules on it, in order.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(from) = stack.iter().position(|n| n == node) {
            return Some(stack[from..].to_vec());
        }
        if !done.insert(node.to_string()) {
            return None;
        }
        stack.push(node.to_string());
        let found = graph
            .get(node)
            .into_iter()
            .flatten()
            .find_map(|next| visit(next, graph, done, stack));
        stack.pop();
        found
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut done, &mut Vec::new()))
}

#[test]
fn the_module_graph_has_no_circle() {
    let graph = graph(&modules());
    assert!(graph.len() > 15, "the scan found {} modules", graph.len());
    assert!(graph["policy::breaker"].contains("scale"), "{graph:?}");
    assert_eq!(circle(&graph), None, "a circle of imports: {graph:?}");
}

#[test]
fn no_module_imports_through_the_facade() {
    let upward: Vec<_> = graph(&modules())
        .into_iter()
        .filter(|(m, targets)| m != "lib" && targets.contains("lib"))
        .map(|(m, _)| m)
        .collect();
    assert!(upward.is_empty(), "import through lib.rs: {upward:?}");
}

/// The scan itself sees groups, derives and circles: a scan that sees
/// nothing would pass anything.
#[test]
fn the_scan_sees_groups_derives_and_circles() {
    let code =
        "use crate::{a::X, b};\n#[derive(Debug, Scale)]\nstruct S(crate::c::D, $crate::e::F);";
    assert_eq!(paths(code), ["a::X", "b", "c::D", "scale"]);
    let modules: BTreeMap<String, String> = [
        ("a", "use crate::b::X;"),
        ("b", "use crate::a::Y;"),
        ("lib", ""),
    ]
    .map(|(m, c)| (m.to_string(), c.to_string()))
    .into();
    assert_eq!(
        circle(&graph(&modules)),
        Some(vec!["a".to_string(), "b".to_string()])
    );
}
