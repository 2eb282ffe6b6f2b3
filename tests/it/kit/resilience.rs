//! The end-to-end resilience environment: a simulator with a client on the
//! spec's policy in compressed time, alert collection, request-log counting,
//! and the scenarios several tests need (open the breaker, get inside the
//! deploy window).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::kit::sim::Kit;
use grag_client::types::SpendGrouping;
use grag_client::{Grag, PipelineId};
use grag_sim::embedded;
use grag_sim::{Fault, Rule, Sim, SimConfig};
use sdk_runtime::CircuitState;
use sdk_runtime::Policy;
use sdk_runtime::alerts::CollectAlerts;
use tokio::time::Instant;

/// The spec's policy at 1/100: default attempt timeout 300 ms, deadline
/// 1.8 s, R1 from 5 ms, 429 floor 20 ms, breaker window 300 ms, probe every
/// 50 ms (30 ms timeout), canary 50 ms, deploy-suspected 1.2 s, open alert 3 s.
pub fn policy() -> &'static Policy {
    embedded::policy(100)
}

/// The spec's policy at 1/1000, for the rules whose scaled(100) duration
/// would cost seconds (the 5 min open alert, the 180 s deadline): default
/// attempt timeout 30 ms, llm 150 ms, deadline 180 ms, breaker window 30 ms,
/// probe every 5 ms, open alert 300 ms.
pub fn fast_policy() -> &'static Policy {
    embedded::policy(1000)
}

/// The simulator's timings at 1/100 (deploy churn 200 ms refused + 100 ms
/// flaky, conversions 30 ms).
pub fn sim_config() -> SimConfig {
    embedded::sim_config(100)
}

/// A simulator and one client of tenant `knoll` on it.
pub struct Env {
    pub sim: Sim,
    pub grag: Grag,
    pub alerts: Arc<CollectAlerts>,
}

impl Env {
    /// Simulator at 1/100, client on the policy at 1/100.
    pub async fn start() -> Env {
        Env::with(sim_config(), policy()).await
    }

    pub async fn with(config: SimConfig, policy: &'static Policy) -> Env {
        Env::build(config, policy, false).await
    }

    /// Like [`Env::start`], with the spec's warm-up calls enabled (§7).
    pub async fn with_warm_up() -> Env {
        Env::build(sim_config(), policy(), true).await
    }

    async fn build(config: SimConfig, policy: &'static Policy, warm_up: bool) -> Env {
        let Kit { sim, grag, alerts } =
            Kit::start_with(config, policy, |c| c.warm_up(warm_up)).await;
        Env { sim, grag, alerts }
    }

    /// Requests that reached one route (attempts, retries included).
    pub fn count(&self, operation: &str) -> usize {
        self.sim.log().count(operation)
    }

    /// Requests that reached any platform route.
    pub fn total(&self) -> usize {
        self.sim.log().len()
    }

    /// The statuses the simulator answered on one route, in arrival order.
    pub fn statuses(&self, operation: &str) -> Vec<Option<u16>> {
        self.sim
            .log()
            .of(operation)
            .iter()
            .map(|e| e.status)
            .collect()
    }

    /// Gaps between consecutive arrivals on one route.
    pub fn gaps(&self, operation: &str) -> Vec<Duration> {
        self.sim.log().gaps(operation)
    }

