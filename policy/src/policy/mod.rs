//! The policy as data: everything the generator lowers from `spec/<api>/`.
//!
//! All types are `'static`-friendly so a generated crate can hold its whole
//! policy in one `static`. Nothing API-specific lives in the runtime itself.

use std::time::Duration;

use crate::Endpoint;
pub use crate::index::{BudgetIx, DetailIx, RetryIx, RouteIx, RowIx, StreamIx, TimeoutIx};
use crate::log::{LogLines, LogNames};

#[cfg(feature = "bake")]
use crate::bake::{
    Bake, Names, Part, bake_fields, bake_struct, bake_unit_enum, byte_ranges, endpoints, part_or,
};
#[cfg(feature = "bake")]
use proc_macro2::TokenStream;
#[cfg(feature = "bake")]
use quote::quote;

/// The class of an error no taxonomy row matched: every API has it.
pub const UNCLASSIFIED: &str = "unclassified";

/// The whole policy of one API.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Short API name (`grag`), used in logs and metrics.
    pub api: &'static str,
    pub headers: HeaderNames,
    pub ids: IdRules,
    /// The spec's reserved tenants: the floor of every policy made from this
    /// one. A clone, [`Policy::scaled`] or an override keeps it, so a copy
    /// whose `ids.reserved_tenants` lost one is refused by the client, on
    /// every construction path, instead of sending that tenant (GRAG §3:
    /// `default` would be served silently).
    pub reserved_floor: &'static [&'static str],
    pub timeouts: &'static [TimeoutClass],
    /// Overall deadline of an interactive operation, retries included.
    pub deadline: Duration,
    pub retries: &'static [RetryClass],
    /// The origin's circuit breaker; `None` for an API without one (no
    /// failure ever opens anything, no probe runs).
    pub breaker: Option<BreakerPolicy>,
    pub throttle: ThrottlePolicy,
    /// Rows in match order: the first row that matches decides.
    pub taxonomy: &'static [TaxonomyRow],
    pub detail_sets: &'static [DetailSet],
    pub streams: &'static [StreamPolicy],
    /// How a buffering proxy is recognised; `None` for an API without streams.
    pub buffering: Option<BufferingRule>,
    /// Streams falling back to polling this often raise this alert.
    pub fallbacks_sustained: Option<(AlertRate, &'static str)>,
    pub states: &'static [FeatureStateCopy],
    pub messages: &'static [ClassMessage],
    /// Calls fired once after a breaker close to warm cold models, when enabled.
    pub warm_up: &'static [WarmUpCall],
    pub features: &'static [FeaturePolicy],
    pub alerts: AlertNames,
    pub limits: Limits,
    /// Every route of the API: the only descriptors the pipeline sends.
    pub routes: &'static [&'static Endpoint],
    /// How long an idle pooled connection is kept: less than the server's
    /// keep-alive, so no request goes out on a connection it already closed.
    pub pool_idle: Duration,
    /// The least pool idle a deployment may configure, for a proxy whose
    /// keep-alive is shorter than the server's.
    pub pool_idle_floor: Duration,
    /// A server's announced `Keep-Alive: timeout=` lowers the pool idle to
    /// this much less; `None`: announcements are not read.
    pub keep_alive_margin: Option<Duration>,
    /// What the exported metrics are called.
    pub metrics: MetricNames,
    /// What the log lines are called, and who writes them.
    pub log: LogNames,
    pub log_lines: &'static dyn LogLines,
    /// Statuses after which the server closes the connection unannounced
    /// (uvicorn after an unhandled error): unless the answer said
    /// `Connection: close`, no pooled connection is used again.
    pub fresh_after: &'static [u16],
    /// The durable replay queue of the `replay` routes; `None` for an API
    /// whose writes are never queued.
    pub replay: Option<ReplayPolicy>,
    /// How several replicas keep the throttle as one tenant; `None` for an
    /// API whose replicas cannot share it.
    pub fleet: Option<FleetPolicy>,
}

#[cfg(feature = "bake")]
/// The tables and the log writer are the generated crate's statics; `fresh_after` is written with its suffix (`500u16`), as generated crates have it.
impl Bake for Policy {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            Policy {
                api,
                headers,
                ids,
                reserved_floor,
                limits,
                routes = part_or(n, Part::Routes, || endpoints(routes, n)),
                pool_idle,
                pool_idle_floor,
                keep_alive_margin,
                fresh_after = quote!(&[#(#fresh_after),*]),
                log,
                log_lines = n.log_lines(),
                metrics,
                timeouts = part_or(n, Part::Timeouts, || timeouts.bake(n)),
                deadline,
                retries = part_or(n, Part::Retries, || retries.bake(n)),
                breaker,
                throttle,
                taxonomy,
                detail_sets,
                streams,
                buffering,
                fallbacks_sustained,
                states,
                messages,
                warm_up,
                features,
                alerts,
                replay,
                fleet,
            }
        )
    }
}

