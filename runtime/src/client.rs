//! The client: one per tenant, shared state behind an `Arc`, cheap clones.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::alerts::{AlertSink, LogAlerts};
use crate::breaker::{Breaker, BreakerGuard, SharedBreaker};
use crate::error::ConfigError;
use crate::fleet::Fleet;
use crate::memory::Memory;
use crate::metrics::Metrics;
use crate::origin::Origin;
use crate::policy::{BudgetIx, Policy, RetryClass, RetrySchedule};
use crate::pool::Pool;
use crate::rate::RateAlarm;
use crate::throttle::Throttle;
use crate::{Id, IdKind};

/// What a client needs besides its policy. The tenant is an [`Id`] of kind
/// tenant: validated, never defaulted.
pub struct ClientConfig {
    pub(crate) base_url: String,
    pub(crate) api_key: String,
    pub(crate) tenant: Id,
    /// `None`: the policy's own log lines ([`LogAlerts`]).
    pub(crate) alerts: Option<Arc<dyn AlertSink>>,
    pub(crate) warm_up: bool,
    pub(crate) retry_attempts: Option<u32>,
    pub(crate) retry_backoff: Option<Duration>,
    pub(crate) pool_idle: Option<Duration>,
    /// The fleet's shared store (Redis), when the replicas share the throttle.
    pub(crate) store_url: Option<String>,
}

impl ClientConfig {
    pub fn new(base_url: impl Into<String>, api_key: impl Into<String>, tenant: Id) -> Self {
        ClientConfig {
            base_url: base_url.into(),
            api_key: api_key.into(),
            tenant,
            alerts: None,
            warm_up: false,
            retry_attempts: None,
            retry_backoff: None,
            pool_idle: None,
            store_url: None,
        }
    }

    /// How long an idle pooled connection is kept (default: the policy's
    /// `pool_idle`): below the keep-alive of a proxy in front that closes
    /// sooner than the platform. Below the policy's `pool_idle_floor` the
    /// client is refused.
    pub fn pool_idle(mut self, idle: Duration) -> Self {
        self.pool_idle = Some(idle);
        self
    }

    /// Share the throttle with the other replicas through the Redis at
    /// `url` (`redis://host:port/db`): the policy's budgets, pauses, dark
    /// features and probe are kept by the whole fleet. Needs the `redis`
    /// feature and a policy with a fleet section; otherwise the client is
    /// refused when it is built.
    pub fn redis_url(mut self, url: impl Into<String>) -> Self {
        self.store_url = Some(url.into()).filter(|u: &String| !u.is_empty());
        self
    }

    /// Attempts in all (the first included) of the policy's configurable
    /// retry classes. Below the class's minimum the client is refused.
    pub fn retry_attempts(mut self, attempts: u32) -> Self {
        self.retry_attempts = Some(attempts);
        self
    }

    /// The step of the configurable linear classes: the wait before retry `n`
    /// is `backoff × n`. Below the class's minimum the client is refused.
    pub fn retry_backoff(mut self, backoff: Duration) -> Self {
        self.retry_backoff = Some(backoff);
        self
    }

    /// Where alerts go (default: a `warn` log event).
    pub fn alerts(mut self, sink: impl AlertSink) -> Self {
        self.alerts = Some(Arc::new(sink));
        self
    }

    /// Fire the policy's warm-up calls once after every breaker close (§7).
    pub fn warm_up(mut self, enabled: bool) -> Self {
        self.warm_up = enabled;
        self
    }
}

/// The runtime side of a generated client.
#[derive(Clone)]
pub struct Client {
    pub(crate) shared: Arc<Shared>,
    pub(crate) pipeline_id: Option<Arc<str>>,
    /// A caller's mode (a bulk backfill): every call also draws from this budget.
    pub(crate) extra_budget: Option<BudgetIx>,
    /// A job queue's client: a wait the server asks for ends the call.
    pub(crate) defer_server_waits: bool,
    /// Where the request ID of every call is noted, if the caller asked.
    pub(crate) refs: Option<crate::RequestRefs>,
}

