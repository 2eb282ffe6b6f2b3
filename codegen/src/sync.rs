//! Keeps `generated/` in step with `spec/`: render in memory, compare, write.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::emit::File;

/// Why the generated tree could not be rendered.
#[derive(Debug)]
pub enum SyncError {
    Io(PathBuf, std::io::Error),
    Spec(crate::SpecErrors),
}

impl fmt::Display for SyncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyncError::Io(path, e) => write!(f, "{}: {e}", path.display()),
            SyncError::Spec(errors) => write!(f, "{errors}"),
        }
    }
}

impl std::error::Error for SyncError {}

/// Specs that emit a policy module alone, not a crate: (the spec's folder,
/// the module's file), relative to the workspace root. The runtime's test
/// fixture is no API a user gets a client for, so its spec lives beside the
/// runtime rather than in `spec/`, and nothing of it lands in `generated/`.
pub const POLICY_MODULES: &[(&str, &str)] = &[("runtime/fixture", "runtime/src/testing/policy.rs")];

/// Every file under `generated/`, rendered from every API folder of `spec/`,
/// and every policy module of [`POLICY_MODULES`], with paths relative to `root`.
///
/// Every folder of `spec/` is an API: one without a readable `api.yaml` is an
/// error, never skipped, and so is a `spec/` that holds no API at all.
pub fn render(root: &Path) -> Result<Vec<File>, SyncError> {
    let (apis, mut refused) = api_folders(root)?;
    let mut out = Vec::new();
    let mut crates: Vec<(String, crate::model::Location)> = Vec::new();
    for dir in apis {
        let model = match api_model(root, &dir) {
            Ok(model) => model,
            Err(errors) => {
                refused.extend(errors);
                continue;
            }
        };
        if let Some((_, first)) = crates.iter().find(|(c, _)| *c == model.api.crate_name) {
            refused.push(model.api.crate_at.error(
                "crate",
                format!(
                    "the crate `{}` is already generated from {}",
                    model.api.crate_name,
                    first.file.display()
                ),
            ));
            continue;
        }
        crates.push((model.api.crate_name.clone(), model.api.crate_at.clone()));
        let crate_dir = Path::new("generated").join(&model.api.crate_name);
        match crate::emit::files(&model) {
            Ok(mut files) => {
                let settled = settle(root, &crate_dir, &files);
                crate::history::apply(&mut files, &settled);
                out.extend(files.into_iter().map(|file| File {
                    path: crate_dir.join(file.path),
                    contents: file.contents,
                }))
            }
            Err(errors) => refused.extend(errors.0),
        }
    }
    for (dir, path) in POLICY_MODULES {
        match policy_module(root, dir, path) {
            Ok(file) => out.extend(file),
            Err(errors) => refused.extend(errors),
        }
    }
    if !refused.is_empty() {
        refused.sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
        return Err(SyncError::Spec(crate::SpecErrors(refused)));
    }
    Ok(out)
}

/// The policy module lowered from the spec folder `dir`, written to `path`.
///
/// A root without the folder (a scratch copy of `spec/` alone) has no
/// module to render, unless the module is there: then its spec is gone.
fn policy_module(
    root: &Path,
    dir: &str,
    path: &str,
) -> Result<Option<File>, Vec<crate::SpecError>> {
    let spec = root.join(dir);
    if !spec.exists() {
        if root.join(path).exists() {
            let message = format!(
                "is generated from {dir}/, which is gone: restore it, or remove the module"
            );
            return Err(vec![whole(PathBuf::from(path), &message)]);
        }
        return Ok(None);
    }
    let model = api_model(root, &spec)?;
    crate::emit::policy_module(&model, dir, Path::new(path))
        .map(Some)
        .map_err(|errors| errors.0)
}

/// The history of the crate at `crate_dir` given its newly rendered files
/// (their `api.lock`).
fn settle(root: &Path, crate_dir: &Path, files: &[File]) -> crate::history::Settled {
    let record = files
        .iter()
        .find(|f| f.path == Path::new("api.lock"))
        .map_or("", |f| f.contents.as_str());
    crate::history::settle(root, crate_dir, record)
}

/// Every change between the record on disk and the rendered one, per
/// crate that has one: what `cargo xtask codegen` prints before it writes.
pub fn verdicts(root: &Path) -> Result<Vec<(PathBuf, Vec<crate::record::Change>)>, SyncError> {
    let rendered = render(root)?;
    let mut out = Vec::new();
    for file in rendered.iter().filter(|f| f.path.ends_with("api.lock")) {
        let Ok(old) = std::fs::read_to_string(root.join(&file.path)) else {
            continue;
        };
        let changes = crate::record::diff(&old, &file.contents);
        let dir = file.path.parent().unwrap_or(Path::new("")).to_path_buf();
        out.push((dir, changes));
    }
    Ok(out)
}

