//! Spec errors that name the file, line, column and field.

use std::fmt;
use std::path::PathBuf;

use marked_yaml::{Marker, Span};

/// One problem in the spec, located in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
    /// Dotted path of the field (`routes.upsert_entity.timeout`).
    pub field: String,
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: `{}`: {}",
            self.file.display(),
            self.line,
            self.column,
            self.field,
            self.message
        )
    }
}

/// Every problem found in one pass, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecErrors(pub Vec<SpecError>);

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for SpecErrors {}

/// Maps marker source indices back to file names and collects errors.
#[derive(Debug, Default)]
pub struct Sources {
    files: Vec<PathBuf>,
    errors: Vec<SpecError>,
}

impl Sources {
    /// Registers a file and returns the source index its markers carry.
    pub fn add(&mut self, file: PathBuf) -> usize {
        self.files.push(file);
        self.files.len() - 1
    }

    pub fn file(&self, source: usize) -> PathBuf {
        self.files.get(source).cloned().unwrap_or_default()
    }

    /// Where a span starts, for errors found after lowering.
    pub fn locate(&self, span: &Span) -> crate::model::Location {
        match span.start() {
            Some(m) => crate::model::Location {
                file: self.file(m.source()),
                line: m.line(),
                column: m.column(),
            },
            None => crate::model::Location::default(),
        }
    }

    /// Records an error at a marker.
    pub fn at_marker(
        &mut self,
        marker: Option<&Marker>,
        field: impl Into<String>,
        message: String,
    ) {
        let (file, line, column) = match marker {
            Some(m) => (self.file(m.source()), m.line(), m.column()),
            None => (PathBuf::new(), 0, 0),
        };
        self.errors.push(SpecError {
            file,
            line,
            column,
            field: field.into(),
            message,
        });
    }

    /// Records an error at the start of a span.
    pub fn at(&mut self, span: &Span, field: impl Into<String>, message: impl Into<String>) {
        self.at_marker(span.start(), field, message.into());
    }

    /// Records an error at the top of a file.
    pub fn in_file(&mut self, source: usize, field: impl Into<String>, message: impl Into<String>) {
        let marker = Marker::new(source, 0, 1, 1);
        self.at_marker(Some(&marker), field, message.into());
    }

    pub fn error_count(&self) -> usize {
        self.errors.len()
    }

    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }

    /// Ends the pass: `Err` with every error found, in file and line order.
    pub fn finish(mut self) -> Result<(), SpecErrors> {
        if self.errors.is_empty() {
            return Ok(());
        }
        self.errors
            .sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
        Err(SpecErrors(self.errors))
    }
}
