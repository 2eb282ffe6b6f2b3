//! The generator's own fuzz: seeded mutations of copies of the real spec
//! trees (`spec/grag`, `spec/core`, the toy fixture), each run through
//! `load::read_dir` and `generate` as `cargo xtask codegen` runs them.
//!
//! Every case must end in one of two ways: the generated files, or errors
//! that each name a file and a line. A panic, a hang (the case runs in a
//! thread of its own; the timeout only detects one, no case comes near it),
//! an "internal error", or a success after a mutation that must be refused
//! (a required file deleted, bytes that are not UTF-8, a dangling reference,
//! …) fails the test, with the seed and case that reproduce it.
//!
//! `cargo test -p sdk-codegen --test spec_fuzz` runs [`DEFAULT_CASES`];
//! `SPEC_FUZZ_CASES=20000` runs more, `SPEC_FUZZ_SEED=<n>` another seed,
//! `SPEC_FUZZ_CASE=<n>` only that case (with what it mutated printed), and
//! `SPEC_FUZZ_VERBOSE=1` prints every case before it runs, and
//! `SPEC_FUZZ_MINUTES=10` stops starting cases after ten minutes.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Cases of a plain `cargo test`: a few hundred, a few seconds each batch.
const DEFAULT_CASES: u64 = 200;
const DEFAULT_SEED: u64 = 0x5EC_F022;
/// Most bytes emitted per byte of spec read (plus 256 KiB).
const MAX_GROWTH: usize = 32;
/// Only a hang detector: a case takes well under a second.
const HANG: Duration = Duration::from_secs(120);

/// One spec tree, as bytes: its folder name and its files by relative path.
struct Tree {
    name: String,
    files: Vec<(PathBuf, Vec<u8>)>,
}

fn trees() -> Vec<Tree> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.parent().unwrap();
    [
        root.join("spec/grag"),
        root.join("spec/core"),
        manifest.join("tests/fixtures/toy"),
    ]
    .into_iter()
    .map(|dir| {
        let mut files = Vec::new();
        collect(&dir, &dir, &mut files);
        files.sort();
        Tree {
            name: dir.file_name().unwrap().to_string_lossy().into_owned(),
            files,
        }
    })
    .collect()
}

fn collect(base: &Path, dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(base, &path, out);
        } else {
            let bytes = std::fs::read(&path).unwrap();
            out.push((path.strip_prefix(base).unwrap().to_path_buf(), bytes));
        }
    }
}

/// What one case did to its tree, for the report.
#[derive(Debug, Default)]
struct Mutations {
    done: Vec<String>,
    /// A mutation that no valid spec survives was applied.
    must_fail: bool,
}

impl Mutations {
    fn note(&mut self, must_fail: bool, what: String) {
        self.must_fail |= must_fail;
        self.done.push(what);
    }
}

/// Keys whose value names another item (or one of a closed set of words):
/// a name that exists nowhere must be refused.
const REFERENCES: &[&str] = &[
    "timeout",
    "retry",
    "budget",
    "stream",
    "probe_route",
    "canary_route",
    "fallback",
    "proven_by",
    "reconcile",
    "alert",
    "severity",
    "feature_state",
    "escalate_to",
    "lane",
    "scope",
    "method",
    "kind",
    "rule",
    "when",
    "outcome",
    "probe_timeout",
    "canary_timeout",
];

/// Keys whose value is free text (it reaches rustdoc, Markdown, TOML).
const TEXTS: &[&str] = &["doc", "copy", "action", "title", "lost_copy", "source"];

/// Printable text that is awkward in Rust docs, Markdown and TOML.
const TRICKY: &[&str] = &[
    "a `tick` \"quote\" \\ back */ /* {} <b> # hash",
    "```\nfn main() { not rust }\n```",
    "line one\nline two\n\n  indented\ttab",
    "ümlaut é 😀 \u{feff} zero\u{200b}width",
    "| table | cell |\n|---|---|",
    "%s {0} {{}} $HOME `$(x)`",
    "",
    "   ",
    "#[doc = \"x\"] //! inner",
    "\"",
];

/// Names put in place of a name everywhere it occurs: keywords, raw
/// identifiers, odd but valid names, names too long.
const RENAMES: &[&str] = &[
    "type",
    "match",
    "self",
    "typeof",
    "crate",
    "super",
    "async",
    "gen",
    "union",
    "r#x",
    "x_y_z",
    "body",
    "lib",
    "error",
    "none",
    "core",
    "std",
    "serde",
    "default",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
];

