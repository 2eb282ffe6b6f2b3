//! What the pipeline adds to a call, measured against a peer in the same run.
//!
//! - `call/*`: one GET over loopback to the same local server, through the
//!   generated client (`grag`) and through bare reqwest with the same headers
//!   (`reqwest`). The difference is the per-call overhead of the pipeline:
//!   breaker admission, throttle, header assembly, classification, the log
//!   event and decoding into typed values.
//! - `throughput8/*`: 8 calls in flight at once (one iteration = 8 calls), a
//!   small JSON GET, a 106 KB JSON answer and a 1 MB PUT, through the client
//!   and through bare reqwest with the same headers, the same body encoding
//!   and decode, and a `reqwest::Client` built as the SDK builds its own.
//! - `admission/*` and `classify/*`: the pieces alone, each beside the bare
//!   primitive a hand-written client would use. `admission/*/peer` is a
//!   governor check plus a tokio semaphore acquire; `8_tasks` runs 8 tasks
//!   admitting at once on a 2-worker runtime.
//!
//! The client runs with the spec's policy except `throttle.per_second =
//! u32::MAX` (the override named `unpaced` in the output), so the 50 req/s
//! bucket does not turn the bench into a measurement of sleeping.
//!
//! - `fail_fast/open_breaker`: a call refused by the open breaker, with the
//!   allocations per refusal counted by a counting global allocator and
//!   printed (the goal: none beyond the error itself).
//!
//! Run with `cargo bench -p grag-tests --bench overhead`. It lives here, beside
//! the other users of the generated client, since the runtime depends on no
//! generated API.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::routing::get;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures_util::future::join_all;
use grag_client::policy::POLICY;
use grag_client::types::{Document, Kb};
use grag_client::{Config, Grag, KbId, TenantId};
use sdk_runtime::internals::Throttle;
use sdk_runtime::internals::{Outcome, classify};
use sdk_runtime::policy::ThrottlePolicy;

/// Counts allocations, so the fail-fast path can be held to "the error and nothing else".
struct Counting;

static ALLOCATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

// SAFETY: every call is passed to the system allocator unchanged.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The name the policy override goes by in the bench output.
const OVERRIDE: &str = "unpaced(per_second=u32::MAX)";

/// The spec's policy with a token bucket wide enough not to pace the bench.
fn unpaced() -> &'static sdk_runtime::Policy {
    let mut policy = POLICY.clone();
    policy.throttle = ThrottlePolicy {
        per_second: u32::MAX,
        ..POLICY.throttle.clone()
    };
    Box::leak(Box::new(policy))
}

const KBS: &str = "/workspaces/api/v1/kbs";
const DOCUMENTS: &str = "/workspaces/api/v1/kbs/kb-1/documents";
const SETTINGS: &str = "/workspaces/api/v1/settings";

/// A document list of about 106 KB, as JSON.
fn documents_body() -> Bytes {
    let docs: Vec<serde_json::Value> = (0..800)
        .map(|i| {
            serde_json::json!({
                "document_id": format!("doc-{i:05}"),
                "filename": format!("pruefbericht-{i:05}-anlage.pdf"),
                "content_type": "application/pdf",
                "status": "indexed",
                "created_at": "2026-11-30T08:15:00Z",
            })
        })
        .collect();
    Bytes::from(serde_json::to_vec(&docs).unwrap())
}

/// A settings document of about 1 MB.
fn settings_body() -> serde_json::Value {
    let rows: Vec<serde_json::Value> = (0..8000)
        .map(|i| serde_json::json!({"key": format!("setting-{i:06}"), "value": "x".repeat(100)}))
        .collect();
    serde_json::json!({ "rows": rows })
}

