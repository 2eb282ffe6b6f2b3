//! What follows a breaker transition: the probe loop while open, the single
//! canary while half-open, forgetting stable answers and warming up after a close.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use tokio::time::Instant;

use sdk_policy::endpoint::Endpoint;

use crate::alerts::Alert;
use crate::breaker::{Admission, CircuitState, Generation, Transition};
use crate::call::Call;
use crate::client::{Caller, Client, Parts};
use crate::error::Error;
use crate::fleet::{Turn, TurnTimes};
use crate::telemetry::{self, AttemptLog, LogScope};
use crate::wire::{Attempt, Wire, perform};

impl Client {
    /// The breaker's word on attempt `attempt`; a breaker no live loop
    /// probes is probed by the call itself first.
    pub(crate) async fn admit_breaker(
        &self,
        endpoint: &Endpoint,
        attempt: u32,
    ) -> Result<Generation, Error> {
        let breaker = &self.gate().breaker;
        let mut admission = breaker.admit(Instant::now, false);
        if matches!(admission, Admission::Rejected(_)) && self.catch_up().await {
            admission = breaker.admit(Instant::now, false);
        }
        match admission {
            Admission::Allowed(g) | Admission::Canary(g) => Ok(g),
            Admission::Rejected(_) => {
                // Never open without a live probe loop (it may have died
                // with the runtime it was spawned on).
                self.ensure_probe_loop();
                let error = self.gate().circuit_open(self.plan(), endpoint);
                Err(error.with_attempts(attempt - 1))
            }
        }
    }

    /// Reacts to a breaker transition; called after every recorded outcome.
    pub(crate) fn on_transition(&self, transition: Option<Transition>) {
        let Some(transition) = transition else { return };
        let state = transition.to();
        self.recorder().metrics.circuit_state(state.metric());
        let transition_name = format!("{transition:?}");
        self.plan()
            .policy
            .log_lines
            .breaker(&transition_name, state.as_str());
        match transition {
            Transition::Opened | Transition::Reopened => self.spawn_probe_loop(),
            Transition::Closed => {
                // A deploy finished: dark flags and budgets may have changed.
                self.gate().memory().forget_routes();
                if self.parts.warm_up {
                    self.spawn_warm_up();
                }
            }
            Transition::HalfOpened => {}
        }
    }

