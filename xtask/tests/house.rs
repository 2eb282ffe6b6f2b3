//! The house's tidy check: in every crate's hand-written `src/` (generated
//! crates, integration suites, benches, fuzz targets and unit tests aside) no
//! function is longer than 80 lines, and the modules (files) of a crate import
//! each other without a circle. The modules are found by following `mod`
//! declarations from each crate root; an arrow is any path a file names
//! (`use`, an expression, a type, a macro's tokens) through `crate::`,
//! `super::` or `self::`, to the file of the longest module it names (an
//! item re-exported by `lib.rs` is `lib.rs`'s). A parent naming its own
//! children by their bare names draws no arrow.
//!
//! The source is read with `syn` and measured with span locations: strings,
//! raw strings, comments and lifetimes cannot fool the count.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// The longest a hand-written function may be, signature to closing brace.
const MAX_LINES: usize = 80;

/// Directories that hold no hand-written crate source.
const SKIPPED: &[&str] = &["generated", "tests", "benches", "fuzz", "target"];

/// A function over the limit.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct LongFn {
    krate: String,
    file: String,
    line: usize,
    name: String,
    lines: usize,
}

impl fmt::Display for LongFn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            krate,
            file,
            line,
            name,
            lines,
        } = self;
        write!(f, "{krate}/{file}:{line} fn {name}: {lines} lines")
    }
}

/// A set of files of one crate that import each other round.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Circle {
    krate: String,
    files: Vec<String>,
}

impl fmt::Display for Circle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.krate, self.files.join(" ⇄ "))
    }
}

/// What one file of a crate holds: its long functions, the modules it
/// defines, the module paths it names and the files of its child modules.
#[derive(Debug, Default)]
struct Scanned {
    /// Functions over the limit: line, name, length.
    long: Vec<(usize, String, usize)>,
    /// Module paths (inline modules included) defined in this file.
    defines: Vec<Vec<String>>,
    /// Paths named, made absolute from the crate root.
    names: Vec<Vec<String>>,
    /// Child modules declared here that live in files of their own.
    children: Vec<(Vec<String>, PathBuf)>,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace")
        .to_path_buf()
}

/// The crate directories of the house (relative to the root), each with `src/`.
fn crates(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a readable directory") {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if !path.is_dir() || name.starts_with('.') || SKIPPED.contains(&name.as_ref()) {
                continue;
            }
            if path.join("Cargo.toml").exists() && path.join("src").is_dir() {
                let rel = path.strip_prefix(root).expect("below the root");
                out.push(rel.to_string_lossy().into_owned());
            } else if path
                .strip_prefix(root)
                .is_ok_and(|r| r.components().count() < 2)
            {
                dirs.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Whether an item is test code: `#[cfg(test)]` or `#[test]`.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| match &a.meta {
        syn::Meta::Path(p) => p.is_ident("test"),
        syn::Meta::List(l) => l.path.is_ident("cfg") && l.tokens.to_string() == "test",
        syn::Meta::NameValue(_) => false,
    })
}

/// The `#[path = "…"]` of a `mod` declaration, if it has one.
fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// Walks one file: functions and their lengths, the modules it defines and
/// the module paths it names.
struct Walker {
    /// The module the walker stands in, from the crate root.
    module: Vec<String>,
    /// Where `mod x;` of the current module finds `x.rs` / `x/mod.rs`.
    dir: PathBuf,
    out: Scanned,
}

impl Walker {
    fn function(&mut self, name: &syn::Ident, sig: &syn::Signature, close: proc_macro2::Span) {
        let start = sig.fn_token.span.start().line;
        let lines = close.end().line + 1 - start;
        if lines > MAX_LINES {
            self.out.long.push((start, name.to_string(), lines));
        }
    }

    /// Makes a path absolute from the crate root, if it starts from it.
    fn absolute(&self, segments: &[String]) -> Option<Vec<String>> {
        let mut at = match segments.first().map(String::as_str) {
            Some("crate") => Vec::new(),
            Some("self") | Some("super") => self.module.clone(),
            // A bare path: another crate, an item in scope, or a child the
            // parent declares (the parent's own business, not an arrow).
            _ => return None,
        };
        let mut rest = if segments[0] == "crate" {
            &segments[1..]
        } else {
            segments
        };
        while let Some(first) = rest.first() {
            match first.as_str() {
                "self" => {}
                "super" => {
                    at.pop()?;
                }
                _ => break,
            }
            rest = &rest[1..];
        }
        at.extend(rest.iter().cloned());
        Some(at)
    }

