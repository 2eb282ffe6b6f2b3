//! The lowered model: every reference resolved, every duration parsed.
//! This is what the emitter reads; it never sees YAML.

use std::time::Duration;

pub use sdk_policy::Method;
pub use sdk_policy::endpoint::{Endpoint, Lane, ScopeNeed};
pub use sdk_policy::index::{BudgetIx, DetailIx, RetryIx, RouteIx, RowIx, StreamIx, TimeoutIx};
pub use sdk_policy::log::LogNames;
pub use sdk_policy::policy::{
    AlertNames, AlertRate, AlertSeverity, BreakerPolicy, BudgetPolicy, BufferingRule, ClassMessage,
    Conflict, Degraded, DetailSet, FeaturePolicy, FeatureStateCopy, FleetMetricNames, FleetPolicy,
    HeaderNames, IdPattern, IdRules, Limits, MetricNames, OutcomeKind, PollingPolicy, Replay,
    ReplayPolicy, RetryBounds, RetryClass, RetrySchedule, RowMatch, StagePolicy, StateTrigger,
    StreamFallback, StreamPolicy, TaxonomyRow, ThrottlePolicy, TimeoutClass, UNCLASSIFIED,
    WarmUpCall,
};

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

/// A value of the policy's vocabulary with what the runtime does not hold:
/// the spec's words about it and where the policy says it. It reads as the
/// value itself (`timeout.per_attempt`).
#[derive(Debug, Clone)]
pub struct Item<T> {
    pub value: T,
    pub doc: String,
    pub source: Source,
}

impl<T> std::ops::Deref for Item<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

/// The methods the generated client type has whatever the spec says
/// (`emit/client.rs` writes them): a caller's budget, which becomes a
/// method of that type too, must not take one of these names.
pub const CLIENT_METHODS: [&str; 5] = [
    "new",
    "with_policy",
    "noting_requests",
    "deferring_server_waits",
    "runtime",
];

#[derive(Debug)]
pub struct Model {
    pub api: Api,
    pub timeouts: Vec<Item<TimeoutClass>>,
    pub deadline: Duration,
    pub deadline_source: Source,
    pub retries: Vec<Item<RetryClass>>,
    pub breaker: Option<Item<BreakerPolicy>>,
    /// Calls fired once after a breaker close, when the client enables them.
    pub warm_up: Vec<Item<WarmUpCall>>,
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
    pub replay: Option<Item<ReplayPolicy>>,
    /// Where the replay queue's retention numbers come from.
    pub retention_source: Option<Source>,
    /// `None`: no fleet section (every replica on its own).
    pub fleet: Option<Item<FleetPolicy>>,
    pub metrics: MetricNames,
    pub log: LogNames,
    pub log_fields: LogFields,
    pub details: Vec<Item<DetailSet>>,
    pub rows: Vec<Item<TaxonomyRow>>,
    /// Every class of the rows that can end a call as an error, in row
    /// order, and the runtime's `unclassified` (no row matched) last.
    pub classes: Vec<Class>,
    pub streams: Vec<Stream>,
    pub buffering: Option<BufferingRule>,
    /// At least this many fallbacks within this long raise the alert.
    pub fallbacks_sustained: Option<(AlertRate, &'static str)>,
    pub states: Vec<Item<FeatureStateCopy>>,
    pub messages: Vec<Item<ClassMessage>>,
    /// The copy of an error whose outcome is unknown (`class` is empty).
    pub unknown_outcome: Option<&'static str>,
    pub alerts: Vec<Alert>,
    /// The runtime's part of the alerts: the retry-exhaustion alert, the
    /// rate it is raised at, and every alert's severity.
    pub alert_names: AlertNames,
    /// How long a rule over the raised-alerts counter fires after a raise.
    pub alert_look_back: Duration,
    pub features: Vec<Item<FeaturePolicy>>,
    pub types: Vec<TypeDef>,
    pub services: Vec<Service>,
    /// The constant that names each item of the indexed tables.
    pub constants: Constants,
}

/// The constants of `src/policy.rs` that name each timeout class, retry
/// class, budget and stream (`timeout::DEFAULT`), by the item's index:
/// named by [`crate::naming::screaming`] when the model is built.
#[derive(Debug)]
pub struct Constants {
    pub timeouts: Vec<String>,
    pub retries: Vec<String>,
    pub budgets: Vec<String>,
    pub streams: Vec<String>,
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
    /// Marks a production deployment (`auth.production_env`), if the API has one.
    pub production_env: Option<String>,
    pub headers: HeaderNames,
    /// What an ID must look like, and the tenants refused.
    pub id_rules: IdRules,
    pub ids: Vec<IdType>,
    /// The lanes besides `key` (auth.lanes_authenticated), and whether each
    /// presents the API key; one that does not has it injected server-side.
    pub lanes: Vec<(String, bool)>,
    pub workspace_services: Vec<String>,
    /// Services every route of which carries the pipeline header (`pipeline_id: true`).
    pub pipeline_services: Vec<String>,
    /// Where the policy asks for the workspace (`None` without workspace services).
    pub workspace_source: Option<Source>,
    /// Where the policy asks for the pipeline id (`None` without pipeline services).
    pub pipeline_source: Option<Source>,
    /// Where the policy asks for the tenant (`auth`).
    pub tenant_source: Source,
    /// Where the policy states the ID rules (`ids`).
    pub ids_source: Source,
    pub source: Source,
}

#[derive(Debug)]
pub struct IdType {
    pub name: String,
    pub doc: String,
    /// Minted by the platform: only path safety is checked, not the pattern.
    pub opaque: bool,
    pub source: Source,
}

/// What the generated log lines call the fields the runtime hands over
/// unnamed (the runtime's part is [`LogNames`]).
#[derive(Debug)]
pub struct LogFields {
    /// The field naming the service (`grag_service`).
    pub service: String,
    /// The field of the workspace (`workspace_id`).
    pub workspace: String,
}

/// A route named as `service.route`, resolved to indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteRef {
    pub service: usize,
    pub route: usize,
}

