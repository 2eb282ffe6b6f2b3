//! The origin circuit breaker (GRAG §5.2) as a pure, synchronous state machine.
//!
//! Time is a parameter of every method (`now`), never read inside, so the
//! async probe loop and the HTTP pipeline built on top drive it and tests run
//! without sleeping. The caller wraps one [`Breaker`] per origin in a mutex.
//!
//! Every state change bumps a [`Generation`]; each admission hands out the
//! generation it was admitted under, and results reported with an older one
//! are ignored, so a slow attempt that started before a state change cannot
//! reopen or close the breaker afterwards (Polly issue 216).

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use sdk_policy::policy::BreakerPolicy;

/// The externally visible state, as logged (`circuit_state`) and exported
/// (`grag_client_circuit_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CircuitState {
    /// Calls flow; breaker-feeding failures are counted.
    Closed,
    /// Healthy probes seen; only the single canary read flows.
    HalfOpen,
    /// Calls fail fast; the probe loop polls `/health`.
    Open,
}

impl CircuitState {
    fn from_metric(value: u8) -> Self {
        match value {
            0 => CircuitState::Closed,
            1 => CircuitState::HalfOpen,
            _ => CircuitState::Open,
        }
    }

    /// The gauge value GRAG §10 prescribes: 0 closed, 1 half-open, 2 open.
    pub fn metric(self) -> u8 {
        match self {
            CircuitState::Closed => 0,
            CircuitState::HalfOpen => 1,
            CircuitState::Open => 2,
        }
    }

    /// Stable snake_case name for the `circuit_state` log field.
    pub fn as_str(self) -> &'static str {
        match self {
            CircuitState::Closed => "closed",
            CircuitState::HalfOpen => "half_open",
            CircuitState::Open => "open",
        }
    }
}

/// Identifies one state period; results of attempts admitted under an older
/// generation are ignored so they cannot act on a state they never saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Generation(u64);

impl Generation {
    /// The raw counter, for logs only.
    pub fn value(self) -> u64 {
        self.0
    }
}

/// The answer to [`Breaker::admit`]; the generation must be handed back with
/// the attempt's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Closed: send the request normally.
    Allowed(Generation),
    /// Half-open: this caller is the one canary; report it via
    /// [`Breaker::record_canary`].
    Canary(Generation),
    /// Fail fast (`circuit_open`); carries the state for the log line.
    Rejected(CircuitState),
}

impl Admission {
    /// The generation to report the result with, `None` when rejected.
    pub fn generation(self) -> Option<Generation> {
        match self {
            Admission::Allowed(g) | Admission::Canary(g) => Some(g),
            Admission::Rejected(_) => None,
        }
    }
}

/// A state change, returned by the method that caused it so the caller can
/// log it, update metrics, start/stop the probe loop and fire the warm-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Closed -> Open: the failure threshold was reached.
    Opened,
    /// Open -> HalfOpen: enough consecutive healthy probes.
    HalfOpened,
    /// HalfOpen -> Closed: the canary got its 200; deploy-suspected starts.
    Closed,
    /// HalfOpen -> Open: the canary failed or never reported.
    Reopened,
}

impl Transition {
    /// The state the breaker is in after this transition.
    pub fn to(self) -> CircuitState {
        match self {
            Transition::Opened | Transition::Reopened => CircuitState::Open,
            Transition::HalfOpened => CircuitState::HalfOpen,
            Transition::Closed => CircuitState::Closed,
        }
    }
}