pub(crate) struct Shared {
    pub(crate) policy: &'static Policy,
    /// The policy's retry classes, with the configured attempts and step.
    pub(crate) retries: Box<[RetryClass]>,
    /// The overall deadline: the policy's, or longer where the configured
    /// retries need more ([`overall_deadline`]).
    pub(crate) deadline: Duration,
    pub(crate) pool: Pool,
    /// The base URL parsed and the header names made, once.
    pub(crate) origin: crate::origin::Origin,
    /// `<scheme> <key>` (`Bearer`), built once and marked sensitive (never in a debug print).
    pub(crate) authorization: reqwest::header::HeaderValue,
    pub(crate) tenant: Id,
    pub(crate) throttle: Throttle,
    /// The fleet stage after the throttle; `None`: this replica alone.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fleet: Option<Fleet>,
    pub(crate) breaker: SharedBreaker,
    /// The open breaker's row and copy, for its refusals.
    pub(crate) circuit_open: crate::pipeline::CircuitOpen,
    pub(crate) memory: Mutex<Memory>,
    pub(crate) metrics: Metrics,
    pub(crate) alerts: Arc<dyn AlertSink>,
    pub(crate) warm_up: bool,
    /// A probe loop is running for the open breaker.
    pub(crate) probing: AtomicBool,
    /// Exhausted calls, when the policy alerts on their rate only.
    pub(crate) exhaustion: Option<Mutex<RateAlarm>>,
    /// A proxy was seen buffering event streams: jobs are followed by
    /// polling alone for the rest of the client's life (§6.4).
    pub(crate) proxy_buffering: AtomicBool,
    /// Streams seen buffered so far.
    pub(crate) buffered_streams: std::sync::atomic::AtomicU32,
    /// Fallbacks to polling, when the policy alerts on their rate.
    pub(crate) fallbacks: Option<Mutex<RateAlarm>>,
}

impl Client {
    /// A client of `policy`, the API's own. Configuration that could never
    /// work (a key no header can carry, a base URL with a query, fragment or
    /// userinfo) is refused here, so it never looks like an outage later.
    pub fn new(policy: &'static Policy, config: ClientConfig) -> Result<Client, ConfigError> {
        // The indices of the routes and rows are checked here, once: no call
        // checks them again.
        policy.check_indices().map_err(ConfigError::Policy)?;
        if config.tenant.kind() != IdKind::Tenant {
            return Err(ConfigError::NotATenant(kind_name(config.tenant.kind())));
        }
        // The spec's reserved tenants are a floor, not an option: a copy of
        // the policy that dropped one is refused, whoever built the client.
        if policy
            .reserved_floor
            .iter()
            .any(|t| !policy.ids.reserved_tenants.contains(t))
        {
            return Err(ConfigError::Override(
                "the reserved tenants (the spec's are the floor of every copy of its policy)",
            ));
        }
        // The tenant may have been parsed under other rules: check this policy's.
        Id::parse(&policy.ids, IdKind::Tenant, config.tenant.as_str())
            .map_err(ConfigError::Tenant)?;
        let authorization = check_api_key(policy.headers.auth_scheme, &config.api_key)?;
        let base = check_base_url(&config.base_url)?;
        let tenant = config.tenant.as_str();
        let origin = Origin::new(base, &policy.headers, tenant, policy.routes)?;
        let retries = configured_retries(policy, config.retry_attempts, config.retry_backoff)?;
        let deadline = overall_deadline(policy, &retries);
        let idle = configured_idle(policy, config.pool_idle)?;
        let pool = Pool::new(idle, policy.fresh_after, policy.keep_alive_margin)
            .map_err(|e| ConfigError::Http(e.to_string()))?;
        let alerts = config
            .alerts
            .unwrap_or_else(|| Arc::new(LogAlerts::new(policy.log_lines)));
        let mut metrics = Metrics::new(
            &policy.metrics,
            policy.routes.len(),
            crate::metrics::Known::of(policy),
        );
        let fleet = fleet(
            policy,
            config.tenant.as_str(),
            config.store_url.as_deref(),
            &mut metrics,
            &alerts,
        )?;
        Ok(Client {
            shared: Arc::new(Shared {
                policy,
                retries,
                deadline,
                pool,
                origin,
                authorization,
                tenant: config.tenant,
                throttle: Throttle::new(&policy.throttle),
                fleet,
                breaker: SharedBreaker::new(Breaker::of(policy.breaker.as_ref())),
                circuit_open: crate::pipeline::CircuitOpen::of(policy),
                memory: Mutex::new(Memory::default()),
                metrics,
                alerts,
                warm_up: config.warm_up,
                probing: AtomicBool::new(false),
                exhaustion: policy
                    .alerts
                    .retry_exhausted_rate
                    .map(|rate| Mutex::new(RateAlarm::new(rate))),
                proxy_buffering: AtomicBool::new(false),
                buffered_streams: std::sync::atomic::AtomicU32::new(0),
                fallbacks: policy
                    .fallbacks_sustained
                    .map(|(rate, _)| Mutex::new(RateAlarm::new(rate))),
            }),
            pipeline_id: None,
            extra_budget: None,
            defer_server_waits: false,
            refs: None,
        })
    }

