//! What the pipeline adds to a call, measured against a peer in the same run.
//!
//! - `call/*`: one GET over loopback to the same local server, through the
//!   generated client (`grag`) and through bare reqwest with the same headers
//!   (`reqwest`). The difference is the per-call overhead of the pipeline:
//!   breaker admission, throttle, header assembly, classification, the log
//!   event and decoding into typed values.
//! - `admission/*` and `classify/*`: the pieces alone, each beside the bare
//!   primitive a hand-written client would use.
//!
//! Run with `cargo bench -p sdk-runtime --bench overhead`.

use std::hint::black_box;
use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use criterion::{Criterion, criterion_group, criterion_main};
use grag_client::policy::POLICY;
use grag_client::{Config, Grag, TenantId};
use sdk_runtime::classify::{Outcome, classify};
use sdk_runtime::policy::ThrottlePolicy;
use sdk_runtime::throttle::Throttle;

/// The spec's policy with a token bucket wide enough not to pace the bench.
fn unpaced() -> &'static sdk_runtime::Policy {
    let mut policy = POLICY.clone();
    policy.throttle = ThrottlePolicy {
        per_second: u32::MAX,
        ..POLICY.throttle.clone()
    };
    Box::leak(Box::new(policy))
}

fn call(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let addr = rt.block_on(async {
        let app = Router::new().route(
            "/workspaces/api/v1/kbs",
            get(|| async {
                axum::Json(serde_json::json!([{"kb_id": "kb-1", "name": "Methodik"}]))
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    });
    let base = format!("http://{addr}");
    let _guard = rt.enter();
    let grag = Grag::with_policy(
        Config::new(&base, "bench-key", TenantId::parse("knoll").unwrap()),
        unpaced(),
    )
    .unwrap();
    let http = reqwest::Client::new();
    let url = format!("{base}/workspaces/api/v1/kbs");
    let mut group = c.benchmark_group("call");
    group.bench_function("reqwest", |b| {
        b.to_async(&rt).iter(|| async {
            let kbs: Vec<grag_client::types::Kb> = http
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

fn admission(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let policy = unpaced();
    let throttle = Throttle::new(&policy.throttle);
    let semaphore = Arc::new(tokio::sync::Semaphore::new(8));
    let mut group = c.benchmark_group("admission");
    group.bench_function("throttle", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(throttle.admit(0).await) })
    });
    group.bench_function("semaphore", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(semaphore.clone().acquire_owned().await.unwrap()) })
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

criterion_group!(benches, call, admission, classification);
criterion_main!(benches);