    fn name(&mut self, segments: Vec<String>) {
        if let Some(path) = self.absolute(&segments) {
            self.out.names.push(path);
        }
    }
}

/// Flattens a `use` tree into its paths.
fn use_paths(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_paths(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => out.push([prefix.clone(), vec![n.ident.to_string()]].concat()),
        syn::UseTree::Rename(r) => out.push([prefix.clone(), vec![r.ident.to_string()]].concat()),
        syn::UseTree::Glob(_) => out.push(prefix.clone()),
        syn::UseTree::Group(g) => g.items.iter().for_each(|t| use_paths(t, prefix, out)),
    }
}

/// The `crate::a::b` and `super::c` paths written inside a macro's tokens.
fn macro_paths(tokens: TokenStream, out: &mut Vec<Vec<String>>) {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let mut i = 0;
    while i < trees.len() {
        match &trees[i] {
            TokenTree::Group(g) => macro_paths(g.stream(), out),
            TokenTree::Ident(id)
                if ["crate", "super", "self"].contains(&id.to_string().as_str()) =>
            {
                let mut path = vec![id.to_string()];
                // `ident` `:` `:` `ident` …
                while let (
                    Some(TokenTree::Punct(a)),
                    Some(TokenTree::Punct(b)),
                    Some(TokenTree::Ident(next)),
                ) = (trees.get(i + 1), trees.get(i + 2), trees.get(i + 3))
                {
                    if a.as_char() != ':' || b.as_char() != ':' {
                        break;
                    }
                    path.push(next.to_string());
                    i += 3;
                }
                if path.len() > 1 {
                    out.push(path);
                }
            }
            _ => {}
        }
        i += 1;
    }
}

impl<'ast> Visit<'ast> for Walker {
    fn visit_item_fn(&mut self, i: &'ast syn::ItemFn) {
        if is_test(&i.attrs) {
            return;
        }
        self.function(&i.sig.ident, &i.sig, i.block.brace_token.span.close());
        syn::visit::visit_item_fn(self, i);
    }

    fn visit_impl_item_fn(&mut self, i: &'ast syn::ImplItemFn) {
        if is_test(&i.attrs) {
            return;
        }
        self.function(&i.sig.ident, &i.sig, i.block.brace_token.span.close());
        syn::visit::visit_impl_item_fn(self, i);
    }

    fn visit_trait_item_fn(&mut self, i: &'ast syn::TraitItemFn) {
        if let Some(block) = &i.default {
            self.function(&i.sig.ident, &i.sig, block.brace_token.span.close());
        }
        syn::visit::visit_trait_item_fn(self, i);
    }

    fn visit_item_mod(&mut self, i: &'ast syn::ItemMod) {
        if is_test(&i.attrs) {
            return;
        }
        let mut module = self.module.clone();
        module.push(i.ident.to_string());
        let dir = self.dir.join(i.ident.to_string());
        match &i.content {
            Some((_, items)) => {
                self.out.defines.push(module.clone());
                let outer = std::mem::replace(&mut self.module, module);
                let outer_dir = std::mem::replace(&mut self.dir, dir);
                items.iter().for_each(|item| self.visit_item(item));
                self.module = outer;
                self.dir = outer_dir;
            }
            None => {
                let file = match path_attr(&i.attrs) {
                    Some(path) => self.dir.parent().expect("a module directory").join(path),
                    None if dir.join("mod.rs").exists() => dir.join("mod.rs"),
                    None => dir.with_extension("rs"),
                };
                self.out.children.push((module, file));
            }
        }
    }

    fn visit_item_use(&mut self, i: &'ast syn::ItemUse) {
        let mut paths = Vec::new();
        use_paths(&i.tree, &mut Vec::new(), &mut paths);
        paths.into_iter().for_each(|p| self.name(p));
    }

    fn visit_path(&mut self, i: &'ast syn::Path) {
        self.name(i.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, i);
    }