    /// A client of `policy`, an override of the API's own `spec` policy (other
    /// numbers, compressed time). No override may change what scopes a
    /// request: its header names, its ID rules and reserved tenants, or its
    /// route table.
    pub fn with_override(
        spec: &'static Policy,
        policy: &'static Policy,
        config: ClientConfig,
    ) -> Result<Client, ConfigError> {
        if policy.headers != spec.headers {
            return Err(ConfigError::Override("the scope header names"));
        }
        if policy.ids != spec.ids {
            return Err(ConfigError::Override(
                "the ID rules or the reserved tenants",
            ));
        }
        let same_routes = policy.routes.len() == spec.routes.len()
            && policy
                .routes
                .iter()
                .zip(spec.routes)
                .all(|(a, b)| std::ptr::eq(*a, *b));
        if !same_routes {
            return Err(ConfigError::Override("the route table"));
        }
        Client::new(policy, config)
    }

    /// The same client, stamping the pipeline header on routes that carry it.
    pub fn with_pipeline_id(&self, pipeline_id: &Id) -> Client {
        Client {
            pipeline_id: Some(pipeline_id.as_str().into()),
            ..self.clone()
        }
    }

    /// The same client, noting the request ID of every call that reaches the
    /// platform in `refs` (for `ai_runs.refs`): the typed methods return
    /// what they always return, the IDs go to the handle.
    pub fn noting_requests(&self, refs: &crate::RequestRefs) -> Client {
        Client {
            refs: Some(refs.clone()),
            ..self.clone()
        }
    }

    /// The same client, every call of it also drawing from `budget`: a
    /// caller's mode such as a bulk backfill, on top of each route's own
    /// budget. A budget outside this policy's table (another API's) adds none.
    pub fn within_budget(&self, budget: BudgetIx) -> Client {
        let known = budget.get() < self.shared.policy.throttle.budgets.len();
        Client {
            extra_budget: known.then_some(budget),
            ..self.clone()
        }
    }

    /// The same client, for a job queue: a wait the server asks for
    /// (`Retry-After`, e.g. a 503 under WAL backpressure) ends the call with
    /// [`crate::Error::retry_after`] instead of being slept out inside it, so
    /// the queue re-schedules the job and holds no slot meanwhile.
    pub fn deferring_server_waits(&self) -> Client {
        Client {
            defer_server_waits: true,
            ..self.clone()
        }
    }