/// [`RENAMES`] for CamelCase names (types, IDs, the client).
const CAMEL_RENAMES: &[&str] = &[
    "Self",
    "String",
    "Option",
    "Error",
    "Other",
    "Unknown",
    "Default",
    "Config",
    "Client",
    "Serialize",
    "TypeId",
    "SelfId",
    "CrateId",
    "WorkspaceId",
    "OrchestratorEvent",
    "Vec",
    "Aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
];

/// Renames one name (a key of some file) everywhere in the tree, whole
/// words only: references stay consistent, so the tree often still
/// generates, through the emitter, with the new name.
fn rename_everywhere(rng: &mut StdRng, files: &mut [(PathBuf, Vec<u8>)], m: &mut Mutations) {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let texts: Vec<Option<String>> = files
        .iter()
        .map(|(_, b)| String::from_utf8(b.clone()).ok())
        .collect();
    let keys: Vec<String> = texts
        .iter()
        .flatten()
        .flat_map(|t| t.lines())
        .filter_map(|l| {
            let t = l.trim_start();
            let t = t.strip_prefix("- ").unwrap_or(t);
            let key = t.split_once(':')?.0;
            (!key.is_empty() && key.chars().all(word)).then(|| key.to_owned())
        })
        .collect();
    // Names something refers to (they occur other than as keys) keep the
    // tree consistent when renamed; a schema key (`doc`) would not.
    let mut words: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for text in texts.iter().flatten() {
        for w in text.split(|c: char| !word(c)).filter(|w| !w.is_empty()) {
            *words.entry(w).or_default() += 1;
        }
    }
    let occurrences = |name: &str| words.get(name).copied().unwrap_or(0);
    // The schema's own keys (`pub doc: Text` in spec.rs) stay as they are.
    let schema: std::collections::HashSet<&str> = include_str!("../src/spec.rs")
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            l.strip_prefix("pub ")
                .and_then(|r| r.split_once(':'))
                .map(|(k, _)| k)
                .or_else(|| {
                    l.strip_prefix("#[serde(rename = \"")?
                        .split_once('"')
                        .map(|(k, _)| k)
                })
        })
        .collect();
    let mut as_key: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for k in &keys {
        *as_key.entry(k).or_default() += 1;
    }
    let referenced: Vec<&String> = keys
        .iter()
        .filter(|k| !schema.contains(k.as_str()) && occurrences(k) > as_key[k.as_str()])
        .collect();
    let from = match referenced.len() {
        0 => &keys[rng.random_range(0..keys.len())],
        n => referenced[rng.random_range(0..n)],
    };
    let names = if from.starts_with(|c: char| c.is_ascii_uppercase()) {
        CAMEL_RENAMES
    } else {
        RENAMES
    };
    let to = names[rng.random_range(0..names.len())];
    let mut count = 0;
    for ((_, bytes), text) in files.iter_mut().zip(texts) {
        let Some(text) = text else { continue };
        let mut out = String::with_capacity(text.len());
        let mut rest = text.as_str();
        while let Some(at) = rest.find(from.as_str()) {
            let before = rest[..at].chars().next_back();
            let after = rest[at + from.len()..].chars().next();
            out.push_str(&rest[..at]);
            if before.is_some_and(word) || after.is_some_and(word) {
                out.push_str(from);
            } else {
                out.push_str(to);
                count += 1;
            }
            rest = &rest[at + from.len()..];
        }
        out.push_str(rest);
        *bytes = out.into_bytes();
    }
    m.note(
        false,
        format!("renamed `{from}` to `{to}` everywhere ({count} times)"),
    );
}

/// Keys whose value is a type expression.
const TYPED: &[&str] = &["body", "returns"];

/// A `key: value` line (in a mapping or a list entry), not a comment and
/// not the head of a block scalar: its indent, key and value.
fn key_value(line: &str) -> Option<(usize, &str, &str)> {
    let indent = line.len() - line.trim_start().len();
    let rest = line.trim_start();
    let rest = rest.strip_prefix("- ").unwrap_or(rest);
    if rest.starts_with('#') {
        return None;
    }
    let (key, value) = rest.split_once(": ")?;
    let value = value.trim();
    let plain_key = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    (plain_key && !value.is_empty() && !value.starts_with(['|', '>', '#']))
        .then_some((indent, key, value))
}

