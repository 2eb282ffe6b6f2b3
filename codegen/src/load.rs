//! Reads the YAML files of one API into the raw [`spec`](crate::spec) types.

use std::path::{Path, PathBuf};

use marked_yaml::types::MarkedScalarNode;
use marked_yaml::{LoadError, LoaderOptions, Marker, Node};
use serde::de::DeserializeOwned;

use crate::error::{Sources, SpecErrors};
use crate::spec::{ApiFile, DegradationFile, PolicyFile, ServiceFile, StreamsFile, TaxonomyFile};

/// The raw files of one API, parsed but not yet checked against each other.
#[derive(Debug)]
pub struct RawSpec {
    pub api: ApiFile,
    pub policy: PolicyFile,
    pub taxonomy: TaxonomyFile,
    pub streams: StreamsFile,
    pub degradation: DegradationFile,
    pub services: Vec<ServiceFile>,
}

/// Largest spec file read, in bytes: the real ones are a few KiB.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// Reads every `.yaml` file of an API folder (`spec/grag`), services sorted by name.
///
/// Every failure names the file it is about: a missing file, a directory
/// where a file belongs, a file too large or not UTF-8 (with the line of the
/// first bad byte). Files that are not spec files are refused in
/// `services/`, where a typo (`kg.yml`) would otherwise drop a service unseen.
pub fn read_dir(dir: &Path) -> Result<Vec<(PathBuf, String)>, SpecErrors> {
    let mut sources = Sources::default();
    let mut files = Vec::new();
    if !dir.is_dir() {
        whole_file(&mut sources, dir, "is not a directory of spec files");
        return sources.finish().map(|()| files);
    }
    for name in ["api", "policy", "taxonomy", "streams", "degradation"] {
        let path = dir.join(format!("{name}.yaml"));
        // An API without event streams has no streams.yaml.
        if name == "streams" && std::fs::symlink_metadata(&path).is_err() {
            continue;
        }
        if let Some(text) = read_file(&path, &mut sources) {
            files.push((path, text));
        }
    }
    let services = dir.join("services");
    match std::fs::read_dir(&services) {
        Ok(entries) => {
            let mut paths = Vec::new();
            for entry in entries {
                match entry {
                    Ok(e) => paths.push(e.path()),
                    Err(e) => whole_file(&mut sources, &services, &io_message(&e)),
                }
            }
            paths.sort();
            let mut any = false;
            for path in paths {
                let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
                if name.as_deref().is_some_and(|n| n.starts_with('.')) {
                    continue; // editor and system files
                }
                if path.extension().is_none_or(|e| e != "yaml") {
                    stray(&mut sources, &path);
                    continue;
                }
                any = true;
                if let Some(text) = read_file(&path, &mut sources) {
                    files.push((path, text));
                }
            }
            if !any {
                whole_file(
                    &mut sources,
                    &services,
                    "holds no service: an API has at least one `services/<service>.yaml`",
                );
            }
        }
        Err(e) => whole_file(
            &mut sources,
            &services,
            &format!("{}: an API keeps its services in services/", io_message(&e)),
        ),
    }
    sources.finish().map(|()| files)
}

/// Refuses what is not a service file in `services/`. A folder is refused
/// through the files in it (each at its line 1), so every refusal names a
/// file; an empty one names the folder.
fn stray(sources: &mut Sources, path: &Path) {
    const STRAY: &str = "services/ holds one `<service>.yaml` file per service, nothing else";
    let mut files = Vec::new();
    files_under(path, &mut files);
    if files.is_empty() {
        files.push(path.to_path_buf());
    }
    for file in files {
        whole_file(sources, &file, STRAY);
    }
}

/// The files under `dir` (none if it is no folder), sorted, at most
/// [`MAX_STRAY_FILES`] and [`MAX_STRAY_DEPTH`] folders deep: a refusal, not a scan.
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for path in paths {
            if out.len() >= MAX_STRAY_FILES {
                return;
            }
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() && depth < MAX_STRAY_DEPTH => walk(&path, depth + 1, out),
                Ok(m) if !m.is_dir() => out.push(path),
                _ => {}
            }
        }
    }
    walk(dir, 0, out);
}

/// How many files of a stray folder are named, and how deep it is looked into.
const MAX_STRAY_FILES: usize = 16;
const MAX_STRAY_DEPTH: usize = 4;