    pub fn policy(&self) -> &'static Policy {
        self.shared.policy
    }

    /// The overall deadline of this client's calls: the policy's, or longer
    /// when its configured retries need more.
    pub fn deadline(&self) -> Duration {
        self.shared.deadline
    }

    pub fn tenant(&self) -> &Id {
        &self.shared.tenant
    }

    /// The base URL every request goes to, as parsed (without a trailing
    /// `/`): a route's path appended to it is the request's URL.
    pub fn base_url(&self) -> &str {
        self.shared.origin.base_url()
    }

    pub fn throttle(&self) -> &Throttle {
        &self.shared.throttle
    }

    /// How long idle pooled connections are kept now: the configured (or the
    /// policy's) pool idle, lowered by any shorter `Keep-Alive: timeout=` a
    /// server announced.
    pub fn pool_idle(&self) -> Duration {
        self.shared.pool.idle()
    }

    /// Whether this client shares the throttle with a fleet (a Redis URL was
    /// configured), and if so whether its store is away (degraded).
    pub fn fleet_status(&self) -> Option<FleetStatus> {
        #[cfg(feature = "redis")]
        {
            self.shared.fleet.as_ref().map(|f| FleetStatus {
                degraded: f.degraded(),
                live_replicas: f.live_replicas(),
                leases_held: f.leases_held(),
                slowest_failed_call: f.slowest_failed_call(),
            })
        }
        #[cfg(not(feature = "redis"))]
        {
            None
        }
    }

    /// The origin breaker's state right now.
    pub fn circuit_state(&self) -> crate::breaker::CircuitState {
        self.breaker().state()
    }

    /// Whether the origin is deploy-suspected (a close happened recently).
    pub fn deploy_suspected(&self) -> bool {
        self.breaker().deploy_suspected(tokio::time::Instant::now())
    }

    /// Sends `alert` to this client's sink and counts it in the raised-alerts
    /// metric: a layer on top (the replay queue) raises its alerts where the
    /// client's go. Every alert of the client goes through here; its
    /// severity is the policy's for its name, whatever the caller set.
    pub fn alert(&self, mut alert: crate::alerts::Alert) {
        self.shared.metrics.alert(alert.name);
        if let Some(severity) = self.shared.policy.severity(alert.name) {
            alert.severity = severity;
        }
        self.shared.alerts.alert(alert);
    }

    /// An alert named `name` with its severity from the policy and nothing
    /// else set: `Alert { detail, ..client.alert_of(name) }`.
    pub fn alert_of(&self, name: &'static str) -> crate::alerts::Alert {
        crate::alerts::Alert {
            name,
            severity: self.shared.policy.severity(name).unwrap_or_default(),
            endpoint: None,
            row: None,
            detail: None,
            request_id: None,
        }
    }

    /// Every metric of §10.3 in the Prometheus text format.
    /// Whether jobs are followed by polling alone: a proxy between client
    /// and platform was confirmed buffering event streams.
    pub fn polling_only(&self) -> bool {
        self.shared
            .proxy_buffering
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A stream arrived in one burst at its end: counted; once the policy's
    /// `confirm_after` streams did, buffering is confirmed (alert, and jobs
    /// are polled from then on).
    pub(crate) fn stream_buffered(
        &self,
        stream: &'static str,
        endpoint: &'static crate::Endpoint,
        rule: &crate::policy::BufferingRule,
    ) {
        use std::sync::atomic::Ordering;
        self.shared.metrics.sse_buffered(stream);
        let seen = self.shared.buffered_streams.fetch_add(1, Ordering::Relaxed) + 1;
        if seen >= rule.confirm_after && !self.shared.proxy_buffering.swap(true, Ordering::Relaxed)
        {
            self.alert(crate::alerts::Alert {
                endpoint: Some(endpoint.operation),
                detail: Some(format!(
                    "a proxy buffers event streams: {seen} arrived in one burst at their end or sent no head within the open timeout; jobs are followed by polling from now on"
                )),
                ..self.alert_of(rule.alert)
            });
        }
    }

    /// A stream's opening timed out before its head: counted as a buffered
    /// stream (a live relay sends its head at once).
    pub(crate) fn stream_withheld(&self, stream: &'static str, endpoint: &'static crate::Endpoint) {
        if let Some(rule) = &self.shared.policy.buffering {
            self.stream_buffered(stream, endpoint, rule);
        }
    }

    /// A stream was given up for polling: counted, and alerted once the
    /// policy's rate of fallbacks is reached (once per window while it lasts).
    pub(crate) fn stream_fell_back(&self, stream: &'static str, error: &crate::Error) {
        self.shared.metrics.sse_fallback(stream);
        let (Some(alarm), Some((rate, alert))) = (
            &self.shared.fallbacks,
            self.shared.policy.fallbacks_sustained,
        ) else {
            return;
        };
        let raise = alarm
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .record(tokio::time::Instant::now());
        if raise {
            let detail = format!(
                "{} stream fallbacks to polling within {} s; the last: {}",
                rate.at_least,
                rate.within.as_secs(),
                error.detail().unwrap_or(error.class_name())
            );
            self.raise_with(alert, error, Some(detail));
        }
    }

    pub fn metrics_text(&self) -> String {
        let now = tokio::time::Instant::now();
        let (state, open_total) = {
            let breaker = self.breaker();
            (breaker.state(), breaker.open_seconds_total(now))
        };
        self.shared.metrics.circuit_state(state.metric());
        self.shared.metrics.circuit_open_total(open_total);
        self.shared.metrics.encode()
    }

    pub(crate) fn breaker(&self) -> BreakerGuard<'_> {
        self.shared.breaker.lock()
    }

    pub(crate) fn memory(&self) -> MutexGuard<'_, Memory> {
        self.shared.memory.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The policy's retry classes with the configuration's attempts and step
