//! Rows 1 and 2: what the pipeline adds to a call, against bare reqwest
//! with the same headers, the same body encoding and decode, and a
//! `reqwest::Client` built as the SDK builds its own (same pool settings).
//!
//! The client runs the spec's policy with one override, [`OVERRIDE`]: the
//! 50 req/s bucket would otherwise turn the bench into a measurement of
//! sleeping. Everything else (breaker, semaphores, rolling windows,
//! classification, the log event, typed decode) runs as in production.

use std::cell::RefCell;
use std::time::Instant;

use futures_util::future::join_all;
use grag_client::policy::POLICY;
use grag_client::types::{Document, Kb};
use grag_client::{Config, Grag, KbId, TenantId};
use sdk_runtime::policy::ThrottlePolicy;

use crate::report::{Goal, Measurement};
use crate::rounds::{quantile, rotate};
use crate::server::{self, DOCUMENTS, KBS, SETTINGS};
use crate::{Opts, alloc};

/// The policy override, as named in the output.
pub const OVERRIDE: &str = "throttle.per_second=u32::MAX";

/// Calls in flight at once.
const IN_FLIGHT: usize = 8;

/// The spec's policy with a token bucket wide enough not to pace the bench.
pub fn unpaced() -> &'static sdk_runtime::Policy {
    let mut policy = POLICY.clone();
    policy.throttle = ThrottlePolicy {
        per_second: u32::MAX,
        ..POLICY.throttle.clone()
    };
    Box::leak(Box::new(policy))
}

fn grag(base: &str) -> Grag {
    let tenant = TenantId::parse("knoll").expect("a tenant");
    Grag::with_policy(Config::new(base, "bench-key", tenant), unpaced()).expect("a client")
}

/// The bare peer's client, built as `runtime/src/pool.rs` builds the SDK's.
fn bare_client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_idle_timeout(POLICY.pool_idle)
        .build()
        .expect("a reqwest client")
}

/// The headers the pipeline sends on these routes.
fn bare(http: &reqwest::Client, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
    http.request(method, url)
        .header("X-Request-ID", uuid::Uuid::new_v4().to_string())
        .header("Authorization", "Bearer bench-key")
        .header("X-Tenant-ID", "knoll")
}

/// The small GET of row 1, through our client and through bare reqwest:
/// shared by the wall-time row and its callgrind pair (`micro`).
pub struct SmallGet {
    grag: Grag,
    http: reqwest::Client,
    url: String,
}

impl SmallGet {
    /// Both contenders against the bench server at `base`.
    pub fn new(base: &str) -> Self {
        SmallGet {
            grag: grag(base),
            http: bare_client(),
            url: format!("{base}{KBS}"),
        }
    }

    pub async fn ours(&self) {
        self.grag.workspaces().list_kbs().await.expect("list_kbs");
    }

    pub async fn peer(&self) {
        bare_json::<Vec<Kb>>(bare(&self.http, reqwest::Method::GET, &self.url)).await;
    }
}