/// How several replicas of one client keep the throttle's promises as one
/// tenant, through a shared store (Redis).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetPolicy {
    /// The spec asks for the shared backend: a client without a store URL
    /// is refused. `false`: shared only when a URL is configured.
    pub shared: bool,
    /// The environment variable the store URL is read from.
    pub url_env: &'static str,
    /// Every call to the store ends within this, answered or not.
    pub deadline: Duration,
    /// Failed store calls in a row that open the store's breaker...
    pub breaker_failures: u32,
    /// ...the first and the last at least this far apart: a stall shorter
    /// than this (a loaded machine, a slow fork) is not an outage.
    pub breaker_over: Duration,
    /// How long the store's breaker stays open before one call tries again.
    pub breaker_retry: Duration,
    /// How long an in-flight slot (a lease) lives without renewal.
    pub lease: Duration,
    /// How often a replica renews its leases and says it is live.
    pub heartbeat: Duration,
    /// Percent kept below `limit ÷ live replicas` while degraded.
    pub margin_percent: u32,
    /// What a replica does while the store is away.
    pub degraded: Degraded,
    /// Indices of the budgets each replica keeps on its own.
    pub per_replica: &'static [BudgetIx],
    pub metrics: FleetMetricNames,
    /// Raised when a replica goes degraded.
    pub alert: &'static str,
}

#[cfg(feature = "bake")]
impl Bake for FleetPolicy {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            FleetPolicy {
                shared,
                url_env,
                deadline,
                breaker_failures,
                breaker_over,
                breaker_retry,
                lease,
                heartbeat,
                margin_percent,
                degraded,
                per_replica,
                metrics,
                alert,
            }
        )
    }
}

/// What a replica does while the shared store is unreachable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Degraded {
    /// Go on at this replica's share of the local budgets.
    Open,
    /// Refuse every call until the store is back.
    Closed,
}

#[cfg(feature = "bake")]
bake_unit_enum!(Degraded { Open, Closed });

/// What the fleet's metrics are called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetMetricNames {
    /// Histogram of admission time, by backend.
    pub admission: &'static str,
    /// Counter of admission decisions, by backend and outcome.
    pub decisions: &'static str,
    /// Gauge: 1 while degraded.
    pub degraded: &'static str,
    /// Gauge: this replica's share of the fleet's limits (1 when shared).
    pub share: &'static str,
}

#[cfg(feature = "bake")]
impl Bake for FleetMetricNames {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            FleetMetricNames {
                admission,
                decisions,
                degraded,
                share,
            }
        )
    }
}

/// How queued writes are replayed (GRAG §5.3): the numbers a job queue reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayPolicy {
    /// The throttle budget replays run in; its `max_in_flight` is how many
    /// jobs a worker runs at once.
    pub budget: BudgetIx,
    /// How long a claimed job stays its worker's without a checkpoint;
    /// after it, another worker (a replica) takes the job over.
    pub lease: Duration,
    /// How long a job interrupted by an outage waits before its replay,
    /// unless the platform named a wait (`Retry-After`).
    pub pause: Duration,
    /// Most items of one batch after a 413 split it.
    pub split: usize,
    /// The job kinds: the `kind` label of the depth gauge.
    pub kinds: &'static [&'static str],
    /// Tries of a store write that meets "database is locked", in all.
    pub lock_attempts: u32,
    /// The delay before try n+1 is `lock_step` × n.
    pub lock_step: Duration,
    /// Gauge of jobs not done, by kind.
    pub depth_metric: &'static str,
    /// Counter of jobs that ended failed (without `_total`).
    pub failures_metric: &'static str,
    /// Raised when a job ends failed.
    pub failure_alert: &'static str,
}

#[cfg(feature = "bake")]
impl Bake for ReplayPolicy {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            ReplayPolicy {
                budget,
                lease,
                pause,
                split,
                kinds,
                lock_attempts,
                lock_step,
                depth_metric,
                failures_metric,
                failure_alert,
            }
        )
    }
}

/// Names of the Prometheus metrics (counters without their `_total`). A
/// metric of a section the API does not have (no breaker, no streams) is
/// `None` and not exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricNames {
    /// Calls by service, final error class and whether they were retried.
    pub requests: &'static str,
    /// Call duration, retries included.
    pub duration: &'static str,
    pub circuit_state: Option<&'static str>,
    pub circuit_open_seconds: Option<&'static str>,
    pub sse_fallback: Option<&'static str>,
    /// Streams a proxy held back and delivered in one burst (§6.4).
    pub sse_buffered: Option<&'static str>,
    /// Alerts the client raised, by name (`{alert}`): what the generated
    /// Prometheus rules read where the client's own context decides.
    pub alerts: &'static str,
    /// Every 429 the client saw, by whether it carried `Retry-After`
    /// (`{retry_after}`: `present` or `absent`).
    pub rate_limited: &'static str,
}

#[cfg(feature = "bake")]
impl Bake for MetricNames {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            MetricNames {
                requests,
                duration,
                circuit_state,
                circuit_open_seconds,
                sse_fallback,
                sse_buffered,
                alerts,
                rate_limited,
            }
        )
    }
}

/// Bounds on what a server may send, in bytes. The largest 2xx body is per
/// route ([`Endpoint::max_response`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of a non-2xx body read for its `detail`; the rest is never read.
    pub error_body: usize,
    /// Longest `detail` an error keeps (cut on a char boundary, marked as cut).
    pub detail: usize,
    /// Longest SSE line.
    pub sse_line: usize,
    /// Most data one SSE event may gather before its blank line.
    pub sse_event: usize,
}

#[cfg(feature = "bake")]
impl Bake for Limits {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            Limits {
                error_body,
                detail,
                sse_line,
                sse_event,
            }
        )
    }
}

