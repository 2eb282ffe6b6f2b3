//! Checks the raw files against each other and lowers them to the [`Model`].
//!
//! Every rule records an error at the offending value and carries on, so
//! one run reports every problem of the spec, each with file, line and field.

mod api;
mod degradation;
mod id_pattern;
mod names;
mod policy;
mod routes;
mod taxonomy;
mod types;

use std::time::Duration;

use marked_yaml::Spanned;

use crate::error::Sources;
use crate::load::RawSpec;
use crate::model::*;
use crate::spec::Text;

pub use routes::placeholders;

/// The lane that always sends the key: a service's `lane`, never one of
/// `auth.lanes_authenticated`.
const KEY_LANE: &str = "key";

/// Lowers a parsed spec; returns `None` when any rule failed (see `sources`).
///
/// The sections that refer to nothing come first, since what the others may
/// refer to is read off them; then the services and the taxonomy; then the
/// policy sections that refer to services. Every step runs whatever failed
/// before it, so one run reports every problem.
pub fn lower(raw: &RawSpec, sources: &mut Sources) -> Option<Model> {
    let mut cx = Cx { sources };
    let own = cx.standalone(raw);
    let names = own.known(raw);
    let calls = cx.calls(raw, &own, &names);
    let guards = cx.guards(raw, &own, &names, &calls.services);
    if cx.sources.has_errors() {
        return None;
    }
    model(own, calls, guards)
}

/// The sections that refer to no other part of the spec.
struct Standalone {
    pattern: Option<IdPattern<'static>>,
    api: Api,
    timeouts: Vec<Item<TimeoutClass>>,
    retries: Vec<Item<RetryClass>>,
    throttle: Throttle,
    limits: Option<(Limits, u64)>,
    pool: PoolSettings,
    log: LogNames,
    log_fields: LogFields,
    metrics: MetricNames,
    details: Vec<Item<DetailSet>>,
    states: Vec<Item<FeatureStateCopy>>,
    alerts: Vec<Alert>,
    types: Vec<TypeDef>,
}

/// The connection pool's settings; a `None` is a value that did not lower
/// (its error recorded).
struct PoolSettings {
    idle: Option<Duration>,
    idle_floor: Option<Duration>,
    keep_alive_margin: Option<Option<Duration>>,
    fresh_after: Vec<u16>,
}

/// The services and the taxonomy: they refer to the standalone sections.
struct Calls {
    services: Vec<Service>,
    rows: Vec<Item<TaxonomyRow>>,
    classes: Vec<Class>,
    messages: Vec<Item<ClassMessage>>,
    unknown_outcome: Option<&'static str>,
}