/// Per-state data, so fields that only make sense in one state cannot leak
/// into another.
#[derive(Debug)]
enum Phase {
    Closed {
        /// Last failure per endpoint (or every failure when endpoints need
        /// not be distinct) inside the rolling window.
        failures: Vec<(&'static str, Instant)>,
        /// When the last open->close happened; starts deploy-suspected.
        closed_at: Option<Instant>,
    },
    Open {
        /// The previous probe result, or the (re)open: next probe is due
        /// `probe_interval` after it.
        probe_anchor: Instant,
        /// Consecutive healthy probes so far.
        healthy: u32,
    },
    HalfOpen {
        /// When the breaker half-opened.
        since: Instant,
        /// When the canary was admitted; `Some` means the slot is taken.
        canary_at: Option<Instant>,
    },
}

/// One origin's breaker. Not thread-safe by itself: wrap it in a mutex.
#[derive(Debug)]
pub struct Breaker {
    /// `None`: the API has no breaker; nothing opens it, it stays closed.
    policy: Option<&'static BreakerPolicy>,
    phase: Phase,
    generation: Generation,
    /// Start of the current open period (Closed -> Open); kept through
    /// half-open and reopen, cleared on close.
    opened_at: Option<Instant>,
    /// Whether the open-too-long alert already fired in this open period.
    alerted: bool,
    /// Time spent open in finished open periods.
    open_total: Duration,
}

impl Breaker {
    /// A closed breaker, not deploy-suspected, at generation 0.
    pub fn new(policy: &'static BreakerPolicy) -> Self {
        Breaker::of(Some(policy))
    }

    /// The breaker of an API's policy: one that never opens when the API has
    /// none (every other method then answers as a closed breaker does).
    pub fn of(policy: Option<&'static BreakerPolicy>) -> Self {
        Breaker {
            policy,
            phase: Phase::Closed {
                failures: Vec::new(),
                closed_at: None,
            },
            generation: Generation(0),
            opened_at: None,
            alerted: false,
            open_total: Duration::ZERO,
        }
    }

    /// The current state, for admission decisions, logs and the gauge.
    pub fn state(&self) -> CircuitState {
        match self.phase {
            Phase::Closed { .. } => CircuitState::Closed,
            Phase::HalfOpen { .. } => CircuitState::HalfOpen,
            Phase::Open { .. } => CircuitState::Open,
        }
    }

    /// The current generation; changes with every state change.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// Decides whether a call may be sent. Closed: `Allowed`. Open:
    /// `Rejected`. Half-open: the first `canary_eligible` caller (only the
    /// designated authenticated canary read) gets `Canary`; everyone else is
    /// rejected, so exactly one request probes the origin per half-open period.
    pub fn admit(&mut self, now: Instant, canary_eligible: bool) -> Admission {
        let generation = self.generation;
        match &mut self.phase {
            Phase::Closed { .. } => Admission::Allowed(generation),
            Phase::Open { .. } => Admission::Rejected(CircuitState::Open),
            Phase::HalfOpen { canary_at, .. } => {
                if canary_eligible && canary_at.is_none() {
                    *canary_at = Some(now);
                    Admission::Canary(generation)
                } else {
                    Admission::Rejected(CircuitState::HalfOpen)
                }
            }
        }
    }

    /// A breaker-feeding failure (connection-level failure, 502 or 503) of
    /// `endpoint` (the templated path). While closed it opens the breaker when
    /// `threshold` failures (of distinct endpoints when `distinct_endpoints`)
    /// are younger than `window`. With the canary's generation it reopens.
    /// Ignored when `generation` is stale.
    pub fn record_failure(
        &mut self,
        generation: Generation,
        endpoint: &'static str,
        now: Instant,
    ) -> Option<Transition> {
        let policy = self.policy?;
        if generation != self.generation {
            return None;
        }
        match &mut self.phase {
            Phase::Closed { failures, .. } => {
                failures.retain(|&(_, at)| now.saturating_duration_since(at) < policy.window);
                let known = failures.iter_mut().find(|(e, _)| *e == endpoint);
                match known {
                    Some((_, at)) if policy.distinct_endpoints => *at = (*at).max(now),
                    _ => failures.push((endpoint, now)),
                }
                if failures.len() >= policy.threshold as usize {
                    self.opened_at = Some(now);
                    self.alerted = false;
                    self.enter_open(now);
                    Some(Transition::Opened)
                } else {
                    None
                }
            }
            Phase::HalfOpen {
                canary_at: Some(_), ..
            } => {
                self.enter_open(now);
                Some(Transition::Reopened)
            }
            Phase::HalfOpen {
                canary_at: None, ..
            }
            | Phase::Open { .. } => None,
        }
    }

