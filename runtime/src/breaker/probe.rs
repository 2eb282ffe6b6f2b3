//! What follows a breaker transition: the probe loop while open, the single
//! canary while half-open, forgetting stable answers and warming up after a
//! close. Functions of the client's parts: a loop holds them weakly, so it
//! ends when every client is gone.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use tokio::time::Instant;

use sdk_policy::endpoint::Endpoint;

use super::state::{Admission, CircuitState, Transition};
use crate::alerts::Alert;
use crate::call::Call;
use crate::client::{Caller, Client, Parts};
use crate::fleet::{Turn, TurnTimes};
use crate::pipeline::attempt::{Request, once};
use crate::telemetry::{self, AttemptLog, LogScope};
use crate::wire::{Attempt, Wire};

/// Acts on a breaker transition; called after every recorded outcome.
pub(crate) fn react(parts: &Arc<Parts>, transition: Option<Transition>) {
    let Some(transition) = transition else { return };
    let state = transition.to();
    parts.recorder.metrics.circuit_state(state.metric());
    let transition_name = format!("{transition:?}");
    let lines = &parts.plan.policy.log_lines;
    lines.breaker(&transition_name, state.as_str());
    match transition {
        Transition::Opened | Transition::Reopened => spawn_loop(parts),
        Transition::Closed => {
            // A deploy finished: dark flags and budgets may have changed.
            parts.gate.memory().forget_routes();
            if parts.warm_up {
                spawn_warm_up(parts);
            }
        }
        Transition::HalfOpened => {}
    }
}

fn spawn_loop(parts: &Arc<Parts>) {
    let probing = &parts.gate.probing;
    if probing.swap(true, Ordering::AcqRel) {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        // No runtime to probe on: the next call that finds the breaker
        // open starts the loop on its own runtime.
        probing.store(false, Ordering::Release);
        return;
    };
    let flag = ProbingFlag {
        parts: Arc::downgrade(parts),
        held: true,
    };
    runtime.spawn(probe_loop(flag));
}

/// The breaker is open and a call was refused: make sure a probe loop is
/// alive. One that died with the runtime it ran on cleared its flag.
pub(super) fn ensure_loop(parts: &Arc<Parts>) {
    if !parts.gate.probing.load(Ordering::Acquire) {
        spawn_loop(parts);
    }
}

/// A call found the breaker open (or half-open) and no probe loop alive:
/// the loop died with the runtime it ran on, and one spawned now may die
/// with this call's (a runtime per call, `block_on`). So the call does the
/// loop's due work itself first: a probe whose interval has passed, then
/// the canary once half-open, on the policy's schedule. An open breaker thus
/// always ends, whether or not any runtime outlives a call. Returns whether
/// the breaker is closed afterwards.
pub(super) async fn catch_up(parts: &Arc<Parts>) -> bool {
    let probing = &parts.gate.probing;
    if probing.load(Ordering::Acquire) || probing.swap(true, Ordering::AcqRel) {
        return false; // a live loop does it
    }
    let _flag = ProbingFlag {
        parts: Arc::downgrade(parts),
        held: true,
    };
    loop {
        let now = Instant::now();
        let (state, next_probe) = {
            let breaker = parts.gate.breaker();
            (breaker.state(), breaker.next_probe_at())
        };
        let closed = match state {
            CircuitState::Closed => return true,
            CircuitState::Open if next_probe.is_some_and(|at| at <= now) => {
                check_open_alert(parts, now);
                closed_by_fleet(parts).await || {
                    let healthy = probe(parts).await;
                    let transition = parts.gate.breaker().record_probe(healthy, Instant::now());
                    react(parts, transition);
                    // Still open: the next probe is an interval away.
                    parts.gate.breaker().state() != CircuitState::Open
                }
            }
            CircuitState::Open => return false,
            CircuitState::HalfOpen => canary_turn(parts).await == Some(Transition::Closed),
        };
        if !closed {
            return false;
        }
    }
}

/// The half-open breaker's canary, sent by whoever holds its slot, or the
/// slot of a loop that died expired: the transition it led to.
async fn canary_turn(parts: &Arc<Parts>) -> Option<Transition> {
    let admission = parts.gate.breaker().admit(Instant::now(), true);
    let transition = match admission {
        Admission::Canary(generation) => {
            let ok = canary(parts).await;
            (parts.gate.breaker()).record_canary(generation, ok, Instant::now())
        }
        // A canary of a loop that died: it ends at its deadline.
        _ => parts.gate.breaker().expire_canary(Instant::now()),
    };
    react(parts, transition);
    transition
}

/// The policy's warm-up calls, each sent through the pipeline as any call
/// (consumed, so it is counted and its attempt line written).
fn spawn_warm_up(parts: &Arc<Parts>) {
    for warm in parts.plan.policy.warm_up {
        let client = Client {
            parts: parts.clone(),
            caller: Caller::default(),
        };
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
            let outcome = client.send(call).await.and_then(crate::reply::Reply::empty);
            let lines = &client.parts.plan.policy.log_lines;
            lines.warm_up(warm.endpoint.operation, outcome.is_ok());
        });
    }
}

