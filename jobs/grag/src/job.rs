//! What a job carries: its payload, with every platform ID fixed when the
//! job is made, so a replay addresses exactly what the first run did.

use grag_client::types::{Edge, Entity, Point, UploadDocument};
use grag_client::{DocumentId, KbId, WorkspaceId};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The job kind of an upload, and of a KG batch (`policy.yaml replay.kinds`).
pub(crate) const INGEST: &str = "ingest";
pub(crate) const KG: &str = "kg";

/// One document into a knowledge base: upload, convert, then upsert its
/// chunk points. The document id is deterministic (409 = already there) and
/// the point ids are derived from the chunks, so every step can be repeated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Upload {
    pub kb: KbId,
    pub document: UploadDocument,
    /// The document's chunk embeddings, one upsert (split on a 413).
    pub points: Vec<Point>,
}

/// Entities, then edges, of one workspace's knowledge graph: MERGE upserts
/// by id, so repeating one changes nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KgBatch {
    pub workspace: WorkspaceId,
    pub entities: Vec<Entity>,
    pub edges: Vec<Edge>,
}

/// The job of an upload: one per document of a knowledge base.
pub fn upload_key(upload: &Upload) -> String {
    document_key(&upload.kb, &upload.document.document_id)
}

/// The job of the upload of document `document_id` into `kb`.
pub fn document_key(kb: &KbId, document_id: &DocumentId) -> String {
    format!("ingest:{}:{}", kb.as_str(), document_id.as_str())
}

/// The job of a KG batch: the same batch (same content) is the same job.
pub fn kg_key(batch: &KgBatch) -> String {
    let bytes = serde_json::to_vec(batch).unwrap_or_default();
    let digest = Sha256::digest(&bytes);
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("kg:{}:{hex}", batch.workspace.as_str())
}

/// Why a job could not be submitted or worked.
#[derive(Debug, thiserror::Error)]
pub enum JobsError {
    #[error("job store: {0}")]
    Store(#[from] sdk_queue::StoreError),
    /// A stored payload or checkpoint that does not decode: the row was
    /// written by another version or damaged. The job is left as it is.
    #[error("job {key}: its {what} does not decode: {reason}")]
    Corrupt {
        key: String,
        what: &'static str,
        reason: String,
    },
    /// A rerun given content that is not the content the job ran: nothing
    /// was run. The caller's file store holds another version (replace the
    /// document under a new id) or the wrong document.
    #[error("job {key}: refused to rerun: {reason}")]
    NotItsContent { key: String, reason: String },
    #[error("the client's policy has no `replay` section: its writes are never queued")]
    NoReplayPolicy,
}
