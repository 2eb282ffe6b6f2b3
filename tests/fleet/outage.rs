//! Short Redis outages, measured from their first second: three replica
//! processes, each on a port of its own of one nginx (`limit_req` as the
//! platform's proxies), so the simulator's log says which replica sent each
//! request. Redis goes away for [`OUTAGE`] (killed and restarted empty,
//! frozen and thawed) and comes back, or a primary behind three Sentinels
//! is killed and its replica promoted; every bound is checked over the
//! whole run, the outage's first second and the return included.

use std::time::{Duration, SystemTime};

use grag_client::policy::POLICY;
use grag_sim::LoggedRequest;
use grag_sim::{arrivals, max_in_any_window};
use sdk_fleet_redis::redis_server::{RedisServer, Sentinel};
use tokio::time::Instant;

use super::{
    Limiter, LoadRun, Replicas, SERIAL, check_limits, degraded_shares, logged, redis_available,
    second, sim,
};

/// How long Redis is away: what a supervisor's restart often takes.
const OUTAGE: Duration = Duration::from_secs(5);

/// The header nginx sets to the port a replica came in on.
const PORT_HEADER: &str = "x-fleet-port";

/// How an outage starts and ends.
#[derive(Debug, Clone, Copy)]
enum Outage {
    /// SIGKILL, then started again empty on the same port.
    Killed,
    /// SIGSTOP (connections open, nothing answered), then SIGCONT.
    Frozen,
    /// The primary behind three Sentinels SIGKILLed; its replica promoted.
    Failover,
}

/// The master's name the Sentinels watch.
const MASTER: &str = "grag";

/// A primary and three Sentinels (quorum 2) on loopback watching it and
/// its replica: the primary is down for them after `DOWN_AFTER` without an
/// answer.
struct Watched {
    primary: RedisServer,
    replica_port: u16,
    sentinels: Vec<Sentinel>,
}

/// Long enough that the fleet runs degraded a while before the failover.
const DOWN_AFTER: Duration = Duration::from_secs(3);