/// `p` relative to `root`, as errors name files (`spec/grag/policy.yaml:12:5`).
fn relative(root: &Path, p: &Path) -> PathBuf {
    p.strip_prefix(root)
        .map(Path::to_path_buf)
        .unwrap_or_else(|_| p.to_path_buf())
}

/// The API folders of `spec/`, sorted, and an error for anything else
/// there (Markdown notes and hidden files aside) or for no API at all.
fn api_folders(root: &Path) -> Result<(Vec<PathBuf>, Vec<crate::SpecError>), SyncError> {
    let spec = root.join("spec");
    let mut apis = Vec::new();
    let mut refused = Vec::new();
    for entry in std::fs::read_dir(&spec).map_err(|e| SyncError::Io(spec.clone(), e))? {
        let path = entry.map_err(|e| SyncError::Io(spec.clone(), e))?.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.starts_with('.') || name.ends_with(".md") {
            continue;
        }
        if path.is_dir() {
            apis.push(path);
        } else {
            refused.push(whole(
                relative(root, &path),
                "spec/ holds one folder per API (and Markdown notes), nothing else",
            ));
        }
    }
    apis.sort();
    if apis.is_empty() && refused.is_empty() {
        refused.push(whole(
            relative(root, &spec),
            "holds no API: each API is a folder `spec/<api>/` with an api.yaml",
        ));
    }
    Ok((apis, refused))
}

/// The model of one API folder, or its errors with files named from `root`.
fn api_model(root: &Path, dir: &Path) -> Result<crate::model::Model, Vec<crate::SpecError>> {
    let model = crate::load::read_dir(dir).and_then(|files| {
        let files: Vec<(PathBuf, String)> = files
            .into_iter()
            .map(|(p, text)| (relative(root, &p), text))
            .collect();
        crate::model(&files)
    });
    model.map_err(|errors| {
        (errors.0.into_iter())
            .map(|mut e| {
                e.file = relative(root, &e.file);
                e
            })
            .collect()
    })
}

fn whole(file: PathBuf, message: &str) -> crate::SpecError {
    crate::SpecError {
        file,
        line: 1,
        column: 1,
        field: String::new(),
        message: message.into(),
    }
}

/// Files whose content on disk differs from the rendering, or that the
/// rendering no longer produces (stray `.rs` files under a generated crate).
pub fn stale(root: &Path) -> Result<Vec<PathBuf>, SyncError> {
    let rendered = render(root)?;
    let mut out: Vec<PathBuf> = rendered
        .iter()
        .filter(|f| {
            std::fs::read_to_string(root.join(&f.path)).ok().as_deref() != Some(&f.contents)
        })
        .map(|f| f.path.clone())
        .collect();
    out.extend(strays(root, &rendered));
    out.extend(stray_crates(root, &rendered));
    Ok(out)
}

/// Folders of `generated/` that no API renders any more: an API folder
/// deleted from `spec/` leaves its crate behind, and `--check` says so.
fn stray_crates(root: &Path, rendered: &[File]) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root.join("generated")) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| Path::new("generated").join(e.file_name()))
        .filter(|dir| !rendered.iter().any(|f| f.path.starts_with(dir)))
        .collect();
    out.sort();
    out
}

/// Writes every rendered file and removes strays; returns the paths changed.
pub fn write(root: &Path) -> Result<Vec<PathBuf>, SyncError> {
    let rendered = render(root)?;
    let mut changed = Vec::new();
    for file in &rendered {
        let path = root.join(&file.path);
        if std::fs::read_to_string(&path).ok().as_deref() == Some(&file.contents) {
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| SyncError::Io(parent.to_path_buf(), e))?;
        }
        std::fs::write(&path, &file.contents).map_err(|e| SyncError::Io(path.clone(), e))?;
        changed.push(file.path.clone());
    }
    if let Some(dir) = stray_crates(root, &rendered).into_iter().next() {
        let e = std::io::Error::other(
            "no API under spec/ renders this crate: remove it, or restore its spec",
        );
        return Err(SyncError::Io(dir, e));
    }
    for stray in strays(root, &rendered) {
        std::fs::remove_file(root.join(&stray)).map_err(|e| SyncError::Io(stray.clone(), e))?;
        changed.push(stray);
    }
    Ok(changed)
}

/// `.rs` files under a generated crate's `src/` that nothing renders.
fn strays(root: &Path, rendered: &[File]) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = rendered
        .iter()
        .filter_map(|f| f.path.parent().map(Path::to_path_buf))
        .filter(|d| d.ends_with("src"))
        .collect();
    dirs.sort();
    dirs.dedup();
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(root.join(&dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = dir.join(entry.file_name());
            if path.extension().is_some_and(|e| e == "rs")
                && !rendered.iter().any(|f| f.path == path)
            {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}
