//! The guide book's and the READMEs' internal links resolve: every relative
//! link names a file that exists and, with a `#fragment`, a heading of that
//! file, and every chapter of the book is compiled as a doctest module.
//! mdbook renders a broken link without a word, and this check needs no
//! mdbook: `cargo test --workspace` runs it, and so `.ci/run` fails on it.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// What a Markdown file points at and which anchors it offers.
#[derive(Debug, Default)]
struct Page {
    links: Vec<String>,
    anchors: BTreeSet<String>,
}

/// The anchor mdbook (and GitHub) gives a heading: lower case, spaces as
/// `-`, every other character but letters, digits, `-` and `_` dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_lowercase().next()?),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}

/// `base`, or the first of `base-1`, `base-2`, … not taken yet, as mdbook
/// numbers a repeated heading.
fn unused(taken: &BTreeSet<String>, base: &str) -> String {
    std::iter::once(base.to_string())
        .chain((1..).map(|n| format!("{base}-{n}")))
        .find(|a| !taken.contains(a))
        .expect("the numbers run out after the anchors")
}

/// Reads a page's link targets and its headings' anchors.
fn page(markdown: &str) -> Page {
    let mut page = Page::default();
    let mut heading: Option<String> = None;
    let options = Options::ENABLE_TABLES | Options::ENABLE_HEADING_ATTRIBUTES;
    for event in Parser::new_ext(markdown, options) {
        match event {
            Event::Start(Tag::Heading { id: Some(id), .. }) => {
                page.anchors.insert(id.to_string());
            }
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some(h) = heading.take() {
                    let free = unused(&page.anchors, &anchor(&h));
                    page.anchors.insert(free);
                }
            }
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                page.links.push(dest_url.to_string());
            }
            _ => {}
        }
    }
    page
}

/// The files an mdbook `{{#include path}}` directive names.
fn includes(markdown: &str) -> Vec<String> {
    markdown
        .split("{{#include ")
        .skip(1)
        .filter_map(|rest| Some(rest.split("}}").next()?.trim().to_string()))
        .collect()
}

/// A link that leaves the repository (a scheme, or mail): not ours to check.
fn is_external(link: &str) -> bool {
    link.contains("://") || link.starts_with("mailto:")
}

/// `dir/target` with `.` and `..` folded, without touching the file system.
fn join(dir: &Path, target: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for part in dir.join(target).components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The READMEs whose links are checked beside the book's.
const READMES: [&str; 3] = ["README.md", "bench/README.md", "ARCHITECTURE.md"];

/// Every Markdown file a reader meets: the READMEs and the book's pages.
pub(crate) fn pages() -> Vec<PathBuf> {
    let src = root().join("docs/src");
    let mut book: Vec<PathBuf> = std::fs::read_dir(&src)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    book.sort();
    READMES.iter().map(|f| root().join(f)).chain(book).collect()
}

pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_path_buf()
}

pub(crate) fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The chapters SUMMARY.md lists, as paths under `docs/src/`.
fn chapters(summary: &str) -> Vec<String> {
    page(summary)
        .links
        .into_iter()
        .filter(|l| !is_external(l))
        .collect()
}

/// Every broken link of the Markdown file at `file`: a target that does not
/// exist, a fragment no heading of its target has, or (`within`) a target
/// outside that folder, which a rendered book would not have.
fn broken_links(file: &Path, within: Option<&Path>) -> Vec<String> {
    let text = read(file);
    let dir = file.parent().expect("a file has a folder");
    let mut broken = Vec::new();
    for link in page(&text).links.iter().filter(|l| !is_external(l)) {
        let (path, fragment) = link.split_once('#').unwrap_or((link, ""));
        let target = if path.is_empty() {
            file.to_path_buf()
        } else {
            join(dir, path)
        };
        if within.is_some_and(|w| !target.starts_with(w)) {
            broken.push(format!("{link}: outside the book"));
        } else if !target.is_file() {
            broken.push(format!("{link}: no such file"));
        } else if !fragment.is_empty() && !page(&read(&target)).anchors.contains(fragment) {
            broken.push(format!("{link}: no heading #{fragment} there"));
        }
    }
    for include in includes(&text) {
        if !join(dir, &include).is_file() {
            broken.push(format!("{{{{#include {include}}}}}: no such file"));
        }
    }
    broken
        .into_iter()
        .map(|b| format!("{}: {b}", file.display()))
        .collect()
}

#[test]
fn a_heading_gets_the_anchor_mdbook_gives_it() {
    assert_eq!(
        anchor("Writes that survive outages: the replay queue"),
        "writes-that-survive-outages-the-replay-queue"
    );
    assert_eq!(
        anchor("`Jobs::shutdown` and `sdk_queue`"),
        "jobsshutdown-and-sdk_queue"
    );
    let twice = page("# Traces\n\n## Traces\n");
    assert!(twice.anchors.contains("traces") && twice.anchors.contains("traces-1"));
}

#[test]
fn a_broken_link_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("chapter.md");
    std::fs::write(
        &file,
        "# Here\n\n[ok](#here) [gone](missing.md) [no anchor](chapter.md#there) \
         [out](../x.md)\n\n{{#include nothing.md}}\n\n`[code](missing.md)`\n",
    )
    .unwrap();
    let broken = broken_links(&file, Some(dir.path()));
    assert_eq!(broken.len(), 4, "{broken:#?}");
}

#[test]
fn every_link_of_the_book_resolves() {
    let src = root().join("docs/src");
    let summary = read(&src.join("SUMMARY.md"));
    let mut broken = broken_links(&src.join("SUMMARY.md"), Some(&src));
    let listed: BTreeSet<PathBuf> = chapters(&summary).iter().map(|c| join(&src, c)).collect();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") && !path.ends_with("SUMMARY.md") {
            if !listed.contains(&path) {
                broken.push(format!("{}: not in SUMMARY.md", path.display()));
            }
            broken.extend(broken_links(&path, Some(&src)));
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_link_of_the_readmes_resolves() {
    let broken: Vec<String> = READMES
        .iter()
        .flat_map(|f| broken_links(&root().join(f), None))
        .collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_chapter_is_compiled_as_a_doctest() {
    let src = root().join("docs/src");
    let lib = read(&root().join("tests/src/lib.rs"));
    let missing: Vec<String> = chapters(&read(&src.join("SUMMARY.md")))
        .into_iter()
        .filter(|chapter| {
            let text = read(&src.join(chapter));
            let compiled = |file: &str| lib.contains(&format!("include_str!(\"../../{file}\")"));
            // A chapter that only includes another file is compiled as that file.
            match includes(&text).as_slice() {
                [only] if text.trim() == format!("{{{{#include {only}}}}}") => {
                    let file = join(Path::new("docs/src"), only);
                    !compiled(&file.to_string_lossy())
                }
                _ => !compiled(&format!("docs/src/{chapter}")),
            }
        })
        .collect();
    assert!(
        missing.is_empty(),
        "chapters no doctest module includes: {missing:?}"
    );
}