/// Reads one spec file as UTF-8, recording why it cannot be.
fn read_file(path: &Path, sources: &mut Sources) -> Option<String> {
    let bytes = std::fs::metadata(path)
        .and_then(|m| {
            if m.is_dir() {
                Err(std::io::Error::other(
                    "is a directory where a YAML file belongs",
                ))
            } else if m.len() > MAX_FILE_BYTES {
                Err(std::io::Error::other(format!(
                    "is {} bytes: a spec file is at most {MAX_FILE_BYTES}",
                    m.len()
                )))
            } else {
                Ok(())
            }
        })
        .and_then(|()| std::fs::read(path));
    let bytes = match bytes {
        Ok(bytes) => bytes,
        Err(e) => {
            whole_file(sources, path, &io_message(&e));
            return None;
        }
    };
    match String::from_utf8(bytes) {
        Ok(text) => Some(text),
        Err(e) => {
            let bytes = e.as_bytes();
            let at = e.utf8_error().valid_up_to();
            let line = 1 + bytes[..at].iter().filter(|&&b| b == b'\n').count();
            let line_start = bytes[..at]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            let column = 1 + String::from_utf8_lossy(&bytes[line_start..at])
                .chars()
                .count();
            let source = sources.add(path.to_path_buf());
            let marker = Marker::new(source, at, line, column);
            sources.at_marker(
                Some(&marker),
                "",
                format!("not UTF-8: byte {:#04x} at offset {at}", bytes[at]),
            );
            None
        }
    }
}

fn io_message(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "is missing".into(),
        std::io::ErrorKind::IsADirectory => "is a directory where a YAML file belongs".into(),
        _ => e.to_string(),
    }
}

/// An error about a file as a whole (or a folder): at its first line.
fn whole_file(sources: &mut Sources, path: &Path, message: &str) {
    let source = sources.add(path.to_path_buf());
    sources.in_file(source, "", message);
}

/// Parses the files: the five fixed ones by file name, the rest as services.
/// Returns `None` when a file failed; its errors are in `sources`.
pub fn parse(files: &[(PathBuf, String)], sources: &mut Sources) -> Option<RawSpec> {
    let mut api = None;
    let mut policy = None;
    let mut taxonomy = None;
    let mut streams = None;
    let mut degradation = None;
    let mut services = Vec::new();
    for (path, text) in files {
        let source = sources.add(path.clone());
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let in_services = path
            .parent()
            .and_then(|p| p.file_name())
            .is_some_and(|n| n == "services");
        if in_services {
            services.extend(one(source, text, sources));
            continue;
        }
        match stem {
            "api" => api = one(source, text, sources),
            "policy" => policy = one(source, text, sources),
            "taxonomy" => taxonomy = one(source, text, sources),
            "streams" => streams = one(source, text, sources),
            "degradation" => degradation = one(source, text, sources),
            _ => sources.in_file(
                source,
                "",
                "unknown spec file: expected api, policy, taxonomy, streams, degradation or services/*.yaml",
            ),
        }
    }
    if files.is_empty() {
        sources.at_marker(None, "", "the spec has no files: an API needs api.yaml, policy.yaml, taxonomy.yaml, degradation.yaml and services/".into());
    }
    // The API's folder, where a missing file should have been.
    let dir = files.first().and_then(|(p, _)| {
        let parent = p.parent()?;
        Some(if parent.file_name().is_some_and(|n| n == "services") {
            parent.parent().unwrap_or(parent)
        } else {
            parent
        })
    });
    for (name, present) in [
        ("api.yaml", api.is_some()),
        ("policy.yaml", policy.is_some()),
        ("taxonomy.yaml", taxonomy.is_some()),
        ("degradation.yaml", degradation.is_some()),
    ] {
        if !present
            && !files.iter().any(|(p, _)| p.ends_with(name))
            && let Some(dir) = dir
        {
            let source = sources.add(dir.join(name));
            sources.in_file(source, "", "is missing");
        }
    }
    if sources.has_errors() {
        return None;
    }
    Some(RawSpec {
        api: api?,
        policy: policy?,
        taxonomy: taxonomy?,
        // An API without event streams has no streams.yaml.
        streams: match streams {
            Some(streams) => streams,
            None if files.iter().any(|(p, _)| p.ends_with("streams.yaml")) => return None,
            None => StreamsFile::default(),
        },
        degradation: degradation?,
        services,
    })
}

/// Parses one file, recording its error (with file, line and field) on failure.
fn one<T: DeserializeOwned>(source: usize, text: &str, sources: &mut Sources) -> Option<T> {
    if let Err((marker, message)) = shape(source, text) {
        sources.at_marker(Some(&marker), "", message);
        return None;
    }
    let options = LoaderOptions::default().error_on_duplicate_keys(true);
    let node = match marked_yaml::parse_yaml_with_options(source, text, options) {
        Ok(node) => node,
        Err(e) => {
            let (marker, message) = load_error(&e);
            sources.at_marker(marker.as_ref(), "", message);
            return None;
        }
    };
    let before = sources.error_count();
    scalars(&node, "", sources);
    if sources.error_count() > before {
        return None;
    }
    match marked_yaml::from_node(&node) {
        Ok(value) => Some(value),
        Err(e) => {
            let field = e.path().unwrap_or("").to_owned();
            let marker = e.start_mark();
            sources.at_marker(marker.as_ref(), field, e.to_string());
            None
        }
    }
}

