//! Short Redis outages, measured from their first second: three replica
//! processes, each on a port of its own of one nginx (`limit_req` as the
//! platform's proxies), so the simulator's log says which replica sent each
//! request. Redis goes away for [`OUTAGE`] (killed and restarted empty,
//! frozen and thawed) and comes back; every bound is checked over the
//! whole run, the outage's first second and the return included.

use std::time::Duration;

use grag_client::policy::POLICY;
use grag_sim::LoggedRequest;
use grag_sim::testkit::{arrivals, max_in_any_window};
use sdk_fleet_redis::redis_server::RedisServer;
use tokio::time::Instant;

use super::{
    Limiter, LoadRun, Replicas, SERIAL, bounds, check_limits, logged, policy, redis_available,
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
}

/// What the platform saw of one short outage.
struct Seen {
    entries: Vec<LoggedRequest>,
    /// The replica each entry came from (by the port nginx saw it on).
    replica: Vec<Option<usize>>,
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
    let mut redis = RedisServer::start();
    let sim = sim().await;
    let limiter = Limiter::for_replicas(&sim, 3);
    let replicas = Replicas::spawn_each(limiter.url(0), &redis, "load", 3, |i| {
        vec![(super::SIM_URL, limiter.url(i))]
    });
    replicas.all_ready().await;
    let start = sim.log().entries().len();
    replicas.go();
    logged(&sim, start + 400, Duration::from_secs(120)).await;
    let lost = Instant::now();
    match kind {
        Outage::Killed => redis.kill(),
        Outage::Frozen => redis.freeze(),
    }
    tokio::time::sleep(OUTAGE).await;
    let back = Instant::now();
    let at_back = sim.log().entries().len();
    match kind {
        Outage::Killed => redis.restart(),
        Outage::Frozen => redis.thaw(),
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
    let (reports, entries, _redis) = run.stop().await;
    assert!(reports.iter().all(|r| r.errors == 0), "{reports:?}");
    assert!(reports.iter().all(|r| !r.degraded), "{reports:?}");
    let entries = entries[start..].to_vec();
    let replica = (entries.iter())
        .map(|e| {
            let port = e.headers.iter().find(|(name, _)| name == PORT_HEADER)?;
            ports.iter().position(|p| p.to_string() == port.1)
        })
        .collect();
    Some(Seen {
        entries,
        replica,
        lost,
        back,
    })
}

/// The longest gap between consecutive arrivals of `times` that ends
/// within `from..until` (a gap open at `until` counts to `until`), and
/// when it began.
fn longest_gap(times: &[Instant], from: Instant, until: Instant) -> (Duration, Instant) {
    let mut longest = (Duration::ZERO, from);
    let mut last: Option<Instant> = None;
    for &t in times.iter().filter(|t| **t <= until) {
        if let Some(prev) = last
            && t > from
            && t - prev > longest.0
        {
            longest = (t - prev, prev);
        }
        last = Some(t);
    }
    if let Some(prev) = last.map(|l| l.max(from))
        && until.saturating_duration_since(prev) > longest.0
    {
        longest = (until - prev, prev);
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
    /// span + 100 ms, from the outage's first instant until 3 s after its
    /// end (the return is a transition too).
    fn no_stall(&self) {
        let fleet = POLICY.fleet.as_ref().unwrap();
        let slack = fleet.deadline + fleet.breaker_over + Duration::from_millis(100);
        let until = self.back + Duration::from_secs(3);
        // Without nginx no request says its replica: the fleet as one.
        let each: Vec<Vec<Instant>> = if self.replica.iter().all(Option::is_none) {
            eprintln!("no nginx: the fleet's silences, not each replica's");
            vec![self.entries.iter().map(|e| e.arrived).collect()]
        } else {
            (0..3).map(|i| self.of_replica(i)).collect()
        };
        let mut silent = Vec::new();
        for (i, times) in each.into_iter().enumerate() {
            assert!(times.len() > 100, "replica {i}: {} requests", times.len());
            let (steady, _) = longest_gap(&times, self.lost - Duration::from_secs(3), self.lost);
            let (silence, began) = longest_gap(&times, self.lost, until);
            eprintln!(
                "replica {i}: steady gap {steady:?}, longest silence {silence:?} from {:?} \
                 after the outage began (bound {:?})",
                began.saturating_duration_since(self.lost),
                steady + slack
            );
            if silence > steady + slack {
                silent.push((i, silence, steady));
            }
        }
        assert!(
            silent.is_empty(),
            "(replica, silence, steady gap): {silent:?}"
        );
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
        let margin = policy().fleet.as_ref().unwrap().margin_percent;
        let share = bounds().per_second as f64 * f64::from(100 - margin) / 100.0;
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
        eprint!("whole run: ");
        check_limits(&self.entries, 1.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_for_five_seconds_stalls_no_replica_and_its_return_bursts_nothing() {
    let Some(seen) = through(Outage::Killed).await else {
        return;
    };
    seen.windows_held();
    seen.full_share();
    seen.no_stall();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_frozen_for_five_seconds_stalls_no_replica_and_its_thaw_bursts_nothing() {
    let Some(seen) = through(Outage::Frozen).await else {
        return;
    };
    seen.windows_held();
    seen.full_share();
    seen.no_stall();
}