    /// Any other outcome (a success or a non-feeding error) of an attempt
    /// admitted in `generation`. Never changes a closed breaker (failures
    /// slide out of the window instead of being reset). With the canary's
    /// generation it REOPENS: this call cannot tell a 200 from a non-feeding
    /// error such as the deploy 401-window the canary exists to catch, and
    /// only a 200 may close, so report the canary via
    /// [`Breaker::record_canary`].
    pub fn record_success(&mut self, generation: Generation, now: Instant) -> Option<Transition> {
        if generation != self.generation {
            return None;
        }
        match self.phase {
            Phase::HalfOpen {
                canary_at: Some(_), ..
            } => {
                self.enter_open(now);
                Some(Transition::Reopened)
            }
            _ => None,
        }
    }

    /// The canary's result: `ok` (a 200) closes and starts deploy-suspected,
    /// anything else reopens. Ignored unless `generation` is the current
    /// half-open period's and its canary is out.
    pub fn record_canary(
        &mut self,
        generation: Generation,
        ok: bool,
        now: Instant,
    ) -> Option<Transition> {
        if generation != self.generation {
            return None;
        }
        let Phase::HalfOpen {
            canary_at: Some(_), ..
        } = self.phase
        else {
            return None;
        };
        if ok {
            self.enter_closed(now);
            Some(Transition::Closed)
        } else {
            self.enter_open(now);
            Some(Transition::Reopened)
        }
    }

    /// Another replica's canary saw a 200 after this breaker opened (a
    /// fleet shares one canary): an open or half-open breaker closes as its
    /// own canary's 200 would have closed it.
    pub fn record_shared_canary(&mut self, now: Instant) -> Option<Transition> {
        if matches!(self.phase, Phase::Closed { .. }) {
            return None;
        }
        self.enter_closed(now);
        Some(Transition::Closed)
    }

    /// The result of one `/health` probe; only counts while open. After
    /// `healthy_probes` consecutive healthy ones the breaker half-opens; an
    /// unhealthy probe resets the count. Either way the next probe is due
    /// `probe_interval` from `now`.
    pub fn record_probe(&mut self, healthy: bool, now: Instant) -> Option<Transition> {
        let needed = self.policy?.healthy_probes;
        let Phase::Open {
            probe_anchor,
            healthy: count,
        } = &mut self.phase
        else {
            return None;
        };
        *probe_anchor = now;
        *count = if healthy { count.saturating_add(1) } else { 0 };
        if *count >= needed {
            self.enter(Phase::HalfOpen {
                since: now,
                canary_at: None,
            });
            Some(Transition::HalfOpened)
        } else {
            None
        }
    }

    /// When a half-open period without a canary result must end: a canary
    /// that never reports (its task was dropped) would otherwise reject all
    /// traffic forever. `canary_timeout` after the canary's admission, or
    /// after the half-open if no canary was admitted; `None` unless half-open.
    pub fn canary_deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::HalfOpen { since, canary_at } => canary_at
                .unwrap_or(since)
                .checked_add(self.policy?.canary_timeout),
            _ => None,
        }
    }

    /// Reopens when [`Breaker::canary_deadline`] has passed; the probe loop
    /// calls it while half-open. A late canary result is then stale.
    pub fn expire_canary(&mut self, now: Instant) -> Option<Transition> {
        match self.canary_deadline() {
            Some(deadline) if now >= deadline => {
                self.enter_open(now);
                Some(Transition::Reopened)
            }
            _ => None,
        }
    }

    /// Whether the origin is deploy-suspected: for `deploy_suspected` after
    /// the last open->close (R2 retries and cold-start timeouts apply).
    pub fn deploy_suspected(&self, now: Instant) -> bool {
        match self.phase {
            Phase::Closed {
                closed_at: Some(at),
                ..
            } => self
                .policy
                .is_some_and(|p| now.saturating_duration_since(at) < p.deploy_suspected),
            _ => false,
        }
    }

    /// How long the current open period has lasted (open or half-open since
    /// the close->open), `None` when closed.
    pub fn open_for(&self, now: Instant) -> Option<Duration> {
        self.opened_at.map(|at| now.saturating_duration_since(at))
    }

    /// True exactly once per open period, the first time it is called with
    /// the breaker open longer than `alert_after`: the caller fires the alert.
    pub fn take_open_alert(&mut self, now: Instant) -> bool {
        match self.open_for(now) {
            Some(open) if !self.alerted && self.policy.is_some_and(|p| open > p.alert_after) => {
                self.alerted = true;
                true
            }
            _ => false,
        }
    }

    /// Total time spent open (half-open included) so far, for
    /// `grag_client_circuit_open_seconds_total`.
    pub fn open_seconds_total(&self, now: Instant) -> Duration {
        self.open_total + self.open_for(now).unwrap_or(Duration::ZERO)
    }

    /// When the next `/health` probe is due: `probe_interval` after the
    /// previous probe or the (re)open. `None` unless open.
    pub fn next_probe_at(&self) -> Option<Instant> {
        match self.phase {
            Phase::Open { probe_anchor, .. } => {
                probe_anchor.checked_add(self.policy?.probe_interval)
            }
            _ => None,
        }
    }

    /// Switches phase and bumps the generation: the one place a state change
    /// happens, so no change can forget to invalidate in-flight attempts.
    fn enter(&mut self, phase: Phase) {
        self.phase = phase;
        self.generation = Generation(self.generation.0.wrapping_add(1));
    }

    /// Open (or reopen) with a fresh probe count; the failure window goes
    /// with the closed phase.
    fn enter_open(&mut self, now: Instant) {
        self.enter(Phase::Open {
            probe_anchor: now,
            healthy: 0,
        });
    }

    /// Close, ending the open period and starting deploy-suspected.
    fn enter_closed(&mut self, now: Instant) {
        if let Some(at) = self.opened_at.take() {
            self.open_total += now.saturating_duration_since(at);
        }
        self.alerted = false;
        self.enter(Phase::Closed {
            failures: Vec::new(),
            closed_at: Some(now),
        });
    }
}

