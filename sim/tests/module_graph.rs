//! The simulator's modules import each other without a circle, and none
//! imports back up through the crate's facade (`lib.rs`): the stages and
//! handlers name the module that holds what they use.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every module of `src/` (as `a::b`, the root as `lib`) and its code without unit tests and comments.
fn modules() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(&root).unwrap().with_extension("");
                let name = rel.to_string_lossy().replace('/', "::");
                let name = name.strip_suffix("::mod").unwrap_or(&name).to_owned();
                let source = std::fs::read_to_string(&path).unwrap();
                out.insert(name, code_of(&source));
            }
        }
    }
    out
}

/// `source` without its unit tests and its comments.
fn code_of(source: &str) -> String {
    let source = source.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    source
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a use-tree starting at `text` names, groups expanded
/// (`a::{b, c::{d}}` gives `a::b`, `a::c::d`).
fn tree(text: &str, base: &str, out: &mut Vec<String>) -> usize {
    let mut path = base.to_owned();
    let mut at = 0;
    let bytes = text.as_bytes();
    while at < bytes.len() {
        let c = bytes[at] as char;
        if c.is_alphanumeric() || c == '_' || c == ':' {
            path.push(c);
            at += 1;
        } else if c == '{' {
            at += 1;
            loop {
                while at < bytes.len() && (bytes[at] as char).is_whitespace() {
                    at += 1;
                }
                if at >= bytes.len() || bytes[at] == b'}' {
                    return at + 1;
                }
                at += tree(&text[at..], &path, out);
                if at < bytes.len() && bytes[at] == b',' {
                    at += 1;
                }
            }
        } else {
            break;
        }
    }
    let path = path.trim_end_matches("::").trim_end_matches("::self");
    if !path.is_empty() {
        out.push(path.to_owned());
    }
    at
}

/// The crate paths a module's code names: `crate::…`, `super::…`, and the
/// paths into its own child modules (`mod x;` then `x::…`).
fn paths(module: &str, code: &str) -> Vec<String> {
    let own = match module {
        "lib" => String::new(),
        m => format!("{m}::"),
    };
    // `super` of `a::b` is `a`, of a top module the crate root.
    let parent = module
        .rsplit_once("::")
        .map_or(String::new(), |(p, _)| format!("{p}::"));
    let children: Vec<String> = code
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l
                .strip_prefix("pub(crate) ")
                .or(l.strip_prefix("pub "))
                .unwrap_or(l);
            l.strip_prefix("mod ")?.strip_suffix(';').map(str::to_owned)
        })
        .collect();
    let mut prefixes = vec![
        ("crate::".to_owned(), String::new()),
        ("super::".to_owned(), parent),
    ];
    for child in children {
        prefixes.push((format!("{child}::"), format!("{own}{child}::")));
    }
    let mut out = Vec::new();
    for (prefix, base) in prefixes {
        let mut rest = code;
        while let Some(at) = rest.find(&prefix) {
            let before = rest[..at].chars().last();
            rest = &rest[at + prefix.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':' || c == '$') {
                continue;
            }
            tree(rest, &base, &mut out);
        }
    }
    out
}

/// Each module's imports, each resolved to the longest module its path
/// names; a path that names none goes through the facade (`lib`).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules();
    let mut graph = BTreeMap::new();
    for (module, code) in &modules {
        let mut targets = BTreeSet::new();
        for path in paths(module, code) {
            let segments: Vec<&str> = path.split("::").collect();
            let target = (1..=segments.len())
                .rev()
                .map(|n| segments[..n].join("::"))
                .find(|m| modules.contains_key(m))
                .unwrap_or_else(|| "lib".to_owned());
            if &target != module {
                targets.insert(target);
            }
        }
        graph.insert(module.clone(), targets);
    }
    graph
}

/// A circle of imports, if the graph has one.
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
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, done, stack) {
                return Some(found);
            }
        }
        stack.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut done, &mut Vec::new()))
}

#[test]
fn the_simulator_s_modules_have_no_circle() {
    let graph = graph();
    assert!(graph.len() > 20, "the scan found {} modules", graph.len());
    assert!(
        graph["platform"].contains("platform::record"),
        "the scan misses a parent's imports of its children: {:?}",
        graph["platform"]
    );
    assert_eq!(circle(&graph), None, "a circle of imports");
}

#[test]
fn no_module_imports_back_up_through_the_facade() {
    let upward: Vec<_> = graph()
        .into_iter()
        .filter(|(m, targets)| m != "lib" && targets.contains("lib"))
        .collect();
    assert!(upward.is_empty(), "imports through lib.rs: {upward:?}");
}

/// The scan itself: groups, `super`, children and the facade are seen, and
/// a circle is found (a check that sees nothing would pass anything).
#[test]
fn the_scan_sees_groups_parents_children_and_circles() {
    let code = "mod x;\nuse crate::{a::{B, c::D}, e};\nfn f() { crate::Thing::new(); super::g::h(); x::y(); }";
    let found = paths("p::q", code);
    assert_eq!(
        found,
        [
            "a::B",
            "a::c::D",
            "e",
            "Thing::new",
            "p::g::h",
            "p::q::x::y"
        ]
    );
    let mut graph = BTreeMap::new();
    graph.insert("a".to_owned(), BTreeSet::from(["b".to_owned()]));
    graph.insert("b".to_owned(), BTreeSet::from(["c".to_owned()]));
    assert_eq!(circle(&graph), None);
    graph.insert("c".to_owned(), BTreeSet::from(["a".to_owned()]));
    assert_eq!(
        circle(&graph),
        Some(vec!["a".into(), "b".into(), "c".into()])
    );
}
