//! The client: one per tenant, shared state behind an `Arc`, cheap clones.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::alerts::{AlertSink, LogAlerts};
use crate::breaker::Breaker;
use crate::error::ConfigError;
use crate::memory::Memory;
use crate::metrics::Metrics;
use crate::policy::{Policy, RetryClass, RetrySchedule};
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
        }
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
    pub(crate) extra_budget: Option<usize>,
    /// A job queue's client: a wait the server asks for ends the call.
    pub(crate) defer_server_waits: bool,
}

pub(crate) struct Shared {
    pub(crate) policy: &'static Policy,
    /// The policy's retry classes, with the configured attempts and step.
    pub(crate) retries: Box<[RetryClass]>,
    pub(crate) pool: Pool,
    pub(crate) base_url: String,
    /// `<scheme> <key>` (`Bearer`), built once and marked sensitive (never in a debug print).
    pub(crate) authorization: reqwest::header::HeaderValue,
    pub(crate) tenant: Id,
    pub(crate) throttle: Throttle,
    pub(crate) breaker: Mutex<Breaker>,
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
        if config.tenant.kind() != IdKind::Tenant {
            return Err(ConfigError::NotATenant(kind_name(config.tenant.kind())));
        }
        // The tenant may have been parsed under other rules: check this policy's.
        Id::parse(&policy.ids, IdKind::Tenant, config.tenant.as_str())
            .map_err(ConfigError::Tenant)?;
        let authorization = check_api_key(policy.headers.auth_scheme, &config.api_key)?;
        let base_url = check_base_url(&config.base_url)?;
        let retries = configured_retries(policy, config.retry_attempts, config.retry_backoff)?;
        let pool = Pool::new(policy.pool_idle, policy.fresh_after)
            .map_err(|e| ConfigError::Http(e.to_string()))?;
        Ok(Client {
            shared: Arc::new(Shared {
                policy,
                retries,
                pool,
                base_url,
                authorization,
                tenant: config.tenant,
                throttle: Throttle::new(&policy.throttle),
                breaker: Mutex::new(Breaker::of(policy.breaker.as_ref())),
                memory: Mutex::new(Memory::default()),
                metrics: Metrics::new(&policy.metrics),
                alerts: config
                    .alerts
                    .unwrap_or_else(|| Arc::new(LogAlerts::new(policy.log_lines))),
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

    /// The same client, every call of it also drawing from `budget` (an index
    /// into the policy's budgets): a caller's mode such as a bulk backfill,
    /// on top of each route's own budget.
    pub fn within_budget(&self, budget: usize) -> Client {
        Client {
            extra_budget: Some(budget),
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

    pub fn tenant(&self) -> &Id {
        &self.shared.tenant
    }

    pub fn base_url(&self) -> &str {
        &self.shared.base_url
    }

    pub fn throttle(&self) -> &Throttle {
        &self.shared.throttle
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
    /// client's go. Every alert of the client goes through here.
    pub fn alert(&self, alert: crate::alerts::Alert) {
        self.shared.metrics.alert(alert.name);
        self.shared.alerts.alert(alert);
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
                name: rule.alert,
                endpoint: Some(endpoint.operation),
                row: None,
                detail: Some(format!(
                    "a proxy buffers event streams: {seen} arrived in one burst at their end; jobs are followed by polling from now on"
                )),
                request_id: None,
            });
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

    pub(crate) fn breaker(&self) -> MutexGuard<'_, Breaker> {
        self.shared
            .breaker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
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

/// The origin every path is appended to: http(s), a host, nothing a path
/// cannot follow (query, fragment) and no credentials in the URL.
fn check_base_url(raw: &str) -> Result<String, ConfigError> {
    let refuse = |reason| ConfigError::BaseUrl {
        url: raw.to_owned(),
        reason,
    };
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
    Ok(raw.trim_end_matches('/').to_owned())
}

fn kind_name(kind: IdKind) -> &'static str {
    match kind {
        IdKind::Tenant => "TenantId",
        IdKind::Workspace => "WorkspaceId",
        IdKind::Other(name) => name,
    }
}
