//! The client: one per tenant, shared state behind an `Arc`, cheap clones.

use std::sync::Arc;
use std::time::Duration;

use sdk_policy::endpoint::Endpoint;
use sdk_policy::policy::{BudgetIx, Policy, RetryClass, RetrySchedule};
use sdk_policy::scope::{Id, IdKind};

use crate::alerts::{AlertSink, LogAlerts};
use crate::error::ConfigError;
use crate::fleet::{Fleet, FleetBackend, FleetSetup, FleetStatus};
use crate::gate::Gate;
use crate::metrics::Metrics;
use crate::origin::Origin;
use crate::plan::Plan;
use crate::pool::Pool;
use crate::recorder::Recorder;
use crate::transport::Transport;

/// What a client needs besides its policy. The tenant is an [`Id`] of kind
/// tenant: validated, never defaulted.
#[derive(Clone)]
pub struct ClientConfig {
    pub(crate) base_url: String,
    pub(crate) api_key: String,
    pub(crate) tenant: Id,
    /// `None`: the policy's own log lines ([`LogAlerts`]).
    pub(crate) alerts: Option<Arc<dyn AlertSink>>,
    pub(crate) warm_up: bool,
    pub(crate) production: bool,
    pub(crate) retry_attempts: Option<u32>,
    pub(crate) retry_backoff: Option<Duration>,
    pub(crate) pool_idle: Option<Duration>,
    /// The fleet's shared store (Redis), when the replicas share the throttle.
    pub(crate) store_url: Option<String>,
    /// What connects to it (the generated crate's `redis` feature names it).
    pub(crate) fleet_backend: Option<Arc<dyn FleetBackend>>,
}

impl ClientConfig {
    pub fn new(base_url: impl Into<String>, api_key: impl Into<String>, tenant: Id) -> Self {
        ClientConfig {
            base_url: base_url.into(),
            api_key: api_key.into(),
            tenant,
            alerts: None,
            warm_up: false,
            production: false,
            retry_attempts: None,
            retry_backoff: None,
            pool_idle: None,
            store_url: None,
            fleet_backend: None,
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
    /// features and probe are kept by the whole fleet. Needs a
    /// [`fleet_backend`](Self::fleet_backend) and a policy with a fleet
    /// section; otherwise the client is refused when it is built.
    pub fn redis_url(mut self, url: impl Into<String>) -> Self {
        self.store_url = Some(url.into()).filter(|u: &String| !u.is_empty());
        self
    }

    /// The fleet backend a [`redis_url`](Self::redis_url) connects through
    /// (the generated crate's `redis` feature sets `sdk-fleet-redis`'s).
    pub fn fleet_backend(mut self, backend: impl FleetBackend) -> Self {
        self.fleet_backend = Some(Arc::new(backend));
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

    /// A production deployment: every call of a keyless lane (one whose
    /// auth has not landed, a proxy injects the key) is refused unsent.
    pub fn production(mut self, production: bool) -> Self {
        self.production = production;
        self
    }
}

/// A Sentinel configuration as the fleet's store URL, for
/// [`ClientConfig::redis_url`]: `redis+sentinel://host:port,host:port/<master>`.
pub fn sentinel_url(master: &str, sentinels: &[&str]) -> String {
    format!("redis+sentinel://{}/{master}", sentinels.join(","))
}

/// Every part a log may show: never the API key, nor the store's URL (it
/// may carry a password).
impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &"<redacted>")
            .field("tenant", &self.tenant)
            .field("warm_up", &self.warm_up)
            .field("production", &self.production)
            .field("pool_idle", &self.pool_idle)
            .finish_non_exhaustive()
    }
}

/// The runtime side of a generated client: its parts, shared by every
/// clone, and what this handle's caller asked for.
#[derive(Clone)]
pub struct Client {
    pub(crate) parts: Arc<Parts>,
    pub(crate) caller: Caller,
}

/// The parts of a client, each with one job.
pub(crate) struct Parts {
    pub plan: Plan,
    pub gate: Gate,
    pub transport: Transport,
    /// Shared with every [`Reply`](crate::reply::Reply), which records its call when decoded.
    pub recorder: Arc<Recorder>,
    /// Fire the policy's warm-up calls after every breaker close.
    pub warm_up: bool,
}

/// What differs per handle of one client.
#[derive(Clone, Default)]
pub(crate) struct Caller {
    /// A caller's mode (a bulk backfill): every call also draws from this budget.
    pub extra_budget: Option<BudgetIx>,
    /// A job queue's client: a wait the server asks for ends the call.
    pub defer_server_waits: bool,
    /// Where the request ID of every call is noted, if the caller asked.
    pub refs: Option<crate::refs::RequestRefs>,
}