/// `calls` calls of `one`, [`IN_FLIGHT`] at a time, as a row runs them
/// but unmeasured (the callgrind pairs count instructions around it).
pub async fn in_flight<F, Fut>(calls: u64, one: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()>,
{
    let next = std::cell::Cell::new(0);
    join_all((0..IN_FLIGHT).map(|_| async {
        while next.get() < calls {
            next.set(next.get() + 1);
            one().await;
        }
    }))
    .await;
}

async fn bare_json<T: serde::de::DeserializeOwned>(request: reqwest::RequestBuilder) -> T {
    let response = request.send().await.expect("the bench server answers");
    assert!(response.status().is_success(), "{}", response.status());
    let body = response.bytes().await.expect("a body");
    serde_json::from_slice(&body).expect("JSON")
}

/// One round of one contender: calls per second, and each call's latency.
struct Batch {
    per_second: f64,
    latencies_us: Vec<f64>,
}

/// `calls` calls of `one`, `IN_FLIGHT` at a time, on `rt`.
fn batch<F, Fut>(rt: &tokio::runtime::Runtime, calls: usize, one: F) -> Batch
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()>,
{
    let latencies = RefCell::new(Vec::with_capacity(calls));
    let next = std::cell::Cell::new(0);
    let started = Instant::now();
    rt.block_on(join_all((0..IN_FLIGHT).map(|_| async {
        while next.get() < calls {
            next.set(next.get() + 1);
            let t = Instant::now();
            one().await;
            latencies.borrow_mut().push(t.elapsed().as_secs_f64() * 1e6);
        }
    })));
    Batch {
        per_second: calls as f64 / started.elapsed().as_secs_f64(),
        latencies_us: latencies.into_inner(),
    }
}

/// Rows for one request shape: throughput ratio, added p50 and p99.
fn rows(shape: &str, results: Vec<Vec<Batch>>) -> Vec<Measurement> {
    let [ours, peer]: [Vec<Batch>; 2] = results.try_into().ok().expect("two contenders");
    let per_second = |b: &[Batch]| b.iter().map(|b| b.per_second).collect::<Vec<_>>();
    let latency = |b: &[Batch], q: f64| {
        b.iter()
            .map(|b| quantile(&mut b.latencies_us.clone(), q))
            .collect::<Vec<_>>()
    };
    let note =
        format!("ours: grag client [{OVERRIDE}]; peer: bare reqwest, same headers/pool/decode");
    vec![
        Measurement::new(
            format!("pipeline {shape}: throughput, {IN_FLIGHT} in flight"),
            "calls/s",
            (per_second(&ours), per_second(&peer)),
        )
        .note(note.clone())
        .goal(Goal::ratio(">=", 0.97)),
        Measurement::new(
            format!("pipeline {shape}: p50 latency"),
            "µs",
            (latency(&ours, 0.5), latency(&peer, 0.5)),
        )
        .note(note.clone())
        .added(),
        Measurement::new(
            format!("pipeline {shape}: p99 latency"),
            "µs",
            (latency(&ours, 0.99), latency(&peer, 0.99)),
        )
        .note(note)
        .added(),
    ]
}

pub fn run(opts: &Opts) {
    let server = server::start();
    let base = server.base();
    // The client on this thread, the server on its own: one core each.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let _guard = rt.enter();
    let small_get = SmallGet::new(&base);
    let scale = |n: usize| if opts.quick { n / 4 } else { n / 2 };
    let rounds = opts.rounds;

    let results = rotate(
        rounds,
        &mut [
            &mut || batch(&rt, scale(2000), || small_get.ours()),
            &mut || batch(&rt, scale(2000), || small_get.peer()),
        ],
    );
    rows("small GET", results)
        .iter()
        .for_each(Measurement::print);
    rows(
        "106 KB GET",
        large_get(&rt, scale(400), rounds, &small_get, &base),
    )
    .iter()
    .for_each(Measurement::print);
    rows(
        "1 MB PUT",
        large_put(&rt, scale(80), rounds, &small_get, &base),
    )
    .iter()
    .for_each(Measurement::print);
    allocations(&rt, &small_get, rounds);
}

/// The 106 KB document list, through the client and bare, `n` calls a round.
fn large_get(
    rt: &tokio::runtime::Runtime,
    n: usize,
    rounds: usize,
    small_get: &SmallGet,
    base: &str,
) -> Vec<Vec<Batch>> {
    let (grag, http) = (&small_get.grag, &small_get.http);
    let kb = KbId::parse("kb-1").expect("a KB id");
    let documents = format!("{base}{DOCUMENTS}");
    rotate(
        rounds,
        &mut [
            &mut || {
                batch(rt, n, || async {
                    grag.workspaces()
                        .list_documents(&kb)
                        .await
                        .expect("list_documents");
                })
            },
            &mut || {
                batch(rt, n, || async {
                    bare_json::<Vec<Document>>(bare(http, reqwest::Method::GET, &documents)).await;
                })
            },
        ],
    )
}

/// The 1 MB settings PUT, through the client and bare, `n` calls a round.
fn large_put(
    rt: &tokio::runtime::Runtime,
    n: usize,
    rounds: usize,
    small_get: &SmallGet,
    base: &str,
) -> Vec<Vec<Batch>> {
    let (grag, http) = (&small_get.grag, &small_get.http);
    let settings = server::settings_body();
    let put = format!("{base}{SETTINGS}");
    rotate(
        rounds,
        &mut [
            &mut || {
                batch(rt, n, || async {
                    grag.workspaces()
                        .put_settings(&settings)
                        .await
                        .expect("put_settings");
                })
            },
            &mut || {
                batch(rt, n, || async {
                    let body = serde_json::to_vec(&settings).expect("JSON");
                    bare_json::<serde_json::Value>(
                        bare(http, reqwest::Method::PUT, &put)
                            .header(reqwest::header::CONTENT_TYPE, "application/json")
                            .body(body),
                    )
                    .await;
                })
            },
        ],
    )
}

/// Row 2: allocations per small GET on this thread (the client's runtime),
/// one call at a time so the count is the call's own.
fn allocations(rt: &tokio::runtime::Runtime, small_get: &SmallGet, rounds: usize) {
    const CALLS: u64 = 200;
    let per_call = |f: &dyn Fn()| {
        let before = alloc::count();
        for _ in 0..CALLS {
            f();
        }
        (alloc::count() - before) as f64 / CALLS as f64
    };
    let ours = || rt.block_on(small_get.ours());
    let peer = || rt.block_on(small_get.peer());
    let samples = crate::rounds::pair(rounds, || per_call(&ours), || per_call(&peer));
    Measurement::new("allocations per small GET", "allocs", samples)
        .note(format!(
            "counted on the calling thread (client runtime), one call at a time; ours [{OVERRIDE}]"
        ))
        .print();
}
