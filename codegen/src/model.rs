//! The lowered model: every reference resolved, every duration parsed.
//! This is what the emitter reads; it never sees YAML.

use std::time::Duration;

pub use sdk_policy::Method;
pub use sdk_policy::endpoint::{Lane, ScopeNeed};
pub use sdk_policy::policy::Replay as RowReplay;
pub use sdk_policy::policy::{Conflict, OutcomeKind, RetrySchedule, StateTrigger};

/// Where an item is written in the spec: errors found after lowering (a
/// crate name two APIs share, a failure of the emitter) point there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Location {
    pub file: std::path::PathBuf,
    pub line: usize,
    pub column: usize,
}

impl Location {
    pub fn error(&self, field: &str, message: impl Into<String>) -> crate::SpecError {
        crate::SpecError {
            file: self.file.clone(),
            line: self.line,
            column: self.column,
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Where an item comes from in the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub section: String,
    pub inferred: bool,
}

#[derive(Debug)]
pub struct Model {
    pub api: Api,
    pub timeouts: Vec<Timeout>,
    pub deadline: Duration,
    pub deadline_source: Source,
    pub retries: Vec<Retry>,
    pub breaker: Option<Breaker>,
    pub throttle: Throttle,
    pub limits: Limits,
    /// How long an idle pooled connection is kept.
    pub pool_idle: Duration,
    /// The least configurable pool idle (`pool_idle` when the spec names none).
    pub pool_idle_floor: Duration,
    /// Let go this long before a server's announced keep-alive; `None`: not read.
    pub keep_alive_margin: Option<Duration>,
    /// Statuses after which no pooled connection is reused.
    pub fresh_after: Vec<u16>,
    /// `None`: the API's writes are not queued for replay.
    pub replay: Option<Replay>,
    /// `None`: no fleet section (every replica on its own).
    pub fleet: Option<Fleet>,
    /// requests, duration, circuit_state, circuit_open_seconds, sse_fallback.
    pub metrics: MetricNames,
    pub log: LogNames,
    pub details: Vec<DetailSet>,
    pub rows: Vec<Row>,
    pub streams: Vec<Stream>,
    pub buffering: Option<Buffering>,
    /// At least this many fallbacks within this long raise the alert.
    pub fallbacks_sustained: Option<(u32, Duration, String)>,
    pub states: Vec<State>,
    pub messages: Vec<Message>,
    /// The copy of an error whose outcome is unknown (`class` is empty).
    pub unknown_outcome: Option<Message>,
    pub alerts: Vec<Alert>,
    pub breaker_alert: Option<String>,
    /// Raise the retry-exhaustion alert only at this rate (count, window).
    pub retry_exhausted_rate: Option<(u32, Duration)>,
    pub retry_exhausted_alert: String,
    /// How long a rule over the raised-alerts counter fires after a raise.
    pub alert_look_back: Duration,
    pub features: Vec<Feature>,
    pub types: Vec<TypeDef>,
    pub services: Vec<Service>,
}

#[derive(Debug)]
pub struct Api {
    /// `document.license` (SPDX) of the OpenAPI document, if the spec names one.
    pub license: Option<String>,
    /// `document.contact`: name, url, email.
    pub contact: Option<(String, Option<String>, Option<String>)>,
    /// The `api:` line: what the files of the crate root are blamed on.
    pub at: Location,
    /// The `crate:` line.
    pub crate_at: Location,
    pub name: String,
    pub title: String,
    pub crate_name: String,
    pub client: String,
    pub doc: String,
    pub origin_env: String,
    pub key_env: String,
    pub tenant_env: String,
    pub headers: Headers,
    pub id_pattern: IdPattern,
    pub reserved_tenants: Vec<String>,
    /// Longest value of an opaque ID, in bytes.
    pub opaque_max_len: u32,
    pub ids: Vec<IdType>,
    /// The lanes besides `key` (auth.lanes_authenticated), and whether each
    /// presents the API key; one that does not has it injected server-side.
    pub lanes: Vec<(String, bool)>,
    pub workspace_services: Vec<String>,
    /// Services every route of which carries the pipeline header (`pipeline_id: true`).
    pub pipeline_services: Vec<String>,
    /// Where the policy asks for the workspace (`None` without workspace services).
    pub workspace_source: Option<Source>,
    /// Where the policy asks for the tenant (`auth`).
    pub tenant_source: Source,
    /// Where the policy states the ID rules (`ids`).
    pub ids_source: Source,
    pub source: Source,
}

/// `ids.pattern`, lowered: see [`sdk_policy::policy::IdPattern`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdPattern {
    /// As the spec wrote it.
    pub text: String,
    pub first: Vec<(u8, u8)>,
    pub rest: Vec<(u8, u8)>,
    pub min_len: usize,
    pub max_len: usize,
}

impl IdPattern {
    /// The runtime's view, to check a value the spec itself names.
    pub fn rule(&self) -> sdk_policy::policy::IdPattern<'_> {
        sdk_policy::policy::IdPattern {
            text: &self.text,
            first: &self.first,
            rest: &self.rest,
            min_len: self.min_len,
            max_len: self.max_len,
        }
    }
}