/// One probe of the public liveness route: healthy on a 2xx.
async fn probe(parts: &Parts) -> bool {
    let Some(b) = &parts.plan.policy.breaker else {
        return false;
    };
    let probe = async {
        let status = probe_status(parts, b.probe, b.probe_timeout).await;
        status.is_some_and(|s| (200..300).contains(&s))
    };
    // A fleet sends one probe per interval, not one per replica: the
    // replica holding the probe sends it and shares what it saw, the others
    // take that (nothing fresh yet: not healthy this round).
    if let Some(fleet) = &parts.gate.fleet {
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
async fn canary(parts: &Parts) -> bool {
    let Some(b) = &parts.plan.policy.breaker else {
        return false;
    };
    let canary = async { probe_status(parts, b.canary, b.canary_timeout).await == Some(200) };
    // One canary for the fleet, like the probe: the others wait for its
    // answer (up to its timeout) instead of sending their own. What it saw
    // is kept two probe intervals, so that every replica's probe loop, an
    // interval apart, finds a 200 and closes on it (`closed_by_fleet`).
    if let Some(fleet) = &parts.gate.fleet {
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
/// opened: a fleet sends one canary, and every replica's breaker closes on
/// it by its next probe instead of probing on to a canary of its own.
async fn closed_by_fleet(parts: &Arc<Parts>) -> bool {
    let Some(fleet) = &parts.gate.fleet else {
        return false;
    };
    let Some(open_for) = parts.gate.breaker().open_for(Instant::now()) else {
        return false;
    };
    let passed = fleet.healthy_since(Turn::Canary).await;
    if passed.is_none_or(|age| age >= open_for) {
        return false;
    }
    let transition = parts.gate.breaker().record_shared_canary(Instant::now());
    react(parts, transition);
    transition.is_some()
}

/// One request outside the retry loop (probe and canary), made and logged
/// as the pipeline makes any. Returns the status, if any came back.
async fn probe_status(
    parts: &Parts,
    endpoint: &'static Endpoint,
    timeout: std::time::Duration,
) -> Option<u16> {
    let (plan, transport) = (&parts.plan, &parts.transport);
    let call = Call::new(endpoint);
    let path = call.render_path().ok()?;
    let scope = LogScope::of(plan.policy, &plan.tenant, &call);
    let request = Request {
        call: &call,
        path: &path,
        scope: &scope,
        number: 1,
    };
    let until = crate::clock::after(Instant::now(), timeout);
    let none = tracing::Span::none();
    let exchange = once(transport, plan, request, Wire::Read, until, &none).await;
    let (status, echoed) = match exchange.answer {
        Some((
            Attempt::Answer {
                status, echoed_id, ..
            },
            _,
        )) => (Some(status), echoed_id),
        _ => (None, None),
    };
    let log = AttemptLog {
        scope: &scope,
        request_id: &exchange.request_id,
        echoed_id: echoed.as_deref(),
        status,
        row: None,
        attempt: 1,
        retry_after: None,
        latency: exchange.started.elapsed(),
        circuit_state: parts.gate.breaker().state().as_str(),
    };
    telemetry::attempt(plan.policy, &log, None);
    status
}

/// Raises the breaker's open-too-long alert, once per open.
fn check_open_alert(parts: &Parts, now: Instant) {
    if parts.gate.breaker().take_open_alert(now)
        && let Some(b) = &parts.plan.policy.breaker
    {
        let recorder = &parts.recorder;
        recorder.alert(Alert {
            detail: Some(format!(
                "the breaker has been open longer than {} s",
                b.alert_after.as_secs()
            )),
            ..recorder.alert_of(b.open_alert)
        });
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
/// and ends when it closes or every client is gone: the loop reaches the
/// parts through the flag's weak handle.
async fn probe_loop(mut flag: ProbingFlag) {
    loop {
        let Some(parts) = flag.parts.upgrade() else {
            return;
        };
        let (state, next_probe, canary_deadline) = {
            let breaker = parts.gate.breaker();
            let at = (breaker.next_probe_at(), breaker.canary_deadline());
            (breaker.state(), at.0, at.1)
        };
        match state {
            CircuitState::Closed => {
                let probing = &parts.gate.probing;
                probing.store(false, Ordering::Release);
                flag.held = false;
                // An open that raced with this exit finds no loop: take over.
                if parts.gate.breaker().state() == CircuitState::Closed
                    || probing.swap(true, Ordering::AcqRel)
                {
                    return;
                }
                flag.held = true;
            }
            CircuitState::Open => {
                drop(parts);
                tokio::time::sleep_until(next_probe.unwrap_or_else(Instant::now)).await;
                let Some(parts) = flag.parts.upgrade() else {
                    return;
                };
                check_open_alert(&parts, Instant::now());
                if closed_by_fleet(&parts).await {
                    continue;
                }
                let healthy = probe(&parts).await;
                let transition = parts.gate.breaker().record_probe(healthy, Instant::now());
                react(&parts, transition);
            }
            CircuitState::HalfOpen => {
                let admission = parts.gate.breaker().admit(Instant::now(), true);
                if let Admission::Canary(generation) = admission {
                    let ok = canary(&parts).await;
                    let at = Instant::now();
                    let transition = parts.gate.breaker().record_canary(generation, ok, at);
                    react(&parts, transition);
                } else {
                    // The canary slot is taken and never reported: let it expire.
                    drop(parts);
                    tokio::time::sleep_until(canary_deadline.unwrap_or_else(Instant::now)).await;
                    let Some(parts) = flag.parts.upgrade() else {
                        return;
                    };
                    let transition = parts.gate.breaker().expire_canary(Instant::now());
                    react(&parts, transition);
                }
            }
        }
    }
}