impl Caller {
    /// Notes a call that reached the platform in the caller's handle, if any.
    pub fn note(&self, endpoint: &Endpoint, request_id: &str, status: Option<u16>, ok: bool) {
        if let Some(refs) = &self.refs {
            refs.note(crate::refs::RequestRef {
                service: endpoint.service,
                operation: endpoint.operation,
                request_id: request_id.to_owned(),
                status,
                ok,
            });
        }
    }
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
        let pool = Pool::new(
            idle,
            policy.pool_idle_floor,
            policy.fresh_after,
            policy.keep_alive_margin,
        )
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
            (config.store_url.as_deref(), config.fleet_backend.as_deref()),
            &mut metrics,
            &alerts,
        )?;
        let recorder = Recorder::new(policy, config.tenant.clone(), metrics, alerts);
        let parts = Parts {
            plan: Plan {
                policy,
                retries,
                deadline,
                tenant: config.tenant,
                production: config.production,
            },
            gate: Gate::new(policy, fleet),
            transport: Transport {
                pool,
                origin,
                authorization,
            },
            recorder: Arc::new(recorder),
            warm_up: config.warm_up,
        };
        Ok(Client {
            parts: Arc::new(parts),
            caller: Caller::default(),
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
        if !crate::api_error::same_table(policy.routes, spec.routes) {
            return Err(ConfigError::Override("the route table"));
        }
        Client::new(policy, config)
    }

    /// The same client, noting the request ID of every call that reaches the
    /// platform in `refs` (for `ai_runs.refs`): the typed methods return
    /// what they always return, the IDs go to the handle.
    pub fn noting_requests(&self, refs: &crate::refs::RequestRefs) -> Client {
        let mut client = self.clone();
        client.caller.refs = Some(refs.clone());
        client
    }

    /// The same client, every call of it also drawing from `budget`: a
    /// caller's mode such as a bulk backfill, on top of each route's own
    /// budget. A budget outside this policy's table (another API's) adds none.
    pub fn within_budget(&self, budget: BudgetIx) -> Client {
        let known = budget.get() < self.policy().throttle.budgets.len();
        let mut client = self.clone();
        client.caller.extra_budget = known.then_some(budget);
        client
    }

    /// The same client, for a job queue: a wait the server asks for
    /// (`Retry-After`, e.g. a 503 under WAL backpressure) ends the call with
    /// [`crate::error::Error::retry_after`] instead of being slept out inside it, so
    /// the queue re-schedules the job and holds no slot meanwhile.
    pub fn deferring_server_waits(&self) -> Client {
        let mut client = self.clone();
        client.caller.defer_server_waits = true;
        client
    }

    pub fn policy(&self) -> &'static Policy {
        self.parts.plan.policy
    }

    /// The overall deadline of this client's calls: the policy's, or longer
    /// when its configured retries need more.
    pub fn deadline(&self) -> Duration {
        self.parts.plan.deadline
    }

    /// Why every call of `endpoint` is refused before a byte is sent (a
    /// keyless lane in production), if it is: a tool skips such a step with
    /// this reason instead of counting the refusal as a fault.
    pub fn lane_refusal(&self, endpoint: &Endpoint) -> Option<String> {
        self.parts.plan.lane_refusal(endpoint)
    }

    pub fn tenant(&self) -> &Id {
        &self.parts.plan.tenant
    }

    /// The base URL every request goes to, as parsed (without a trailing
    /// `/`): a route's path appended to it is the request's URL.
    pub fn base_url(&self) -> &str {
        self.parts.transport.origin.base_url()
    }

    pub fn throttle(&self) -> &crate::throttle::Throttle {
        &self.parts.gate.throttle
    }

    /// How long idle pooled connections are kept now: the configured (or the
    /// policy's) pool idle, lowered by any shorter `Keep-Alive: timeout=` a
    /// server announced.
    pub fn pool_idle(&self) -> Duration {
        self.parts.transport.pool.idle()
    }

    /// Whether this client shares the throttle with a fleet (a Redis URL was
    /// configured), and if so whether its store is away (degraded).
    pub fn fleet_status(&self) -> Option<FleetStatus> {
        self.gate().fleet.as_ref().map(|f| f.status())
    }

    /// Stops this client as a replica that shuts down: with a fleet it
    /// leaves it (no longer counted live by the others, its heartbeat
    /// ended, its leases given back: see [`Fleet::leave`]). Calls still open
    /// end as they would; a client used after this is served, but is no
    /// longer one of the fleet's live replicas. Without a fleet: nothing.
    pub async fn shutdown(&self) {
        if let Some(fleet) = &self.gate().fleet {
            fleet.leave().await;
        }
    }

    /// The origin breaker's state right now.
    pub fn circuit_state(&self) -> crate::breaker::CircuitState {
        self.gate().breaker().state()
    }

    /// Whether the origin is deploy-suspected (a close happened recently).
    pub fn deploy_suspected(&self) -> bool {
        self.gate()
            .breaker()
            .deploy_suspected(tokio::time::Instant::now())
    }

    /// Sends `alert` to this client's sink and counts it in the raised-alerts
    /// metric: a layer on top (the replay queue) raises its alerts where the
    /// client's go. Every alert of the client goes through here; its
    /// severity is the policy's for its name, whatever the caller set.
    pub fn alert(&self, alert: crate::alerts::Alert) {
        self.recorder().alert(alert);
    }

    /// An alert named `name` with its severity from the policy and nothing
    /// else set: `Alert { detail, ..client.alert_of(name) }`.
    pub fn alert_of(&self, name: &'static str) -> crate::alerts::Alert {
        self.recorder().alert_of(name)
    }

    /// Whether jobs are followed by polling alone: a proxy between client
    /// and platform was confirmed buffering event streams.
    pub fn polling_only(&self) -> bool {
        self.recorder().polling_only()
    }

    /// Every metric of §10.3 in the Prometheus text format.
    pub fn metrics_text(&self) -> String {
        let now = tokio::time::Instant::now();
        let (state, open_total) = {
            let breaker = self.gate().breaker();
            (breaker.state(), breaker.open_seconds_total(now))
        };
        let metrics = &self.recorder().metrics;
        metrics.circuit_state(state.metric());
        metrics.circuit_open_total(open_total);
        metrics.encode()
    }

    pub(crate) fn plan(&self) -> &Plan {
        &self.parts.plan
    }

    pub(crate) fn gate(&self) -> &Gate {
        &self.parts.gate
    }

    pub(crate) fn recorder(&self) -> &Arc<Recorder> {
        &self.parts.recorder
    }
}