/// How deep a line may indent (spaces and `- ` entries together); the real
/// files indent 8. Deeper nesting would overflow the YAML parser's stack.
pub const MAX_INDENT: usize = 64;
/// Longest text value, in bytes.
pub const MAX_TEXT_BYTES: usize = 64 << 10;
/// Longest mapping key, in bytes: every key of a spec is a name.
pub const MAX_KEY_BYTES: usize = 64;

/// Checks what the YAML parser would mishandle before it runs: a second
/// document (silently dropped) and nesting deep enough to overflow its stack.
fn shape(source: usize, text: &str) -> Result<(), (Marker, String)> {
    let mut offset = 0;
    let mut content = false;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let at = |column: usize| Marker::new(source, offset, i + 1, column);
        let bare = line.trim_end();
        let marker = |m: &str| {
            bare == m
                || bare
                    .strip_prefix(m)
                    .is_some_and(|r| r.starts_with([' ', '\t']))
        };
        if marker("...") || (marker("---") && content) {
            return Err((
                at(1),
                "a spec file is one YAML document: this line would end it, and what follows would be ignored".into(),
            ));
        }
        let trimmed = line.trim_start();
        if !trimmed.is_empty()
            && !trimmed.starts_with('#')
            && !trimmed.starts_with('%')
            && !marker("---")
        {
            content = true;
        }
        let mut depth = line.len() - line.trim_start_matches(' ').len();
        let mut rest = &line[depth..];
        while let Some(r) = rest
            .strip_prefix("- ")
            .or_else(|| rest.strip_prefix("? "))
            .or_else(|| rest.strip_prefix(": "))
        {
            depth += 2;
            rest = r.trim_start_matches(' ');
        }
        if depth > MAX_INDENT {
            return Err((
                at(1),
                format!("nested deeper than {MAX_INDENT} columns: a spec nests a few levels"),
            ));
        }
        offset += line.len();
    }
    Ok(())
}

/// Checks every key and text value: no control characters (they would reach
/// rustdoc, TOML and Markdown as they are), keys no longer than a name, text
/// no longer than [`MAX_TEXT_BYTES`].
fn scalars(node: &Node, path: &str, sources: &mut Sources) {
    let text = |s: &MarkedScalarNode, path: &str, limit: usize, sources: &mut Sources| {
        let value: &str = s;
        if let Some(c) = value.chars().find(|&c| forbidden(c)) {
            sources.at(
                s.span(),
                path,
                format!(
                    "contains the control character {:?}: spec text is printable (a newline is fine)",
                    c
                ),
            );
        } else if value.len() > limit {
            sources.at(
                s.span(),
                path,
                format!("is {} bytes long: at most {limit}", value.len()),
            );
        }
    };
    match node {
        Node::Scalar(s) => text(s, path, MAX_TEXT_BYTES, sources),
        Node::Sequence(items) => {
            for item in items.iter() {
                scalars(item, path, sources);
            }
        }
        Node::Mapping(map) => {
            for (key, value) in map.iter() {
                let key_text: &str = key;
                let path = if path.is_empty() {
                    key_text.chars().take(MAX_KEY_BYTES).collect()
                } else {
                    format!(
                        "{path}.{}",
                        key_text.chars().take(MAX_KEY_BYTES).collect::<String>()
                    )
                };
                text(key, &path, MAX_KEY_BYTES, sources);
                scalars(value, &path, sources);
            }
        }
    }
}

/// Characters refused in spec text: control characters but the newline and
/// the tab, line and paragraph separators, and the bidirectional overrides
/// rustc refuses in comments (they make text read otherwise than it is).
fn forbidden(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

fn load_error(e: &LoadError) -> (Option<Marker>, String) {
    match e {
        LoadError::TopLevelMustBeMapping(m) => (Some(*m), "the file must be a mapping".into()),
        LoadError::TopLevelMustBeSequence(m) => (Some(*m), "the file must be a sequence".into()),
        LoadError::UnexpectedAnchor(m) => (Some(*m), "anchors and aliases are not allowed".into()),
        LoadError::MappingKeyMustBeScalar(m) => (Some(*m), "mapping keys must be scalars".into()),
        LoadError::UnexpectedTag(m) => (Some(*m), "explicit tags are not allowed".into()),
        LoadError::ScanError(m, err) => (Some(*m), format!("not valid YAML: {err}")),
        LoadError::DuplicateKey(inner) => (
            Some(*inner.key.span().start().unwrap_or(&Marker::new(0, 0, 0, 0))),
            format!("duplicate key `{}`", inner.key.as_str()),
        ),
    }
}
