//! The connection pool, and its replacement when the server has said, by
//! its status, that it closes connections without announcing it.

use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use reqwest::header::{CONNECTION, HeaderMap};

/// The HTTP client whose pool the calls share. After a status of the
/// policy's `fresh_after` (uvicorn's 500 after an unhandled error, followed
/// by a close it never announces) no pooled connection is used again: the
/// pool is replaced and the next calls connect afresh, so none of them is
/// written onto a connection the server is about to reset.
pub(crate) struct Pool {
    current: RwLock<reqwest::Client>,
    idle: Duration,
    fresh_after: &'static [u16],
    /// How many times the pool was replaced.
    replaced: AtomicU64,
}

impl Pool {
    pub(crate) fn new(idle: Duration, fresh_after: &'static [u16]) -> reqwest::Result<Pool> {
        Ok(Pool {
            current: RwLock::new(build(idle)?),
            idle,
            fresh_after,
            replaced: AtomicU64::new(0),
        })
    }

    /// The client to send the next request with (a handle: cloning is cheap).
    pub(crate) fn client(&self) -> reqwest::Client {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Called with every answer's status and headers, before its body is read
    /// (so before its connection goes back to the pool).
    pub(crate) fn answered(&self, status: u16, headers: &HeaderMap) {
        if must_not_reuse(self.fresh_after, status, headers) {
            self.retire();
        }
    }

    /// Replaces the pool. Requests in flight keep the old one until they
    /// end; its idle connections close with it. Should a new client not
    /// build (it never needs more than the first one did), the old one stays.
    fn retire(&self) {
        if let Ok(fresh) = build(self.idle) {
            *self.current.write().unwrap_or_else(|e| e.into_inner()) = fresh;
            self.replaced.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// How many times the pool was replaced.
    #[cfg(test)]
    fn replaced(&self) -> u64 {
        self.replaced.load(Ordering::Relaxed)
    }
}

/// Whether an answer means its server closes connections unannounced: a
/// `fresh_after` status without `Connection: close` (with it, the HTTP
/// client already drops that connection).
fn must_not_reuse(fresh_after: &[u16], status: u16, headers: &HeaderMap) -> bool {
    fresh_after.contains(&status)
        && !headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|token| token.trim().eq_ignore_ascii_case("close"))
}

fn build(idle: Duration) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        // Never follow a redirect: the next hop would get the tenant,
        // workspace and pipeline headers (and on 307/308 the body). A 3xx
        // is an answer with a row of its own (contract drift).
        .redirect(reqwest::redirect::Policy::none())
        .pool_idle_timeout(idle)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(connection: Option<&'static str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(v) = connection {
            h.insert(CONNECTION, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn only_a_listed_status_without_an_announced_close_retires_the_pool() {
        let listed = &[500];
        assert!(must_not_reuse(listed, 500, &headers(None)));
        assert!(must_not_reuse(listed, 500, &headers(Some("keep-alive"))));
        assert!(!must_not_reuse(listed, 500, &headers(Some("close"))));
        assert!(!must_not_reuse(
            listed,
            500,
            &headers(Some("keep-alive, Close"))
        ));
        assert!(!must_not_reuse(listed, 502, &headers(None)));
        assert!(!must_not_reuse(listed, 200, &headers(None)));
        assert!(!must_not_reuse(&[], 500, &headers(None)));
    }

    #[tokio::test]
    async fn a_retired_pool_hands_out_a_new_client() {
        let pool = Pool::new(Duration::from_secs(4), &[500]).unwrap();
        pool.answered(200, &headers(None));
        pool.answered(500, &headers(Some("close")));
        assert_eq!(pool.replaced(), 0, "nothing to retire");
        pool.answered(500, &headers(None));
        assert_eq!(pool.replaced(), 1, "a fresh pool");
    }
}