/// One origin's breaker behind its mutex, with its state and generation
/// published in a word read without the lock: admission while closed (the
/// generation is all it hands out) and refusal while open (nothing at all)
/// are one load, no lock and no clock read. Only half-open, where one caller
/// takes the canary slot, needs the breaker itself.
///
/// The word is written by the guard as it unlocks, so it always holds what
/// the last holder of the lock left; a reader that sees an older word saw it
/// an instant before that holder's change, as a caller queued behind the
/// lock would have.
#[derive(Debug)]
pub struct SharedBreaker {
    /// `generation << 2 | state.metric()` (the generation wraps after 2^62 changes).
    word: AtomicU64,
    breaker: Mutex<Breaker>,
}

fn word_of(breaker: &Breaker) -> u64 {
    breaker.generation.0 << 2 | u64::from(breaker.state().metric())
}

impl SharedBreaker {
    pub fn new(breaker: Breaker) -> Self {
        Self {
            word: AtomicU64::new(word_of(&breaker)),
            breaker: Mutex::new(breaker),
        }
    }

    /// [`Breaker::admit`] at `now()`, read only when the breaker is half-open.
    pub fn admit(&self, now: impl FnOnce() -> Instant, canary_eligible: bool) -> Admission {
        let word = self.word.load(Ordering::Acquire);
        match CircuitState::from_metric((word & 3) as u8) {
            CircuitState::Closed => Admission::Allowed(Generation(word >> 2)),
            CircuitState::Open => Admission::Rejected(CircuitState::Open),
            CircuitState::HalfOpen => self.lock().admit(now(), canary_eligible),
        }
    }

    /// The breaker itself; its state is published when the guard drops.
    pub fn lock(&self) -> BreakerGuard<'_> {
        BreakerGuard {
            word: &self.word,
            breaker: self.breaker.lock().unwrap_or_else(PoisonError::into_inner),
        }
    }

    /// The state as the last holder of the lock left it, without the lock.
    pub fn state(&self) -> CircuitState {
        CircuitState::from_metric((self.word.load(Ordering::Acquire) & 3) as u8)
    }
}

/// The locked breaker of a [`SharedBreaker`].
#[derive(Debug)]
pub struct BreakerGuard<'a> {
    word: &'a AtomicU64,
    breaker: MutexGuard<'a, Breaker>,
}

impl Deref for BreakerGuard<'_> {
    type Target = Breaker;

    fn deref(&self) -> &Breaker {
        &self.breaker
    }
}

impl DerefMut for BreakerGuard<'_> {
    fn deref_mut(&mut self) -> &mut Breaker {
        &mut self.breaker
    }
}

