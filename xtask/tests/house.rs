//! The house's tidy check: in every crate's hand-written `src/` (generated
//! crates, integration suites, benches, fuzz targets and unit tests aside) no
//! function is longer than 80 lines, and the modules (files) of a crate import
//! each other without a circle. The modules are found by following `mod`
//! declarations from each crate root; an arrow is any path a file names
//! (`use`, an expression, a type, a macro's tokens) through `crate::`,
//! `super::` or `self::`, to the file of the longest module it names (an
//! item re-exported by `lib.rs` is `lib.rs`'s), and a derive of
//! [`DERIVE_IMPORTS`] to the module its expansion names. A parent naming its
//! own children by their bare names draws no arrow, except in the crates of
//! [`STRICT_TREES`].
//!
//! Some crates are held to more: in [`FACADES`] the root is only a facade,
//! so no module names an item through it; [`NAMED_ONLY_BY`] says which
//! modules alone may name a module (the runtime's client is named only by
//! the layers above it).
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

/// Derives whose expansion names a module of the crate that applies them
/// (the scan does not expand macros): applying one imports that module.
const DERIVE_IMPORTS: &[(&str, &str)] = &[("Bake", "bake"), ("Scale", "scale")];

/// Modules only some of their crate's modules may name: (crate, module,
/// the modules, each with those inside it, that may).
const NAMED_ONLY_BY: &[(&str, &str, &[&str])] = &[(
    // The client is named by the layers that run calls with it and by the
    // breaker's life-cycle, which spawns probes and warm-ups with its parts;
    // nothing below the pipeline names it.
    "runtime",
    "client",
    &[
        "client",
        "pipeline",
        "breaker::admit",
        "breaker::probe",
        "events",
        "follow",
        "turn",
        "features",
    ],
)];

/// Crates whose root is only their facade: no module names an item through it.
const FACADES: &[&str] = &["policy", "runtime", "sim"];

/// Crates whose modules never name their parent's items: a parent naming a
/// child by its bare name is an arrow too, so a child naming the parent back
/// closes a circle.
const STRICT_TREES: &[&str] = &["sim"];