    /// `pub(super)` and `pub(crate)` say who may see an item, not what it uses.
    fn visit_vis_restricted(&mut self, _: &'ast syn::VisRestricted) {}

    fn visit_macro(&mut self, i: &'ast syn::Macro) {
        let mut paths = Vec::new();
        macro_paths(i.tokens.clone(), &mut paths);
        paths.into_iter().for_each(|p| self.name(p));
        syn::visit::visit_macro(self, i);
    }
}

/// Reads one file as the module `module`, whose own `mod x;` live in `dir`.
fn scan(file: &Path, module: Vec<String>, dir: PathBuf) -> Scanned {
    let source =
        std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let ast = syn::parse_file(&source).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut walker = Walker {
        module: module.clone(),
        dir,
        out: Scanned::default(),
    };
    walker.out.defines.push(module);
    walker.visit_file(&ast);
    walker.out
}

/// Every file module of a crate, from each of its roots (`lib.rs`,
/// `main.rs`, `bin/*.rs`), by following its `mod` declarations.
fn crate_modules(src: &Path) -> BTreeMap<PathBuf, Scanned> {
    let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"].iter().map(|r| src.join(r)).collect();
    if let Ok(bins) = std::fs::read_dir(src.join("bin")) {
        roots.extend(bins.map(|e| e.expect("a bin entry").path()));
    }
    let mut files = BTreeMap::new();
    let mut todo: Vec<(PathBuf, Vec<String>)> = roots
        .into_iter()
        .filter(|r| r.is_file())
        .map(|r| (r, Vec::new()))
        .collect();
    while let Some((file, module)) = todo.pop() {
        // A `#[path]` out of `src/` (a bench's shared inputs) is not this crate's source.
        let Ok(file) = file.canonicalize() else {
            continue;
        };
        if !file.starts_with(src) || files.contains_key(&file) {
            continue;
        }
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let dir = match name {
            "lib.rs" | "main.rs" | "mod.rs" => file.parent().expect("a parent").to_path_buf(),
            _ => file.with_extension(""),
        };
        let scanned = scan(&file, module, dir);
        todo.extend(scanned.children.iter().cloned().map(|(m, f)| (f, m)));
        files.insert(file, scanned);
    }
    files
}

/// The crate's file graph: an arrow from each file to the file of the
/// longest module prefix of each path it names.
fn file_graph(files: &BTreeMap<PathBuf, Scanned>) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let owner: BTreeMap<&[String], &PathBuf> = files
        .iter()
        .flat_map(|(file, s)| s.defines.iter().map(move |m| (m.as_slice(), file)))
        .collect();
    let mut graph = BTreeMap::new();
    for (file, scanned) in files {
        let mut targets = BTreeSet::new();
        for path in &scanned.names {
            let target = (0..=path.len()).rev().find_map(|n| owner.get(&path[..n]));
            if let Some(target) = target {
                targets.insert((*target).clone());
            }
        }
        targets.remove(file);
        graph.insert(file.clone(), targets);
    }
    graph
}

/// The strongly connected sets of more than one node (Tarjan's algorithm).
fn circles<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> Vec<Vec<N>> {
    struct Tarjan<'g, N> {
        graph: &'g BTreeMap<N, BTreeSet<N>>,
        index: BTreeMap<N, (usize, usize)>,
        stack: Vec<N>,
        found: Vec<Vec<N>>,
    }
    impl<N: Ord + Clone> Tarjan<'_, N> {
        fn visit(&mut self, node: &N) -> usize {
            let n = self.index.len();
            self.index.insert(node.clone(), (n, n));
            self.stack.push(node.clone());
            let mut low = n;
            for next in self.graph.get(node).into_iter().flatten() {
                low = match self.index.get(next) {
                    None => low.min(self.visit(next)),
                    Some(&(at, _)) if self.stack.contains(next) => low.min(at),
                    Some(_) => low,
                };
            }
            self.index.insert(node.clone(), (n, low));
            if low == n {
                let from = self
                    .stack
                    .iter()
                    .position(|s| s == node)
                    .expect("on the stack");
                let mut set = self.stack.split_off(from);
                if set.len() > 1 {
                    set.sort();
                    self.found.push(set);
                }
            }
            low
        }
    }
    let mut t = Tarjan {
        graph,
        index: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !t.index.contains_key(node) {
            t.visit(node);
        }
    }
    t.found.sort();
    t.found
}

/// The whole house: its long functions and its circles.
fn inspect(root: &Path) -> (Vec<LongFn>, Vec<Circle>) {
    let (mut long, mut found) = (Vec::new(), Vec::new());
    for krate in crates(root) {
        let (l, c) = inspect_crate(&root.join(&krate), &krate);
        long.extend(l);
        found.extend(c);
    }
    long.sort();
    (long, found)
}