/// applied to the configurable ones. A value below a class's minimum is
/// refused, not clamped: a client that retries less than its operator asked
/// for would fail in a way nobody chose. Setting a value when no class is
/// configurable is refused too.
fn configured_retries(
    policy: &Policy,
    attempts: Option<u32>,
    backoff: Option<Duration>,
) -> Result<Box<[RetryClass]>, ConfigError> {
    if (attempts.is_some() || backoff.is_some())
        && !policy.retries.iter().any(|r| r.configurable.is_some())
    {
        return Err(ConfigError::Retry(format!(
            "the {} policy has no configurable retry class",
            policy.api
        )));
    }
    policy
        .retries
        .iter()
        .map(|class| {
            let (Some(bounds), RetrySchedule::Linear { attempts: a, step }) =
                (class.configurable, class.schedule)
            else {
                return Ok(class.clone());
            };
            let attempts = attempts.unwrap_or(a);
            let step = backoff.unwrap_or(step);
            if attempts < bounds.min_attempts {
                return Err(ConfigError::Retry(format!(
                    "retry_attempts {attempts} is below the minimum of {} ({})",
                    bounds.min_attempts, class.name
                )));
            }
            if step < bounds.min_step {
                return Err(ConfigError::Retry(format!(
                    "retry_backoff {step:?} is below the minimum of {:?} ({})",
                    bounds.min_step, class.name
                )));
            }
            Ok(RetryClass {
                schedule: RetrySchedule::Linear { attempts, step },
                ..class.clone()
            })
        })
        .collect()
}

/// The overall deadline a client holds its calls to: the policy's, unless a
/// configurable class's attempts need longer. Such a deadline is inferred
/// from the attempts it must hold (Core: 65 s for the default 2 × 30 s and
/// the 0.25 s wait), so it follows a configured `retry_attempts` and
/// `retry_backoff`: every attempt of the slowest route of the class, at its
/// whole timeout, and every wait between them fit. It never shrinks below
/// the policy's, so the minimum rule of the retry knobs is the deadline's too.
pub(crate) fn overall_deadline(policy: &Policy, retries: &[RetryClass]) -> Duration {
    let mut deadline = policy.deadline;
    for (index, class) in retries.iter().enumerate() {
        let (Some(_), RetrySchedule::Linear { attempts, step }) =
            (class.configurable, class.schedule)
        else {
            continue;
        };
        let slowest = policy
            .routes
            .iter()
            .filter(|r| r.retry.get() == index)
            .map(|r| &policy.timeouts[r.timeout])
            .map(|t| t.per_attempt.max(t.budget(true)))
            .max()
            .unwrap_or_default();
        let waits: u32 = (1..attempts).sum();
        let needed = slowest
            .saturating_mul(attempts)
            .saturating_add(step.saturating_mul(waits));
        deadline = deadline.max(needed);
    }
    deadline
}

/// The pool idle a deployment set, refused below the policy's floor (not
/// clamped: an operator who lowered it for a proxy must get what was asked for
/// or an error).
fn configured_idle(policy: &Policy, idle: Option<Duration>) -> Result<Duration, ConfigError> {
    match idle {
        None => Ok(policy.pool_idle),
        Some(idle) if idle < policy.pool_idle_floor => Err(ConfigError::PoolIdle(format!(
            "pool_idle {idle:?} is below the floor of {:?}",
            policy.pool_idle_floor
        ))),
        Some(idle) => Ok(idle),
    }
}

