//! What a done job keeps of its content: what identifies it, a digest of the
//! content, and the result's summary. Knoll's file store is the source of
//! truth (§1.4); a rerun takes the content from there again, and the digest
//! tells whether it is the content the job ran.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::job::{KgBatch, Upload};

/// A job's content, as a rerun hands it back.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    Upload(Upload),
    Kg(KgBatch),
}

impl From<Upload> for Content {
    fn from(upload: Upload) -> Self {
        Content::Upload(upload)
    }
}

impl From<KgBatch> for Content {
    fn from(batch: KgBatch) -> Self {
        Content::Kg(batch)
    }
}

/// The hex SHA-256 of a payload's JSON text. Taken of the `Value`, whose
/// object keys are sorted, so the content a job ran and the same content
/// given again digest alike.
pub(crate) fn digest(payload: &Value) -> String {
    let text = serde_json::to_vec(payload).unwrap_or_default();
    Sha256::digest(&text)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The payload a done job keeps in place of `payload`: the platform ids fixed
/// at submit, the content's digest and size, and how many items it wrote.
pub(crate) fn kept(kind: &str, payload: &Value) -> Value {
    let count = |v: &Value| v.as_array().map_or(0, Vec::len);
    let bytes = serde_json::to_vec(payload).map_or(0, |t| t.len());
    let mut kept = match kind {
        crate::job::INGEST => json!({
            "kb": payload["kb"],
            "document_id": payload["document"]["document_id"],
            "filename": payload["document"]["filename"],
            "points": count(&payload["points"]),
        }),
        _ => json!({
            "workspace": payload["workspace"],
            "entities": count(&payload["entities"]),
            "edges": count(&payload["edges"]),
        }),
    };
    kept["digest"] = json!(digest(payload));
    kept["content_bytes"] = json!(bytes);
    kept
}

/// The digest a done job's content had: the kept one, or, for a row a release
/// that kept whole payloads wrote, the digest of that payload.
pub(crate) fn kept_digest(stored: &Value) -> String {
    match stored.get("digest").and_then(Value::as_str) {
        Some(d) if stored.get("content_bytes").is_some() => d.to_owned(),
        _ => digest(stored),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_ignores_key_order_and_sees_every_byte() {
        let a = json!({"a": 1, "b": "x"});
        let b: Value = serde_json::from_str(r#"{"b":"x","a":1}"#).unwrap();
        assert_eq!(digest(&a), digest(&b));
        assert_ne!(digest(&a), digest(&json!({"a": 1, "b": "y"})));
        assert_eq!(digest(&a).len(), 64);
    }

    #[test]
    fn a_kept_payload_names_its_digest_and_an_old_whole_payload_is_digested() {
        let whole = json!({"kb": "kb-1", "document": {"document_id": "d", "filename": "f"}, "points": [1, 2]});
        let k = kept(crate::job::INGEST, &whole);
        assert_eq!(
            (k["kb"].clone(), k["points"].clone()),
            (json!("kb-1"), json!(2))
        );
        assert_eq!(kept_digest(&k), digest(&whole));
        assert_eq!(kept_digest(&whole), digest(&whole));
    }
}
