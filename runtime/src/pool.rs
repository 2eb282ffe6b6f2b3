//! The connection pool, and its replacement when the server has said, by
//! its status, that it closes connections without announcing it.

#[cfg(test)]
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use reqwest::header::{CONNECTION, HeaderMap, HeaderName};

/// Made once: a name given as a string is parsed again on every lookup.
const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");

/// The HTTP client whose pool the calls share. After a status of the
/// policy's `fresh_after` (uvicorn's 500 after an unhandled error, followed
/// by a close it never announces) no pooled connection is used again: the
/// pool is replaced and the next calls connect afresh, so none of them is
/// written onto a connection the server is about to reset. A server's
/// announced `Keep-Alive: timeout=` shorter than the pool idle lowers it.
///
/// A write that is not idempotent goes out on connections of its own, kept
/// idle no longer than the policy's floor: a connection a proxy closes at
/// the moment a request is written on it loses the request unanswered, and
/// only an idempotent one may be sent again. hyper checks each connection's
/// idle time when it hands it out, so no write meets a proxy's keep-alive
/// edge above the floor.
///
/// A replacement is built off the async workers (building an HTTP client sets
/// up TLS, blocking work: 112–163 ms per rebuild were seen on a worker); until it is ready, calls go out on a
/// client that keeps no idle connection at all, built with the first one.
pub(crate) struct Pool {
    inner: Arc<Inner>,
}

/// What requests go out on: one client for any request, one for writes
/// that are not idempotent (see [`Pool`]).
#[derive(Clone)]
struct Clients {
    any: reqwest::Client,
    writes: reqwest::Client,
}

impl Clients {
    /// Connections kept `idle`, a write's no longer than `write_idle`.
    fn build(idle: Duration, write_idle: Duration) -> reqwest::Result<Clients> {
        Ok(Clients {
            any: build(Some(idle))?,
            writes: build(Some(idle.min(write_idle)))?,
        })
    }

    fn unpooled(unpooled: &reqwest::Client) -> Clients {
        Clients {
            any: unpooled.clone(),
            writes: unpooled.clone(),
        }
    }
}

struct Inner {
    current: RwLock<Clients>,
    /// Keeps no idle connection: every request on a fresh one.
    unpooled: reqwest::Client,
    /// The idle limit the next pool is built with, in ms.
    idle_ms: AtomicU64,
    /// The longest a write's connection is kept idle.
    write_idle: Duration,
    fresh_after: &'static [u16],
    /// How long before an announced keep-alive idle connections go.
    margin: Option<Duration>,
    /// A replacement is being built.
    rebuilding: AtomicBool,
    /// How many times the pool was replaced.
    replaced: AtomicU64,
    /// The threads replacements were built on.
    #[cfg(test)]
    built_on: Mutex<Vec<std::thread::ThreadId>>,
}

impl Pool {
    pub(crate) fn new(
        idle: Duration,
        write_idle: Duration,
        fresh_after: &'static [u16],
        margin: Option<Duration>,
    ) -> reqwest::Result<Pool> {
        Ok(Pool {
            inner: Arc::new(Inner {
                current: RwLock::new(Clients::build(idle, write_idle)?),
                unpooled: build(None)?,
                idle_ms: AtomicU64::new(millis(idle)),
                write_idle,
                fresh_after,
                margin,
                rebuilding: AtomicBool::new(false),
                replaced: AtomicU64::new(0),
                #[cfg(test)]
                built_on: Mutex::default(),
            }),
        })
    }

    /// The client to send the next request with (a handle: cloning is
    /// cheap); `idempotent`: whether the request may be sent again.
    pub(crate) fn client(&self, idempotent: bool) -> reqwest::Client {
        let clients = self.inner.current.read().unwrap_or_else(|e| e.into_inner());
        if idempotent {
            clients.any.clone()
        } else {
            clients.writes.clone()
        }
    }

    /// The idle limit pooled connections are kept to now.
    pub(crate) fn idle(&self) -> Duration {
        Duration::from_millis(self.inner.idle_ms.load(Ordering::Relaxed))
    }

    /// Called with every answer's status and headers, before its body is read
    /// (so before its connection goes back to the pool).
    pub(crate) fn answered(&self, status: u16, headers: &HeaderMap) {
        let lowered = self
            .inner
            .margin
            .and_then(|margin| announced_idle(headers, margin))
            .is_some_and(|idle| {
                let ms = millis(idle);
                self.inner.idle_ms.fetch_min(ms, Ordering::Relaxed) > ms
            });
        if lowered || must_not_reuse(self.inner.fresh_after, status, headers) {
            self.retire();
        }
    }

