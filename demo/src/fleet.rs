//! Three replicas keep one budget through Redis, and carry on at their share
//! when Redis stops.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use grag_client::policy::POLICY;
use grag_client::{Config, Grag, TenantId};
use grag_sim::{LoggedRequest, PlatformLimits, Sim, SimConfig};
use grag_sim::{arrivals, max_in_any_window};
use sdk_fleet_redis::redis_server::{self, RedisServer};
use tokio::time::Instant;

use crate::scene::stamp;
use crate::stage::{SPEED, Walk};

const REPLICAS: usize = 3;
/// Calls in flight per replica: each offers far more than the policy's rate.
const LOOPS: usize = 6;
/// Requests the platform sees in each phase (shared, then Redis gone).
const PHASE: usize = 180;

/// The Redis of the scene: the one `GRAG_REDIS_URL` names, or one started
/// here on a free loopback port (which the scene may stop).
enum Redis {
    Given(String),
    Own(RedisServer),
}

impl Redis {
    fn find(url_env: &str) -> Option<Redis> {
        match std::env::var(url_env) {
            Ok(url) if !url.is_empty() => Some(Redis::Given(url)),
            _ => redis_server::installed().then(|| Redis::Own(RedisServer::start())),
        }
    }

    fn url(&self) -> String {
        match self {
            Redis::Given(url) => url.clone(),
            Redis::Own(server) => server.url(),
        }
    }
}

/// The scene runs on a simulator of its own, with the platform's limits; the
/// walk's stage is not needed.
pub(crate) fn three_replicas(_: &mut Walk) -> BoxFuture<'_, Result<()>> {
    async move {
        let fleet = POLICY.fleet.as_ref().context("GRAG has a fleet section")?;
        let Some(mut redis) = Redis::find(fleet.url_env) else {
            println!("   skipped: no Redis here. To see this scene, install redis-server (the demo");
            println!(
                "   starts its own on a free loopback port) or set {}=redis://…",
                fleet.url_env
            );
            return Ok(());
        };
        // The platform's own limits, as its Traefik and gateway enforce them.
        let limits = PlatformLimits::platform();
        let config = SimConfig::scaled(1.0 / SPEED).with_platform_limits(limits.clone());
        let sim = Sim::start(config).await?;
        let replicas: Vec<Grag> = (0..REPLICAS)
            .map(|_| {
                let config = Config::new(sim.url(), "demo-key", TenantId::parse("knoll")?)
                    .redis_url(redis.url());
                Ok(Grag::with_policy(config, &POLICY)?)
            })
            .collect::<Result<_>>()?;
        println!(
            "   {REPLICAS} clients (one per replica), {LOOPS} calls in flight each, all asking as fast as they may;"
        );
        println!(
            "   the policy promises {} req/s for the tenant, Traefik refuses past {} per second.",
            POLICY.throttle.per_second, limits.ceiling
        );
        let load = Load::start(&replicas);
        let since = Instant::now();
        let start = sim.log().entries().len();
        let shared_end = logged(&sim, start + PHASE).await?;
        let shared = snapshot(&load.counts);
        let entries = sim.log().entries();
        report(since, "shared", &entries[start..shared_end], &shared);
        let Redis::Own(server) = &mut redis else {
            println!(
                "   (the Redis {} names is not stopped: run without it to see it go)",
                fleet.url_env
            );
            return load.finish(sim).await;
        };
        server.kill();
        without_redis(&sim, &replicas, &load, since, shared_end, &shared).await?;
        load.finish(sim).await
    }
    .boxed()
}

/// Redis is gone: each replica goes on at its share of the tenant's rate.
async fn without_redis(
    sim: &Sim,
    replicas: &[Grag],
    load: &Load,
    since: Instant,
    shared_end: usize,
    shared: &[usize],
) -> Result<()> {
    let fleet = POLICY.fleet.as_ref().context("GRAG has a fleet section")?;
    println!(
        "   {} Redis is killed (SIGKILL): every call still ends within its {} ms deadline, and a",
        stamp(since),
        fleet.deadline.as_millis()
    );
    println!(
        "   replica goes on its share once Redis has failed it {} times over {} ms",
        fleet.breaker_failures,
        fleet.breaker_over.as_millis()
    );
    let gone_end = logged(sim, shared_end + PHASE).await?;
    let gone: Vec<usize> = snapshot(&load.counts)
        .iter()
        .zip(shared)
        .map(|(now, before)| now - before)
        .collect();
    let entries = sim.log().entries();
    report(
        since,
        "on their share",
        &entries[shared_end..gone_end],
        &gone,
    );
    let degraded = replicas
        .iter()
        .filter(|g| g.runtime().fleet_status().is_some_and(|s| s.degraded))
        .count();
    println!(
        "   {degraded} of {REPLICAS} replicas degraded, each at {} ÷ {REPLICAS} less {} % (the `fleet_degraded` alert is raised)",
        POLICY.throttle.per_second, fleet.margin_percent
    );
    Ok(())
}

/// The replicas' callers: `LOOPS` tasks each, counting the calls that
/// answered, until stopped.
struct Load {
    counts: Arc<Vec<AtomicUsize>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(replicas: &[Grag]) -> Load {
        let counts: Arc<Vec<AtomicUsize>> =
            Arc::new((0..REPLICAS).map(|_| AtomicUsize::new(0)).collect());
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for (r, grag) in replicas.iter().enumerate() {
            for _ in 0..LOOPS {
                let (grag, counts, stop) = (grag.clone(), counts.clone(), stop.clone());
                tasks.push(tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        if grag.workspaces().list_kbs().await.is_ok() {
                            counts[r].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }));
            }
        }
        Load {
            counts,
            stop,
            tasks,
        }
    }

    /// Stops the callers, then checks the platform never had to refuse one.
    async fn finish(self, sim: Sim) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.abort();
        }
        let refused = sim.log().count_status(429);
        println!("   the platform answered 429 {refused} time(s): one polite tenant");
        sim.stop().await;
        anyhow::ensure!(refused == 0, "the fleet went past the platform's limits");
        Ok(())
    }
}

fn snapshot(counts: &[AtomicUsize]) -> Vec<usize> {
    counts.iter().map(|c| c.load(Ordering::Relaxed)).collect()
}

/// Waits until the platform has seen `n` requests.
async fn logged(sim: &Sim, n: usize) -> Result<usize> {
    let seen = sim
        .log()
        .wait_for(Duration::from_secs(60), |entries| entries.len() >= n)
        .await;
    anyhow::ensure!(seen, "the replicas stopped sending");
    Ok(sim.log().entries().len())
}

/// What the platform saw of one phase.
fn report(since: Instant, phase: &str, entries: &[LoggedRequest], per_replica: &[usize]) {
    let busiest = max_in_any_window(&arrivals(entries), Duration::from_secs(1));
    let refused = entries.iter().filter(|e| e.status == Some(429)).count();
    let shares: Vec<String> = per_replica.iter().map(|n| n.to_string()).collect();
    println!(
        "   {} {phase}: {} requests ({} per replica), at most {busiest} in any second, {refused} answered 429",
        stamp(since),
        entries.len(),
        shares.join(" / "),
    );
}
