//! Every `text` block of the READMEs and the book is what a program prints
//! today. Each is marked `<!-- output: KEY -->` (`<!-- output: KEY, excerpt -->`
//! for lines picked out of a longer output, in their order) and a test prints
//! KEY again and hands it to [`shown`]. What differs from run to run (ports,
//! request IDs, latencies) is masked on both sides. A whole output is
//! compared word by word, so a block may wrap its long lines; an excerpt
//! line by line.

use std::path::{Path, PathBuf};

use grag_verify::progress::Progress;
use grag_verify::target::{Scenario, Target};
use grag_verify::{canary, drift};
use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag};

use crate::book_links::{pages, read, root};

const MARKER: &str = "<!-- output:";

/// One `text` block: where it is, and the output its marker names.
#[derive(Debug)]
struct Block {
    page: PathBuf,
    line: usize,
    key: Option<String>,
    excerpt: bool,
    text: String,
}

/// The `text` blocks of one Markdown page, each with the marker right
/// before it (an HTML comment with nothing between it and the block).
fn blocks_of(page: &Path, markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut marker: Option<(String, bool)> = None;
    let mut open: Option<Block> = None;
    for (event, at) in Parser::new(markdown).into_offset_iter() {
        match event {
            Event::Html(html) if html.trim_start().starts_with(MARKER) => {
                let inner = html.trim().trim_start_matches(MARKER);
                let inner = inner.trim_end_matches("-->").trim();
                marker = Some(match inner.strip_suffix(", excerpt") {
                    Some(key) => (key.trim().to_owned(), true),
                    None => (inner.to_owned(), false),
                });
            }
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) if &*info == "text" => {
                let (key, excerpt) = marker.take().map_or((None, false), |(k, e)| (Some(k), e));
                open = Some(Block {
                    page: page.to_path_buf(),
                    line: markdown[..at.start].lines().count() + 1,
                    key,
                    excerpt,
                    text: String::new(),
                });
            }
            Event::Text(text) if open.is_some() => {
                open.as_mut().expect("checked").text.push_str(&text);
            }
            Event::End(_) if open.is_some() => blocks.extend(open.take()),
            Event::Start(_) => marker = None,
            _ => {}
        }
    }
    blocks
}

/// Every `text` block a reader meets.
fn blocks() -> Vec<Block> {
    pages()
        .iter()
        .flat_map(|page| blocks_of(page, &read(page)))
        .collect()
}

fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.chars().all(|c| c.is_ascii_hexdigit()))
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_digit())
}

/// `word` with what differs between runs replaced: a loopback port (also as
/// a `…port=N` field), a request ID (inside brackets too), a latency (a
/// number before `ms`).
fn mask(word: &str, next: Option<&str>) -> String {
    let bare = word.trim_matches(|c: char| "[](),".contains(c));
    if is_uuid(bare) {
        return word.replace(bare, "<uuid>");
    }
    if next == Some("ms") && is_number(word) {
        return "<n>".into();
    }
    if let Some((field, port)) = word.split_once('=')
        && field.ends_with("port")
        && is_number(port)
    {
        return format!("{field}=<port>");
    }
    match word.split_once("127.0.0.1:") {
        Some((before, after)) => {
            let rest = after.trim_start_matches(|c: char| c.is_ascii_digit());
            format!("{before}127.0.0.1:<port>{rest}")
        }
        None => word.to_owned(),
    }
}

/// The non-blank lines of `text`, masked, with single spaces between words.
fn masked(text: &str) -> Vec<String> {
    text.lines()
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let masked: Vec<String> = (0..words.len())
                .map(|i| mask(words[i], words.get(i + 1).copied()))
                .collect();
            masked.join(" ")
        })
        .filter(|line| !line.is_empty())
        .collect()
}

/// Whether `wanted` are lines of `printed`, in their order.
fn picked_from(wanted: &[String], printed: &[String]) -> bool {
    let mut printed = printed.iter();
    wanted.iter().all(|w| printed.any(|p| p == w))
}

/// Asserts that every block marked `output: key` is what `printed` shows.
pub fn shown(key: &str, printed: &str) {
    let marked: Vec<Block> = blocks()
        .into_iter()
        .filter(|b| b.key.as_deref() == Some(key))
        .collect();
    assert!(
        !marked.is_empty(),
        "no text block is marked `output: {key}`"
    );
    let now = masked(printed);
    for block in marked {
        let was = masked(&block.text);
        let same = if block.excerpt {
            picked_from(&was, &now)
        } else {
            was.join(" ") == now.join(" ")
        };
        assert!(
            same,
            "{}:{}: the `{key}` block is not what is printed today, which is:\n{printed}",
            block.page.display(),
            block.line
        );
    }
}