impl Drop for BreakerGuard<'_> {
    /// Before the mutex unlocks (fields drop after this), so the word never
    /// lags a state another holder of the lock could see.
    fn drop(&mut self) {
        self.word.store(word_of(&self.breaker), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static POLICY: BreakerPolicy = BreakerPolicy::example();

    const KBS: &str = "/workspaces/api/v1/kbs";
    const DOCS: &str = "/workspaces/api/v1/kbs/{kb}/documents";
    const SEARCH: &str = "/workspaces/api/v1/search";
    const STATUS: &str = "/next/api/pipeline/status/{jobId}";

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn allowed(b: &mut Breaker, now: Instant) -> Generation {
        match b.admit(now, false) {
            Admission::Allowed(g) => g,
            other => panic!("expected Allowed, got {other:?}"),
        }
    }

    /// Opens a fresh breaker at `t0` with three distinct failures.
    fn opened(t0: Instant) -> Breaker {
        let mut b = Breaker::new(&POLICY);
        for ep in [KBS, DOCS, SEARCH] {
            let g = allowed(&mut b, t0);
            b.record_failure(g, ep, t0);
        }
        assert_eq!(b.state(), CircuitState::Open);
        b
    }

    /// Two healthy probes, 5 s apart, starting at `at`; returns the time of
    /// the second one.
    fn half_open(b: &mut Breaker, at: Instant) -> Instant {
        assert_eq!(b.record_probe(true, at), None);
        let t = at + secs(5);
        assert_eq!(b.record_probe(true, t), Some(Transition::HalfOpened));
        t
    }

    fn canary(b: &mut Breaker, now: Instant) -> Generation {
        match b.admit(now, true) {
            Admission::Canary(g) => g,
            other => panic!("expected Canary, got {other:?}"),
        }
    }

    #[test]
    fn the_shared_word_follows_every_change_made_under_the_lock() {
        let t0 = Instant::now();
        let shared = SharedBreaker::new(Breaker::new(&POLICY));
        assert_eq!(shared.state(), CircuitState::Closed);
        for ep in [KBS, DOCS, SEARCH] {
            let mut b = shared.lock();
            let g = allowed(&mut b, t0);
            b.record_failure(g, ep, t0);
        }
        assert_eq!(shared.state(), CircuitState::Open);
        let t = half_open(&mut shared.lock(), t0 + secs(5));
        assert_eq!(shared.state(), CircuitState::HalfOpen);
        {
            let mut b = shared.lock();
            let g = canary(&mut b, t);
            b.record_canary(g, true, t);
            // Published as the guard unlocks, not before.
            assert_eq!(shared.state(), CircuitState::HalfOpen);
        }
        assert_eq!(shared.state(), CircuitState::Closed);
    }

    #[test]
    fn admission_through_the_word_answers_as_the_breaker_does() {
        let t0 = Instant::now();
        let never = || -> Instant { panic!("no clock read outside half-open") };
        let shared = SharedBreaker::new(opened(t0));
        assert_eq!(
            shared.admit(never, true),
            Admission::Rejected(CircuitState::Open)
        );
        let t = half_open(&mut shared.lock(), t0 + secs(5));
        assert_eq!(
            shared.admit(|| t, false),
            Admission::Rejected(CircuitState::HalfOpen)
        );
        let Admission::Canary(g) = shared.admit(|| t, true) else {
            panic!("the first eligible caller is the canary");
        };
        shared.lock().record_canary(g, true, t);
        let closed = shared.lock().generation();
        assert_ne!(closed, g);
        assert_eq!(shared.admit(never, false), Admission::Allowed(closed));
        assert_eq!(shared.lock().admit(t, false), Admission::Allowed(closed));
    }

    #[test]
    fn state_metric_and_names() {
        assert_eq!(CircuitState::Closed.metric(), 0);
        assert_eq!(CircuitState::HalfOpen.metric(), 1);
        assert_eq!(CircuitState::Open.metric(), 2);
        assert_eq!(CircuitState::HalfOpen.as_str(), "half_open");
        assert_eq!(Transition::Reopened.to(), CircuitState::Open);
    }

    #[test]
    fn opens_on_three_distinct_endpoints() {
        let t0 = Instant::now();
        let mut b = Breaker::new(&POLICY);
        let g = allowed(&mut b, t0);
        assert_eq!(b.record_failure(g, KBS, t0), None);
        assert_eq!(b.record_failure(g, DOCS, t0 + secs(10)), None);
        assert_eq!(b.state(), CircuitState::Closed);
        assert_eq!(
            b.record_failure(g, SEARCH, t0 + secs(20)),
            Some(Transition::Opened)
        );
        assert_eq!(b.state(), CircuitState::Open);
        assert_ne!(b.generation(), g);
        assert_eq!(b.open_for(t0 + secs(21)), Some(secs(1)));
    }

    #[test]
    fn three_failures_of_one_endpoint_do_not_open() {
        let t0 = Instant::now();
        let mut b = Breaker::new(&POLICY);
        let g = allowed(&mut b, t0);
        for i in 0..5 {
            assert_eq!(b.record_failure(g, KBS, t0 + secs(i)), None);
        }
        assert_eq!(b.state(), CircuitState::Closed);
        // Still one slot used: two more distinct endpoints open it.
        assert_eq!(b.record_failure(g, DOCS, t0 + secs(6)), None);
        assert_eq!(
            b.record_failure(g, SEARCH, t0 + secs(7)),
            Some(Transition::Opened)
        );
    }

    #[test]
    fn failures_spread_over_more_than_the_window_do_not_open() {
        let t0 = Instant::now();
        let mut b = Breaker::new(&POLICY);
        let g = allowed(&mut b, t0);
        assert_eq!(b.record_failure(g, KBS, t0), None);
        assert_eq!(b.record_failure(g, DOCS, t0 + secs(15)), None);
        // KBS is 31 s old now: slid out of the window.
        assert_eq!(b.record_failure(g, SEARCH, t0 + secs(31)), None);
        assert_eq!(b.state(), CircuitState::Closed);
        // DOCS (29 s old), SEARCH and STATUS are inside the window.
        assert_eq!(
            b.record_failure(g, STATUS, t0 + secs(44)),
            Some(Transition::Opened)
        );
    }

    #[test]
    fn rejects_while_open() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        assert_eq!(
            b.admit(t0 + secs(1), false),
            Admission::Rejected(CircuitState::Open)
        );
        assert_eq!(
            b.admit(t0 + secs(1), true),
            Admission::Rejected(CircuitState::Open)
        );
        assert_eq!(b.next_probe_at(), Some(t0 + secs(5)));
    }

    #[test]
    fn half_opens_after_two_consecutive_healthy_probes() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let g = b.generation();
        assert_eq!(b.record_probe(true, t0 + secs(5)), None);
        assert_eq!(b.state(), CircuitState::Open);
        assert_eq!(b.next_probe_at(), Some(t0 + secs(10)));
        assert_eq!(
            b.record_probe(true, t0 + secs(10)),
            Some(Transition::HalfOpened)
        );
        assert_eq!(b.state(), CircuitState::HalfOpen);
        assert_ne!(b.generation(), g);
        assert_eq!(b.next_probe_at(), None);
        // Still an open period for the alert and the metric.
        assert_eq!(b.open_for(t0 + secs(10)), Some(secs(10)));
    }

    #[test]
    fn another_replica_s_canary_closes_an_open_or_half_open_breaker() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let g = b.generation();
        assert_eq!(
            b.record_shared_canary(t0 + secs(3)),
            Some(Transition::Closed)
        );
        assert_eq!(b.state(), CircuitState::Closed);
        assert_ne!(b.generation(), g);
        assert!(
            b.deploy_suspected(t0 + secs(4)),
            "closed as a canary closes"
        );
        assert_eq!(b.record_shared_canary(t0 + secs(5)), None);
        let mut half = opened(t0);
        half.record_probe(true, t0 + secs(5));
        half.record_probe(true, t0 + secs(10));
        assert_eq!(half.state(), CircuitState::HalfOpen);
        assert_eq!(
            half.record_shared_canary(t0 + secs(11)),
            Some(Transition::Closed)
        );
    }

    #[test]
    fn healthy_unhealthy_healthy_does_not_half_open() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        assert_eq!(b.record_probe(true, t0 + secs(5)), None);
        assert_eq!(b.record_probe(false, t0 + secs(10)), None);
        assert_eq!(b.record_probe(true, t0 + secs(15)), None);
        assert_eq!(b.state(), CircuitState::Open);
        assert_eq!(
            b.record_probe(true, t0 + secs(20)),
            Some(Transition::HalfOpened)
        );
    }

    #[test]
    fn exactly_one_canary_per_half_open_period() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let t = half_open(&mut b, t0 + secs(5));
        let canaries = (0..100)
            .filter(|_| matches!(b.admit(t, true), Admission::Canary(_)))
            .count();
        assert_eq!(canaries, 1);
        assert_eq!(
            b.admit(t, true),
            Admission::Rejected(CircuitState::HalfOpen)
        );
        // The next half-open period has its own single slot.
        let g = b.generation();
        assert_eq!(
            b.record_canary(g, false, t + secs(1)),
            Some(Transition::Reopened)
        );
        let t = half_open(&mut b, t + secs(6));
        let canaries = (0..100)
            .filter(|_| matches!(b.admit(t, true), Admission::Canary(_)))
            .count();
        assert_eq!(canaries, 1);
    }

    #[test]
    fn non_eligible_callers_are_rejected_in_half_open() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let t = half_open(&mut b, t0 + secs(5));
        for _ in 0..10 {
            assert_eq!(
                b.admit(t, false),
                Admission::Rejected(CircuitState::HalfOpen)
            );
        }
        // They did not use up the slot.
        canary(&mut b, t);
    }

    #[test]
    fn canary_success_closes_and_starts_deploy_suspected_for_120s() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        assert!(!b.deploy_suspected(t0));
        let t = half_open(&mut b, t0 + secs(5));
        let g = canary(&mut b, t);
        let closed = t + secs(1);
        assert_eq!(b.record_canary(g, true, closed), Some(Transition::Closed));
        assert_eq!(b.state(), CircuitState::Closed);
        assert_eq!(b.open_for(closed), None);
        assert!(matches!(b.admit(closed, false), Admission::Allowed(_)));
        assert!(b.deploy_suspected(closed));
        assert!(b.deploy_suspected(closed + secs(119)));
        assert!(!b.deploy_suspected(closed + secs(120)));
        assert!(!b.deploy_suspected(closed + secs(500)));
    }

    #[test]
    fn canary_failure_reopens_with_fresh_state() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let t = half_open(&mut b, t0 + secs(5));
        let g = canary(&mut b, t);
        let t = t + secs(2);
        assert_eq!(b.record_canary(g, false, t), Some(Transition::Reopened));
        assert_eq!(b.state(), CircuitState::Open);
        assert_ne!(b.generation(), g);
        assert!(!b.deploy_suspected(t));
        assert_eq!(b.next_probe_at(), Some(t + secs(5)));
        // Probe count was reset: one healthy probe is not enough.
        assert_eq!(b.record_probe(true, t + secs(5)), None);
        assert_eq!(b.state(), CircuitState::Open);
        // The open period did not restart.
        assert_eq!(b.open_for(t), Some(t - t0));
    }

    #[test]
    fn breaker_feeding_canary_failure_reopens() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let t = half_open(&mut b, t0 + secs(5));
        let g = canary(&mut b, t);
        assert_eq!(b.record_failure(g, KBS, t), Some(Transition::Reopened));
    }

    #[test]
    fn canary_reported_via_record_success_does_not_close() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let t = half_open(&mut b, t0 + secs(5));
        let g = canary(&mut b, t);
        assert_eq!(b.record_success(g, t), Some(Transition::Reopened));
        assert_eq!(b.state(), CircuitState::Open);
    }

    #[test]
    fn lost_canary_expires_and_reopens() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let t = half_open(&mut b, t0 + secs(5));
        let g = canary(&mut b, t + secs(1));
        assert_eq!(b.canary_deadline(), Some(t + secs(6)));
        assert_eq!(b.expire_canary(t + secs(5)), None);
        assert_eq!(b.expire_canary(t + secs(6)), Some(Transition::Reopened));
        // The late result is stale.
        assert_eq!(b.record_canary(g, true, t + secs(7)), None);
        assert_eq!(b.state(), CircuitState::Open);
    }

    #[test]
    fn stale_failure_is_ignored() {
        let t0 = Instant::now();
        let mut b = Breaker::new(&POLICY);
        let slow = allowed(&mut b, t0);
        for ep in [KBS, DOCS, SEARCH] {
            let g = allowed(&mut b, t0);
            b.record_failure(g, ep, t0);
        }
        let t = half_open(&mut b, t0 + secs(5));
        let g = canary(&mut b, t);
        // Admitted while closed, lands in half-open: must not reopen.
        assert_eq!(b.record_failure(slow, STATUS, t), None);
        assert_eq!(b.state(), CircuitState::HalfOpen);
        assert_eq!(b.record_canary(g, true, t), Some(Transition::Closed));
        // Nor count in the new closed period.
        assert_eq!(b.record_failure(slow, STATUS, t), None);
        assert_eq!(b.record_failure(slow, KBS, t), None);
        assert_eq!(b.record_failure(slow, DOCS, t), None);
        assert_eq!(b.state(), CircuitState::Closed);
    }

    #[test]
    fn stale_success_is_ignored() {
        let t0 = Instant::now();
        let mut b = Breaker::new(&POLICY);
        let slow = allowed(&mut b, t0);
        for ep in [KBS, DOCS, SEARCH] {
            let g = allowed(&mut b, t0);
            b.record_failure(g, ep, t0);
        }
        let t = half_open(&mut b, t0 + secs(5));
        let old_canary = canary(&mut b, t);
        assert_eq!(b.record_success(slow, t), None);
        assert_eq!(b.record_canary(slow, true, t), None);
        assert_eq!(b.state(), CircuitState::HalfOpen);
        // A canary of an earlier half-open period cannot close a later one.
        assert_eq!(
            b.record_canary(old_canary, false, t),
            Some(Transition::Reopened)
        );
        let t = half_open(&mut b, t + secs(5));
        assert_eq!(b.record_canary(old_canary, true, t), None);
        assert_eq!(b.state(), CircuitState::HalfOpen);
    }

    #[test]
    fn failures_before_the_open_do_not_carry_into_the_next_closed_period() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let t = half_open(&mut b, t0 + secs(5));
        let g = canary(&mut b, t);
        b.record_canary(g, true, t);
        let g = allowed(&mut b, t);
        assert_eq!(b.record_failure(g, KBS, t), None);
        assert_eq!(b.record_failure(g, DOCS, t), None);
        assert_eq!(b.state(), CircuitState::Closed);
    }

    #[test]
    fn alert_fires_once_after_five_minutes_open() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        assert!(!b.take_open_alert(t0 + secs(60)));
        assert!(!b.take_open_alert(t0 + secs(300)));
        assert!(b.take_open_alert(t0 + secs(301)));
        assert!(!b.take_open_alert(t0 + secs(302)));
        assert!(!b.take_open_alert(t0 + secs(1000)));
    }

    #[test]
    fn alert_rearms_for_the_next_open_period() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let t = half_open(&mut b, t0 + secs(400));
        assert!(b.take_open_alert(t));
        let g = canary(&mut b, t);
        b.record_canary(g, true, t);
        assert!(!b.take_open_alert(t + secs(1000)));
        let g = allowed(&mut b, t);
        for ep in [KBS, DOCS, SEARCH] {
            b.record_failure(g, ep, t);
        }
        assert!(!b.take_open_alert(t + secs(300)));
        assert!(b.take_open_alert(t + secs(301)));
    }

    #[test]
    fn open_seconds_total_accumulates_across_two_open_periods() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        assert_eq!(b.open_seconds_total(t0 + secs(3)), secs(3));
        let t = half_open(&mut b, t0 + secs(5));
        let g = canary(&mut b, t);
        let closed = t0 + secs(12);
        b.record_canary(g, true, closed);
        assert_eq!(b.open_seconds_total(closed + secs(100)), secs(12));
        let reopen = closed + secs(100);
        let g = allowed(&mut b, reopen);
        for ep in [KBS, DOCS, SEARCH] {
            b.record_failure(g, ep, reopen);
        }
        assert_eq!(b.open_seconds_total(reopen + secs(8)), secs(20));
    }
}