/// The policy's retry classes with the configuration's attempts and step
/// applied to the configurable ones. A value outside a class's bounds is
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
            if attempts > bounds.max_attempts {
                return Err(ConfigError::Retry(format!(
                    "retry_attempts {attempts} is above the maximum of {} ({}): retry bounds \
                     stay low, every attempt may repeat the work",
                    bounds.max_attempts, class.name
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
        // Checked: a sum past `Duration`'s range is no deadline at all.
        let needed = (1..attempts)
            .try_fold(0u32, u32::checked_add)
            .and_then(|waits| step.checked_mul(waits))
            .and_then(|waits| slowest.checked_mul(attempts)?.checked_add(waits))
            .unwrap_or(Duration::MAX);
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

/// The fleet stage of a client given a store URL; a policy that needs one
/// and got none, a URL that cannot work, or a configuration without a backend is
/// refused here, before anything is sent.
fn fleet(
    policy: &'static Policy,
    tenant: &str,
    (url, backend): (Option<&str>, Option<&dyn FleetBackend>),
    metrics: &mut Metrics,
    alerts: &Arc<dyn AlertSink>,
) -> Result<Option<Arc<dyn Fleet>>, ConfigError> {
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
    let Some(backend) = backend else {
        return Err(ConfigError::Fleet(
            "this build has no fleet backend: enable the generated crate's `redis` feature \
             (or set the config's fleet_backend)"
                .to_string(),
        ));
    };
    let setup = FleetSetup {
        tenant: tenant.to_owned(),
        url: url.to_owned(),
        policy,
        metrics: Some(metrics.register_fleet(&fleet_policy.metrics)),
        alerts: metrics.counting(Arc::clone(alerts)),
    };
    backend
        .connect(setup)
        .map(Some)
        .map_err(|reason| ConfigError::Fleet(format!("invalid Redis URL: {reason}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::POLICY;
    use sdk_policy::policy::RetryBounds;

    /// The fixture's classes made configurable to `attempts` of `step` each.
    fn configured(attempts: u32, step: Duration) -> Vec<RetryClass> {
        let bounds = RetryBounds {
            min_attempts: 1,
            max_attempts: u32::MAX,
            min_step: Duration::ZERO,
        };
        POLICY
            .retries
            .iter()
            .map(|class| RetryClass {
                schedule: RetrySchedule::Linear { attempts, step },
                configurable: Some(bounds),
                ..class.clone()
            })
            .collect()
    }

    /// A sum past what the types hold is the longest deadline, never an
    /// overflow panic (debug) or a wrapped, short one (release).
    #[test]
    fn a_deadline_sum_past_its_range_is_the_longest_deadline() {
        let waits_past_u32 = configured(100_000, Duration::from_millis(1));
        assert_eq!(overall_deadline(&POLICY, &waits_past_u32), Duration::MAX);
        let past_duration = configured(u32::MAX, Duration::MAX);
        assert_eq!(overall_deadline(&POLICY, &past_duration), Duration::MAX);
        let within = configured(3, Duration::from_secs(1));
        let deadline = overall_deadline(&POLICY, &within);
        assert!(deadline >= Duration::from_secs(3), "{deadline:?}");
        assert!(deadline < Duration::from_secs(86_400), "{deadline:?}");
    }
}