#[test]
fn a_block_is_read_with_its_marker_and_masked() {
    let page = "# Run\n\n<!-- output: run, excerpt -->\n\n```text\n\
                step  ok   12 ms  36229795-4e81-4182-90be-9b88c6b086e1\n\n\
                at http://127.0.0.1:34785/x [request 9222a796-4e81-4182-90be-9b88c6b086e1]\n```\n\n\
                Prose.\n\n```text\nunmarked\n```\n\n<!-- output: later -->\n\nProse.\n\n```text\nx\n```\n";
    let found = blocks_of(Path::new("p.md"), page);
    assert_eq!(found.len(), 3, "{found:#?}");
    assert_eq!(
        (found[0].key.as_deref(), found[0].excerpt),
        (Some("run"), true)
    );
    assert_eq!(found[0].line, 5);
    assert_eq!(found[1].key, None, "a block without a marker");
    assert_eq!(found[2].key, None, "a marker with prose before the block");
    assert_eq!(
        masked(&found[0].text),
        [
            "step ok <n> ms <uuid>",
            "at http://127.0.0.1:<port>/x [request <uuid>]"
        ]
    );
    let printed = masked(
        "first\nstep  ok 3 ms 00000000-0000-0000-0000-000000000000\nmiddle\nat http://127.0.0.1:1/x [request 00000000-0000-0000-0000-000000000000]\n",
    );
    assert!(picked_from(&masked(&found[0].text), &printed));
    assert!(!picked_from(&masked(&found[0].text), &printed[..2]));
    assert!(!picked_from(&masked("step ok 3 ms x"), &printed));
}

#[test]
fn every_text_block_is_marked_and_printed_again_by_a_test() {
    // A test prints a key again where it calls `shown("key", …)`.
    let sources: String = rust_files(&root().join("tests/it"))
        .iter()
        .map(|p| read(p).split_whitespace().collect::<String>())
        .collect();
    let mut wrong = Vec::new();
    for block in blocks() {
        let at = format!("{}:{}", block.page.display(), block.line);
        match &block.key {
            None => wrong.push(format!("{at}: a text block without `{MARKER} KEY -->`")),
            Some(key) if !sources.contains(&format!("shown(\"{key}\"")) => {
                wrong.push(format!("{at}: no test prints `{key}` again"));
            }
            Some(_) => {}
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The `.rs` files under `dir`, in its folders too.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

#[test]
fn the_compile_error_shown_is_the_one_trybuild_holds_rustc_to() {
    // `compile_fail` fails when rustc's output differs from the `.stderr` file.
    let stderr = read(&root().join("tests/ui/fail/kg_with_tenant.stderr"));
    shown("tenant-for-workspace", &stderr);
}

#[test]
fn the_spec_error_shown_is_what_codegen_says_of_that_edit() {
    let tree = tempfile::tempdir().unwrap();
    copy(&root().join("spec"), &tree.path().join("spec"));
    let file = tree.path().join("spec/grag/services/ai-gateway.yaml");
    let text = read(&file);
    assert_eq!(
        text.matches("timeout: search").count(),
        1,
        "one route to break"
    );
    std::fs::write(&file, text.replace("timeout: search", "timeout: glacial")).unwrap();
    let error = sdk_codegen::sync::render(tree.path()).expect_err("an unknown timeout class");
    shown("unknown-timeout-class", &error.to_string());
}

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

#[tokio::test]
async fn the_canary_report_shown_is_the_one_grag_verify_prints() {
    let target = Target::embedded(Scenario::Healthy).await.unwrap();
    let report = canary::run(&target.grag, true, &Progress::quiet()).await;
    target.stop().await;
    shown("canary", &report.to_string());
}

#[tokio::test]
async fn the_drift_report_shown_is_the_one_grag_verify_prints() {
    let target = Target::embedded(Scenario::Drifted).await.unwrap();
    let report = drift::run(&target.origin, &[], None, &Progress::quiet()).await;
    target.stop().await;
    shown("drift", &report.unwrap().to_string());
}
