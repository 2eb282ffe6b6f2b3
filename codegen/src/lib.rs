//! The generator: load YAML -> validate and lower to a model -> emit Rust.
//!
//! `cargo xtask codegen` calls [`generate`] for every API under `spec/`.

pub mod error;
pub mod load;
pub mod lower;
pub mod model;
pub mod spec;
pub mod sync;

use std::path::PathBuf;

pub use error::{SpecError, SpecErrors};
pub use model::Model;

/// Loads and validates the files of one API.
pub fn model(files: &[(PathBuf, String)]) -> Result<Model, SpecErrors> {
    let mut sources = error::Sources::default();
    let model = load::parse(files, &mut sources).and_then(|raw| lower::lower(&raw, &mut sources));
    sources.finish()?;
    Ok(model.expect("no errors means a model"))
}

pub mod emit;

/// Loads, validates and emits one API: the files of its generated crate.
pub fn generate(files: &[(PathBuf, String)]) -> Result<Vec<emit::File>, SpecErrors> {
    model(files).map(|m| emit::files(&m))
}