/// Alerts the runtime raises on its own.
#[derive(Debug, Clone)]
pub struct AlertNames {
    /// A call failed after its retry class was used up.
    pub retry_exhausted: &'static str,
    /// `None`: raised for every exhausted call. `Some`: only when exhaustion
    /// is elevated, at least this many within this long (the Core policy:
    /// "alert on elevated retry-exhaustion rates").
    pub retry_exhausted_rate: Option<AlertRate>,
    /// Every alert of the spec (degradation.yaml `alerts`) with its severity:
    /// what a sink routes on.
    pub severities: &'static [AlertSeverity],
}

#[cfg(feature = "bake")]
impl Bake for AlertNames {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            AlertNames {
                retry_exhausted,
                retry_exhausted_rate,
                severities,
            }
        )
    }
}

/// An alert's severity (degradation.yaml `alerts.<name>.severity`, one of its
/// `severities`: `page`, `ops`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlertSeverity {
    pub alert: &'static str,
    pub severity: &'static str,
}

#[cfg(feature = "bake")]
impl Bake for AlertSeverity {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(self, n, AlertSeverity { alert, severity })
    }
}

/// "Elevated": at least `at_least` events within a rolling `within`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlertRate {
    pub at_least: u32,
    pub within: Duration,
}

#[cfg(feature = "bake")]
impl Bake for AlertRate {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(self, n, AlertRate { at_least, within })
    }
}

/// One warm-up call of §7.
#[derive(Debug, Clone)]
pub struct WarmUpCall {
    pub endpoint: &'static Endpoint,
    pub path: &'static [&'static str],
    /// JSON text.
    pub body: Option<&'static str>,
    /// A timeout class instead of the route's own (§7.3: `-m 150` for the pair).
    pub timeout: Option<TimeoutIx>,
    /// The pipeline header's value, on a route that carries one: the warm-up's
    /// own, so its cost is booked apart from every run's.
    pub pipeline_id: Option<&'static str>,
}

#[cfg(feature = "bake")]
impl Bake for WarmUpCall {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            WarmUpCall {
                endpoint = n.endpoint(endpoint),
                path,
                body,
                timeout,
                pipeline_id,
            }
        )
    }
}

/// A UI feature and the routes it depends on.
#[derive(Debug, Clone)]
pub struct FeaturePolicy {
    pub name: &'static str,
    pub routes: &'static [&'static Endpoint],
}

#[cfg(feature = "bake")]
impl Bake for FeaturePolicy {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            FeaturePolicy {
                name,
                routes = endpoints(routes, n),
            }
        )
    }
}

/// Names of the headers the pipeline stamps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderNames {
    pub authorization: &'static str,
    /// The scheme the key is sent under: `<scheme> <key>` (`Bearer`).
    pub auth_scheme: &'static str,
    pub tenant: &'static str,
    /// `None`: the API has no workspace scope.
    pub workspace: Option<&'static str>,
    /// Sent fresh on every request; the answer's echo of it is logged.
    pub request_id: &'static str,
    /// The answer header with the server's wait (`Retry-After`).
    pub retry_after: &'static str,
    /// `None`: no route carries a pipeline id.
    pub pipeline: Option<&'static str>,
}

#[cfg(feature = "bake")]
impl Bake for HeaderNames {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            HeaderNames {
                authorization,
                auth_scheme,
                tenant,
                workspace,
                request_id,
                retry_after,
                pipeline,
            }
        )
    }
}

/// What an ID must look like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdRules {
    /// The pattern the IDs the client chooses follow (spec `ids.pattern`).
    pub pattern: IdPattern<'static>,
    /// Tenants refused before a byte is sent (the platform's own tenants).
    pub reserved_tenants: &'static [&'static str],
    /// ID types the platform mints: checked only to be safe in a path, not
    /// against [`pattern`](Self::pattern).
    pub opaque: &'static [&'static str],
    /// Longest opaque ID, in bytes.
    pub opaque_max_len: usize,
}

#[cfg(feature = "bake")]
impl Bake for IdRules {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            IdRules {
                pattern,
                reserved_tenants,
                opaque,
                opaque_max_len,
            }
        )
    }
}

/// An ID pattern `^[first][rest]{min,max}$`, lowered by the generator into
/// byte ranges so that checking an ID needs no regex engine: one pass over
/// its bytes, each looked up in a handful of ranges.
///
/// The classes hold ASCII only, so a valid ID is as many bytes as characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdPattern<'a> {
    /// The pattern as the spec wrote it, quoted by [`InvalidId`](crate::InvalidId).
    pub text: &'a str,
    /// The bytes the first character may be: inclusive ranges.
    pub first: &'a [(u8, u8)],
    /// The bytes every later character may be: inclusive ranges.
    pub rest: &'a [(u8, u8)],
    /// Shortest and longest ID, in bytes (the first character included).
    pub min_len: usize,
    pub max_len: usize,
}

#[cfg(feature = "bake")]
/// The classes as byte literals: `(b'a', b'z')`.
impl Bake for IdPattern<'_> {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            IdPattern {
                text,
                first = byte_ranges(first),
                rest = byte_ranges(rest),
                min_len,
                max_len,
            }
        )
    }
}

impl IdPattern<'_> {
    /// Whether `value` matches the pattern, its length included.
    pub fn matches(&self, value: &str) -> bool {
        let bytes = value.as_bytes();
        let in_class = |class: &[(u8, u8)], b: u8| class.iter().any(|&(lo, hi)| lo <= b && b <= hi);
        match bytes.split_first() {
            Some((&first, rest)) => {
                (self.min_len..=self.max_len).contains(&bytes.len())
                    && in_class(self.first, first)
                    && rest.iter().all(|&b| in_class(self.rest, b))
            }
            None => false,
        }
    }
}

