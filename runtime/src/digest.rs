//! The sha256 digests log lines and alerts carry instead of content.

/// Request bodies up to this size are hashed for the log line; a larger
/// one is logged by length alone (hashing megabytes per call buys nothing).
const MAX_HASHED_BODY: usize = 1 << 20;

/// The sha256 of a request body, if it is small enough to be worth hashing.
pub(crate) fn body_digest(body: &[u8]) -> Option<String> {
    (body.len() <= MAX_HASHED_BODY).then(|| sha256_hex(body))
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write;
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn large_bodies_are_not_hashed() {
        assert_eq!(super::body_digest(b"{}").map(|d| d.len()), Some(64));
        assert_eq!(
            super::body_digest(&vec![b'x'; super::MAX_HASHED_BODY + 1]),
            None
        );
    }
}
