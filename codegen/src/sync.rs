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

/// Every file under `generated/`, rendered from every API folder of `spec/`,
/// with paths relative to `root`.
pub fn render(root: &Path) -> Result<Vec<File>, SyncError> {
    let spec = root.join("spec");
    let mut apis: Vec<PathBuf> = std::fs::read_dir(&spec)
        .map_err(|e| SyncError::Io(spec.clone(), e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("api.yaml").is_file())
        .collect();
    apis.sort();
    let mut out = Vec::new();
    for dir in apis {
        let files = crate::load::read_dir(&dir).map_err(|e| SyncError::Io(dir.clone(), e))?;
        // Name files relative to the root, so errors read `spec/grag/policy.yaml:12:5`.
        let files: Vec<(PathBuf, String)> = files
            .into_iter()
            .map(|(p, text)| {
                (
                    p.strip_prefix(root).map(Path::to_path_buf).unwrap_or(p),
                    text,
                )
            })
            .collect();
        let model = crate::model(&files).map_err(SyncError::Spec)?;
        let crate_dir = Path::new("generated").join(&model.api.crate_name);
        for file in crate::emit::files(&model) {
            out.push(File {
                path: crate_dir.join(file.path),
                contents: file.contents,
            });
        }
    }
    Ok(out)
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
    Ok(out)
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