/// Per-attempt time budget of a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeoutClass {
    pub name: &'static str,
    pub per_attempt: Duration,
    /// Longer budget while the origin is deploy-suspected (cold starts).
    pub deploy_suspected: Option<Duration>,
}

#[cfg(feature = "bake")]
impl Bake for TimeoutClass {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            TimeoutClass {
                name,
                per_attempt,
                deploy_suspected,
            }
        )
    }
}

impl TimeoutClass {
    /// The budget of one attempt, given whether a deploy is suspected.
    pub fn budget(&self, deploy_suspected: bool) -> Duration {
        match (deploy_suspected, self.deploy_suspected) {
            (true, Some(longer)) => longer,
            _ => self.per_attempt,
        }
    }
}

/// A named retry class (R0–R5 for GRAG).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryClass {
    pub name: &'static str,
    pub schedule: RetrySchedule,
    /// Set when the client's configuration may change the attempts and the
    /// step of this (linear) class: the range it accepts.
    pub configurable: Option<RetryBounds>,
}

#[cfg(feature = "bake")]
impl Bake for RetryClass {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            RetryClass {
                name,
                schedule,
                configurable,
            }
        )
    }
}

/// What a configured linear retry may ask for: fewer attempts than
/// `min_attempts`, more than `max_attempts` or a shorter step is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryBounds {
    pub min_attempts: u32,
    pub max_attempts: u32,
    pub min_step: Duration,
}

#[cfg(feature = "bake")]
impl Bake for RetryBounds {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            RetryBounds {
                min_attempts,
                max_attempts,
                min_step,
            }
        )
    }
}

/// How a retry class spaces its attempts. `attempts` counts the first one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetrySchedule {
    /// Never retried.
    Never,
    /// Exponential backoff with full jitter: a random wait in
    /// `[0, min(cap, base * factor^(n-1))]` before retry `n`.
    Exponential {
        attempts: u32,
        base: Duration,
        factor: u32,
        cap: Duration,
    },
    /// Extra attempts only for GET while the origin is deploy-suspected.
    DeployWindow { attempts: u32 },
    /// Wait what `Retry-After` says (seconds or HTTP date), `floor` when the
    /// header is absent, plus a random extra wait up to `jitter`.
    RetryAfter {
        attempts: u32,
        floor: Duration,
        jitter: Duration,
    },
    /// Retried immediately, `attempts - 1` times.
    Once { attempts: u32 },
    /// A wait growing linearly, without jitter: `step * n` before retry `n`
    /// (the Core client's `retry_backoff_seconds * attempt`).
    Linear { attempts: u32, step: Duration },
}

#[cfg(feature = "bake")]
impl Bake for RetrySchedule {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        match self {
            RetrySchedule::Never => quote!(RetrySchedule::Never),
            RetrySchedule::Exponential {
                attempts,
                base,
                factor,
                cap,
            } => bake_fields!(
                n,
                RetrySchedule::Exponential {
                    attempts,
                    base,
                    factor,
                    cap
                }
            ),
            RetrySchedule::DeployWindow { attempts } => {
                bake_fields!(n, RetrySchedule::DeployWindow { attempts })
            }
            RetrySchedule::RetryAfter {
                attempts,
                floor,
                jitter,
            } => bake_fields!(
                n,
                RetrySchedule::RetryAfter {
                    attempts,
                    floor,
                    jitter
                }
            ),
            RetrySchedule::Once { attempts } => bake_fields!(n, RetrySchedule::Once { attempts }),
            RetrySchedule::Linear { attempts, step } => {
                bake_fields!(n, RetrySchedule::Linear { attempts, step })
            }
        }
    }
}

impl RetrySchedule {
    /// Attempts in all, the first one included.
    pub fn attempts(&self) -> u32 {
        match *self {
            RetrySchedule::Never => 1,
            RetrySchedule::Exponential { attempts, .. }
            | RetrySchedule::DeployWindow { attempts }
            | RetrySchedule::RetryAfter { attempts, .. }
            | RetrySchedule::Once { attempts }
            | RetrySchedule::Linear { attempts, .. } => attempts,
        }
    }
}

/// The origin circuit breaker.
#[derive(Debug, Clone)]
pub struct BreakerPolicy {
    /// Failures that open the breaker within `window`.
    pub threshold: u32,
    pub window: Duration,
    /// Count failures of distinct endpoints only.
    pub distinct_endpoints: bool,
    /// The public liveness route the open breaker probes.
    pub probe: &'static Endpoint,
    /// The authenticated read sent alone while the breaker is half-open.
    pub canary: &'static Endpoint,
    pub probe_interval: Duration,
    pub probe_timeout: Duration,
    pub healthy_probes: u32,
    pub canary_timeout: Duration,
    /// How long the origin stays deploy-suspected after a close.
    pub deploy_suspected: Duration,
    /// Alert when open longer than this.
    pub alert_after: Duration,
    /// The alert raised then.
    pub open_alert: &'static str,
}