/// The policy sections that refer to services and names. `Some(None)`: the
/// section is there but did not lower (errors recorded).
struct Guards {
    breaker: Option<Option<Item<BreakerPolicy>>>,
    warm_up: Vec<Item<WarmUpCall>>,
    streams: Vec<Stream>,
    fallbacks_sustained: Option<(AlertRate, &'static str)>,
    buffering: Option<BufferingRule>,
    deadline: Option<Duration>,
    deadline_source: Source,
    alerting: Alerting,
    features: Vec<Item<FeaturePolicy>>,
    /// The replay queue, and where its retention numbers come from.
    replay: Option<Option<(Item<ReplayPolicy>, Source)>>,
    fleet: Option<Option<Item<FleetPolicy>>>,
}

/// When the policy's own alerts are raised and how long their rules look back.
struct Alerting {
    retry_exhausted: &'static str,
    retry_exhausted_rate: Option<AlertRate>,
    look_back: Option<Duration>,
}

impl Standalone {
    /// The names other items may refer to.
    fn known<'a>(&'a self, raw: &'a RawSpec) -> Known<'a> {
        Known {
            timeouts: self.timeouts.iter().map(|t| t.name).collect(),
            retries: self.retries.iter().map(|r| r.name).collect(),
            budgets: self.throttle.budgets.iter().map(|b| b.name).collect(),
            streams: raw.streams.streams.keys().map(|k| k.as_str()).collect(),
            ids: self.api.ids.iter().map(|i| i.name.as_str()).collect(),
            types: self.types.iter().map(|t| t.name.as_str()).collect(),
            details: self.details.iter().map(|d| d.name).collect(),
            alerts: self.alerts.iter().map(|a| a.alert).collect(),
            states: self.states.iter().map(|s| s.state).collect(),
            pipeline_header: self.api.headers.pipeline.is_some(),
        }
    }
}

/// The model, once every part lowered; `None` if a part that must be there is not.
fn model(own: Standalone, calls: Calls, guards: Guards) -> Option<Model> {
    let constants = constants(&own, &guards);
    let (pool, alerting) = (own.pool, guards.alerting);
    let replay = settled(guards.replay)?;
    let (replay, retention_source) = match replay {
        Some((r, s)) => (Some(r), Some(s)),
        None => (None, None),
    };
    Some(Model {
        api: own.api,
        timeouts: own.timeouts,
        deadline: guards.deadline?,
        deadline_source: guards.deadline_source,
        retries: own.retries,
        breaker: settled(guards.breaker)?,
        warm_up: guards.warm_up,
        throttle: own.throttle,
        limits: own.limits?.0,
        pool_idle: pool.idle?,
        pool_idle_floor: pool.idle_floor?,
        keep_alive_margin: settled(pool.keep_alive_margin)?,
        fresh_after: pool.fresh_after,
        replay,
        retention_source,
        fleet: settled(guards.fleet)?,
        metrics: own.metrics,
        log: own.log,
        log_fields: own.log_fields,
        details: own.details,
        rows: calls.rows,
        classes: calls.classes,
        streams: guards.streams,
        buffering: guards.buffering,
        fallbacks_sustained: guards.fallbacks_sustained,
        states: own.states,
        messages: calls.messages,
        unknown_outcome: calls.unknown_outcome,
        alert_names: AlertNames {
            retry_exhausted: alerting.retry_exhausted,
            retry_exhausted_rate: alerting.retry_exhausted_rate,
            severities: leak_all(own.alerts.iter().map(|a| a.value).collect()),
        },
        alerts: own.alerts,
        alert_look_back: alerting.look_back?,
        features: guards.features,
        types: own.types,
        services: calls.services,
        constants,
    })
}

/// The constant of each item of the indexed tables.
fn constants(own: &Standalone, guards: &Guards) -> Constants {
    Constants {
        timeouts: screaming(own.timeouts.iter().map(|t| t.name)),
        retries: screaming(own.retries.iter().map(|r| r.name)),
        budgets: screaming(own.throttle.budgets.iter().map(|b| b.name)),
        streams: screaming(guards.streams.iter().map(|s| s.name)),
    }
}

/// Each name as a constant ([`crate::naming::screaming`]).
fn screaming<'a>(names: impl Iterator<Item = &'a str>) -> Vec<String> {
    names.map(crate::naming::screaming).collect()
}

/// An optional section: absent (`Some(None)`), lowered (`Some(Some(_))`), or
/// present but not lowered (`None`).
fn settled<T>(section: Option<Option<T>>) -> Option<Option<T>> {
    match section {
        Some(lowered) => Some(Some(lowered?)),
        None => Some(None),
    }
}

