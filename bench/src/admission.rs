//! Rows 3 and 4: admission alone, and a call refused by an open breaker.
//!
//! Admission is what the pipeline runs before a request leaves: the
//! breaker's check (its state word) and the throttle's stages for the
//! retrieval budget (its rolling window and semaphore, the token bucket
//! with its rolling second, the global semaphore). The peer is what a
//! hand-written client would use: a governor check and a tokio semaphore.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use grag_client::policy::POLICY;
use grag_client::{Config, Grag, KbId, TenantId};
use sdk_runtime::CircuitState;
use sdk_runtime::internals::Throttle;
use sdk_runtime::internals::{Admission, Breaker, SharedBreaker};
use sdk_runtime::policy::{BudgetPolicy, ThrottlePolicy};

use crate::report::{Goal, Measurement};
use crate::rounds::pair;
use crate::{Opts, alloc};

/// The override, as named in the output: nothing paces the bench.
pub const OVERRIDE: &str = "throttle.per_second=u32::MAX, budgets' per_minute=u32::MAX";

/// The spec's throttle with every rate lifted; limits in flight unchanged.
fn unpaced() -> &'static sdk_runtime::Policy {
    let budgets: Vec<BudgetPolicy> = POLICY
        .throttle
        .budgets
        .iter()
        .map(|b| BudgetPolicy {
            per_minute: b.per_minute.map(|_| u32::MAX),
            ..b.clone()
        })
        .collect();
    let mut policy = POLICY.clone();
    policy.throttle = ThrottlePolicy {
        per_second: u32::MAX,
        budgets: Box::leak(budgets.into_boxed_slice()),
        ..POLICY.throttle.clone()
    };
    Box::leak(Box::new(policy))
}

fn retrieval(policy: &sdk_runtime::Policy) -> usize {
    policy
        .throttle
        .budgets
        .iter()
        .position(|b| b.name == "retrieval")
        .expect("the spec has a retrieval budget")
}

/// Ours: the breaker's check and the throttle's stages, as the pipeline runs them.
pub struct Ours {
    breaker: SharedBreaker,
    throttle: Throttle,
    budget: usize,
}

impl Ours {
    /// Fresh per batch: the lifted windows keep every admission for their
    /// period, so a long run would otherwise grow them without end.
    pub fn new() -> Self {
        let policy = unpaced();
        Self {
            breaker: SharedBreaker::new(Breaker::of(policy.breaker.as_ref())),
            throttle: Throttle::new(&policy.throttle),
            budget: retrieval(policy),
        }
    }

    pub async fn admit(&self) {
        let admission = self.breaker.admit(tokio::time::Instant::now, false);
        assert!(matches!(admission, Admission::Allowed(_)));
        drop(std::hint::black_box(
            self.throttle.admit_all(&[self.budget]).await,
        ));
    }
}

/// The peer: a governor check and a tokio semaphore.
pub struct Peer {
    bucket: governor::DefaultDirectRateLimiter,
    semaphore: tokio::sync::Semaphore,
}

impl Peer {
    pub fn new() -> Self {
        Self {
            bucket: governor::RateLimiter::direct(governor::Quota::per_second(NonZeroU32::MAX)),
            semaphore: tokio::sync::Semaphore::new(8),
        }
    }