impl Watched {
    /// The watch, and the replica (the Redis the fleet ends on).
    async fn start() -> (Watched, RedisServer) {
        let primary = RedisServer::start();
        let replica = RedisServer::replica_of(&primary);
        let sentinels: Vec<Sentinel> = (0..3)
            .map(|_| Sentinel::start(MASTER, &primary, 2, DOWN_AFTER))
            .collect();
        let watched = Watched {
            primary,
            replica_port: replica.port(),
            sentinels,
        };
        // A failover needs every Sentinel to know the replica and the others.
        for _ in 0..3000 {
            let mut ready = true;
            for sentinel in &watched.sentinels {
                let seen = watched.master_fields(sentinel).await;
                let field =
                    |name: &str| seen.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
                ready &= field("num-slaves").as_deref() == Some("1")
                    && field("num-other-sentinels").as_deref() == Some("2");
            }
            if ready {
                return (watched, replica);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the sentinels never saw the replica and each other");
    }

    fn url(&self) -> String {
        let addrs: Vec<String> = self.sentinels.iter().map(Sentinel::addr).collect();
        format!("redis+sentinel://{}/{MASTER}", addrs.join(","))
    }

    async fn connection(addr: &str) -> redis::aio::MultiplexedConnection {
        let client = redis::Client::open(format!("redis://{addr}/")).unwrap();
        client.get_multiplexed_async_connection().await.unwrap()
    }

    async fn master_fields(&self, sentinel: &Sentinel) -> Vec<(String, String)> {
        let mut connection = Self::connection(&sentinel.addr()).await;
        let flat: Vec<String> = redis::cmd("SENTINEL")
            .arg("master")
            .arg(MASTER)
            .query_async(&mut connection)
            .await
            .unwrap();
        flat.chunks(2)
            .map(|kv| (kv[0].clone(), kv.get(1).cloned().unwrap_or_default()))
            .collect()
    }

    /// Waits until the first Sentinel names the replica the master.
    async fn promoted(&self) {
        let mut connection = Self::connection(&self.sentinels[0].addr()).await;
        for _ in 0..6000 {
            let (_, port): (String, u16) = redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(MASTER)
                .query_async(&mut connection)
                .await
                .unwrap();
            if port == self.replica_port {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("the replica was never promoted");
    }
}

/// What the platform saw of one short outage.
struct Seen {
    entries: Vec<LoggedRequest>,
    /// The replica each entry came from (by the port nginx saw it on).
    replica: Vec<Option<usize>>,
    /// When each replica went degraded (`None`: it never did).
    switched: Vec<Option<Instant>>,
    lost: Instant,
    back: Instant,
}

/// Three load replicas through a short outage of `kind`: 400 requests
/// shared, the outage, then 600 more.
async fn through(kind: Outage) -> Option<Seen> {
    let _serial = SERIAL.lock().await;
    if !redis_available() {
        return None;
    }
    // The run's Redis is the one the fleet ends on.
    let (mut watched, mut redis) = match kind {
        Outage::Failover => {
            let (watched, replica) = Watched::start().await;
            (Some(watched), replica)
        }
        _ => (None, RedisServer::start()),
    };
    let url = watched.as_ref().map(Watched::url);
    let sim = sim().await;
    let limiter = Limiter::for_replicas(&sim, 3);
    let replicas = Replicas::spawn_each(limiter.url(0), &redis, "load", 3, |i| {
        let mut env = vec![(super::SIM_URL, limiter.url(i))];
        if let Some(url) = &url {
            env.push((super::REDIS_URL, url.as_str()));
        }
        env
    });
    replicas.all_ready().await;
    let start = sim.log().entries().len();
    replicas.go();
    logged(&sim, start + 400, Duration::from_secs(120)).await;
    let run_before = run_of(&redis).await;
    let (lost, lost_wall) = (Instant::now(), SystemTime::now());
    match (kind, watched.as_mut()) {
        (Outage::Killed, _) => redis.kill(),
        (Outage::Frozen, _) => redis.freeze(),
        (Outage::Failover, Some(w)) => w.primary.kill(),
        (Outage::Failover, None) => unreachable!("a failover is watched"),
    }
    match &watched {
        Some(w) => w.promoted().await,
        None => tokio::time::sleep(OUTAGE).await,
    }
    let back = Instant::now();
    let at_back = sim.log().entries().len();
    match kind {
        Outage::Killed => redis.restart(),
        Outage::Frozen => redis.thaw(),
        Outage::Failover => eprintln!("promoted {:?} after the kill", back - lost),
    }
    logged(&sim, at_back + 600, Duration::from_secs(120)).await;
    let run = LoadRun {
        redis,
        sim,
        limiter,
        replicas,
        start,
    };
    let ports = run.limiter.ports.clone();
    let (reports, entries, redis) = run.stop().await;
    assert!(reports.iter().all(|r| r.errors == 0), "{reports:?}");
    assert!(reports.iter().all(|r| !r.degraded), "{reports:?}");
    // Shared again on the Redis the fleet ended on, in a run of its own
    // unless Redis only froze (it lost nothing).
    let mut connection = super::connection(&redis).await;
    let live: usize = redis::cmd("ZCARD")
        .arg("{grag:knoll}:replicas")
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(live, 3);
    let run_after = run_of(&redis).await;
    match kind {
        Outage::Frozen => assert_eq!(run_after, run_before),
        _ => assert_ne!(run_after, run_before, "a new run after the state was lost"),
    }
    let entries = entries[start..].to_vec();
    let replica = (entries.iter())
        .map(|e| {
            let port = e.headers.iter().find(|(name, _)| name == PORT_HEADER)?;
            ports.iter().position(|p| p.to_string() == port.1)
        })
        .collect();
    let switched = (reports.iter())
        .map(|r| r.switched(lost, lost_wall))
        .collect();
    Some(Seen {
        entries,
        replica,
        switched,
        lost,
        back,
    })
}

/// The run of the tenant's state in `redis` (0 where it has none).
async fn run_of(redis: &RedisServer) -> u64 {
    let mut connection = super::connection(redis).await;
    let run: Option<u64> = redis::cmd("HGET")
        .arg("{grag:knoll}:state")
        .arg("run")
        .query_async(&mut connection)
        .await
        .unwrap();
    run.unwrap_or(0)
}

/// The longest silence of `times` within `from..until` (a gap open at
/// either end counts from `from` or to `until`), and when it began.
fn longest_gap(times: &[Instant], from: Instant, until: Instant) -> (Duration, Instant) {
    let mut longest = (Duration::ZERO, from);
    let mut last = from;
    for &t in times.iter().filter(|t| **t > from && **t <= until) {
        if t - last > longest.0 {
            longest = (t - last, last);
        }
        last = t;
    }
    if until.saturating_duration_since(last) > longest.0 {
        longest = (until - last, last);
    }
    longest
}

impl Seen {
    fn of_replica(&self, i: usize) -> Vec<Instant> {
        // In arrival order, as the log is.
        (self.entries.iter().zip(&self.replica))
            .filter(|(_, r)| **r == Some(i))
            .map(|(e, _)| e.arrived)
            .collect()
    }

    /// No replica silent longer than its steady gap (its longest in the
    /// shared phase's last 3 s) + the Redis deadline + the store breaker's
    /// span + 100 ms, from its first failed Redis call until 3 s after
    /// Redis is back (while the replicas take it back and queue in its
    /// bucket again). Before that call the replica still waits, as in its
    /// steady gaps, for slots Redis reserved before it failed.
    fn no_stall(&self) {
        let fleet = POLICY.fleet.as_ref().unwrap();
        let slack = fleet.deadline + fleet.breaker_over + Duration::from_millis(100);
        // Without nginx no request says its replica: the fleet as one.
        let each: Vec<(Instant, Vec<Instant>)> = if self.replica.iter().all(Option::is_none) {
            eprintln!("no nginx: the fleet's silences, not each replica's");
            vec![(self.lost, self.entries.iter().map(|e| e.arrived).collect())]
        } else {
            (0..3)
                .map(|i| (self.first_failure(i), self.of_replica(i)))
                .collect()
        };
        let after = self.back + Duration::from_secs(3);
        let mut silent = Vec::new();
        for (i, (failed, times)) in each.into_iter().enumerate() {
            assert!(times.len() > 100, "replica {i}: {} requests", times.len());
            let (steady, _) = longest_gap(&times, self.lost - Duration::from_secs(3), self.lost);
            let (silence, began) = longest_gap(&times, failed, after);
            let since = |t: Instant| t.saturating_duration_since(self.lost);
            eprintln!(
                "replica {i}: steady gap {steady:?}; first failed Redis call {:?} into the \
                 outage; longest silence from then until 3 s after Redis was back {silence:?} \
                 from {:?} (bound {:?})",
                since(failed),
                since(began),
                steady + slack,
            );
            if silence > steady + slack {
                silent.push((i, silence, since(began), steady));
            }
        }
        assert!(
            silent.is_empty(),
            "(replica, silence, from, steady gap): {silent:?}"
        );
    }

    /// When replica `i`'s first Redis call failed, dated from its switch:
    /// its breaker opens on the failure that comes the breaker's span after
    /// the first, a deadline at most after that call was made. The
    /// outage's first instant for a replica that did not switch, or that
    /// switched sooner (a refused connection is a failure at once).
    fn first_failure(&self, i: usize) -> Instant {
        let fleet = POLICY.fleet.as_ref().unwrap();
        let before = fleet.breaker_over + fleet.deadline;
        let switched = self.switched.get(i).copied().flatten();
        (switched.and_then(|s| s.checked_sub(before)))
            .map_or(self.lost, |t| t.clamp(self.lost, self.back))
    }

    /// From 1 s after the failure until Redis is back, the fleet's rate at
    /// the platform is at least 90 % of the degraded shares' sum.
    fn full_share(&self) {
        let from = self.lost + Duration::from_secs(1);
        let times: Vec<Instant> = (self.entries.iter())
            .map(|e| e.arrived)
            .filter(|t| *t >= from && *t < self.back)
            .collect();
        let span = self.back - from;
        let rate = times.len() as f64 / span.as_secs_f64();
        let share = degraded_shares(3);
        eprintln!("degraded: {rate:.1} req/s at the platform ({share:.1} the shares' sum)");
        assert!(rate >= 0.9 * share, "degraded at {rate:.1} req/s");
    }

    /// Every platform window held over the whole run; the rolling second
    /// after the return printed.
    fn windows_held(&self) {
        let after: Vec<&LoggedRequest> = (self.entries.iter())
            .filter(|e| e.arrived >= self.back)
            .collect();
        let most = max_in_any_window(&arrivals(after.iter().copied()), second());
        eprintln!("after the return: {most} per rolling second");
        let all = arrivals(&self.entries);
        let per = |t: Instant| {
            all.iter()
                .filter(|a| **a >= t && **a < t + second())
                .count()
        };
        let (at, n) = (all.iter())
            .map(|t| (*t, per(*t)))
            .max_by_key(|(_, n)| *n)
            .unwrap();
        eprintln!(
            "whole run: most {n} in the rolling second from {:?} after the outage began",
            at.saturating_duration_since(self.lost)
        );
        eprint!("whole run: ");
        check_limits(&self.entries, 1.0);
    }
}

/// Every bound of a short outage of `kind`, checked at the platform.
async fn held_through(kind: Outage) {
    let Some(seen) = through(kind).await else {
        return;
    };
    seen.windows_held();
    seen.full_share();
    seen.no_stall();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_for_five_seconds_stalls_no_replica_and_its_return_bursts_nothing() {
    held_through(Outage::Killed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_frozen_for_five_seconds_stalls_no_replica_and_its_thaw_bursts_nothing() {
    held_through(Outage::Frozen).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_stalls_no_replica_and_the_promoted_replica_bursts_nothing() {
    held_through(Outage::Failover).await;
}
