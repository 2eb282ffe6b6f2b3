//! The generator: load YAML -> validate and lower to a model -> emit Rust.
//!
//! `cargo xtask codegen` calls [`generate`] for every API under `spec/`.

pub mod emit;
pub mod error;
pub mod history;
pub mod load;
pub mod lower;
pub mod model;
pub mod naming;
pub mod record;
pub mod roles;
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
    model.ok_or_else(|| {
        // Lowering returns no model only with an error recorded; should a
        // rule forget to record one, the refusal still says so.
        let file = files.first().map(|(p, _)| p.clone()).unwrap_or_default();
        SpecErrors(vec![SpecError {
            file,
            line: 1,
            column: 1,
            field: String::new(),
            message: "internal error: the spec did not lower, and no rule said why".into(),
        }])
    })
}

/// Loads, validates and emits one API: the files of its generated crate.
pub fn generate(files: &[(PathBuf, String)]) -> Result<Vec<emit::File>, SpecErrors> {
    model(files).and_then(|m| emit::files(&m))
}