#[derive(Debug)]
pub struct Headers {
    pub authorization: String,
    /// The scheme before the key (`Bearer`).
    pub auth_scheme: String,
    pub tenant: String,
    /// `None`: the API has no workspace scope.
    pub workspace: Option<String>,
    pub request_id: String,
    pub retry_after: String,
    /// `None`: no route carries a pipeline id.
    pub pipeline: Option<String>,
}

#[derive(Debug)]
pub struct IdType {
    pub name: String,
    pub doc: String,
    /// Minted by the platform: only path safety is checked, not the pattern.
    pub opaque: bool,
    pub source: Source,
}

#[derive(Debug)]
pub struct Timeout {
    pub name: String,
    pub doc: String,
    pub per_attempt: Duration,
    pub deploy_suspected: Option<Duration>,
    pub source: Source,
}

/// The log lines' target and field names.
#[derive(Debug)]
pub struct LogNames {
    pub target: String,
    /// The field naming the service (`grag_service`).
    pub service_field: String,
    /// The field of the workspace (`workspace_id`).
    pub workspace_field: String,
    /// Fields taken from path placeholders: `(field, placeholders)`.
    pub path_fields: Vec<(String, Vec<String>)>,
}

/// Names of the exported metrics (counters without `_total`).
#[derive(Debug)]
pub struct MetricNames {
    pub requests: String,
    pub duration: String,
    pub circuit_state: Option<String>,
    pub circuit_open_seconds: Option<String>,
    pub sse_fallback: Option<String>,
    pub sse_buffered: Option<String>,
    /// Alerts raised, by name.
    pub alerts: String,
    /// 429s by whether they carried `Retry-After`.
    pub rate_limited: String,
}

#[derive(Debug)]
pub struct Buffering {
    pub min_events: u32,
    pub burst: Duration,
    pub silent_for: Duration,
    pub confirm_after: u32,
    pub alert: String,
}

/// The durable replay queue (`policy.yaml replay`).
#[derive(Debug)]
pub struct Replay {
    /// Index of the throttle budget replays run in.
    pub budget: usize,
    pub lease: Duration,
    pub pause: Duration,
    pub split: u32,
    pub kinds: Vec<String>,
    pub lock_attempts: u32,
    pub lock_step: Duration,
    pub depth_metric: String,
    pub failures_metric: String,
    pub failure_alert: String,
    pub source: Source,
}

#[derive(Debug)]
pub struct Retry {
    pub name: String,
    pub doc: String,
    pub schedule: RetrySchedule,
    /// The configuration may set attempts and step, down to these.
    pub configurable: Option<(u32, Duration)>,
    pub source: Source,
}

/// A route named as `service.route`, resolved to indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteRef {
    pub service: usize,
    pub route: usize,
}

#[derive(Debug)]
pub struct Breaker {
    pub threshold: u32,
    pub window: Duration,
    pub distinct_endpoints: bool,
    pub probe: RouteRef,
    pub probe_interval: Duration,
    pub probe_timeout: usize,
    pub healthy_probes: u32,
    pub canary: RouteRef,
    pub canary_timeout: usize,
    pub deploy_suspected: Duration,
    pub alert_after: Duration,
    pub warm_up: Vec<WarmUp>,
    pub source: Source,
}

#[derive(Debug)]
pub struct WarmUp {
    pub route: RouteRef,
    pub path: Vec<String>,
    /// Compact JSON text.
    pub body: Option<String>,
    /// A timeout class instead of the route's own.
    pub timeout: Option<usize>,
    pub source: Source,
}