/// Starts the local server on `rt` and returns its base URL.
fn serve(rt: &tokio::runtime::Runtime) -> String {
    let documents = documents_body();
    let addr = rt.block_on(async move {
        let app = Router::new()
            .route(
                KBS,
                get(|| async {
                    axum::Json(serde_json::json!([{"kb_id": "kb-1", "name": "Methodik"}]))
                }),
            )
            .route(
                DOCUMENTS,
                get(move || {
                    let body = documents.clone();
                    async move { ([("content-type", "application/json")], body) }
                }),
            )
            .route(
                SETTINGS,
                axum::routing::put(|body: Bytes| async move {
                    axum::Json(serde_json::json!({"stored": body.len()}))
                })
                .layer(axum::extract::DefaultBodyLimit::max(4 << 20)),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    });
    format!("http://{addr}")
}

fn server_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

fn grag_client(base: &str) -> Grag {
    Grag::with_policy(
        Config::new(base, "bench-key", TenantId::parse("knoll").unwrap()),
        unpaced(),
    )
    .unwrap()
}

/// The bare peer: the headers the pipeline sends on these routes.
fn bare(http: &reqwest::Client, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
    http.request(method, url)
        .header("X-Request-ID", uuid::Uuid::new_v4().to_string())
        .header("Authorization", "Bearer bench-key")
        .header("X-Tenant-ID", "knoll")
}

async fn bare_json<T: serde::de::DeserializeOwned>(request: reqwest::RequestBuilder) -> T {
    let body = request.send().await.unwrap().bytes().await.unwrap();
    serde_json::from_slice(&body).unwrap()
}

fn call(c: &mut Criterion) {
    let rt = server_runtime();
    let base = serve(&rt);
    let _guard = rt.enter();
    let grag = grag_client(&base);
    let http = reqwest::Client::new();
    let url = format!("{base}{KBS}");
    let mut group = c.benchmark_group("call");
    group.bench_function("reqwest", |b| {
        b.to_async(&rt).iter(|| async {
            let kbs: Vec<Kb> = http
                .get(&url)
                .header("Authorization", "Bearer bench-key")
                .header("X-Tenant-ID", "knoll")
                .header("X-Request-ID", uuid::Uuid::new_v4().to_string())
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            black_box(kbs)
        })
    });
    group.bench_function("grag", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(grag.workspaces().list_kbs().await.unwrap()) })
    });
    group.finish();
}

/// Runs `one` 8 times concurrently.
async fn eight<F, Fut, T>(one: F) -> Vec<T>
where
    F: Fn() -> Fut,
    Fut: Future<Output = T>,
{
    join_all((0..8).map(|_| one())).await
}

fn throughput(c: &mut Criterion) {
    eprintln!("throughput8: the client runs the policy override {OVERRIDE}");
    let rt = server_runtime();
    let base = serve(&rt);
    let _guard = rt.enter();
    let grag = grag_client(&base);
    // Built as the SDK builds its own client: the default pool.
    let http = reqwest::Client::builder().build().unwrap();
    let kb = KbId::parse("kb-1").unwrap();
    let settings = settings_body();
    let grag_name = format!("grag[{OVERRIDE}]");
    let (kbs, documents, put) = (
        format!("{base}{KBS}"),
        format!("{base}{DOCUMENTS}"),
        format!("{base}{SETTINGS}"),
    );

    let mut group = c.benchmark_group("throughput8/small_get");
    group.throughput(Throughput::Elements(8));
    group.bench_function("reqwest", |b| {
        b.to_async(&rt)
            .iter(|| eight(|| bare_json::<Vec<Kb>>(bare(&http, reqwest::Method::GET, &kbs))))
    });
    group.bench_function(&grag_name, |b| {
        b.to_async(&rt)
            .iter(|| eight(|| async { grag.workspaces().list_kbs().await.unwrap() }))
    });
    group.finish();

    let mut group = c.benchmark_group("throughput8/get_106kb");
    group.throughput(Throughput::Elements(8));
    group.bench_function("reqwest", |b| {
        b.to_async(&rt).iter(|| {
            eight(|| bare_json::<Vec<Document>>(bare(&http, reqwest::Method::GET, &documents)))
        })
    });
    group.bench_function(&grag_name, |b| {
        b.to_async(&rt)
            .iter(|| eight(|| async { grag.workspaces().list_documents(&kb).await.unwrap() }))
    });
    group.finish();

    let mut group = c.benchmark_group("throughput8/put_1mb");
    group.throughput(Throughput::Elements(8));
    group.bench_function("reqwest", |b| {
        b.to_async(&rt).iter(|| {
            eight(|| {
                let body = serde_json::to_vec(&settings).unwrap();
                bare_json::<serde_json::Value>(
                    bare(&http, reqwest::Method::PUT, &put)
                        .header(reqwest::header::CONTENT_TYPE, "application/json")
                        .body(body),
                )
            })
        })
    });
    group.bench_function(&grag_name, |b| {
        b.to_async(&rt)
            .iter(|| eight(|| async { grag.workspaces().put_settings(&settings).await.unwrap() }))
    });
    group.finish();
}

/// The bare primitives a hand-written client would use: a token bucket
/// check and a semaphore acquire.
struct Peer {
    bucket: governor::DefaultDirectRateLimiter,
    semaphore: tokio::sync::Semaphore,
}

