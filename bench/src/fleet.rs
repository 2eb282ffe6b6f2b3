//! The fleet rows: what sharing the budgets through Redis costs.
//!
//! - Admission through Redis (the fleet stage alone: its EVALSHA of the
//!   admission script, whose lease the next admission gives back by taking
//!   its member again) against the floor, one bare EVALSHA of a minimal
//!   script on the same Redis and connection kind.
//! - The latency a call gains: the same client call with the fleet stage
//!   against local admission only, p50 and p99, one call at a time.
//!
//! The Redis is `GRAG_REDIS_URL` when set, else a `redis-server` of the
//! bench's own on a free loopback port (no row when neither is there).

use std::time::Instant;

use grag_client::policy::POLICY;
use grag_client::{Config, Grag, TenantId};
use redis::Script;
use sdk_fleet_redis::RedisFleet as Fleet;
use sdk_fleet_redis::redis_server::{self, RedisServer};
use sdk_runtime::internals::Throttle;

use crate::Opts;
use crate::pipeline::{OVERRIDE, unpaced};
use crate::report::{Goal, Measurement};
use crate::rounds::{pair, quantile, rotate};
use crate::server;

/// The Redis the rows run on: given, or started here (and stopped with it).
struct Redis {
    url: String,
    _own: Option<RedisServer>,
}

fn redis() -> Option<Redis> {
    let url_env = POLICY
        .fleet
        .as_ref()
        .map_or("GRAG_REDIS_URL", |f| f.url_env);
    if let Ok(url) = std::env::var(url_env) {
        return Some(Redis { url, _own: None });
    }
    if !redis_server::installed() {
        return None;
    }
    let own = RedisServer::start();
    Some(Redis {
        url: own.url(),
        _own: Some(own),
    })
}

pub fn run(opts: &Opts) {
    let Some(redis) = redis() else {
        eprintln!("fleet: no Redis (set GRAG_REDIS_URL or install redis-server): no rows");
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let _guard = rt.enter();
    admission_floor(opts, &rt, &redis.url);
    added_latency(opts, &rt, &redis.url);
}

/// µs per operation of `n` sequential runs of `one`.
fn per_op<F, Fut>(rt: &tokio::runtime::Runtime, n: usize, one: F) -> f64
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()>,
{
    let started = Instant::now();
    rt.block_on(async {
        for _ in 0..n {
            one().await;
        }
    });
    started.elapsed().as_secs_f64() * 1e6 / n as f64
}

fn admission_floor(opts: &Opts, rt: &tokio::runtime::Runtime, url: &str) {
    let policy = unpaced();
    let fleet = Fleet::alone("bench", url, policy).expect("a fleet member");
    let throttle = Throttle::new(&policy.throttle);
    let client = redis::Client::open(url).expect("a Redis URL");
    let connection = rt
        .block_on(client.get_multiplexed_async_connection())
        .expect("Redis answers");
    let minimal = Script::new("return 1");
    let n = if opts.quick { 300 } else { 2000 };
    let samples = pair(
        opts.rounds,
        || {
            per_op(rt, n, || async {
                let slots = fleet.admit(&throttle, "/bench", &[]).await;
                drop(slots.expect("admitted"));
            })
        },
        || {
            per_op(rt, n, || {
                let mut connection = connection.clone();
                let minimal = &minimal;
                async move {
                    let one: i64 = minimal
                        .invoke_async(&mut connection)
                        .await
                        .expect("EVALSHA");
                    assert_eq!(one, 1);
                }
            })
        },
    );
    assert!(!fleet.degraded(), "the bench's Redis went away");
    Measurement::new(
        "fleet admission through Redis vs a bare EVALSHA",
        "µs",
        samples,
    )
    .note(format!(
        "ours: Fleet::admit (the admission script by EVALSHA; its lease given back by \
             the next admission) on the spec's fleet section [{OVERRIDE}]; peer: EVALSHA of `return 1` \
             on the same Redis; both one at a time"
    ))
    .goal(Goal::ratio("<=", 1.3))
    .print();
}

fn added_latency(opts: &Opts, rt: &tokio::runtime::Runtime, url: &str) {
    let server = server::start();
    let tenant = TenantId::parse("knoll").expect("a tenant");
    let make = |redis: Option<&str>| {
        let config = Config::new(server.base(), "bench-key", tenant.clone());
        let config = match redis {
            Some(url) => config.redis_url(url),
            None => config,
        };
        Grag::with_policy(config, unpaced()).expect("a client")
    };
    let (shared, local) = (make(Some(url)), make(None));
    let n = if opts.quick { 300 } else { 1500 };
    let calls = |grag: &Grag| {
        let mut latencies = Vec::with_capacity(n);
        rt.block_on(async {
            for _ in 0..n {
                let t = Instant::now();
                grag.workspaces().list_kbs().await.expect("list_kbs");
                latencies.push(t.elapsed().as_secs_f64() * 1e6);
            }
        });
        latencies
    };
    let [ours, peer]: [Vec<Vec<f64>>; 2] = rotate(
        opts.rounds,
        &mut [&mut || calls(&shared), &mut || calls(&local)],
    )
    .try_into()
    .expect("two contenders");
    let at = |rounds: &[Vec<f64>], q: f64| {
        rounds
            .iter()
            .map(|r| quantile(&mut r.clone(), q))
            .collect::<Vec<_>>()
    };
    let note = "ours: a small GET with the fleet stage (Redis); peer: the same client \
                without a Redis URL (local admission only); one call at a time";
    for (name, q) in [("p50", 0.5), ("p99", 0.99)] {
        Measurement::new(
            format!("fleet: a call's {name} latency, shared vs local admission"),
            "µs",
            (at(&ours, q), at(&peer, q)),
        )
        .note(note)
        .added()
        .print();
    }
    assert!(
        !shared.runtime().fleet_status().is_some_and(|s| s.degraded),
        "the bench's Redis went away"
    );
}