#[derive(Debug)]
pub struct Throttle {
    pub max_in_flight: u32,
    pub per_second: u32,
    pub budgets: Vec<Budget>,
    pub polling_interval: Duration,
    pub polling_floor: Duration,
    pub polling_hot_factor: u32,
    pub source: Source,
}

/// How replicas share the throttle (issue 17).
#[derive(Debug)]
pub struct Fleet {
    /// `backend: redis`: a client needs a Redis URL.
    pub shared: bool,
    pub url_env: String,
    pub deadline: Duration,
    pub breaker_failures: u32,
    /// The failures in a row must span this long: a shorter stall is not an outage.
    pub breaker_over: Duration,
    pub breaker_retry: Duration,
    pub lease: Duration,
    pub heartbeat: Duration,
    /// Percent below the share while degraded.
    pub margin_percent: u32,
    /// `fail: closed`: degraded replicas refuse.
    pub fail_closed: bool,
    /// Indices of the budgets each replica keeps alone.
    pub per_replica: Vec<usize>,
    pub admission_metric: String,
    pub decisions_metric: String,
    pub degraded_metric: String,
    pub share_metric: String,
    pub alert: String,
    pub source: Source,
}

#[derive(Debug)]
pub struct Budget {
    pub name: String,
    pub doc: String,
    pub max_in_flight: Option<u32>,
    pub per_minute: Option<u32>,
    pub source: Source,
}

/// Bounds on what a server may send, in bytes.
#[derive(Debug)]
pub struct Limits {
    pub response: u64,
    pub error_body: u64,
    pub detail: u64,
    pub sse_line: u64,
    pub sse_event: u64,
    pub source: Source,
}

#[derive(Debug)]
pub struct DetailSet {
    pub name: String,
    pub doc: String,
    pub contains: Vec<String>,
    pub source: Source,
}

#[derive(Debug)]
pub struct Row {
    pub row: String,
    pub outcome: OutcomeKind,
    pub status: Option<(u16, u16)>,
    pub detail: Option<usize>,
    pub retry_after: Option<bool>,
    pub conflict: Option<Conflict>,
    pub keyless: Option<bool>,
    /// Only these routes, when set.
    pub routes: Option<Vec<RouteRef>>,
    pub class: String,
    pub retry: Option<usize>,
    pub feeds_breaker: bool,
    pub outcome_unknown: bool,
    pub alert: Option<String>,
    pub alert_outside_deploy: bool,
    /// Index into [`Model::states`].
    pub feature_state: Option<usize>,
    pub remember_for: Option<Duration>,
    /// Index into [`Model::rows`].
    pub escalate_to: Option<usize>,
    /// What the row means for a queued write; `Never` without a replay queue.
    pub replay: RowReplay,
    pub action: String,
    pub source: Source,
}

#[derive(Debug)]
pub struct Stream {
    pub name: String,
    pub doc: String,
    pub watchdog: Duration,
    pub keepalive: Option<Duration>,
    pub ceiling: Option<Duration>,
    pub fallback: Option<RouteRef>,
    pub resync_after_reconnect: bool,
    pub resend: bool,
    pub first_event: Option<String>,
    pub terminal_events: Vec<String>,
    pub ends_with_terminal: bool,
    /// `event:` names that fail the stream as `stream_error` / `stream_timeout`.
    pub error_event: String,
    pub timeout_event: String,
    /// Set exactly when `fallback` is.
    pub status: Option<StatusRead>,
    /// Event name and index into [`Model::types`].
    pub events: Vec<(String, usize)>,
    pub stages: Option<Stages>,
    pub lost_copy: Option<String>,
    pub source: Source,
}

#[derive(Debug)]
pub struct Stages {
    pub event: String,
    pub stage_field: String,
    pub status_field: String,
    pub failed: Vec<String>,
    pub fail_closed: Vec<String>,
    pub detail_field: Option<String>,
    pub feature: String,
}

#[derive(Debug)]
pub struct StatusRead {
    pub field: String,
    pub completed: Vec<String>,
    pub failed: Vec<String>,
    pub error_field: Option<String>,
    pub reopen_after: u32,
}

#[derive(Debug)]
pub struct State {
    pub name: String,
    pub doc: String,
    pub when: StateTrigger,
    pub copy: Option<String>,
    pub source: Source,
}