impl Cx<'_> {
    /// The sections that refer to nothing, in the order their errors were always found.
    fn standalone(&mut self, raw: &RawSpec) -> Standalone {
        let pattern = self.id_pattern(&raw.api);
        let api = self.api(&raw.api, pattern.as_ref());
        let timeouts = self.timeouts(&raw.policy);
        let retries = self.retries(&raw.policy);
        let throttle = self.throttle(&raw.policy.throttle);
        let limits = self.limits(&raw.policy.limits);
        let pool = self.pool(&raw.policy.connections);
        let (log, log_fields) = self.log(&raw.api.log);
        let metrics = self.metrics(
            &raw.policy.metrics,
            raw.policy.breaker.is_some(),
            !raw.streams.streams.is_empty(),
        );
        let connections = &raw.policy.connections;
        self.source(&connections.source, connections.inferred);
        let details = self.details(&raw.taxonomy);
        let (states, alerts) = self.degradation(&raw.degradation);
        let types = self.types(&raw.services, &api);
        Standalone {
            pattern,
            api,
            timeouts,
            retries,
            throttle,
            limits,
            pool,
            log,
            log_fields,
            metrics,
            details,
            states,
            alerts,
            types,
        }
    }

    /// The pool's idle time, its floor (never above it), the keep-alive
    /// margin and the 5xx statuses after which no connection is reused.
    fn pool(&mut self, connections: &crate::spec::Connections) -> PoolSettings {
        let idle = self.duration(&connections.pool_idle, "connections.pool_idle");
        let idle_floor = match &connections.pool_idle_floor {
            Some(text) => {
                let floor = self.duration(text, "connections.pool_idle_floor");
                if let (Some(f), Some(idle)) = (floor, idle)
                    && f > idle
                {
                    self.error(
                        text,
                        "connections.pool_idle_floor",
                        "must not be above `pool_idle` (the default must be configurable)"
                            .to_owned(),
                    );
                }
                floor
            }
            None => idle,
        };
        let keep_alive_margin = connections
            .keep_alive_margin
            .as_ref()
            .map(|text| self.duration(text, "connections.keep_alive_margin"));
        for status in &connections.fresh_after {
            if !(500..=599).contains(&**status) {
                self.sources.at(
                    status.span(),
                    "connections.fresh_after",
                    "must list 5xx statuses (the errors after which a server closes the connection)",
                );
            }
        }
        let fresh_after = connections.fresh_after.iter().map(|s| **s).collect();
        PoolSettings {
            idle,
            idle_floor,
            keep_alive_margin,
            fresh_after,
        }
    }

    /// The services, checked against each other, then the taxonomy's rows
    /// and the copy of each class.
    fn calls(&mut self, raw: &RawSpec, own: &Standalone, names: &Known) -> Calls {
        let max_response = own.limits.as_ref().map(|(_, response)| *response);
        let mut services = self.services(&raw.services, &own.api, names, max_response);
        self.workspace_services_defined(raw);
        self.existence(&raw.services, &mut services, &own.types);
        self.reconciles(&raw.services, &mut services);
        self.caller_budgets(&raw.policy.throttle, &services);
        let known = taxonomy::RowsKnow {
            names,
            states: &own.states,
            services: &services,
            degradation: &raw.degradation,
        };
        let sections = taxonomy::Sections {
            breaker: raw.policy.breaker.is_some(),
            streams: !raw.streams.streams.is_empty(),
            jobs: raw.streams.streams.values().any(|s| s.fallback.is_some()),
            replay: raw.policy.replay.is_some(),
        };
        let (rows, classes) = self.rows(&raw.taxonomy, &known, sections);
        let messages = self.messages(&raw.degradation, &rows);
        let unknown_outcome = self.unknown_outcome(&raw.degradation, &raw.taxonomy);
        self.streams_bounded(&services, &own.throttle, &raw.services);
        Calls {
            services,
            rows,
            classes,
            messages,
            unknown_outcome,
        }
    }

    /// Each service the API puts behind a workspace has a service file.
    fn workspace_services_defined(&mut self, raw: &RawSpec) {
        for w in raw.api.workspace_services.iter().flat_map(|w| &w.services) {
            if !raw
                .services
                .iter()
                .any(|s| s.service.as_str() == w.as_str())
            {
                self.error(
                    w,
                    "workspace_services.services",
                    format!("no service file defines `{}`", &**w),
                );
            }
        }
    }

    /// The breaker and its warm-up, the streams, the alerts' rules, the
    /// features, the replay queue and the fleet.
    fn guards(
        &mut self,
        raw: &RawSpec,
        own: &Standalone,
        names: &Known,
        services: &[Service],
    ) -> Guards {
        let policy = &raw.policy;
        let open_alert = policy.alerts.breaker_open.as_ref().map(|a| leak(a));
        let breaker = policy
            .breaker
            .as_ref()
            .map(|b| self.breaker(b, services, &own.timeouts, open_alert.unwrap_or_default()));
        let warm_up = (policy.breaker.iter())
            .flat_map(|b| self.warm_up(b, services, names, own.pattern.as_ref()))
            .collect();
        let feature_names: Vec<&str> = raw
            .degradation
            .features
            .keys()
            .map(|k| k.as_str())
            .collect();
        let streams = self.streams(&raw.streams, services, &own.types, &feature_names);
        let fallbacks_sustained = self.fallbacks_sustained(&raw.streams, names);
        let buffering = self.buffering(&raw.streams, names);
        let deadline = self.duration(&policy.deadline.interactive, "deadline.interactive");
        let alerting = self.alerting(policy, names);
        let features = self.features(&raw.degradation, services);
        let replay =
            (policy.replay.as_ref()).map(|r| self.replay(r, &own.throttle, names, deadline));
        let fleet = (policy.fleet.as_ref()).map(|f| self.fleet(f, &own.throttle, names));
        let deadline_source = self.source(&policy.deadline.source, policy.deadline.inferred);
        Guards {
            breaker,
            warm_up,
            streams,
            fallbacks_sustained,
            buffering,
            deadline,
            deadline_source,
            alerting,
            features,
            replay,
            fleet,
        }
    }

    /// How many fallbacks within how long raise which alert.
    fn fallbacks_sustained(
        &mut self,
        streams: &crate::spec::StreamsFile,
        names: &Known,
    ) -> Option<(AlertRate, &'static str)> {
        let f = streams.fallbacks_sustained.as_ref()?;
        self.reference(
            &f.alert,
            "fallbacks_sustained.alert",
            "alert",
            &names.alerts,
        );
        self.source(&f.source, f.inferred);
        let at_least = self.positive(&f.at_least, "fallbacks_sustained.at_least");
        let within = self.duration(&f.within, "fallbacks_sustained.within")?;
        Some((AlertRate { at_least, within }, leak(&f.alert)))
    }

    /// When a stream that buffers instead of streaming raises its alert.
    fn buffering(
        &mut self,
        streams: &crate::spec::StreamsFile,
        names: &Known,
    ) -> Option<BufferingRule> {
        let b = streams.buffering.as_ref()?;
        self.reference(&b.alert, "buffering.alert", "alert", &names.alerts);
        self.source(&b.source, b.inferred);
        Some(BufferingRule {
            min_events: self.positive(&b.min_events, "buffering.min_events"),
            burst: self.duration(&b.burst, "buffering.burst")?,
            silent_for: self.duration(&b.silent_for, "buffering.silent_for")?,
            confirm_after: self.positive(&b.confirm_after, "buffering.confirm_after"),
            alert: leak(&b.alert),
        })
    }

    /// The policy's own alerts: a breaker's goes with a breaker, the
    /// retry-exhaustion alert's rate, and how long their rules look back.
    fn alerting(&mut self, policy: &crate::spec::PolicyFile, names: &Known) -> Alerting {
        let alerts = &policy.alerts;
        match (&alerts.breaker_open, &policy.breaker) {
            (Some(alert), Some(_)) => {
                self.reference(alert, "alerts.breaker_open", "alert", &names.alerts);
            }
            (Some(alert), None) => self.error(
                alert,
                "alerts.breaker_open",
                "there is no breaker to stay open: drop it, or add a `breaker` section",
            ),
            (None, Some(_)) => self.error(
                &alerts.retry_exhausted,
                "alerts.breaker_open",
                "a breaker needs the alert it raises when it stays open: add `breaker_open`",
            ),
            (None, None) => {}
        }
        let field = "alerts.retry_exhausted";
        self.reference(&alerts.retry_exhausted, field, "alert", &names.alerts);
        self.source(&alerts.source, alerts.inferred);
        let retry_exhausted_rate = alerts.retry_exhausted_rate.as_ref().and_then(|r| {
            let at_least = self.positive(&r.at_least, "alerts.retry_exhausted_rate.at_least");
            let within = self.duration(&r.within, "alerts.retry_exhausted_rate.within")?;
            Some(AlertRate { at_least, within })
        });
        Alerting {
            retry_exhausted: leak(&alerts.retry_exhausted),
            retry_exhausted_rate,
            look_back: self.duration(&alerts.look_back, "alerts.look_back"),
        }
    }
}