    fn spawn_probe_loop(&self) {
        if self.gate().probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let parts = Arc::downgrade(&self.parts);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to probe on: the next call that finds the breaker
            // open starts the loop on its own runtime.
            self.gate().probing.store(false, Ordering::Release);
            return;
        };
        let flag = ProbingFlag { parts, held: true };
        runtime.spawn(probe_loop(flag));
    }

    /// The breaker is open and a call was refused: make sure a probe loop is
    /// alive. One that died with the runtime it ran on cleared its flag.
    pub(crate) fn ensure_probe_loop(&self) {
        if !self.gate().probing.load(Ordering::Acquire) {
            self.spawn_probe_loop();
        }
    }

    /// A call found the breaker open (or half-open) and no probe loop alive:
    /// the loop died with the runtime it ran on, and one spawned now may die
    /// with this call's (a runtime per call, `block_on`). So the call does
    /// the loop's due work itself first: a probe whose interval has passed,
    /// then the canary once half-open, on the policy's schedule. An open
    /// breaker thus always ends, whether or not any runtime outlives a call.
    /// Returns whether the breaker is closed afterwards.
    pub(crate) async fn catch_up(&self) -> bool {
        if self.gate().probing.load(Ordering::Acquire)
            || self.gate().probing.swap(true, Ordering::AcqRel)
        {
            return false; // a live loop does it
        }
        let _flag = ProbingFlag {
            parts: Arc::downgrade(&self.parts),
            held: true,
        };
        loop {
            let now = Instant::now();
            let (state, next_probe) = {
                let breaker = self.gate().breaker();
                (breaker.state(), breaker.next_probe_at())
            };
            match state {
                CircuitState::Closed => return true,
                CircuitState::Open if next_probe.is_some_and(|at| at <= now) => {
                    self.check_open_alert(now);
                    if self.closed_by_fleet().await {
                        return true;
                    }
                    let healthy = self.probe().await;
                    let transition = self.gate().breaker().record_probe(healthy, Instant::now());
                    self.on_transition(transition);
                    if self.circuit_state() == CircuitState::Open {
                        return false; // the next probe is an interval away
                    }
                }
                CircuitState::Open => return false,
                CircuitState::HalfOpen => {
                    let admission = self.gate().breaker().admit(Instant::now(), true);
                    let transition = match admission {
                        Admission::Canary(generation) => {
                            let ok = self.canary().await;
                            self.gate()
                                .breaker()
                                .record_canary(generation, ok, Instant::now())
                        }
                        // A canary of a loop that died: it ends at its deadline.
                        _ => self.gate().breaker().expire_canary(Instant::now()),
                    };
                    let Some(transition) = transition else {
                        return false;
                    };
                    self.on_transition(Some(transition));
                    if transition != Transition::Closed {
                        return false;
                    }
                }
            }
        }
    }

    fn spawn_warm_up(&self) {
        for warm in self.plan().policy.warm_up {
            let client = self.clone();
            tokio::spawn(async move {
                let mut call = Call::new(warm.endpoint);
                for value in warm.path {
                    call = call.path(value);
                }
                if let Some(body) = warm.body {
                    call = call.raw_json(body);
                }
                if let Some(pipeline) = warm.pipeline_id {
                    call = call.pipeline_text(pipeline);
                }
                let call = call.timeout_class(warm.timeout);
                // Consumed, so the call is counted and its attempt line written.
                let outcome = client.send(call).await.and_then(crate::reply::Reply::empty);
                client
                    .plan()
                    .policy
                    .log_lines
                    .warm_up(warm.endpoint.operation, outcome.is_ok());
            });
        }
    }

    /// One probe of the public liveness route: healthy on a 2xx.
    async fn probe(&self) -> bool {
        let Some(b) = &self.plan().policy.breaker else {
            return false;
        };
        let probe = async {
            let status = self.bare_attempt(b.probe, b.probe_timeout).await;
            status.is_some_and(|s| (200..300).contains(&s))
        };
        // A fleet sends one probe per interval, not one per replica: the
        // replica holding the probe sends it and shares what it saw, the
        // others take that (nothing fresh yet: not healthy this round).
        if let Some(fleet) = &self.gate().fleet {
            let times = TurnTimes {
                hold: b.probe_interval,
                fresh: b.probe_interval,
                wait: std::time::Duration::ZERO,
            };
            return fleet
                .one_at_a_time(Turn::Probe, times, Box::pin(probe))
                .await;
        }
        probe.await
    }

    /// The authenticated canary read: only a 200 closes the breaker.
    async fn canary(&self) -> bool {
        let Some(b) = &self.plan().policy.breaker else {
            return false;
        };
        let canary = async { self.bare_attempt(b.canary, b.canary_timeout).await == Some(200) };
        // One canary for the fleet, like the probe: the others wait for its
        // answer (up to its timeout) instead of sending their own. What it
        // saw is kept two probe intervals, so that every replica's probe
        // loop, an interval apart, finds a 200 and closes on it
        // (`closed_by_fleet`).
        if let Some(fleet) = &self.gate().fleet {
            let times = TurnTimes {
                hold: b.canary_timeout,
                fresh: b.probe_interval * 2,
                wait: b.canary_timeout,
            };
            return fleet
                .one_at_a_time(Turn::Canary, times, Box::pin(canary))
                .await;
        }
        canary.await
    }

    /// Closes the breaker when another replica's canary saw a 200 after it
    /// opened: a fleet sends one canary, and every replica's breaker closes
    /// on it by its next probe instead of probing on to a canary of its own.
    async fn closed_by_fleet(&self) -> bool {
        if let Some(fleet) = &self.gate().fleet {
            let Some(open_for) = self.gate().breaker().open_for(Instant::now()) else {
                return false;
            };
            let passed = fleet.healthy_since(Turn::Canary).await;
            if passed.is_some_and(|age| age < open_for) {
                let transition = self.gate().breaker().record_shared_canary(Instant::now());
                self.on_transition(transition);
                return transition.is_some();
            }
        }
        false
    }

    /// One attempt outside the retry loop (probe and canary), still assembled
    /// and logged by the pipeline. Returns the status, if any came back.
    async fn bare_attempt(
        &self,
        endpoint: &'static Endpoint,
        timeout: std::time::Duration,
    ) -> Option<u16> {
        let call = Call::new(endpoint);
        let path = call.render_path().ok()?;
        let request_id = uuid::Uuid::new_v4().to_string();
        let started = Instant::now();
        let (plan, transport) = (self.plan(), self.transport());
        let scope = LogScope::of(plan.policy, &plan.tenant, &call);
        let request = transport.request(&call, &path, &request_id);
        telemetry::sent(plan.policy, &scope, &request_id, 1);
        let caps = transport.read_caps(plan.policy, endpoint);
        let performed = perform(&transport.pool, request, Wire::Read, caps);
        let result = tokio::time::timeout(timeout, performed).await;
        let (status, echoed) = match result {
            Ok((
                Attempt::Answer {
                    status, echoed_id, ..
                },
                _,
            )) => (Some(status), echoed_id),
            _ => (None, None),
        };
        let log = AttemptLog {
            scope: &scope,
            request_id: &request_id,
            echoed_id: echoed.as_deref(),
            status,
            row: None,
            attempt: 1,
            retry_after: None,
            latency: started.elapsed(),
            circuit_state: self.gate().breaker().state().as_str(),
        };
        telemetry::attempt(plan.policy, &log, None);
        status
    }

    fn check_open_alert(&self, now: Instant) {
        if self.gate().breaker().take_open_alert(now)
            && let Some(b) = &self.plan().policy.breaker
        {
            self.alert(Alert {
                detail: Some(format!(
                    "the breaker has been open longer than {} s",
                    b.alert_after.as_secs()
                )),
                ..self.alert_of(b.open_alert)
            });
        }
    }
}