    /// Names of the alerts raised so far.
    pub fn alert_names(&self) -> Vec<&'static str> {
        self.alerts.names()
    }

    pub fn state(&self) -> CircuitState {
        self.grag.runtime().circuit_state()
    }

    pub fn feature(&self, name: &str) -> (&'static str, Option<&'static str>) {
        let status = self
            .grag
            .runtime()
            .feature_state(name)
            .unwrap_or_else(|| panic!("feature {name} is in the spec"));
        (status.state, status.copy)
    }

    /// Waits (polling every millisecond) until the breaker is in `want`.
    pub async fn wait_for_state(&self, want: CircuitState, timeout: Duration) -> bool {
        wait_until(timeout, || self.state() == want).await
    }

    /// Keeps `/workspaces/health` failing (502) until the rule is removed, so
    /// an open breaker stays open. Returns the rule's id.
    pub fn health_down(&self) -> u64 {
        self.sim
            .faults()
            .push(Rule::new(Fault::BadGateway).on("health"))
    }

    /// Opens the breaker with one 502 on each of three distinct endpoints
    /// (`get_settings`, `totals`, `spend`; never the canary route), sent
    /// together so they fall inside the window even at 1/1000. The 502 rules
    /// are removed again once the breaker is open.
    pub async fn open_breaker(&self) {
        let faults = self.sim.faults();
        let rules: Vec<u64> = ["get_settings", "totals", "spend"]
            .into_iter()
            .map(|op| faults.push(Rule::new(Fault::BadGateway).on(op)))
            .collect();
        let pipeline = PipelineId::parse("run-1").expect("a valid pipeline id");
        let ledger = self.grag.ledger();
        let workspaces = self.grag.workspaces();
        let (a, b, c) = tokio::join!(
            workspaces.get_settings(),
            ledger.totals(&pipeline),
            ledger.spend(&SpendGrouping::Service),
        );
        for rule in rules {
            faults.remove(rule);
        }
        for (what, result) in [
            ("get_settings", a.err()),
            ("totals", b.err()),
            ("spend", c.err()),
        ] {
            let e = result.unwrap_or_else(|| panic!("{what} failed under its 502 rule"));
            assert!(
                matches!(e.row(), "T12" | "T21"),
                "{what}: a 502 (T12) or the breaker it opened (T21): {e}"
            );
        }
        assert_eq!(
            self.state(),
            CircuitState::Open,
            "three 502s on three distinct endpoints within the window open the breaker"
        );
    }

    /// Gets inside the deploy-suspected window: opens the breaker (three
    /// distinct 502s), lets the probes and the canary close it, and checks
    /// the origin is deploy-suspected.
    pub async fn enter_deploy_window(&self) {
        assert!(!self.grag.runtime().deploy_suspected());
        self.open_breaker().await;
        assert!(
            self.wait_for_state(CircuitState::Closed, Duration::from_secs(10))
                .await,
            "two healthy probes and a 200 canary close the breaker (state {:?})",
            self.state()
        );
        assert!(
            self.grag.runtime().deploy_suspected(),
            "a close starts the deploy-suspected window"
        );
    }
}

/// The output of `call` if it is ready on its first poll: a call that fails
/// fast (breaker open, a remembered dark flag) neither sends nor waits, so it
/// never returns `Pending`. How fast the machine is plays no part.
pub fn ready_now<F: std::future::Future>(call: F) -> Option<F::Output> {
    let mut call = std::pin::pin!(call);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match call.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(output) => Some(output),
        std::task::Poll::Pending => None,
    }
}

/// Polls `cond` every millisecond until it holds or `timeout` passes.
pub async fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Maps the simulator's `Instant`s to wall-clock time (for HTTP dates).
pub struct WallClock {
    instant: Instant,
    system: SystemTime,
}

impl WallClock {
    pub fn now() -> Self {
        WallClock {
            instant: Instant::now(),
            system: SystemTime::now(),
        }
    }

    pub fn at(&self, instant: Instant) -> SystemTime {
        if instant >= self.instant {
            self.system + (instant - self.instant)
        } else {
            self.system - (self.instant - instant)
        }
    }
}

/// `t` truncated to its whole second (HTTP dates have second resolution).
pub fn whole_second(t: SystemTime) -> SystemTime {
    let since = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after the epoch");
    SystemTime::UNIX_EPOCH + Duration::from_secs(since.as_secs())
}

/// Waits until the wall clock is in the first half of a second, so an HTTP
/// date one second ahead is at least 500 ms away.
pub async fn early_in_a_second() {
    let now = SystemTime::now();
    let frac = now
        .duration_since(whole_second(now))
        .expect("a second starts before it ends");
    if frac >= Duration::from_millis(450) {
        tokio::time::sleep(Duration::from_secs(1) - frac + Duration::from_millis(20)).await;
    }
}