impl BreakerPolicy {
    /// A breaker of ordinary values (3 failures of distinct endpoints in
    /// 30 s; probes every 5 s, two healthy ones to half-open) probing
    /// [`HEALTH`](crate::testing::HEALTH), which is its canary too. Tests
    /// start from it and change what they need with `..`, so a new field
    /// gets its value here, beside its declaration. Its durations are whole
    /// seconds: the scaling test reads them so. Behind the `testing` feature.
    #[cfg(any(test, feature = "testing"))]
    pub const fn example() -> BreakerPolicy {
        use crate::testing::HEALTH;
        BreakerPolicy {
            threshold: 3,
            window: Duration::from_secs(30),
            distinct_endpoints: true,
            probe: &HEALTH,
            canary: &HEALTH,
            probe_interval: Duration::from_secs(5),
            probe_timeout: Duration::from_secs(3),
            healthy_probes: 2,
            canary_timeout: Duration::from_secs(5),
            deploy_suspected: Duration::from_secs(120),
            alert_after: Duration::from_secs(300),
            open_alert: "breaker_open_long",
        }
    }

    /// Every duration of the breaker, for a scaled copy of the policy: a
    /// duration added to the breaker is named here, next to its field
    /// (`breaker_durations_are_all_scaled` fails for one left out).
    pub(crate) fn durations_mut(&mut self) -> [&mut Duration; 6] {
        [
            &mut self.window,
            &mut self.probe_interval,
            &mut self.probe_timeout,
            &mut self.canary_timeout,
            &mut self.deploy_suspected,
            &mut self.alert_after,
        ]
    }
}

#[cfg(feature = "bake")]
impl Bake for BreakerPolicy {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            BreakerPolicy {
                threshold,
                window,
                distinct_endpoints,
                probe = part_or(n, Part::Probe, || n.endpoint(probe)),
                canary = part_or(n, Part::Canary, || n.endpoint(canary)),
                probe_interval,
                probe_timeout,
                healthy_probes,
                canary_timeout,
                deploy_suspected,
                alert_after,
                open_alert,
            }
        )
    }
}

/// Client-side throttling.
#[derive(Debug, Clone)]
pub struct ThrottlePolicy {
    pub max_in_flight: u32,
    pub per_second: u32,
    /// The period `per_second` counts in: one second (compressed only by
    /// [`Policy::scaled`], for tests).
    pub rate_period: Duration,
    /// The rolling window budgets' `per_minute` counts in: one minute.
    pub budget_period: Duration,
    pub budgets: &'static [BudgetPolicy],
    pub polling: PollingPolicy,
}

#[cfg(feature = "bake")]
impl Bake for ThrottlePolicy {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            ThrottlePolicy {
                max_in_flight,
                per_second,
                rate_period,
                budget_period,
                budgets = part_or(n, Part::Budgets, || budgets.bake(n)),
                polling,
            }
        )
    }
}

/// A named budget a route draws from on top of the global limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetPolicy {
    pub name: &'static str,
    pub max_in_flight: Option<u32>,
    /// Requests in any rolling 60 s window.
    pub per_minute: Option<u32>,
}

#[cfg(feature = "bake")]
impl Bake for BudgetPolicy {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            BudgetPolicy {
                name,
                max_in_flight,
                per_minute,
            }
        )
    }
}

/// Polling cadence of status routes.
#[derive(Debug, Clone)]
pub struct PollingPolicy {
    pub interval: Duration,
    pub floor: Duration,
    /// Interval multiplier while a 429 is hot.
    pub hot_factor: u32,
}

#[cfg(feature = "bake")]
impl Bake for PollingPolicy {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            PollingPolicy {
                interval,
                floor,
                hot_factor,
            }
        )
    }
}

/// Which kind of outcome a taxonomy row matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutcomeKind {
    /// Refused, reset, TLS failure or per-attempt timeout.
    Connection,
    /// An HTTP status was received.
    Status,
    /// A 2xx body that does not decode.
    Decode,
    /// The overall deadline ended the call.
    Deadline,
    /// The breaker refused the call client-side.
    CircuitOpen,
    /// A scope or ID was refused client-side.
    InvalidScope,
    /// A request that could not be built (nothing was sent).
    InvalidRequest,
    /// A 2xx body larger than the route's cap (reading stopped there).
    TooLarge,
    StreamError,
    StreamTimeout,
    StreamStalled,
    /// A job followed on a stream (or its status route) ended failed or
    /// cancelled.
    JobFailed,
}

#[cfg(feature = "bake")]
bake_unit_enum!(OutcomeKind {
    Connection,
    Status,
    Decode,
    Deadline,
    CircuitOpen,
    InvalidScope,
    InvalidRequest,
    TooLarge,
    StreamError,
    StreamTimeout,
    StreamStalled,
    JobFailed
});

impl OutcomeKind {
    /// Every kind, in the order the spec documents them.
    pub const ALL: [OutcomeKind; 12] = [
        OutcomeKind::Connection,
        OutcomeKind::Status,
        OutcomeKind::Decode,
        OutcomeKind::Deadline,
        OutcomeKind::CircuitOpen,
        OutcomeKind::InvalidScope,
        OutcomeKind::InvalidRequest,
        OutcomeKind::TooLarge,
        OutcomeKind::StreamError,
        OutcomeKind::StreamTimeout,
        OutcomeKind::StreamStalled,
        OutcomeKind::JobFailed,
    ];

