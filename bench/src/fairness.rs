//! Row 5: fairness under the real policy (unscaled, nothing overridden),
//! against the simulator on loopback.
//!
//! - 64 callers arrive 10 ms apart, twice as fast as the 50 req/s bucket
//!   admits them after its burst; each search carries its number as the
//!   pipeline id, and the simulator's log gives the order they were sent
//!   in. Peer: a hand-written client on the same arrivals (a governor
//!   bucket of the same rate and burst, `until_ready`, and a tokio
//!   semaphore of 8, over bare reqwest).
//! - A cheap `list_kbs` behind 130 queued slow reranks (500 ms each, as in
//!   the incident), against the same call alone; each on a client of its
//!   own whose first call it is, so both open their connection.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use grag_client::policy::POLICY;
use grag_client::types::{CreateKb, SearchRequest};
use grag_client::{Config, Grag, KbId, PipelineId, TenantId};
use grag_sim::{Fault, Rule, Sim, SimConfig};

use crate::Opts;
use crate::report::{Goal, Measurement};
use crate::rounds::pair;

const CALLERS: usize = 64;
const BACKLOG: usize = 130;
const RERANK_MS: u64 = 500;

fn kb() -> KbId {
    KbId::parse("kb-methodik").expect("a KB id")
}

fn client(sim: &Sim) -> Grag {
    let tenant = TenantId::parse("knoll").expect("a tenant");
    Grag::with_policy(Config::new(sim.url(), "bench-key", tenant), &POLICY).expect("a client")
}

/// A simulator with the bench's KB, created by a client of its own.
async fn sim() -> Sim {
    let sim = Sim::start(SimConfig::default())
        .await
        .expect("the simulator starts");
    client(&sim)
        .workspaces()
        .create_kb(&CreateKb::new(kb(), "Methodik"))
        .await
        .expect("create_kb");
    sim
}

fn query() -> SearchRequest {
    SearchRequest::new("Prüffristen", 1)
}

/// Pairs in the other order than their numbers.
pub fn out_of_order_pairs(order: &[usize]) -> usize {
    order
        .iter()
        .enumerate()
        .map(|(i, &a)| order[i + 1..].iter().filter(|&&b| b < a).count())
        .sum()
}

/// The callers' numbers in the order the simulator received their searches.
fn arrival_order(sim: &Sim) -> Vec<usize> {
    let mut searches = sim.log().of("search_rerank");
    searches.sort_by_key(|e| e.seq);
    searches
        .iter()
        .filter_map(|e| {
            let (_, id) = e
                .headers
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case("x-pipeline-id"))?;
            id.strip_prefix("caller-")?.parse().ok()
        })
        .collect()
}

/// Spawns caller `i` of `CALLERS`, 10 ms apart, and waits for them all.
async fn arrive<F, Fut>(call: F)
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut calls = Vec::new();
    for i in 0..CALLERS {
        calls.push(tokio::spawn(call(i)));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for call in calls {
        call.await.expect("a caller");
    }
}

async fn ours_in_order() -> f64 {
    let sim = sim().await;
    let grag = client(&sim);
    arrive(|i| {
        let id = PipelineId::parse(&format!("caller-{i}")).expect("a pipeline id");
        let caller = grag.clone();
        async move {
            caller
                .ai_gateway(&id)
                .search_rerank(&kb(), &query())
                .await
                .expect("search_rerank");
        }
    })
    .await;
    let order = arrival_order(&sim);
    assert_eq!(order.len(), CALLERS, "one attempt per caller");
    sim.stop().await;
    out_of_order_pairs(&order) as f64
}

/// The hand-written peer: the same rate, burst and cap, governor and a semaphore.
struct Naive {
    http: reqwest::Client,
    bucket: governor::DefaultDirectRateLimiter,
    slots: tokio::sync::Semaphore,
    url: String,
}