    pub async fn admit(&self) {
        self.bucket.check().expect("an unpaced bucket");
        drop(std::hint::black_box(
            self.semaphore.acquire().await.expect("open"),
        ));
    }
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// ns per admission, `n` in a row on one task.
fn uncontended<T>(
    rt: &tokio::runtime::Runtime,
    n: u32,
    make: fn() -> T,
    admit: impl AsyncFn(&T),
) -> f64 {
    let state = make();
    let started = Instant::now();
    rt.block_on(async {
        for _ in 0..n {
            admit(&state).await;
        }
    });
    started.elapsed().as_nanos() as f64 / f64::from(n)
}

/// ns per admission, `n` spread over 8 tasks on a 2-worker runtime.
fn eight_tasks<T, Fut>(
    rt: &tokio::runtime::Runtime,
    n: u32,
    make: fn() -> T,
    admit: fn(Arc<T>) -> Fut,
) -> f64
where
    T: Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let state = Arc::new(make());
    let per_task = n / 8;
    let started = Instant::now();
    rt.block_on(async {
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let state = Arc::clone(&state);
                tokio::spawn(async move {
                    for _ in 0..per_task {
                        admit(Arc::clone(&state)).await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("an admitting task");
        }
    });
    started.elapsed().as_nanos() as f64 / f64::from(per_task * 8)
}

pub fn run(opts: &Opts) {
    let n = if opts.quick { 50_000 } else { 100_000 };
    let rt = current_thread();
    let note = format!(
        "ours: breaker check + throttle (retrieval budget) [{OVERRIDE}]; peer: governor check + tokio semaphore"
    );
    let samples = pair(
        opts.rounds,
        || uncontended(&rt, n, Ours::new, async |o| o.admit().await),
        || uncontended(&rt, n, Peer::new, async |p| p.admit().await),
    );
    Measurement::new("admission, uncontended", "ns", samples)
        .note(note.clone())
        .goal(Goal::ratio("<=", 2.0))
        .print();

    let rt2 = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let samples = pair(
        opts.rounds,
        || eight_tasks(&rt2, n, Ours::new, |o| async move { o.admit().await }),
        || eight_tasks(&rt2, n, Peer::new, |p| async move { p.admit().await }),
    );
    Measurement::new("admission, 8 tasks on 2 workers", "ns", samples)
        .note(note)
        .goal(Goal::ratio("<=", 2.0))
        .print();

    fail_fast(opts, &rt);
}

/// A client whose breaker is open: three endpoints refused (a port nobody
/// listens on), with time compressed ×10 so opening it takes no seconds.
pub fn open_breaker(rt: &tokio::runtime::Runtime) -> Grag {
    rt.block_on(async {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("an address"));
        drop(listener);
        let tenant = TenantId::parse("knoll").expect("a tenant");
        let grag = Grag::with_policy(Config::new(url, "bench-key", tenant), POLICY.scaled(10))
            .expect("a client");
        let kb = KbId::parse("kb-1").expect("a KB id");
        let _ = grag.workspaces().list_kbs().await;
        let _ = grag.workspaces().get_settings().await;
        let _ = grag.workspaces().list_documents(&kb).await;
        assert_eq!(grag.runtime().circuit_state(), CircuitState::Open);
        grag
    })
}

/// A refused call: through the generated client, and the peer's refusal (a
/// governor check on an exhausted bucket).
pub async fn refuse_ours(grag: &Grag) {
    let error = grag.workspaces().list_kbs().await.expect_err("refused");
    debug_assert_eq!(error.row(), "T21");
    drop(std::hint::black_box(error));
}

pub fn exhausted() -> governor::DefaultDirectRateLimiter {
    let quota = governor::Quota::with_period(Duration::from_secs(3600)).expect("a period");
    let bucket = governor::RateLimiter::direct(quota);
    let _ = bucket.check();
    bucket
}

pub async fn refuse_peer(bucket: &governor::DefaultDirectRateLimiter) {
    let refused = std::hint::black_box(bucket.check());
    assert!(refused.is_err());
}

fn fail_fast(opts: &Opts, rt: &tokio::runtime::Runtime) {
    let grag = open_breaker(rt);
    let bucket = exhausted();
    let n: u32 = if opts.quick { 50_000 } else { 100_000 };
    let each = |f: &dyn Fn() -> u64| {
        let (started, before) = (Instant::now(), alloc::count());
        let done = f();
        let ns = started.elapsed().as_nanos() as f64 / done as f64;
        let allocs = (alloc::count() - before) as f64 / done as f64;
        (ns, allocs)
    };
    let ours = || {
        rt.block_on(async {
            for _ in 0..n {
                refuse_ours(&grag).await;
            }
        });
        u64::from(n)
    };
    let peer = || {
        rt.block_on(async {
            for _ in 0..n {
                refuse_peer(&bucket).await;
            }
        });
        u64::from(n)
    };
    let mut ours_allocs = Vec::new();
    let mut peer_allocs = Vec::new();
    let samples = pair(
        opts.rounds,
        || {
            let (ns, a) = each(&ours);
            ours_allocs.push(a);
            ns
        },
        || {
            let (ns, a) = each(&peer);
            peer_allocs.push(a);
            ns
        },
    );
    let note = "ours: list_kbs on a client whose breaker is open; peer: a refused governor check";
    Measurement::new("open breaker: time per refused call", "ns", samples)
        .note(note)
        .goal(Goal::ours("<", 100.0))
        .print();
    // The warm-up run is in the counts too: drop it, as `pair` drops its time.
    ours_allocs.remove(0);
    peer_allocs.remove(0);
    Measurement::new(
        "open breaker: allocations per refused call",
        "allocs",
        (ours_allocs, peer_allocs),
    )
    .note(format!(
        "{note}; the route's refusal is built once and shared, so the error costs none"
    ))
    .goal(Goal::ours("<=", 1.0))
    .print();
}