    /// The spec's spelling (`circuit_open`).
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeKind::Connection => "connection",
            OutcomeKind::Status => "status",
            OutcomeKind::Decode => "decode",
            OutcomeKind::Deadline => "deadline",
            OutcomeKind::CircuitOpen => "circuit_open",
            OutcomeKind::InvalidScope => "invalid_scope",
            OutcomeKind::InvalidRequest => "invalid_request",
            OutcomeKind::TooLarge => "too_large",
            OutcomeKind::StreamError => "stream_error",
            OutcomeKind::StreamTimeout => "stream_timeout",
            OutcomeKind::StreamStalled => "stream_stalled",
            OutcomeKind::JobFailed => "job_failed",
        }
    }
}

/// What a 409 means on a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflict {
    /// A plain error.
    Error,
    /// The thing already exists: success (idempotent create).
    Success,
    /// Still being processed: poll again.
    Poll,
}

#[cfg(feature = "bake")]
bake_unit_enum!(Conflict {
    Error,
    Success,
    Poll
});

/// Conditions of a taxonomy row; `None` matches anything.
#[derive(Debug, Clone)]
pub struct RowMatch {
    pub outcome: OutcomeKind,
    /// Inclusive status range (a single status is `(s, s)`).
    pub status: Option<(u16, u16)>,
    /// The detail set the answer's `detail` must match.
    pub detail: Option<DetailIx>,
    pub retry_after: Option<bool>,
    pub conflict: Option<Conflict>,
    /// `Some(true)`: only routes that present no key (an unauthenticated lane).
    pub keyless: Option<bool>,
    /// Only these routes (the policy's own descriptors, compared by address).
    pub routes: Option<&'static [&'static Endpoint]>,
}

#[cfg(feature = "bake")]
impl Bake for RowMatch {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            RowMatch {
                outcome,
                status,
                detail,
                retry_after,
                conflict,
                keyless,
                routes = routes.map_or(quote!(None), |list| { let list = endpoints(list, n); quote!(Some(#list)) }),
            }
        )
    }
}

/// One row of the error taxonomy.
#[derive(Debug, Clone)]
pub struct TaxonomyRow {
    /// This row's own position in [`Policy::taxonomy`]: an error keeps it,
    /// and a generated crate reads its class from it.
    pub index: RowIx,
    pub row: &'static str,
    pub matches: RowMatch,
    /// Error class (snake_case), for logs and metrics.
    pub class: &'static str,
    /// The row turns the outcome into a success (the spec's `success` class).
    pub success: bool,
    pub retry: Option<RetryIx>,
    pub feeds_breaker: bool,
    /// A call that is not idempotent and ends here after its request may
    /// have reached the server has an unknown outcome: the server may have
    /// applied it (a 500 raised after the write, a gateway's 502/504 whose
    /// upstream got the request). Never re-sent blindly; read the state first.
    pub outcome_unknown: bool,
    pub alert: Option<&'static str>,
    /// Raise `alert` only outside the deploy-suspected window.
    pub alert_outside_deploy: bool,
    /// The feature state the route's features enter when this row ends a call.
    pub feature_state: Option<&'static str>,
    /// A stable answer: remembered per route this long, failing fast meanwhile.
    pub remember_for: Option<Duration>,
    /// The row that applies when the retry brings back the same detail.
    pub escalate_to: Option<RowIx>,
    /// What this row means for a queued write: replayed, or failed.
    pub replay: Replay,
    pub action: &'static str,
    /// The German message of `class`, resolved by the generator (the same as
    /// [`Policy::message`], without a lookup on the error path).
    pub message: Option<&'static str>,
    /// The German message instead of `message` when the outcome is unknown
    /// (`outcome_unknown`): check the current state before trying again.
    pub unknown_message: Option<&'static str>,
}

#[cfg(feature = "bake")]
impl Bake for TaxonomyRow {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            TaxonomyRow {
                index,
                row,
                matches,
                class,
                success,
                retry,
                feeds_breaker,
                outcome_unknown,
                alert,
                alert_outside_deploy,
                feature_state,
                remember_for,
                escalate_to,
                replay,
                action,
                message,
                unknown_message,
            }
        )
    }
}

impl TaxonomyRow {
    /// Whether this row turns the outcome into a success.
    pub fn is_success(&self) -> bool {
        self.success
    }
}

/// What a failure means for a queued write (a job of the replay queue,
/// GRAG §5.3): whether the job waits and is sent again, or fails for a
/// person to decide. The taxonomy row says it, so the queue keeps no status
/// list of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Replay {
    /// The platform, or the way to it, is down: the job is replayed once
    /// the breaker closes, and a deploy is suspected meanwhile.
    Outage,
    /// Not now, but not an outage either (the platform asked for time with
    /// `Retry-After`, a feature is switched off): the job is replayed after
    /// the platform's wait, or the queue's pause.
    Later,
    /// Transient while a deploy is suspected (containers coming up behind
    /// the proxy): replayed then, a verdict on the job otherwise.
    Deploy,
    /// A verdict on the write: the job fails and keeps its error.
    Never,
}

#[cfg(feature = "bake")]
bake_unit_enum!(Replay {
    Outage,
    Later,
    Deploy,
    Never
});

impl Replay {
    /// Every value, in the order the spec documents them.
    pub const ALL: [Replay; 4] = [Replay::Outage, Replay::Later, Replay::Deploy, Replay::Never];