/// [`key_value`], owned: the line's lead (indent and `- `), key and value.
fn parts(line: &str) -> (String, String, String) {
    let (indent, key, value) = key_value(line).expect("a key: value line");
    let dash = if line.trim_start().starts_with("- ") {
        "- "
    } else {
        ""
    };
    (
        format!("{}{dash}", &line[..indent]),
        key.to_owned(),
        value.to_owned(),
    )
}

fn mutate(rng: &mut StdRng, files: &mut Vec<(PathBuf, Vec<u8>)>, dir: &Path, m: &mut Mutations) {
    let i = rng.random_range(0..files.len());
    let path = files[i].0.clone();
    let shown = path.display().to_string();
    let required = [
        "api.yaml",
        "policy.yaml",
        "taxonomy.yaml",
        "degradation.yaml",
    ]
    .iter()
    .any(|r| path == Path::new(r));
    // Bytes made not UTF-8 stay so: no later mutation reads them as text.
    let Ok(text) = String::from_utf8(files[i].1.clone()) else {
        return;
    };
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    if lines.is_empty() {
        lines.push(String::new());
    }
    let n = rng.random_range(0..lines.len());
    // Lines of block scalars (`doc: >-` and what it folds) are text, not keys.
    let mut block: Option<usize> = None;
    let mut kv = Vec::new();
    for (l, line) in lines.iter().enumerate() {
        let indent = line.len() - line.trim_start().len();
        if let Some(head) = block {
            if line.trim().is_empty() || indent > head {
                continue;
            }
            block = None;
        }
        let value = line.split_once(": ").map(|(_, v)| v.trim());
        if value.is_some_and(|v| v.starts_with(['|', '>'])) {
            block = Some(indent);
        }
        if key_value(line).is_some() {
            kv.push(l);
        }
    }

    let pick_kv = |rng: &mut StdRng| kv[rng.random_range(0..kv.len())];
    let at_kv = |rng: &mut StdRng| if kv.is_empty() { n } else { pick_kv(rng) };
    match rng.random_range(0..28) {
        22 | 23
            if kv
                .iter()
                .any(|&l| TEXTS.contains(&key_value(&lines[l]).unwrap().1)) =>
        {
            let texts: Vec<usize> = kv
                .iter()
                .copied()
                .filter(|&l| TEXTS.contains(&key_value(&lines[l]).unwrap().1))
                .collect();
            let l = texts[rng.random_range(0..texts.len())];
            let (lead, key, _) = parts(&lines[l]);
            let tricky = TRICKY[rng.random_range(0..TRICKY.len())];
            lines[l] = format!("{lead}{key}: {tricky:?}");
            m.note(
                false,
                format!("{shown}:{}: `{key}` set to {tricky:?}", l + 1),
            );
        }
        24..=26 => {
            rename_everywhere(rng, files, m);
            return;
        }
        0 => {
            lines.remove(n);
            m.note(false, format!("{shown}: deleted line {}", n + 1));
        }
        1 => {
            let copy = lines[n].clone();
            lines.insert(n, copy);
            m.note(false, format!("{shown}: duplicated line {}", n + 1));
        }
        2 => {
            let other = rng.random_range(0..lines.len());
            lines.swap(n, other);
            m.note(
                false,
                format!("{shown}: swapped lines {} and {}", n + 1, other + 1),
            );
        }
        3 => {
            let cut = rng.random_range(0..=lines[n].len());
            let cut = (0..=cut)
                .rev()
                .find(|&c| lines[n].is_char_boundary(c))
                .unwrap();
            lines[n].truncate(cut);
            m.note(false, format!("{shown}: truncated line {} at {cut}", n + 1));
        }
        4 => {
            let bytes = &mut files[i].1;
            let cut = rng.random_range(0..=bytes.len());
            bytes.truncate(cut);
            m.note(false, format!("{shown}: truncated the file at byte {cut}"));
            return;
        }
        5 if !kv.is_empty() => {
            let l = pick_kv(rng);
            let wrong = [
                "[1, 2]",
                "{a: 1}",
                "12345",
                "true",
                "-1",
                "4294967296",
                "~",
                "\"\"",
                "0",
                "1.5",
            ];
            let value = wrong[rng.random_range(0..wrong.len())];
            let (lead, key, _) = parts(&lines[l]);
            lines[l] = format!("{lead}{key}: {value}");
            m.note(false, format!("{shown}:{}: `{key}` set to {value}", l + 1));
        }
        6 if !kv.is_empty() => {
            let l = pick_kv(rng);
            let (lead, key, _) = parts(&lines[l]);
            let huge = "x".repeat(rng.random_range(70_000..1_200_000));
            lines[l] = format!("{lead}{key}: {huge}");
            m.note(
                true,
                format!("{shown}:{}: `{key}` set to {} bytes", l + 1, huge.len()),
            );
        }
        7 if !kv.is_empty() => {
            let l = pick_kv(rng);
            let (lead, key, value) = parts(&lines[l]);
            let controls = [
                '\r', '\u{0}', '\u{7}', '\u{1b}', '\u{7f}', '\u{85}', '\u{2028}', '\u{202e}',
            ];
            let c = controls[rng.random_range(0..controls.len())];
            let value = value.trim_matches('"');
            let escaped = format!("\\u{:04X}", c as u32);
            // Either escaped in a double-quoted string or written raw.
            let written = if rng.random_bool(0.5) {
                format!("\"{value}{escaped}x\"")
            } else {
                format!("\"{value}{c}x\"")
            };
            lines[l] = format!("{lead}{key}: {written}");
            m.note(
                true,
                format!("{shown}:{}: `{key}` got the control character {c:?}", l + 1),
            );
        }
        8 => {
            let mut bytes = lines.join("\n").into_bytes();
            let at = rng.random_range(0..=bytes.len());
            let bad: &[u8] =
                [&b"\xff"[..], b"\xc3\x28", b"\xe2\x82", b"\xf0\x9f\x98"][rng.random_range(0..4)];
            bytes.splice(at..at, bad.iter().copied());
            files[i].1 = bytes;
            m.note(
                true,
                format!("{shown}: bytes {bad:x?} (not UTF-8) at offset {at}"),
            );
            return;
        }
        9 => {
            let n = at_kv(rng);
            let indent = lines[n].len() - lines[n].trim_start().len();
            let key = ["zz_unknown", "inferred", "source", "doc", "x"][rng.random_range(0..5)];
            let line = format!("{}{key}: 1", " ".repeat(indent));
            lines.insert(n, line);
            m.note(false, format!("{shown}:{}: inserted key `{key}`", n + 1));
        }
        10 if !kv.is_empty() => {
            let l = pick_kv(rng);
            lines.remove(l);
            m.note(false, format!("{shown}: deleted the key of line {}", l + 1));
        }
        11 => {
            // A dangling reference, or one that refers to itself.
            let refs: Vec<usize> = kv
                .iter()
                .copied()
                .filter(|&l| REFERENCES.contains(&key_value(&lines[l]).unwrap().1))
                .collect();
            if let Some(&l) = refs.get(rng.random_range(0..refs.len().max(1))) {
                let (lead, key, _) = parts(&lines[l]);
                lines[l] = format!("{lead}{key}: zz_dangling");
                m.note(true, format!("{shown}:{}: `{key}` names nothing", l + 1));
            }
        }
        12 => {
            let n = at_kv(rng);
            // A self reference: a row that escalates to itself, a route that reconciles with itself.
            let (indent, key) = (
                lines[n].len() - lines[n].trim_start().len(),
                ["escalate_to", "reconcile"][rng.random_range(0..2)],
            );
            let own = lines[..=n]
                .iter()
                .rev()
                .find_map(|l| {
                    let t = l.trim_start();
                    let t = t.strip_prefix("- ").unwrap_or(t);
                    t.strip_prefix("row: ").map(str::to_owned).or_else(|| {
                        (l.len() - t.len() == 2 && t.ends_with(':'))
                            .then(|| t.trim_end_matches(':').to_owned())
                    })
                })
                .unwrap_or_else(|| "x".into());
            lines.insert(n + 1, format!("{}{key}: {own}", " ".repeat(indent)));
            m.note(false, format!("{shown}:{}: inserted `{key}: {own}`", n + 2));
        }
        13 => {
            let bomb = "bomb: &a [x, x, x, x, x, x, x, x, x]\nbomb2: &b [*a, *a, *a, *a, *a, *a, *a, *a]\nbomb3: [*b, *b, *b, *b, *b, *b, *b, *b]";
            lines.insert(n, bomb.into());
            m.note(true, format!("{shown}:{}: inserted an alias bomb", n + 1));
        }
        14 => {
            let depth = rng.random_range(100..20_000);
            let nest = if rng.random_bool(0.5) {
                format!("deep: {}x{}", "[".repeat(depth), "]".repeat(depth))
            } else {
                format!("deep:\n{}x", "- ".repeat(depth))
            };
            lines.insert(n, nest);
            m.note(
                true,
                format!("{shown}:{}: inserted YAML nested {depth} deep", n + 1),
            );
        }
        15 => {
            let typed: Vec<usize> = kv
                .iter()
                .copied()
                .filter(|&l| TYPED.contains(&key_value(&lines[l]).unwrap().1))
                .collect();
            if let Some(&l) = typed.get(rng.random_range(0..typed.len().max(1))) {
                let (lead, key, value) = parts(&lines[l]);
                let depth = rng.random_range(9..12_000);
                let ty = format!("{}{value}{}", "list<".repeat(depth), ">".repeat(depth));
                lines[l] = format!("{lead}{key}: \"{ty}\"");
                m.note(
                    true,
                    format!("{shown}:{}: `{key}` nested {depth} deep", l + 1),
                );
            }
        }
        16 if !required || rng.random_bool(0.5) => {
            files.remove(i);
            // streams.yaml holds the streams services name; a service file
            // may be one nothing else names.
            let must = required || path == Path::new("streams.yaml");
            m.note(must, format!("{shown}: deleted"));
            return;
        }
        17 => {
            std::fs::create_dir_all(dir.join(&path)).unwrap();
            files.remove(i);
            m.note(true, format!("{shown}: turned into a directory"));
            return;
        }
        18 if path.starts_with("services") => {
            let copy = path.with_file_name(format!(
                "zz-copy-{}",
                path.file_name().unwrap().to_string_lossy()
            ));
            let bytes = files[i].1.clone();
            files.push((copy, bytes));
            m.note(true, format!("{shown}: copied as a second service file"));
            return;
        }
        19 => {
            let doc = ["---", "...", "--- # more"][rng.random_range(0..3)];
            // After the first line of content: a `---` before any starts the one document.
            let first = lines
                .iter()
                .position(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
                .unwrap_or(0);
            let at = rng.random_range(first + 1..=lines.len());
            lines.insert(at, doc.into());
            m.note(
                true,
                format!("{shown}:{}: inserted the document marker `{doc}`", at + 1),
            );
        }
        20 if !kv.is_empty() => {
            let l = pick_kv(rng);
            let (lead, key, value) = parts(&lines[l]);
            let names = [
                "typeof",
                "type",
                "self",
                "Self",
                "crate",
                "r#x",
                "a sentence with spaces",
                "../x",
                "x\"y",
                "",
                "9lives",
                "é",
            ];
            let name = names[rng.random_range(0..names.len())];
            if rng.random_bool(0.5) {
                lines[l] = format!("{lead}{name:?}: {value}");
                m.note(
                    false,
                    format!("{shown}:{}: key `{key}` renamed {name:?}", l + 1),
                );
            } else {
                lines[l] = format!("{lead}{key}: {name:?}");
                m.note(false, format!("{shown}:{}: `{key}` set to {name:?}", l + 1));
            }
        }
        _ => {
            let n = at_kv(rng);
            let long = "n".repeat(rng.random_range(65..2_000));
            let indent = lines[n].len() - lines[n].trim_start().len();
            lines.insert(n, format!("{}{long}: x", " ".repeat(indent)));
            m.note(
                true,
                format!("{shown}:{}: inserted a key of {} bytes", n + 1, long.len()),
            );
        }
    }
    let mut text = lines.join("\n");
    if files[i].1.ends_with(b"\n") {
        text.push('\n');
    }
    files[i].1 = text.into_bytes();
}

/// How one case ended.
#[derive(Debug, PartialEq)]
enum Verdict {
    Generated,
    Refused,
    Panicked(String),
    Hung,
    /// Errors without a file or a line, or internal errors.
    Unlocated(String),
    /// Success after a mutation that must be refused.
    Silent,
    /// More bytes emitted (first) than [`MAX_GROWTH`] allows for those read.
    Blowup(usize, usize),
}

fn run_case(trees: &[Tree], seed: u64, case: u64, verbose: bool) -> (Verdict, Mutations) {
    let mut rng = StdRng::seed_from_u64(seed ^ case.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let tree = &trees[(case % trees.len() as u64) as usize];
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(&tree.name);
    std::fs::create_dir_all(dir.join("services")).unwrap();
    let mut files = tree.files.clone();
    let mut m = Mutations::default();
    for _ in 0..rng.random_range(1..=2) {
        // A mutation that must be refused is the last, so none undoes it.
        if files.is_empty() || m.must_fail {
            break;
        }
        mutate(&mut rng, &mut files, &dir, &mut m);
    }
    for (path, bytes) in &files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    let input: usize = files.iter().map(|(_, b)| b.len()).sum();
    if verbose {
        eprintln!("case {case} ({}): {:?}", tree.name, m.done);
    }
    let (tx, rx) = mpsc::channel();
    let worker = dir.clone();
    std::thread::spawn(move || {
        let out = sdk_codegen::load::read_dir(&worker).and_then(|f| sdk_codegen::generate(&f));
        let _ = tx.send(out.map(|files| files.iter().map(|f| f.contents.len()).sum::<usize>()));
    });
    let verdict = match rx.recv_timeout(HANG) {
        Err(mpsc::RecvTimeoutError::Timeout) => Verdict::Hung,
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            Verdict::Panicked("the case's thread panicked".into())
        }
        Ok(Ok(_)) if m.must_fail => Verdict::Silent,
        // The bound on work, without a clock: what is emitted grows linearly
        // with what is read (the real trees emit about 3 bytes per byte).
        Ok(Ok(bytes)) if bytes > MAX_GROWTH * input + (256 << 10) => Verdict::Blowup(bytes, input),
        Ok(Ok(_)) => Verdict::Generated,
        Ok(Err(errors)) => {
            let bad = errors.0.iter().find(|e| {
                e.line == 0 || !e.file.starts_with(&dir) || e.message.contains("internal error")
            });
            if verbose {
                eprintln!("  refused: {}", errors.0[0]);
            }
            match bad {
                Some(e) => Verdict::Unlocated(e.to_string()),
                None => Verdict::Refused,
            }
        }
    };
    (verdict, m)
}

#[test]
fn every_mutated_spec_generates_or_is_refused_with_file_and_line() {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let seed = env("SPEC_FUZZ_SEED").unwrap_or(DEFAULT_SEED);
    let verbose = std::env::var_os("SPEC_FUZZ_VERBOSE").is_some();
    let cases: Vec<u64> = match env("SPEC_FUZZ_CASE") {
        Some(case) => vec![case],
        None => (0..env("SPEC_FUZZ_CASES").unwrap_or(DEFAULT_CASES)).collect(),
    };
    let trees = trees();
    let (mut generated, mut refused) = (0, 0);
    let mut bad = Vec::new();
    // On demand only: stop starting cases after this long (the long run).
    let budget = env("SPEC_FUZZ_MINUTES").map(|m| Duration::from_secs(m * 60));
    let started = std::time::Instant::now();
    let mut ran = 0;
    for &case in &cases {
        if budget.is_some_and(|b| started.elapsed() > b) {
            break;
        }
        ran += 1;
        let (verdict, m) = run_case(&trees, seed, case, verbose || cases.len() == 1);
        match verdict {
            Verdict::Generated => generated += 1,
            Verdict::Refused => refused += 1,
            other => {
                eprintln!("case {case}: {other:?} after {:?}", m.done);
                bad.push((case, other));
            }
        }
    }
    let count = |f: fn(&Verdict) -> bool| bad.iter().filter(|(_, v)| f(v)).count();
    eprintln!(
        "spec fuzz, seed {seed:#x}: {ran} cases in {:.0?}, {generated} generated, {refused} refused with file and line; \
         {} panics, {} hangs, {} silent successes, {} unlocated refusals, {} blowups",
        started.elapsed(),
        count(|v| matches!(v, Verdict::Panicked(_))),
        count(|v| matches!(v, Verdict::Hung)),
        count(|v| matches!(v, Verdict::Silent)),
        count(|v| matches!(v, Verdict::Unlocated(_))),
        count(|v| matches!(v, Verdict::Blowup(..))),
    );
    assert!(
        bad.is_empty(),
        "{} of {} cases went wrong (rerun one with SPEC_FUZZ_SEED={seed} SPEC_FUZZ_CASE=<case>): {bad:#?}",
        bad.len(),
        ran
    );
}