impl Peer {
    fn new() -> Self {
        Self {
            bucket: governor::RateLimiter::direct(governor::Quota::per_second(NonZeroU32::MAX)),
            semaphore: tokio::sync::Semaphore::new(8),
        }
    }

    async fn admit(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.bucket.check().unwrap();
        self.semaphore.acquire().await.unwrap()
    }
}

/// `iters` admissions spread over 8 tasks on a 2-worker runtime.
fn eight_tasks<F, Fut>(rt: &tokio::runtime::Runtime, iters: u64, admit: F) -> Duration
where
    F: Fn() -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = ()> + Send,
{
    let per_task = iters.div_ceil(8);
    rt.block_on(async {
        let started = Instant::now();
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let admit = admit.clone();
                tokio::spawn(async move {
                    for _ in 0..per_task {
                        admit().await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        started.elapsed()
    })
}

fn admission(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let policy = unpaced();
    let throttle = Arc::new(Throttle::new(&policy.throttle));
    let peer = Arc::new(Peer::new());
    let mut group = c.benchmark_group("admission/uncontended");
    group.bench_function(format!("throttle[{OVERRIDE}]"), |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(throttle.admit(0).await) })
    });
    group.bench_function("peer", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(peer.admit().await) })
    });
    group.finish();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("admission/8_tasks");
    group.bench_function(format!("throttle[{OVERRIDE}]"), |b| {
        b.iter_custom(|iters| {
            let throttle = Arc::clone(&throttle);
            eight_tasks(&rt, iters, move || {
                let throttle = Arc::clone(&throttle);
                async move {
                    drop(black_box(throttle.admit(0).await));
                }
            })
        })
    });
    group.bench_function("peer", |b| {
        b.iter_custom(|iters| {
            let peer = Arc::clone(&peer);
            eight_tasks(&rt, iters, move || {
                let peer = Arc::clone(&peer);
                async move {
                    drop(black_box(peer.admit().await));
                }
            })
        })
    });
    group.finish();
}

fn classification(c: &mut Criterion) {
    let endpoint = grag_client::policy::ENDPOINTS[1];
    let outcome = Outcome::Status {
        status: 503,
        detail: Some("upstream said something new"),
        retry_after: false,
    };
    let mut group = c.benchmark_group("classify");
    group.bench_function("taxonomy", |b| {
        b.iter(|| black_box(classify(&POLICY, endpoint, black_box(&outcome))))
    });
    group.bench_function("match", |b| {
        b.iter(|| {
            let class = match black_box(&outcome) {
                Outcome::Status {
                    status: 503,
                    detail: Some(d),
                    ..
                } if d.contains("disabled") => "feature_dark",
                Outcome::Status { status: 503, .. } => "ambiguous",
                Outcome::Status {
                    status: 500..=599, ..
                } => "server_error",
                _ => "other",
            };
            black_box(class)
        })
    });
    group.finish();
}

/// A client whose breaker is open: three endpoints refused (a port nobody
/// listens on), with time compressed ×10 so opening it takes no seconds.
fn open_breaker(rt: &tokio::runtime::Runtime) -> Grag {
    rt.block_on(async {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        drop(listener);
        let tenant = TenantId::parse("knoll").unwrap();
        let grag =
            Grag::with_policy(Config::new(url, "bench-key", tenant), POLICY.scaled(10)).unwrap();
        let kb = KbId::parse("kb-1").unwrap();
        let _ = grag.workspaces().list_kbs().await;
        let _ = grag.workspaces().get_settings().await;
        let _ = grag.workspaces().list_documents(&kb).await;
        assert_eq!(
            grag.runtime().circuit_state(),
            sdk_runtime::CircuitState::Open
        );
        grag
    })
}

fn fail_fast(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let grag = open_breaker(&rt);
    let refusals = 10_000u64;
    let before = ALLOCATIONS.load(std::sync::atomic::Ordering::Relaxed);
    rt.block_on(async {
        for _ in 0..refusals {
            let e = grag.workspaces().list_kbs().await.unwrap_err();
            assert_eq!(e.row(), "T21");
        }
    });
    let allocations = ALLOCATIONS.load(std::sync::atomic::Ordering::Relaxed) - before;
    eprintln!(
        "fail_fast: {:.2} allocations per refused call (the error itself is 1)",
        allocations as f64 / refusals as f64
    );
    let mut group = c.benchmark_group("fail_fast");
    group.bench_function("open_breaker", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(grag.workspaces().list_kbs().await.unwrap_err()) })
    });
    group.finish();
}

criterion_group!(
    benches,
    call,
    throughput,
    admission,
    classification,
    fail_fast
);
criterion_main!(benches);