    /// The spec's spelling (`outage`).
    pub fn as_str(self) -> &'static str {
        match self {
            Replay::Outage => "outage",
            Replay::Later => "later",
            Replay::Deploy => "deploy",
            Replay::Never => "never",
        }
    }

    /// Whether a job that failed on this row is replayed, given whether a
    /// deploy is suspected.
    pub fn replays(self, deploy_suspected: bool) -> bool {
        match self {
            Replay::Outage | Replay::Later => true,
            Replay::Deploy => deploy_suspected,
            Replay::Never => false,
        }
    }
}

/// Named substrings of the `detail` text (matched case-insensitively).
#[derive(Debug, Clone)]
pub struct DetailSet {
    pub name: &'static str,
    pub contains: &'static [&'static str],
}

#[cfg(feature = "bake")]
impl Bake for DetailSet {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(self, n, DetailSet { name, contains })
    }
}

impl DetailSet {
    /// Whether `detail` contains one of the set's substrings, ignoring ASCII
    /// case. Allocation-free: it runs on every classified error answer.
    pub fn matches(&self, detail: &str) -> bool {
        let haystack = detail.as_bytes();
        self.contains.iter().any(|needle| {
            let needle = needle.as_bytes();
            needle.is_empty()
                || haystack
                    .windows(needle.len())
                    .any(|window| window.eq_ignore_ascii_case(needle))
        })
    }
}

/// An SSE contract.
#[derive(Debug, Clone)]
pub struct StreamPolicy {
    pub name: &'static str,
    /// Silence (no byte at all) after which the stream counts as stalled.
    pub watchdog: Duration,
    pub keepalive: Option<Duration>,
    pub ceiling: Option<Duration>,
    pub resync_after_reconnect: bool,
    pub resend: bool,
    pub first_event: Option<&'static str>,
    pub terminal_events: &'static [&'static str],
    /// A clean close before a terminal event is a drop, not an end.
    pub ends_with_terminal: bool,
    /// The `event:` name that fails the stream (the `stream_error` outcome).
    pub error_event: &'static str,
    /// The `event:` name of the server's ceiling (the `stream_timeout` outcome).
    pub timeout_event: &'static str,
    /// The status route that stands in for the stream when it fails (a job's
    /// progress); `None`: a failed stream is the caller's error.
    pub fallback: Option<StreamFallback>,
    /// How the stream reports its stages (a chat turn's trace), `None` when
    /// it does not.
    pub stages: Option<StagePolicy>,
    /// What the UI shows when the stream ends without its answer (a chat
    /// turn): the user's message is kept, a resend is offered.
    pub lost_copy: Option<&'static str>,
}

#[cfg(feature = "bake")]
impl Bake for StreamPolicy {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            StreamPolicy {
                name,
                watchdog,
                keepalive,
                ceiling,
                resync_after_reconnect,
                resend,
                ends_with_terminal,
                error_event,
                timeout_event,
                first_event,
                terminal_events,
                fallback,
                stages,
                lost_copy,
            }
        )
    }
}

/// A proxy that buffers event streams (§6.4) holds every byte back and
/// delivers the stream in one burst when it ends. A stream whose events
/// (at least `min_events`) all arrived within `burst` of each other, after
/// `silent_for` or more of nothing since it opened, was buffered; after
/// `confirm_after` such streams buffering is confirmed: the alert is raised
/// and jobs are followed by polling alone from then on.
#[derive(Debug, Clone)]
pub struct BufferingRule {
    pub min_events: u32,
    pub burst: Duration,
    pub silent_for: Duration,
    pub confirm_after: u32,
    pub alert: &'static str,
}

#[cfg(feature = "bake")]
/// The counts with their suffix (`3u32`), as generated crates have them.
impl Bake for BufferingRule {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            BufferingRule {
                min_events = quote!(#min_events),
                burst,
                silent_for,
                confirm_after = quote!(#confirm_after),
                alert,
            }
        )
    }
}

/// A stream's stage trace: which events report stages, and which stages fail
/// closed. Every other failed stage fails open: the stream goes on, the
/// result is marked degraded and so is the feature.
#[derive(Debug, Clone)]
pub struct StagePolicy {
    /// The event that reports a stage (`trace`).
    pub event: &'static str,
    pub stage_field: &'static str,
    pub status_field: &'static str,
    /// Status values that mean the stage failed.
    pub failed: &'static [&'static str],
    /// Stages whose failure ends the stream.
    pub fail_closed: &'static [&'static str],
    /// The field with the stage's error text, if any.
    pub detail_field: Option<&'static str>,
    /// The feature shown degraded while a stage fails open.
    pub feature: &'static str,
}

#[cfg(feature = "bake")]
impl Bake for StagePolicy {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            StagePolicy {
                event,
                stage_field,
                status_field,
                failed,
                fail_closed,
                detail_field,
                feature,
            }
        )
    }
}

/// How a stream falls back to polling its status route, and how that route's
/// answer reads.
#[derive(Debug, Clone)]
pub struct StreamFallback {
    /// The status route; its path parameters are the stream route's.
    pub route: &'static Endpoint,
    /// The answer's field holding the job's state.
    pub status_field: &'static str,
    /// States (and terminal event names) that end the job with its result.
    pub completed: &'static [&'static str],
    /// States (and terminal event names) that end the job with its error.
    pub failed: &'static [&'static str],
    /// The field (of the answer, or of a terminal event's data) with the
    /// job's error text.
    pub error_field: Option<&'static str>,
    /// Polls of a running job after a fallback before the stream is opened
    /// again (0: never again).
    pub reopen_after: u32,
}