/// The names other items may refer to.
struct Known<'a> {
    timeouts: Vec<&'a str>,
    retries: Vec<&'a str>,
    budgets: Vec<&'a str>,
    streams: Vec<&'a str>,
    ids: Vec<&'a str>,
    types: Vec<&'a str>,
    details: Vec<&'a str>,
    alerts: Vec<&'a str>,
    states: Vec<&'a str>,
    /// The API names a pipeline header.
    pipeline_header: bool,
}

struct Cx<'s> {
    sources: &'s mut Sources,
}

fn position(names: &[&str], wanted: &str) -> Option<usize> {
    names.iter().position(|n| *n == wanted)
}

fn one_of(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn is_snake(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn is_camel(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_uppercase()) && chars.all(|c| c.is_ascii_alphanumeric())
}

/// Parses a size: `512 B`, `64 KiB`, `16 MiB`, `1 GiB` (the space is optional).
pub fn parse_size(text: &str) -> Option<u64> {
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    let scale: u64 = match unit.trim_start() {
        "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale).filter(|&bytes| bytes > 0)
}

/// Longest duration a spec may write: a year, so every one fits the
/// milliseconds the emitter writes (and no typo waits for centuries).
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Parses `500ms`, `30s`, `5m`, `2h` (at most [`MAX_DURATION`]).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    let d = match unit {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => n.checked_mul(60).map(Duration::from_secs),
        "h" => n.checked_mul(3600).map(Duration::from_secs),
        _ => None,
    };
    d.filter(|d| *d <= MAX_DURATION)
}

impl Cx<'_> {
    /// Log names: a target of `[a-z_][a-z0-9_:]*`, fields that are snake_case
    /// and not one of the line's own, at most `MAX_PATH_FIELDS` path fields.
    fn log(&mut self, l: &crate::spec::Log) -> (LogNames, LogFields) {
        const OWN: &[&str] = &[
            "request_id",
            "tenant",
            "pipeline_id",
            "operation",
            "method",
            "path",
            "status",
            "error_class",
            "row",
            "attempt",
            "retry_after_s",
            "latency_ms",
            "circuit_state",
            "body_len",
            "body_sha256",
            "message",
        ];
        let target_ok = l
            .target
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
            && l.target
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == ':');
        if !target_ok {
            self.error(
                &l.target,
                "log.target",
                "a target matches [a-z_][a-z0-9_:]*",
            );
        }
        let field = |cx: &mut Self, text: &Text, key: &str| {
            if !is_snake(text)
                || OWN.contains(&text.as_str())
                || crate::naming::KEYWORDS.contains(&text.as_str())
            {
                cx.error(
                    text,
                    format!("log.{key}"),
                    format!(
                        "`{}` must be a snake_case name the line does not already use, and no Rust keyword",
                        &**text
                    ),
                );
            }
            leak(text)
        };
        let service_field = field(self, &l.service_field, "service_field");
        let workspace_field = field(self, &l.workspace_field, "workspace_field");
        let mut path_fields = Vec::new();
        for (name, placeholders) in &l.path_fields {
            let key = format!("path_fields.{}", &**name);
            let name = field(self, name, &key);
            path_fields.push((name, leak_texts(placeholders.iter().map(|p| p.as_str()))));
        }
        if path_fields.len() > sdk_policy::log::MAX_PATH_FIELDS {
            self.error(
                &l.target,
                "log.path_fields",
                format!("at most {} path fields", sdk_policy::log::MAX_PATH_FIELDS),
            );
        }
        self.source(&l.source, l.inferred);
        let names = LogNames {
            target: leak(&l.target),
            path_fields: leak_all(path_fields),
        };
        let fields = LogFields {
            service: service_field.to_owned(),
            workspace: workspace_field.to_owned(),
        };
        (names, fields)
    }

    /// Metric names: Prometheus' charset, no `_total` (the exporter adds it
    /// to counters), and a breaker or stream metric only where there is one.
    /// A Prometheus metric name, without the `_total` counters get on export.
    fn metric_name(&mut self, text: &Text, field: &str) -> &'static str {
        let ok = text.chars().enumerate().all(|(i, c)| {
            c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
        });
        if text.is_empty() || !ok || text.ends_with("_total") {
            self.error(
                text,
                field,
                "a metric name matches [a-zA-Z_:][a-zA-Z0-9_:]* and has no `_total` (counters get it on export)",
            );
        }
        leak(text)
    }

    fn metrics(&mut self, m: &crate::spec::Metrics, breaker: bool, streams: bool) -> MetricNames {
        let name =
            |cx: &mut Self, text: &Text, key: &str| cx.metric_name(text, &format!("metrics.{key}"));
        let optional =
            |cx: &mut Self, text: &Option<Text>, key: &str, present: bool, section: &str| {
                let t = text.as_ref()?;
                if !present {
                    cx.error(
                        t,
                        format!("metrics.{key}"),
                        format!("the API has no {section} to measure"),
                    );
                }
                Some(name(cx, t, key))
            };
        let circuit_state = optional(self, &m.circuit_state, "circuit_state", breaker, "breaker");
        let circuit_open_seconds = optional(
            self,
            &m.circuit_open_seconds,
            "circuit_open_seconds",
            breaker,
            "breaker",
        );
        let sse_fallback = optional(self, &m.sse_fallback, "sse_fallback", streams, "streams");
        let sse_buffered = optional(self, &m.sse_buffered, "sse_buffered", streams, "streams");
        self.source(&m.source, m.inferred);
        MetricNames {
            requests: name(self, &m.requests, "requests"),
            duration: name(self, &m.duration, "duration"),
            circuit_state,
            circuit_open_seconds,
            sse_fallback,
            sse_buffered,
            alerts: name(self, &m.alerts, "alerts"),
            rate_limited: name(self, &m.rate_limited, "rate_limited"),
        }
    }

    fn error(&mut self, at: &Text, field: impl Into<String>, message: impl Into<String>) {
        self.sources.at(at.span(), field, message);
    }

    fn source(&mut self, source: &Text, inferred: bool) -> Source {
        if source.trim().is_empty() {
            self.error(
                source,
                "source",
                "must name the policy section (e.g. \"§5.2\")",
            );
        }
        Source {
            section: source.to_string(),
            inferred,
        }
    }

    fn duration(&mut self, text: &Text, field: &str) -> Option<Duration> {
        let parsed = parse_duration(text);
        if parsed.is_none() {
            self.error(
                text,
                field,
                format!(
                    "`{}` is not a duration: write e.g. `500ms`, `30s`, `5m` or `2h` (at most 8760h)",
                    &**text
                ),
            );
        }
        parsed
    }

    fn size(&mut self, text: &Text, field: &str) -> Option<u64> {
        let parsed = parse_size(text);
        if parsed.is_none() {
            self.error(
                text,
                field,
                format!(
                    "`{}` is not a size: write e.g. `512 B`, `64 KiB`, `16 MiB` or `1 GiB` (at least 1 B)",
                    &**text
                ),
            );
        }
        parsed
    }

    fn positive(&mut self, value: &Spanned<u32>, field: &str) -> u32 {
        if **value == 0 {
            self.sources.at(value.span(), field, "must be at least 1");
        }
        **value
    }

    fn scope(&mut self, text: &Text, field: &str) -> Option<ScopeNeed> {
        let scope = ScopeNeed::named(text);
        if scope.is_none() {
            self.error(text, field, "scope is `public`, `tenant` or `workspace`");
        }
        scope
    }

    fn reference(&mut self, text: &Text, field: &str, what: &str, names: &[&str]) -> Option<usize> {
        let found = position(names, text);
        if found.is_none() {
            self.error(
                text,
                field,
                format!(
                    "unknown {what} `{}`: expected one of {}",
                    &**text,
                    one_of(names)
                ),
            );
        }
        found
    }

    /// The descriptor of the route `text` names (`handle.route`).
    fn endpoint_ref(
        &mut self,
        text: &Text,
        field: &str,
        services: &[Service],
    ) -> Option<&'static Endpoint> {
        let r = self.route_ref(text, field, services)?;
        Some(services[r.service].routes[r.route].endpoint)
    }

    fn route_ref(&mut self, text: &Text, field: &str, services: &[Service]) -> Option<RouteRef> {
        let found = text.split_once('.').and_then(|(s, r)| {
            let service = services.iter().position(|x| x.handle == s)?;
            let route = services[service].routes.iter().position(|x| x.name == r)?;
            Some(RouteRef { service, route })
        });
        if found.is_none() {
            self.error(
                text,
                field,
                format!(
                    "`{}` names no route: write `handle.route`, e.g. `workspaces.health`",
                    &**text
                ),
            );
        }
        found
    }
}