    /// Replaces the pool: from now on calls connect afresh (the unpooled
    /// client) until the replacement, built on a blocking thread, takes over.
    /// Requests in flight keep the old pool until they end; its idle
    /// connections close with it. Should a replacement not build (it never
    /// needs more than the first one did), calls stay unpooled.
    fn retire(&self) {
        let inner = &self.inner;
        *inner.current.write().unwrap_or_else(|e| e.into_inner()) =
            Clients::unpooled(&inner.unpooled);
        if inner.rebuilding.swap(true, Ordering::AcqRel) {
            return;
        }
        let inner = self.inner.clone();
        let rebuild = move || {
            #[cfg(test)]
            inner
                .built_on
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(std::thread::current().id());
            let idle = Duration::from_millis(inner.idle_ms.load(Ordering::Relaxed));
            if let Ok(fresh) = Clients::build(idle, inner.write_idle) {
                *inner.current.write().unwrap_or_else(|e| e.into_inner()) = fresh;
                inner.replaced.fetch_add(1, Ordering::Relaxed);
            }
            inner.rebuilding.store(false, Ordering::Release);
        };
        match tokio::runtime::Handle::try_current() {
            // Never on an async worker: the blocking pool is there for it.
            Ok(runtime) => drop(runtime.spawn_blocking(rebuild)),
            // No runtime on this thread: no worker to block.
            Err(_) => rebuild(),
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The idle limit a server announced (`Keep-Alive: timeout=N`, seconds) less
/// `margin`; `None` when it announced none that parses.
fn announced_idle(headers: &HeaderMap, margin: Duration) -> Option<Duration> {
    let seconds = headers
        .get_all(&KEEP_ALIVE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|param| {
            let (name, value) = param.split_once('=')?;
            name.trim()
                .eq_ignore_ascii_case("timeout")
                .then(|| value.trim().trim_matches('"').parse::<u64>().ok())?
        })
        .min()?;
    Some(Duration::from_secs(seconds.min(3600)).saturating_sub(margin))
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

/// A client keeping idle connections for `idle`, or none (`None`, or zero).
fn build(idle: Option<Duration>) -> reqwest::Result<reqwest::Client> {
    let builder = reqwest::Client::builder()
        // Never follow a redirect: the next hop would get the tenant,
        // workspace and pipeline headers (and on 307/308 the body). A 3xx
        // is an answer with a row of its own (contract drift).
        .redirect(reqwest::redirect::Policy::none());
    match idle.filter(|d| !d.is_zero()) {
        Some(idle) => builder.pool_idle_timeout(idle),
        None => builder.pool_max_idle_per_host(0),
    }
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

    impl Pool {
        fn replaced(&self) -> u64 {
            self.inner.replaced.load(Ordering::Relaxed)
        }

        fn built_on(&self) -> Vec<std::thread::ThreadId> {
            self.inner.built_on.lock().unwrap().clone()
        }

        /// Waits (yielding, never blocking the worker) until `n` replacements are in.
        async fn replaced_by(&self, n: u64) {
            while self.replaced() < n || self.inner.rebuilding.load(Ordering::Acquire) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }

    fn keep_alive(value: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("keep-alive", HeaderValue::from_static(value));
        h
    }

    /// On a current-thread runtime its one worker is this thread: a
    /// replacement built inline would be built here.
    #[tokio::test(flavor = "current_thread")]
    async fn a_retired_pool_is_rebuilt_off_the_async_worker() {
        let pool = Pool::new(Duration::from_secs(4), Duration::from_secs(1), &[500], None).unwrap();
        pool.answered(200, &headers(None));
        pool.answered(500, &headers(Some("close")));
        assert_eq!(pool.replaced(), 0, "nothing to retire");
        pool.answered(500, &headers(None));
        pool.replaced_by(1).await;
        assert_eq!(pool.replaced(), 1, "a fresh pool");
        let worker = std::thread::current().id();
        assert_eq!(pool.built_on().len(), 1);
        assert!(
            pool.built_on().iter().all(|t| *t != worker),
            "built on a blocking thread, not on the worker"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_announced_keep_alive_lowers_the_idle_limit_and_never_raises_it() {
        let pool = Pool::new(
            Duration::from_secs(4),
            Duration::from_secs(1),
            &[],
            Some(Duration::from_secs(1)),
        )
        .unwrap();
        pool.answered(200, &keep_alive("timeout=10, max=100"));
        assert_eq!(
            pool.idle(),
            Duration::from_secs(4),
            "longer than ours: kept"
        );
        pool.answered(200, &keep_alive("timeout=2"));
        assert_eq!(
            pool.idle(),
            Duration::from_secs(1),
            "2 s less the 1 s margin"
        );
        pool.replaced_by(1).await;
        pool.answered(200, &keep_alive("max=5, timeout = \"1\""));
        assert_eq!(
            pool.idle(),
            Duration::ZERO,
            "at or below the margin: nothing kept"
        );
        pool.replaced_by(2).await;
        pool.answered(200, &keep_alive("timeout=5"));
        pool.answered(200, &keep_alive("timeout=junk"));
        assert_eq!(pool.idle(), Duration::ZERO);
        assert_eq!(pool.replaced(), 2, "only a lower limit replaces the pool");
        // Not read where the policy names no margin.
        let pool = Pool::new(Duration::from_secs(4), Duration::from_secs(1), &[], None).unwrap();
        pool.answered(200, &keep_alive("timeout=2"));
        assert_eq!(pool.idle(), Duration::from_secs(4));
    }
}