#[cfg(feature = "bake")]
/// `reopen_after` with its suffix (`6u32`), as generated crates have it.
impl Bake for StreamFallback {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            StreamFallback {
                route = n.endpoint(route),
                status_field,
                completed,
                failed,
                error_field,
                reopen_after = quote!(#reopen_after),
            }
        )
    }
}

/// A feature state with its German UI copy and what triggers it.
#[derive(Debug, Clone)]
pub struct FeatureStateCopy {
    pub state: &'static str,
    pub copy: Option<&'static str>,
    pub when: StateTrigger,
}

#[cfg(feature = "bake")]
impl Bake for FeatureStateCopy {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(self, n, FeatureStateCopy { state, copy, when })
    }
}

/// What puts a feature in a state. Checked in this order: `Row` (the worst
/// news, e.g. dark or paused), `BreakerOpen`, `DeploySuspected`, `StageFailed`,
/// and `Otherwise` when nothing else holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StateTrigger {
    Otherwise,
    Row,
    BreakerOpen,
    DeploySuspected,
    StageFailed,
}

#[cfg(feature = "bake")]
bake_unit_enum!(StateTrigger {
    Otherwise,
    Row,
    BreakerOpen,
    DeploySuspected,
    StageFailed
});

/// German message shown for a final error of a class.
#[derive(Debug, Clone)]
pub struct ClassMessage {
    pub class: &'static str,
    pub copy: &'static str,
}

#[cfg(feature = "bake")]
impl Bake for ClassMessage {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(self, n, ClassMessage { class, copy })
    }
}

impl Policy {
    /// Whether every typed index of this policy's routes, rows and warm-up
    /// calls is inside its table, and every row sits at its own index: a
    /// generated policy always is, a hand-made copy may not be. A client
    /// refuses a policy that is not, once, so no call checks it again.
    pub fn check_indices(&self) -> Result<(), &'static str> {
        let timeouts = self.timeouts.len();
        let budgets = self.throttle.budgets.len();
        let routes = self.routes.iter().enumerate().all(|(i, e)| {
            e.route.get() == i
                && e.timeout.get() < timeouts
                && e.retry.get() < self.retries.len()
                && e.budget.get() < budgets
                && e.stream.is_none_or(|s| s.get() < self.streams.len())
        });
        if !routes {
            return Err(
                "a route is not at its own position, or its timeout, retry, budget or stream index is outside its table",
            );
        }
        let rows = self.taxonomy.iter().enumerate().all(|(i, r)| {
            r.index.get() == i
                && r.retry.is_none_or(|x| x.get() < self.retries.len())
                && r.escalate_to.is_none_or(|x| x.get() < self.taxonomy.len())
                && r.matches
                    .detail
                    .is_none_or(|x| x.get() < self.detail_sets.len())
        });
        if !rows {
            return Err(
                "a taxonomy row's index, retry, escalation or detail set is outside its table",
            );
        }
        let warm_up = self
            .warm_up
            .iter()
            .all(|w| w.timeout.is_none_or(|t| t.get() < timeouts));
        let replay = self
            .replay
            .as_ref()
            .is_none_or(|r| r.budget.get() < budgets);
        if !warm_up || !replay {
            return Err("a warm-up timeout class or the replay budget is outside its table");
        }
        Ok(())
    }

    /// The first taxonomy row of `kind`: how an outcome with no status or
    /// detail to match is classified.
    pub fn row_of(&self, kind: OutcomeKind) -> Option<&'static TaxonomyRow> {
        self.taxonomy.iter().find(|r| r.matches.outcome == kind)
    }

    /// The German message for an error class, if the spec has one.
    pub fn message(&self, class: &str) -> Option<&'static str> {
        self.messages
            .iter()
            .find(|m| m.class == class)
            .map(|m| m.copy)
    }

    /// The German copy of a feature state, if the spec has one.
    pub fn state_copy(&self, state: &str) -> Option<&'static str> {
        self.states
            .iter()
            .find(|s| s.state == state)
            .and_then(|s| s.copy)
    }

    /// The severity of the alert `name` (`page`, `ops`), if the spec has the alert.
    pub fn severity(&self, name: &str) -> Option<&'static str> {
        self.alerts
            .severities
            .iter()
            .find(|a| a.alert == name)
            .map(|a| a.severity)
    }

    /// A budget by name.
    pub fn budget(&self, name: &str) -> Option<&'static BudgetPolicy> {
        self.throttle.budgets.iter().find(|b| b.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detail_sets_match_substrings_ignoring_case() {
        let dark = DetailSet {
            name: "dark",
            contains: &["feature flag", "disabled"],
        };
        assert!(dark.matches("Rerank is DISABLED on this instance"));
        assert!(dark.matches("blocked by Feature Flag rerank_v2"));
        assert!(!dark.matches("admission control: overloaded"));
        assert!(!dark.matches(""));
        assert!(!dark.matches("disable"), "a prefix of a needle is no match");
    }

    #[test]
    fn timeout_budget_grows_only_where_the_class_says() {
        let search = TimeoutClass {
            name: "search",
            per_attempt: Duration::from_secs(30),
            deploy_suspected: Some(Duration::from_secs(60)),
        };
        assert_eq!(search.budget(false), Duration::from_secs(30));
        assert_eq!(search.budget(true), Duration::from_secs(60));
        let default = TimeoutClass {
            deploy_suspected: None,
            ..search
        };
        assert_eq!(default.budget(true), Duration::from_secs(30));
    }
}