/// The throttle section: the runtime's `ThrottlePolicy`, and its budgets
/// again as items, each with its doc and source.
#[derive(Debug)]
pub struct Throttle {
    pub value: ThrottlePolicy,
    pub budgets: Vec<Item<BudgetPolicy>>,
    pub source: Source,
}

/// A stream contract: the runtime's [`StreamPolicy`], and the typed events
/// the generated event enum decodes. It reads as its policy.
#[derive(Debug)]
pub struct Stream {
    pub value: StreamPolicy,
    pub doc: String,
    /// The enum its typed events decode to (`OrchestratorEvent`).
    pub event_type: String,
    pub events: Vec<Event>,
    pub source: Source,
}

/// A typed event of a stream.
#[derive(Debug)]
pub struct Event {
    /// `event:` on the wire.
    pub name: String,
    /// Its variant of the stream's event enum.
    pub variant: String,
    /// Its data's type: an index into [`Model::types`].
    pub ty: usize,
}

/// An error class of the taxonomy, as the generated `ErrorClass` has it.
#[derive(Debug)]
pub struct Class {
    /// As the spec spells it (`feature_dark`).
    pub name: &'static str,
    /// Its variant of `ErrorClass` (`FeatureDark`).
    pub variant: String,
    /// The rows that give it, in taxonomy order.
    pub rows: Vec<&'static str>,
    /// The first row's action: what the class means.
    pub action: &'static str,
}

impl std::ops::Deref for Stream {
    type Target = StreamPolicy;

    fn deref(&self) -> &StreamPolicy {
        &self.value
    }
}

/// An alert of the spec: the runtime holds its severity; the rules and
/// tables add its doc and who a severity reaches. It reads as its
/// [`AlertSeverity`] (`alert.alert` is its name).
#[derive(Debug)]
pub struct Alert {
    pub value: AlertSeverity,
    pub doc: String,
    /// Who an alert of this severity reaches (degradation.yaml `severities`).
    pub reaches: String,
    pub source: Source,
}

impl std::ops::Deref for Alert {
    type Target = AlertSeverity;

    fn deref(&self) -> &AlertSeverity {
        &self.value
    }
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
    /// Its module in the generated crate (`kg_service`).
    pub module: String,
    /// The client's method that hands out its handle (`kg`).
    pub handle: String,
    /// The handle's type (`Kg`).
    pub handle_type: String,
    pub doc: String,
    pub prefix: String,
    /// The path of the service's own OpenAPI document on the platform.
    pub openapi: Option<String>,
    pub scope: ScopeNeed,
    pub lane: Lane,
    pub routes: Vec<Route>,
    pub source: Source,
}

impl Service {
    /// Whether a route of the service carries the pipeline header: its
    /// handle then exists only behind a pipeline id.
    pub fn carries_pipeline(&self) -> bool {
        self.routes.iter().any(|r| r.pipeline_id)
    }
}

/// What a route answers with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Returns {
    Nothing,
    Body(TypeExpr),
    /// Index into [`Model::streams`].
    Stream(usize),
}