/// Clears the "a probe loop is running" flag when the loop ends in any way,
/// also when its runtime shuts down and drops it mid-sleep: the breaker is
/// never left open with a flag that claims a loop nobody runs.
struct ProbingFlag {
    parts: Weak<Parts>,
    /// This loop holds the flag (it gives it up when the breaker closes).
    held: bool,
}

impl Drop for ProbingFlag {
    fn drop(&mut self) {
        if self.held
            && let Some(parts) = self.parts.upgrade()
        {
            parts.gate.probing.store(false, Ordering::Release);
        }
    }
}

/// Probes while the breaker is open, sends the canary when it half-opens,
/// and ends when it closes or every client is gone.
/// The loop reaches its clients through the flag's weak handle.
async fn probe_loop(mut flag: ProbingFlag) {
    loop {
        let Some(client) = upgrade(&flag.parts) else {
            return;
        };
        let (state, next_probe, canary_deadline) = {
            let breaker = client.gate().breaker();
            (
                breaker.state(),
                breaker.next_probe_at(),
                breaker.canary_deadline(),
            )
        };
        match state {
            CircuitState::Closed => {
                client.gate().probing.store(false, Ordering::Release);
                flag.held = false;
                // An open that raced with this exit finds no loop: take over.
                if client.circuit_state() == CircuitState::Closed
                    || client.gate().probing.swap(true, Ordering::AcqRel)
                {
                    return;
                }
                flag.held = true;
            }
            CircuitState::Open => {
                drop(client);
                tokio::time::sleep_until(next_probe.unwrap_or_else(Instant::now)).await;
                let Some(client) = upgrade(&flag.parts) else {
                    return;
                };
                client.check_open_alert(Instant::now());
                if client.closed_by_fleet().await {
                    continue;
                }
                let healthy = client.probe().await;
                let transition = client
                    .gate()
                    .breaker()
                    .record_probe(healthy, Instant::now());
                client.on_transition(transition);
            }
            CircuitState::HalfOpen => {
                let admission = client.gate().breaker().admit(Instant::now(), true);
                if let Admission::Canary(generation) = admission {
                    let ok = client.canary().await;
                    let transition =
                        client
                            .gate()
                            .breaker()
                            .record_canary(generation, ok, Instant::now());
                    client.on_transition(transition);
                } else {
                    // The canary slot is taken and never reported: let it expire.
                    drop(client);
                    tokio::time::sleep_until(canary_deadline.unwrap_or_else(Instant::now)).await;
                    let Some(client) = upgrade(&flag.parts) else {
                        return;
                    };
                    let transition = client.gate().breaker().expire_canary(Instant::now());
                    client.on_transition(transition);
                }
            }
        }
    }
}

fn upgrade(parts: &Weak<Parts>) -> Option<Client> {
    parts.upgrade().map(|parts| Client {
        parts,
        caller: Caller::default(),
    })
}