#[derive(Debug)]
pub struct Message {
    pub class: String,
    pub copy: String,
    pub source: Source,
}

#[derive(Debug)]
pub struct Alert {
    pub name: String,
    pub doc: String,
    pub severity: String,
    /// Who an alert of this severity reaches (degradation.yaml `severities`).
    pub reaches: String,
    pub source: Source,
}

#[derive(Debug)]
pub struct Feature {
    pub name: String,
    pub doc: String,
    pub routes: Vec<RouteRef>,
    pub source: Source,
}

/// A named request or response type.
#[derive(Debug)]
pub struct TypeDef {
    pub name: String,
    pub doc: String,
    pub shape: Shape,
    /// The service file that defines it.
    pub service: String,
    pub source: Option<Source>,
}

#[derive(Debug)]
pub enum Shape {
    Struct(Vec<Field>),
    /// A closed set of wire strings; the generated enum keeps any other value too.
    Enum(Vec<Variant>),
}

/// One value of a string enum.
#[derive(Debug)]
pub struct Variant {
    /// The string on the wire (`pending_replay`).
    pub wire: String,
    /// The Rust variant (`PendingReplay`).
    pub name: String,
    pub doc: Option<String>,
    pub source: Option<Source>,
}

#[derive(Debug)]
pub struct Field {
    pub name: String,
    pub ty: TypeExpr,
}

/// A type expression of the spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypeExpr {
    String,
    Integer,
    Number,
    Boolean,
    Json,
    /// An ID newtype (`KbId`).
    Id(String),
    /// A named type from `types`.
    Named(String),
    List(Box<TypeExpr>),
    Map(Box<TypeExpr>),
    Optional(Box<TypeExpr>),
}

#[derive(Debug)]
pub struct Service {
    /// The `service:` line: what the service's generated file is blamed on.
    pub at: Location,
    pub name: String,
    pub handle: String,
    pub doc: String,
    pub prefix: String,
    /// The path of the service's own OpenAPI document on the platform.
    pub openapi: Option<String>,
    pub scope: ScopeNeed,
    pub lane: Lane,
    pub routes: Vec<Route>,
    pub source: Source,
}

/// What a route answers with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Returns {
    Nothing,
    Body(TypeExpr),
    /// Index into [`Model::streams`].
    Stream(usize),
}

#[derive(Debug)]
pub struct Route {
    pub name: String,
    pub doc: String,
    pub method: Method,
    /// Prefix and path together, with `{param}` placeholders.
    pub path: String,
    pub path_params: Vec<(String, TypeExpr)>,
    pub query: Vec<(String, TypeExpr)>,
    pub body: Option<TypeExpr>,
    pub returns: Returns,
    pub idempotent: bool,
    pub timeout: usize,
    pub retry: usize,
    pub budget: usize,
    pub replay: bool,
    pub scope: ScopeNeed,
    pub conflict: Conflict,
    pub pipeline_id: bool,
    /// Largest 2xx body, in bytes.
    pub max_response: u64,
    /// The read that settles an unknown outcome (a route of the same service).
    pub reconcile: Option<RouteRef>,
    /// The body ID that must name something existing, and its proof.
    pub exists: Option<Existence>,
    pub source: Source,
}

/// A route that only takes an ID proven to exist.
#[derive(Debug, Clone)]
pub struct Existence {
    /// The body's field holding the ID.
    pub field: String,
    /// The ID type.
    pub id: String,
    /// The create route whose answer proves it.
    pub proven_by: RouteRef,
}

impl Model {
    pub fn route(&self, r: RouteRef) -> (&Service, &Route) {
        let service = &self.services[r.service];
        (service, &service.routes[r.route])
    }

    /// Budgets no route draws from: modes a caller opts into (a bulk
    /// backfill), each a method on the client.
    pub fn caller_budgets(&self) -> impl Iterator<Item = &Budget> {
        self.throttle
            .budgets
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.routes().any(|(_, r)| r.budget == *i))
            .map(|(_, b)| b)
    }

    /// Routes in spec order, with their service.
    pub fn routes(&self) -> impl Iterator<Item = (&Service, &Route)> {
        self.services
            .iter()
            .flat_map(|s| s.routes.iter().map(move |r| (s, r)))
    }
}