/// The key goes into a header on every keyed request: it must be a valid
/// header value, and a key that is empty or carries whitespace is a paste
/// error, not a credential.
fn check_api_key(scheme: &str, key: &str) -> Result<reqwest::header::HeaderValue, ConfigError> {
    if key.is_empty() {
        return Err(ConfigError::ApiKey("it is empty"));
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ConfigError::ApiKey(
            "it holds a space, a control character (CR, LF, DEL, ...) or a non-ASCII byte",
        ));
    }
    let mut value = reqwest::header::HeaderValue::try_from(format!("{scheme} {key}"))
        .map_err(|_| ConfigError::ApiKey("it is not a valid header value"))?;
    value.set_sensitive(true);
    Ok(value)
}

/// The configured base URL, parsed, when every route's path can be appended
/// to it: http(s), a host, nothing a path cannot follow (query, fragment)
/// and no credentials in the URL.
fn check_base_url(raw: &str) -> Result<reqwest::Url, ConfigError> {
    let refuse = |reason| ConfigError::BaseUrl {
        url: raw.to_owned(),
        reason,
    };
    // The URL parser drops a trailing newline or tab where it finds one, so
    // a value the environment kept them in would be taken for another.
    if raw.chars().any(char::is_control) {
        return Err(refuse(
            "contains a control character (a newline, tab or escape)",
        ));
    }
    let url = reqwest::Url::parse(raw).map_err(|_| refuse("not a URL"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(refuse("must start with http:// or https://"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(refuse("has no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(refuse(
            "carries credentials (userinfo): the key goes in the API key, never in the URL",
        ));
    }
    if url.query().is_some() || raw.contains('?') {
        return Err(refuse("has a query: every route's path is appended to it"));
    }
    if url.fragment().is_some() || raw.contains('#') {
        return Err(refuse(
            "has a fragment: every route's path is appended to it",
        ));
    }
    Ok(url)
}

fn kind_name(kind: IdKind) -> &'static str {
    match kind {
        IdKind::Tenant => "TenantId",
        IdKind::Workspace => "WorkspaceId",
        IdKind::Other(name) => name,
    }
}

/// A fleet member's view of its fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetStatus {
    /// The shared store is away: this replica runs at its share (or refuses).
    pub degraded: bool,
    /// Replicas the last heartbeat counted as live.
    pub live_replicas: usize,
    /// In-flight leases this replica holds in the store.
    pub leases_held: usize,
    /// The longest a failed store call took (bounded by the fleet's deadline).
    pub slowest_failed_call: Duration,
}

/// The fleet stage of a client given a store URL; a policy that needs one
/// and got none, a URL that cannot work, or a build without the backend is
/// refused here, before anything is sent.
fn fleet(
    policy: &'static Policy,
    tenant: &str,
    url: Option<&str>,
    metrics: &mut Metrics,
    alerts: &Arc<dyn AlertSink>,
) -> Result<Option<Fleet>, ConfigError> {
    let Some(fleet_policy) = &policy.fleet else {
        return match url {
            Some(_) => Err(ConfigError::Fleet(
                "the policy has no fleet section: its replicas cannot share the throttle"
                    .to_string(),
            )),
            None => Ok(None),
        };
    };
    if url.is_some_and(|u| u.chars().any(char::is_control)) {
        return Err(ConfigError::Fleet(
            "the Redis URL contains a control character (a newline, tab or escape)".to_string(),
        ));
    }
    let Some(url) = url else {
        return match fleet_policy.shared {
            true => Err(ConfigError::Fleet(format!(
                "the policy shares the throttle through Redis: set {} or the config's redis_url",
                fleet_policy.url_env
            ))),
            false => Ok(None),
        };
    };
    #[cfg(feature = "redis")]
    {
        let names = metrics.register_fleet(&fleet_policy.metrics);
        Fleet::new(
            tenant,
            url,
            policy,
            Some(names),
            metrics.counting(Arc::clone(alerts)),
        )
        .map(Some)
        .map_err(|reason| ConfigError::Fleet(format!("invalid Redis URL: {reason}")))
    }
    #[cfg(not(feature = "redis"))]
    {
        let _ = (tenant, url, metrics, alerts);
        Err(ConfigError::Fleet(
            "this build has no Redis backend: enable the sdk-runtime `redis` feature".to_string(),
        ))
    }
}