async fn peer_in_order() -> f64 {
    let sim = sim().await;
    let throttle = &POLICY.throttle;
    let burst = throttle.max_in_flight.min(throttle.per_second);
    let quota = governor::Quota::per_second(NonZeroU32::new(throttle.per_second).expect("a rate"))
        .allow_burst(NonZeroU32::new(burst).expect("a burst"));
    let naive = Arc::new(Naive {
        http: reqwest::Client::new(),
        bucket: governor::RateLimiter::direct(quota),
        slots: tokio::sync::Semaphore::new(throttle.max_in_flight as usize),
        url: format!(
            "{}/ai-gateway/api/v1/retrieval/collections/{}/search/rerank",
            sim.url(),
            kb().as_str()
        ),
    });
    arrive(|i| {
        let naive = Arc::clone(&naive);
        async move {
            naive.bucket.until_ready().await;
            let _slot = naive.slots.acquire().await.expect("open");
            let response = naive
                .http
                .post(&naive.url)
                .header("Authorization", "Bearer bench-key")
                .header("X-Tenant-ID", "knoll")
                .header("X-Request-ID", uuid::Uuid::new_v4().to_string())
                .header("X-Pipeline-Id", format!("caller-{i}"))
                .json(&query())
                .send()
                .await
                .expect("the simulator answers");
            assert!(response.status().is_success(), "{}", response.status());
        }
    })
    .await;
    let order = arrival_order(&sim);
    assert_eq!(order.len(), CALLERS, "one request per caller");
    sim.stop().await;
    out_of_order_pairs(&order) as f64
}

/// µs of one list_kbs on a fresh client, behind `BACKLOG` slow reranks
/// queued on that client or alone.
async fn list_kbs_latency(backlog: bool) -> f64 {
    let sim = sim().await;
    let grag = client(&sim);
    let mut searches = Vec::new();
    if backlog {
        sim.faults()
            .push(Rule::new(Fault::Delay { ms: RERANK_MS }).on("search_rerank"));
        searches = (0..BACKLOG)
            .map(|_| {
                let grag = grag.clone();
                tokio::spawn(async move {
                    let pipeline = grag_sim::embedded::pipeline();
                    let _ = grag
                        .ai_gateway(&pipeline)
                        .search_rerank(&kb(), &query())
                        .await;
                })
            })
            .collect();
        // The first wave (the retrieval budget's 4) is at the simulator.
        let log = sim.log();
        let sent = log
            .wait_for(Duration::from_secs(5), |entries| {
                entries
                    .iter()
                    .filter(|e| e.operation == Some("search_rerank"))
                    .count()
                    >= 4
            })
            .await;
        assert!(sent, "the first reranks did not go out");
    }
    let started = Instant::now();
    let kbs = grag.workspaces().list_kbs().await.expect("list_kbs");
    let took = started.elapsed();
    assert_eq!(kbs.len(), 1);
    if backlog {
        let queued = searches.iter().filter(|s| !s.is_finished()).count();
        assert!(queued >= BACKLOG - 8, "only {queued} reranks still queued");
    }
    for search in searches {
        search.abort();
    }
    sim.stop().await;
    took.as_secs_f64() * 1e6
}

pub fn run(opts: &Opts) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let rounds = opts.rounds.min(5);
    let samples = pair(
        rounds,
        || rt.block_on(ours_in_order()),
        || rt.block_on(peer_in_order()),
    );
    Measurement::new(
        format!("fairness: out-of-order pairs of {CALLERS} queued callers"),
        "pairs",
        samples,
    )
    .note("real policy; peer: governor until_ready + tokio semaphore over reqwest, same arrivals")
    .goal(Goal::ours("==", 0.0))
    .print();

    let samples = pair(
        opts.rounds.min(7),
        || rt.block_on(list_kbs_latency(true)),
        || rt.block_on(list_kbs_latency(false)),
    );
    Measurement::new(
        format!("fairness: list_kbs behind {BACKLOG} queued slow reranks"),
        "µs",
        samples,
    )
    .note(format!(
        "real policy; reranks take {RERANK_MS} ms; peer: the same call alone (both on a fresh client); \
         the budgets require nothing extra: list_kbs draws on the global budget, retrieval holds 4 of 8 slots"
    ))
    .goal(Goal::ratio("<=", 2.0))
    .added()
    .print();
}