/// The rules a crate is held to beyond the house's own.
#[derive(Default)]
struct Rules {
    facade: bool,
    strict_tree: bool,
    /// (module, the modules that may name it).
    named_only_by: Vec<(&'static str, &'static [&'static str])>,
}

impl Rules {
    fn of(krate: &str) -> Rules {
        Rules {
            facade: FACADES.contains(&krate),
            strict_tree: STRICT_TREES.contains(&krate),
            named_only_by: (NAMED_ONLY_BY.iter())
                .filter(|(k, _, _)| *k == krate)
                .map(|(_, module, by)| (*module, *by))
                .collect(),
        }
    }
}

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
    /// The bare paths that name a child of the module they were named in,
    /// made absolute.
    children_named: Vec<Vec<String>>,
    /// Child modules declared here that live in files of their own.
    children: Vec<(Vec<String>, PathBuf)>,
    /// The derives this file applies.
    derives: Vec<String>,
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
    /// Bare paths named, with the module they were named in: whether one
    /// names a child is known once every `mod` of the file is seen.
    bare: Vec<(Vec<String>, Vec<String>)>,
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
        match self.absolute(&segments) {
            Some(path) => self.out.names.push(path),
            None if segments.len() > 1 => self.bare.push((self.module.clone(), segments)),
            None => {}
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
            // `$crate::` in a `macro_rules!` is the path its callers see.
            TokenTree::Ident(id)
                if ["crate", "super", "self"].contains(&id.to_string().as_str())
                    && !matches!(i.checked_sub(1).and_then(|p| trees.get(p)),
                        Some(TokenTree::Punct(p)) if p.as_char() == '$') =>
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

    fn visit_attribute(&mut self, i: &'ast syn::Attribute) {
        if i.path().is_ident("derive") {
            let _ = i.parse_nested_meta(|meta| {
                if let Some(last) = meta.path.segments.last() {
                    self.out.derives.push(last.ident.to_string());
                }
                Ok(())
            });
        }
        syn::visit::visit_attribute(self, i);
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
        bare: Vec::new(),
    };
    walker.out.defines.push(module);
    walker.visit_file(&ast);
    let mut out = walker.out;
    let declared: BTreeSet<Vec<String>> = (out.defines.iter().cloned())
        .chain(out.children.iter().map(|(m, _)| m.clone()))
        .collect();
    for (at, path) in walker.bare {
        let child = [at.as_slice(), &path[..1]].concat();
        if declared.contains(&child) {
            out.children_named.push([at, path].concat());
        }
    }
    out
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
fn file_graph(
    files: &BTreeMap<PathBuf, Scanned>,
    strict: bool,
) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let owner: BTreeMap<&[String], &PathBuf> = files
        .iter()
        .flat_map(|(file, s)| s.defines.iter().map(move |m| (m.as_slice(), file)))
        .collect();
    let mut graph = BTreeMap::new();
    for (file, scanned) in files {
        let mut targets = BTreeSet::new();
        let children = scanned.children_named.iter().filter(|_| strict);
        for path in scanned.names.iter().chain(children) {
            let target = (0..=path.len()).rev().find_map(|n| owner.get(&path[..n]));
            if let Some(target) = target {
                targets.insert((*target).clone());
            }
        }
        let derived = DERIVE_IMPORTS
            .iter()
            .filter(|(derive, _)| scanned.derives.iter().any(|d| d == derive))
            .filter_map(|(_, module)| owner.get([module.to_string()].as_slice()));
        targets.extend(derived.map(|f| (*f).clone()));
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

/// What the check finds in one crate, or in the whole house.
#[derive(Debug, Default)]
struct Findings {
    long: Vec<LongFn>,
    circles: Vec<Circle>,
    /// Modules naming an item through their crate's root (`lib.rs`,
    /// `main.rs`) instead of the module that defines it, as `crate/file`.
    upward: Vec<String>,
    /// Modules naming one of [`NAMED_ONLY_BY`] they may not, as `crate/file → module`.
    layering: Vec<String>,
}

/// The whole house.
fn inspect(root: &Path) -> Findings {
    let mut all = Findings::default();
    for krate in crates(root) {
        let found = inspect_crate(&root.join(&krate), &krate, &Rules::of(&krate));
        all.long.extend(found.long);
        all.circles.extend(found.circles);
        all.upward.extend(found.upward);
        all.layering.extend(found.layering);
    }
    all.long.sort();
    all
}

/// One crate, its files named from its directory.
fn inspect_crate(dir: &Path, krate: &str, rules: &Rules) -> Findings {
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
    let graph = file_graph(&files, rules.strict_tree);
    let module = |f: &PathBuf| files[f].defines[0].join("::");
    let roots: BTreeSet<&PathBuf> = files.keys().filter(|f| module(f).is_empty()).collect();
    let upward = (graph.iter())
        .filter(|_| rules.facade)
        .filter(|(file, targets)| {
            !roots.contains(file) && targets.iter().any(|t| roots.contains(t))
        })
        .map(|(file, _)| format!("{krate}/{}", rel(file)))
        .collect();
    let mut layering = Vec::new();
    for (guarded, allowed) in &rules.named_only_by {
        let may = |m: &str| (allowed.iter()).any(|a| m == *a || m.starts_with(&format!("{a}::")));
        for (file, targets) in &graph {
            let root = roots.contains(file);
            if targets.iter().any(|t| module(t) == *guarded) && !may(&module(file)) && !root {
                layering.push(format!("{krate}/{} → {guarded}", rel(file)));
            }
        }
    }
    let circles = circles(&graph)
        .into_iter()
        .map(|set| Circle {
            krate: krate.to_owned(),
            files: set.iter().map(|f| rel(f)).collect(),
        })
        .collect();
    Findings {
        long,
        circles,
        upward,
        layering,
    }
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
    let offenders: Vec<String> = inspect(&root())
        .long
        .iter()
        .map(|f| f.to_string())
        .collect();
    assert!(
        offenders.is_empty(),
        "functions over {MAX_LINES} lines:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn no_crate_has_an_import_circle() {
    let found = inspect(&root()).circles;
    let offenders: Vec<String> = found.iter().map(|c| c.to_string()).collect();
    assert!(
        offenders.is_empty(),
        "import circles:\n{}",
        offenders.join("\n")
    );
}

/// A crate's root is its facade: its modules name each other, never an item
/// through the root, so the facade can change without moving them.
#[test]
fn no_module_imports_through_its_crate_s_root() {
    let upward = inspect(&root()).upward;
    assert!(
        upward.is_empty(),
        "naming items through the crate root:\n{}",
        upward.join("\n")
    );
}

#[test]
fn only_the_layers_above_a_guarded_module_name_it() {
    let layering = inspect(&root()).layering;
    assert!(
        layering.is_empty(),
        "naming a module from below it:\n{}",
        layering.join("\n")
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
    let Findings {
        long,
        circles: found,
        ..
    } = inspect_crate(dir.path(), "toy", &Rules::default());
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

/// The crate rules, on a crate written here: an import through the root, a
/// guarded module named from below, a derive's import closing a circle and,
/// in a strict tree, a child naming its parent back.
#[test]
fn the_check_sees_facade_imports_layers_derives_and_strict_trees() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("tree")).unwrap();
    let files = [
        (
            "lib.rs",
            "mod client;\nmod low;\nmod scale;\nmod tree;\nmod kinds;\npub use client::Client;\n",
        ),
        ("client.rs", "pub struct Client;\n"),
        (
            "low.rs",
            "pub fn f(_: crate::client::Client, _: crate::Client) {}\n",
        ),
        ("scale.rs", "pub fn g(_: crate::kinds::K) {}\n"),
        ("kinds.rs", "#[derive(Debug, Scale)]\npub struct K;\n"),
        (
            "tree/mod.rs",
            "mod leaf;\npub struct T;\nfn h() { leaf::l(); }\n",
        ),
        ("tree/leaf.rs", "pub fn l(_: super::T) {}\n"),
    ];
    for (name, text) in files {
        std::fs::write(src.join(name), text).unwrap();
    }
    let rules = Rules {
        facade: true,
        strict_tree: true,
        named_only_by: vec![("client", &["tree"])],
    };
    let found = inspect_crate(dir.path(), "toy", &rules);
    assert_eq!(found.upward, ["toy/src/low.rs"]);
    assert_eq!(found.layering, ["toy/src/low.rs → client"]);
    let circles: Vec<Vec<String>> = found.circles.into_iter().map(|c| c.files).collect();
    assert_eq!(
        circles,
        [
            vec!["src/kinds.rs", "src/scale.rs"],
            vec!["src/tree/leaf.rs", "src/tree/mod.rs"]
        ]
    );
    // Without a strict tree, a child naming its parent is the house's norm.
    let relaxed = inspect_crate(dir.path(), "toy", &Rules::default());
    assert_eq!(relaxed.circles.len(), 1, "{:?}", relaxed.circles);
    assert!(relaxed.upward.is_empty() && relaxed.layering.is_empty());
}

/// The scan follows what the old per-crate checks followed in the real
/// tree: a derive's expansion in the vocabulary, and a parent's bare names
/// of its children in the simulator.
#[test]
fn the_scan_sees_the_real_tree_s_derives_and_children() {
    let arrow = |krate: &str, from: &str, to: &str| {
        let base = root().join(krate).canonicalize().unwrap();
        let files = crate_modules(&base.join("src"));
        let graph = file_graph(&files, Rules::of(krate).strict_tree);
        graph[&base.join(from)].contains(&base.join(to))
    };
    assert!(arrow("policy", "src/policy/breaker.rs", "src/scale.rs"));
    assert!(arrow(
        "sim",
        "src/platform/mod.rs",
        "src/platform/record.rs"
    ));
    assert!(arrow("runtime", "src/pipeline/mod.rs", "src/client.rs"));
}
