//! What a store operation can fail with.

/// A store operation's failure, typed so the flow can tell "try later" from "give up".
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database stayed locked after the lock retry rule gave up.
    #[error("{op}: database is locked after {attempts} attempts")]
    Locked { op: &'static str, attempts: u32 },
    /// Any other database error, reported at once.
    #[error("{op}: database error: {source}")]
    Database {
        op: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// `owner` no longer holds the job's lease (it expired and another worker took it, or it ended).
    #[error("job {key}: lease lost")]
    LeaseLost { key: String },
    /// A stored row that does not decode (hostile or damaged file content).
    #[error("job {key}: corrupt {field}: {reason}")]
    Corrupt {
        key: String,
        field: &'static str,
        reason: String,
    },
    /// A bad path, URL or configuration, refused before anything runs.
    #[error("cannot open {what}: {reason}")]
    Open { what: String, reason: String },
}

impl StoreError {
    pub(crate) fn database(
        op: &'static str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        StoreError::Database {
            op,
            source: Box::new(source),
        }
    }
}