/// A route: the runtime's descriptor, and what becomes its method. It reads
/// as its [`Endpoint`] (`route.method`, `route.path`, `route.timeout`).
#[derive(Debug)]
pub struct Route {
    /// What the runtime sends it by; the generated crate's static of it.
    pub endpoint: &'static Endpoint,
    /// The method's name (the descriptor's `operation`).
    pub name: String,
    /// The descriptor's static in its service's module (`UPSERT_ENTITY`).
    pub constant: String,
    pub doc: String,
    pub path_params: Vec<(String, TypeExpr)>,
    pub query: Vec<(String, TypeExpr)>,
    pub body: Option<TypeExpr>,
    pub returns: Returns,
    /// The read that settles an unknown outcome (a route of the same service).
    pub reconcile: Option<RouteRef>,
    /// The body ID that must name something existing, and its proof.
    pub exists: Option<Existence>,
    pub source: Source,
}

impl std::ops::Deref for Route {
    type Target = Endpoint;

    fn deref(&self) -> &Endpoint {
        self.endpoint
    }
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
    /// The argument that takes the proof ([`crate::naming::proof_argument`]).
    pub argument: String,
    /// The method of the create route's handle that hands the proof out
    /// ([`crate::naming::ensure`]).
    pub ensure: String,
}

impl Model {
    /// The timeout class a typed index names.
    pub fn timeout(&self, index: TimeoutIx) -> &Item<TimeoutClass> {
        &self.timeouts[index.get()]
    }

    /// The retry class a typed index names.
    pub fn retry(&self, index: RetryIx) -> &Item<RetryClass> {
        &self.retries[index.get()]
    }

    /// The budget a typed index names.
    pub fn budget(&self, index: BudgetIx) -> &Item<BudgetPolicy> {
        &self.throttle.budgets[index.get()]
    }

    /// The `ErrorClass` variant of the class `name`.
    pub fn variant(&self, class: &str) -> &str {
        self.classes.iter().find(|c| c.name == class).map_or_else(
            || panic!("`{class}` is a class of the taxonomy"),
            |c| &c.variant,
        )
    }

    /// The route a descriptor of the policy is, with its service.
    pub fn route_of(&self, endpoint: &Endpoint) -> (&Service, &Route) {
        self.routes()
            .nth(endpoint.route.get())
            .expect("every descriptor of the policy is a route of the model")
    }

    pub fn route(&self, r: RouteRef) -> (&Service, &Route) {
        let service = &self.services[r.service];
        (service, &service.routes[r.route])
    }

    /// Budgets no route draws from: modes a caller opts into (a bulk
    /// backfill), each a method on the client.
    pub fn caller_budgets(&self) -> impl Iterator<Item = (BudgetIx, &Item<BudgetPolicy>)> {
        self.throttle
            .budgets
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.routes().any(|(_, r)| r.budget.get() == *i))
            .map(|(i, b)| (BudgetIx::new(i as u16), b))
    }

    /// Every name of the model the generated crate writes as an identifier,
    /// with the spec item a file that holds it is blamed on: the service's
    /// `service:` line for its own names, the `api:` line for the rest.
    pub fn identifiers(&self) -> Vec<(&Location, String)> {
        let api = &self.api.at;
        let mut out: Vec<(&Location, String)> = vec![(api, self.api.client.clone())];
        out.extend(self.api.ids.iter().map(|i| (api, i.name.clone())));
        for t in &self.types {
            out.push((api, t.name.clone()));
            match &t.shape {
                Shape::Struct(fields) => {
                    out.extend((fields.iter()).map(|f| (api, crate::naming::argument(&f.name))))
                }
                Shape::Enum(variants) => out.extend(variants.iter().map(|v| (api, v.name.clone()))),
            }
        }
        out.extend(self.classes.iter().map(|c| (api, c.variant.clone())));
        let c = &self.constants;
        let tables = [&c.timeouts, &c.retries, &c.budgets, &c.streams];
        out.extend(tables.into_iter().flatten().map(|name| (api, name.clone())));
        out.extend(self.caller_budgets().map(|(_, b)| (api, b.name.to_owned())));
        for s in &self.streams {
            out.push((api, s.event_type.clone()));
            out.extend(s.events.iter().map(|e| (api, e.variant.clone())));
        }
        for s in &self.services {
            let at = &s.at;
            out.extend([&s.module, &s.handle, &s.handle_type].map(|n| (at, n.clone())));
            for r in &s.routes {
                out.extend([&r.name, &r.constant].map(|n| (at, n.clone())));
                let params = r.path_params.iter().chain(&r.query);
                out.extend(params.map(|(p, _)| (at, crate::naming::argument(p))));
                if let Some(e) = &r.exists {
                    let stem = e.field.strip_suffix("_id").unwrap_or(&e.field);
                    let names = [&e.field, stem, &e.id].map(crate::naming::argument);
                    out.extend(names.map(|n| (at, n)));
                }
            }
        }
        out
    }

    /// Routes in spec order, with their service.
    pub fn routes(&self) -> impl Iterator<Item = (&Service, &Route)> {
        self.services
            .iter()
            .flat_map(|s| s.routes.iter().map(move |r| (s, r)))
    }
}