/// One crate's long functions and circles, its files named from its directory.
fn inspect_crate(dir: &Path, krate: &str) -> (Vec<LongFn>, Vec<Circle>) {
    let base = dir.canonicalize().expect("the crate directory");
    let files = crate_modules(&base.join("src"));
    let rel = |f: &Path| {
        f.strip_prefix(&base)
            .expect("in the crate")
            .to_string_lossy()
            .into_owned()
    };
    let mut long = Vec::new();
    for (file, scanned) in &files {
        for (line, name, lines) in &scanned.long {
            long.push(LongFn {
                krate: krate.to_owned(),
                file: rel(file),
                line: *line,
                name: name.clone(),
                lines: *lines,
            });
        }
    }
    let found = circles(&file_graph(&files))
        .into_iter()
        .map(|set| Circle {
            krate: krate.to_owned(),
            files: set.iter().map(|f| rel(f)).collect(),
        })
        .collect();
    (long, found)
}

/// The scan reaches every hand-written crate (a scan that finds none passes
/// anything) and none of the generated ones.
#[test]
fn the_scan_reaches_every_crate() {
    let found = crates(&root());
    let expected = [
        "bench",
        "codegen",
        "demo",
        "fleet-redis",
        "jobs/grag",
        "policy",
        "queue",
        "runtime",
        "sim",
        "sse",
        "verify",
        "xtask",
    ];
    assert_eq!(found, expected);
}

#[test]
fn no_hand_written_function_is_over_80_lines() {
    let (long, _) = inspect(&root());
    let offenders: Vec<String> = long.iter().map(|f| f.to_string()).collect();
    assert!(
        offenders.is_empty(),
        "functions over {MAX_LINES} lines:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn no_crate_has_an_import_circle() {
    let (_, found) = inspect(&root());
    let offenders: Vec<String> = found.iter().map(|c| c.to_string()).collect();
    assert!(
        offenders.is_empty(),
        "import circles:\n{}",
        offenders.join("\n")
    );
}

/// The check itself, on a crate written here: braces in strings, raw
/// strings, chars and comments do not move a function's end; a function of
/// exactly the limit passes; test code and undeclared files are left out;
/// `pub(super)` draws no arrow; an import back up closes a circle.
#[test]
fn the_check_sees_long_functions_and_circles() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    let filler = |n: usize| "    let _ = 1;\n".repeat(n);
    // 1 + 4 + (MAX - 4) + 1 lines.
    let tricky = format!(
        "pub fn tricky() {{\n    let _ = \"}}\";\n    let _ = r#\"}}\"#;\n    let _ = '}}';\n    // }}\n{}}}\n",
        filler(MAX_LINES - 4)
    );
    // 1 + (MAX - 2) + 1 + 1 lines.
    let long = format!(
        "pub(super) fn long<'a>(x: &'a str) -> &'a str {{\n{}    x\n}}\n",
        filler(MAX_LINES - 2)
    );
    // Exactly the limit.
    let exact = format!("fn exact() {{\n{}}}\n", filler(MAX_LINES - 2));
    let b = format!(
        "pub struct B;\npub(crate) fn f(_: crate::a::X) {{}}\n{tricky}{exact}#[cfg(test)]\nmod tests {{\n{long}}}\n"
    );
    let files = [
        ("lib.rs", "mod a;\nmod b;\npub struct Root;\n".to_owned()),
        (
            "a/mod.rs",
            "mod inner;\nuse self::inner::long;\nuse crate::b::B;\n".to_owned(),
        ),
        ("a/inner.rs", format!("use super::super::Root;\n{long}")),
        ("b.rs", b),
        ("c.rs", long.clone()),
    ];
    for (name, text) in &files {
        std::fs::write(src.join(name), text).unwrap();
    }
    let (long, found) = inspect_crate(dir.path(), "toy");
    let seen: Vec<(&str, usize, &str, usize)> = long
        .iter()
        .map(|f| (f.file.as_str(), f.line, f.name.as_str(), f.lines))
        .collect();
    assert_eq!(
        seen,
        [
            ("src/a/inner.rs", 2, "long", MAX_LINES + 1),
            ("src/b.rs", 3, "tricky", MAX_LINES + 2),
        ]
    );
    let circles: Vec<Vec<String>> = found.into_iter().map(|c| c.files).collect();
    assert_eq!(circles, [["src/a/mod.rs", "src/b.rs"]]);
}