/// A text the policy holds for the rest of the process: the vocabulary's
/// types are `'static` (a generated crate keeps its policy in statics), and
/// the generator is a build tool that exits. Each distinct text is kept
/// once, so a process that lowers spec after spec (the spec fuzz) does not
/// grow by every name and copy of every one.
pub fn leak(text: &str) -> &'static str {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    static TEXTS: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let mut texts = TEXTS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(kept) = texts.get(text) {
        return kept;
    }
    let kept: &'static str = Box::leak(text.into());
    texts.insert(kept);
    kept
}

/// A table the policy holds for the rest of the process (see [`leak`]).
pub fn leak_all<T>(items: Vec<T>) -> &'static [T] {
    Box::leak(items.into_boxed_slice())
}

/// Texts the policy holds for the rest of the process (see [`leak`]).
pub fn leak_texts<'a>(texts: impl IntoIterator<Item = &'a str>) -> &'static [&'static str] {
    leak_all(texts.into_iter().map(leak).collect())
}

/// The log lines' writer the policy names: the generated crate writes its
/// own (`src/log.rs`); the generator's copy of the policy writes nothing.
#[derive(Debug)]
pub struct Unwritten;

impl sdk_policy::log::LogLines for Unwritten {
    fn enabled(&self) -> bool {
        false
    }
    fn sent(&self, _: &sdk_policy::log::SentLine<'_>) {}
    fn attempt(&self, _: &sdk_policy::log::AttemptLine<'_>) {}
    fn alert(&self, _: &sdk_policy::log::AlertLine<'_>) {}
    fn retry_exhausted(&self, _: &sdk_policy::log::ExhaustedLine<'_>) {}
    fn stream_failed(&self, _: &sdk_policy::log::StreamFailedLine<'_>) {}
    fn breaker(&self, _: &str, _: &str) {}
    fn warm_up(&self, _: &str, _: bool) {}
}

impl Model {
    /// The policy the runtime executes, as the generated crate holds it.
    pub fn policy(&self) -> sdk_policy::Policy {
        sdk_policy::Policy {
            api: leak(&self.api.name),
            headers: self.api.headers.clone(),
            ids: self.api.id_rules.clone(),
            reserved_floor: self.api.id_rules.reserved_tenants,
            timeouts: leak_all(self.timeouts.iter().map(|t| t.value.clone()).collect()),
            deadline: self.deadline,
            retries: leak_all(self.retries.iter().map(|r| r.value.clone()).collect()),
            breaker: self.breaker.as_ref().map(|b| b.value.clone()),
            throttle: self.throttle.value.clone(),
            taxonomy: leak_all(self.rows.iter().map(|r| r.value.clone()).collect()),
            detail_sets: leak_all(self.details.iter().map(|d| d.value.clone()).collect()),
            streams: leak_all(self.streams.iter().map(|s| s.value.clone()).collect()),
            buffering: self.buffering.clone(),
            fallbacks_sustained: self.fallbacks_sustained,
            states: leak_all(self.states.iter().map(|s| s.value.clone()).collect()),
            messages: leak_all(self.messages.iter().map(|m| m.value.clone()).collect()),
            warm_up: leak_all(self.warm_up.iter().map(|w| w.value.clone()).collect()),
            features: leak_all(self.features.iter().map(|f| f.value.clone()).collect()),
            alerts: self.alert_names.clone(),
            limits: self.limits.clone(),
            routes: leak_all(self.routes().map(|(_, r)| r.endpoint).collect()),
            pool_idle: self.pool_idle,
            pool_idle_floor: self.pool_idle_floor,
            keep_alive_margin: self.keep_alive_margin,
            metrics: self.metrics.clone(),
            log: self.log.clone(),
            log_lines: &Unwritten,
            fresh_after: leak_all(self.fresh_after.clone()),
            replay: self.replay.as_ref().map(|r| r.value.clone()),
            fleet: self.fleet.as_ref().map(|f| f.value.clone()),
        }
    }
}
