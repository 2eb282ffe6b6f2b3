//! Checks the raw files against each other and lowers them to the [`Model`].
//!
//! Every rule records an error at the offending value and carries on, so
//! one run reports every problem of the spec, each with file, line and field.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use marked_yaml::Spanned;

use crate::error::Sources;
use crate::load::RawSpec;
use crate::model::*;
use crate::spec::{self, Text};

/// Lowers a parsed spec; returns `None` when any rule failed (see `sources`).
pub fn lower(raw: &RawSpec, sources: &mut Sources) -> Option<Model> {
    let mut cx = Cx { sources };
    let api = cx.api(&raw.api);
    let timeouts = cx.timeouts(&raw.policy);
    let retries = cx.retries(&raw.policy);
    let throttle = cx.throttle(&raw.policy.throttle);
    let details = cx.details(&raw.taxonomy);
    let (states, alerts) = cx.degradation(&raw.degradation);
    let streams_index: Vec<&str> = raw.streams.streams.keys().map(|k| k.as_str()).collect();
    let types = cx.types(&raw.services, &api);
    let names = Names {
        timeouts: timeouts.iter().map(|t| t.name.as_str()).collect(),
        retries: retries.iter().map(|r| r.name.as_str()).collect(),
        budgets: throttle.budgets.iter().map(|b| b.name.as_str()).collect(),
        streams: streams_index,
        ids: api.ids.iter().map(|i| i.name.as_str()).collect(),
        types: types.iter().map(|t| t.name.as_str()).collect(),
        details: details.iter().map(|d| d.name.as_str()).collect(),
        alerts: alerts.iter().map(|a| a.name.as_str()).collect(),
        states: states.iter().map(|s| s.name.as_str()).collect(),
    };
    let services = cx.services(&raw.services, &api, &names);
    let states_when: Vec<StateTrigger> = states.iter().map(|s| s.when).collect();
    let rows = cx.rows(&raw.taxonomy, &names, &states_when);
    let messages = cx.messages(&raw.degradation, &rows);
    let breaker = cx.breaker(&raw.policy.breaker, &services, &names);
    let streams = cx.streams(&raw.streams, &services);
    let deadline = cx.duration(&raw.policy.deadline.interactive, "deadline.interactive");
    let policy_alerts = &raw.policy.alerts;
    cx.reference(
        &policy_alerts.breaker_open,
        "alerts.breaker_open",
        "alert",
        &names.alerts,
    );
    cx.reference(
        &policy_alerts.retry_exhausted,
        "alerts.retry_exhausted",
        "alert",
        &names.alerts,
    );
    cx.source(&policy_alerts.source, policy_alerts.inferred);
    let features = cx.features(&raw.degradation, &services);
    let deadline_source = cx.source(&raw.policy.deadline.source, raw.policy.deadline.inferred);
    if cx.sources.has_errors() {
        return None;
    }
    Some(Model {
        api,
        timeouts,
        deadline: deadline?,
        deadline_source,
        retries,
        breaker: breaker?,
        throttle,
        details,
        rows,
        streams,
        states,
        messages,
        alerts,
        breaker_alert: policy_alerts.breaker_open.to_string(),
        retry_exhausted_alert: policy_alerts.retry_exhausted.to_string(),
        features,
        types,
        services,
    })
}

/// The names other items may refer to.
struct Names<'a> {
    timeouts: Vec<&'a str>,
    retries: Vec<&'a str>,
    budgets: Vec<&'a str>,
    streams: Vec<&'a str>,
    ids: Vec<&'a str>,
    types: Vec<&'a str>,
    details: Vec<&'a str>,
    alerts: Vec<&'a str>,
    states: Vec<&'a str>,
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

/// Parses `500ms`, `30s`, `5m`, `2h`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    match unit {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => n.checked_mul(60).map(Duration::from_secs),
        "h" => n.checked_mul(3600).map(Duration::from_secs),
        _ => None,
    }
}

impl Cx<'_> {
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
                    "`{}` is not a duration: write e.g. `500ms`, `30s`, `5m` or `2h`",
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

    fn api(&mut self, api: &spec::ApiFile) -> Api {
        let pattern = &api.ids.pattern;
        if pattern.as_str() != sdk_runtime::scope::ID_PATTERN {
            self.error(
                pattern,
                "ids.pattern",
                format!(
                    "the runtime enforces `{}` and no other ID pattern",
                    sdk_runtime::scope::ID_PATTERN
                ),
            );
        }
        if api.auth.scheme.as_str() != "bearer" {
            self.error(
                &api.auth.scheme,
                "auth.scheme",
                "only `bearer` is supported",
            );
        }
        let mut ids = Vec::new();
        for (name, id) in &api.ids.types {
            if !is_camel(name) || !name.ends_with("Id") {
                self.error(
                    name,
                    format!("ids.types.{}", &**name),
                    "ID types are CamelCase names ending in `Id`",
                );
            }
            if ["TenantId", "WorkspaceId"].contains(&name.as_str()) {
                self.error(
                    name,
                    format!("ids.types.{}", &**name),
                    "TenantId and WorkspaceId are built in",
                );
            }
            ids.push(IdType {
                name: name.to_string(),
                doc: id.doc.to_string(),
                source: self.source(&id.source, id.inferred),
            });
        }
        for reserved in &api.ids.reserved_tenants {
            if sdk_runtime::Id::parse(
                &sdk_runtime::policy::IdRules {
                    reserved_tenants: &[],
                },
                sdk_runtime::IdKind::Workspace,
                reserved,
            )
            .is_err()
            {
                self.error(
                    reserved,
                    "ids.reserved_tenants",
                    "a reserved tenant must itself look like an ID",
                );
            }
        }
        let h = &api.headers;
        Api {
            name: api.api.to_string(),
            title: api.title.to_string(),
            crate_name: api.crate_name.to_string(),
            client: api.client.to_string(),
            doc: api.doc.to_string(),
            origin_env: api.origin.env.to_string(),
            key_env: api.auth.env.to_string(),
            tenant_env: api.auth.tenant_env.to_string(),
            headers: Headers {
                authorization: h.authorization.to_string(),
                tenant: h.tenant.to_string(),
                workspace: h.workspace.to_string(),
                request_id: h.request_id.to_string(),
                pipeline: h.pipeline.to_string(),
            },
            id_pattern: pattern.to_string(),
            reserved_tenants: api
                .ids
                .reserved_tenants
                .iter()
                .map(|t| t.to_string())
                .collect(),
            ids,
            workspace_services: api
                .workspace_services
                .services
                .iter()
                .map(|s| s.to_string())
                .collect(),
            source: self.source(&api.origin.source, api.origin.inferred),
        }
    }

    fn timeouts(&mut self, policy: &spec::PolicyFile) -> Vec<Timeout> {
        let mut out = Vec::new();
        for (name, t) in &policy.timeouts {
            let field = format!("timeouts.{}", &**name);
            if !is_snake(name) {
                self.error(name, &field, "timeout class names are snake_case");
            }
            let per_attempt = self.duration(&t.per_attempt, &format!("{field}.per_attempt"));
            let deploy_suspected = t
                .deploy_suspected
                .as_ref()
                .and_then(|d| self.duration(d, &format!("{field}.deploy_suspected")));
            out.push(Timeout {
                name: name.to_string(),
                doc: t.doc.to_string(),
                per_attempt: per_attempt.unwrap_or_default(),
                deploy_suspected,
                source: self.source(&t.source, t.inferred),
            });
        }
        out
    }

    fn retries(&mut self, policy: &spec::PolicyFile) -> Vec<Retry> {
        let mut out = Vec::new();
        for (name, r) in &policy.retries {
            let field = format!("retries.{}", &**name);
            let schedule = self.schedule(r, &field);
            out.push(Retry {
                name: name.to_string(),
                doc: r.doc.to_string(),
                schedule: schedule.unwrap_or(RetrySchedule::Never),
                source: self.source(&r.source, r.inferred),
            });
        }
        out
    }

    fn schedule(&mut self, r: &spec::RetryClass, field: &str) -> Option<RetrySchedule> {
        // Which optional numbers each kind takes; anything else is refused.
        let (allowed, _): (&[&str], ()) = match r.kind.as_str() {
            "never" => (&[], ()),
            "exponential" => (&["attempts", "base", "factor", "cap"], ()),
            "deploy_window" | "once" => (&["attempts"], ()),
            "retry_after" => (&["attempts", "floor", "jitter"], ()),
            other => {
                self.error(
                    &r.kind,
                    format!("{field}.kind"),
                    format!(
                        "unknown retry kind `{other}`: expected `never`, `exponential`, `deploy_window`, `retry_after` or `once`"
                    ),
                );
                return None;
            }
        };
        let present = [
            ("attempts", r.attempts.as_ref().map(|a| a.span())),
            ("base", r.base.as_ref().map(|a| a.span())),
            ("factor", r.factor.as_ref().map(|a| a.span())),
            ("cap", r.cap.as_ref().map(|a| a.span())),
            ("floor", r.floor.as_ref().map(|a| a.span())),
            ("jitter", r.jitter.as_ref().map(|a| a.span())),
        ];
        let mut ok = true;
        for (key, span) in present {
            match (span, allowed.contains(&key)) {
                (Some(span), false) => {
                    self.sources.at(
                        span,
                        format!("{field}.{key}"),
                        format!("`{key}` does not apply to kind `{}`", &*r.kind),
                    );
                    ok = false;
                }
                (None, true) => {
                    self.error(
                        &r.kind,
                        format!("{field}.{key}"),
                        format!("kind `{}` needs `{key}`", &*r.kind),
                    );
                    ok = false;
                }
                _ => {}
            }
        }
        if !ok {
            return None;
        }
        let attempts = r
            .attempts
            .as_ref()
            .map(|a| self.positive(a, &format!("{field}.attempts")));
        let d = |cx: &mut Self, t: &Option<Text>, key: &str| {
            t.as_ref()
                .and_then(|t| cx.duration(t, &format!("{field}.{key}")))
        };
        Some(match r.kind.as_str() {
            "never" => RetrySchedule::Never,
            "exponential" => RetrySchedule::Exponential {
                attempts: attempts?,
                base: d(self, &r.base, "base")?,
                factor: self.positive(r.factor.as_ref()?, &format!("{field}.factor")),
                cap: d(self, &r.cap, "cap")?,
            },
            "deploy_window" => RetrySchedule::DeployWindow {
                attempts: attempts?,
            },
            "once" => RetrySchedule::Once {
                attempts: attempts?,
            },
            _ => RetrySchedule::RetryAfter {
                attempts: attempts?,
                floor: d(self, &r.floor, "floor")?,
                jitter: d(self, &r.jitter, "jitter")?,
            },
        })
    }

    fn throttle(&mut self, t: &spec::Throttle) -> Throttle {
        let mut budgets = Vec::new();
        for (name, b) in &t.budgets {
            let field = format!("throttle.budgets.{}", &**name);
            budgets.push(Budget {
                name: name.to_string(),
                doc: b.doc.to_string(),
                max_in_flight: b
                    .max_in_flight
                    .as_ref()
                    .map(|v| self.positive(v, &format!("{field}.max_in_flight"))),
                per_minute: b
                    .per_minute
                    .as_ref()
                    .map(|v| self.positive(v, &format!("{field}.per_minute"))),
                source: self.source(&b.source, b.inferred),
            });
        }
        let p = &t.polling;
        let interval = self
            .duration(&p.interval, "throttle.polling.interval")
            .unwrap_or_default();
        let floor = self
            .duration(&p.floor, "throttle.polling.floor")
            .unwrap_or_default();
        if interval < floor {
            self.error(
                &p.interval,
                "throttle.polling.interval",
                "the polling interval is below its own floor",
            );
        }
        Throttle {
            max_in_flight: self.positive(&t.max_in_flight, "throttle.max_in_flight"),
            per_second: self.positive(&t.per_second, "throttle.per_second"),
            budgets,
            polling_interval: interval,
            polling_floor: floor,
            polling_hot_factor: self.positive(&p.hot_factor, "throttle.polling.hot_factor"),
            source: self.source(&t.source, t.inferred),
        }
    }

    fn details(&mut self, taxonomy: &spec::TaxonomyFile) -> Vec<DetailSet> {
        let mut out = Vec::new();
        for (name, set) in &taxonomy.details {
            if set.contains.is_empty() {
                self.error(
                    name,
                    format!("details.{}.contains", &**name),
                    "a detail set needs at least one substring",
                );
            }
            out.push(DetailSet {
                name: name.to_string(),
                doc: set.doc.to_string(),
                contains: set.contains.iter().map(|c| c.to_lowercase()).collect(),
                source: self.source(&set.source, set.inferred),
            });
        }
        out
    }

    fn degradation(&mut self, d: &spec::DegradationFile) -> (Vec<State>, Vec<Alert>) {
        let mut states = Vec::new();
        for (name, s) in &d.states {
            let when = match s.when.as_str() {
                "otherwise" => StateTrigger::Otherwise,
                "row" => StateTrigger::Row,
                "breaker_open" => StateTrigger::BreakerOpen,
                "deploy_suspected" => StateTrigger::DeploySuspected,
                "stage_failed" => StateTrigger::StageFailed,
                other => {
                    self.error(
                        &s.when,
                        format!("states.{}.when", &**name),
                        format!("unknown trigger `{other}`: `otherwise`, `row`, `breaker_open`, `deploy_suspected` or `stage_failed`"),
                    );
                    StateTrigger::Otherwise
                }
            };
            states.push(State {
                name: name.to_string(),
                doc: s.doc.to_string(),
                when,
                copy: s.copy.as_ref().map(|c| c.to_string()),
                source: self.source(&s.source, s.inferred),
            });
        }
        let mut alerts = Vec::new();
        for (name, a) in &d.alerts {
            if !["page", "ops"].contains(&a.severity.as_str()) {
                self.error(
                    &a.severity,
                    format!("alerts.{}.severity", &**name),
                    "severity is `page` or `ops`",
                );
            }
            alerts.push(Alert {
                name: name.to_string(),
                doc: a.doc.to_string(),
                severity: a.severity.to_string(),
                source: self.source(&a.source, a.inferred),
            });
        }
        (states, alerts)
    }

    fn messages(&mut self, d: &spec::DegradationFile, rows: &[Row]) -> Vec<Message> {
        let classes: BTreeSet<&str> = rows.iter().map(|r| r.class.as_str()).collect();
        let mut out = Vec::new();
        for (class, m) in &d.messages {
            if !classes.contains(class.as_str()) {
                self.error(
                    class,
                    format!("messages.{}", &**class),
                    format!("no taxonomy row has the class `{}`", &**class),
                );
            }
            out.push(Message {
                class: class.to_string(),
                copy: m.copy.to_string(),
                source: self.source(&m.source, m.inferred),
            });
        }
        out
    }

    fn types(&mut self, services: &[spec::ServiceFile], api: &Api) -> Vec<TypeDef> {
        let mut seen: HashMap<String, String> = HashMap::new();
        let mut out = Vec::new();
        for service in services {
            for (name, t) in &service.types {
                let field = format!("types.{}", &**name);
                if !is_camel(name) {
                    self.error(name, &field, "type names are CamelCase");
                }
                if api.ids.iter().any(|i| i.name == name.as_str())
                    || ["TenantId", "WorkspaceId"].contains(&name.as_str())
                {
                    self.error(name, &field, "this name is already an ID type");
                }
                if let Some(other) = seen.insert(name.to_string(), service.service.to_string()) {
                    self.error(
                        name,
                        &field,
                        format!("type `{}` is already defined by service `{other}`", &**name),
                    );
                }
                let shape = match (&t.fields, &t.values) {
                    (Some(fields), None) => Shape::Struct(
                        fields
                            .iter()
                            .map(|(f, _)| Field {
                                name: f.to_string(),
                                ty: TypeExpr::String, // resolved below, once every name is known
                            })
                            .collect(),
                    ),
                    (None, Some(values)) if !values.is_empty() => {
                        Shape::Enum(values.iter().map(|v| v.to_string()).collect())
                    }
                    _ => {
                        self.error(
                            name,
                            &field,
                            "a type has either `fields` or a non-empty `values` list",
                        );
                        Shape::Enum(Vec::new())
                    }
                };
                out.push(TypeDef {
                    name: name.to_string(),
                    doc: t.doc.to_string(),
                    shape,
                    service: service.service.to_string(),
                    source: t.source.as_ref().map(|s| self.source(s, t.inferred)),
                });
            }
        }
        // Resolve field types now that every type name is known.
        let type_names: Vec<String> = out.iter().map(|t| t.name.clone()).collect();
        let ids: Vec<&str> = api.ids.iter().map(|i| i.name.as_str()).collect();
        let names = Names {
            timeouts: vec![],
            retries: vec![],
            budgets: vec![],
            streams: vec![],
            ids,
            types: type_names.iter().map(|s| s.as_str()).collect(),
            details: vec![],
            alerts: vec![],
            states: vec![],
        };
        let mut i = 0;
        for service in services {
            for (name, t) in &service.types {
                if let (Some(fields), Shape::Struct(lowered)) = (&t.fields, &mut out[i].shape) {
                    for ((field, ty), target) in fields.iter().zip(lowered.iter_mut()) {
                        if !is_snake(field) {
                            self.error(
                                field,
                                format!("types.{}.fields.{}", &**name, &**field),
                                "field names are snake_case",
                            );
                        }
                        let path = format!("types.{}.fields.{}", &**name, &**field);
                        target.ty = self.type_expr(ty, &path, &names).unwrap_or(TypeExpr::Json);
                    }
                }
                i += 1;
            }
        }
        out
    }

    fn type_expr(&mut self, text: &Text, field: &str, names: &Names) -> Option<TypeExpr> {
        match parse_type(text, names) {
            Ok(t) => Some(t),
            Err(message) => {
                self.error(text, field, message);
                None
            }
        }
    }

    fn services(
        &mut self,
        services: &[spec::ServiceFile],
        api: &Api,
        names: &Names,
    ) -> Vec<Service> {
        let mut handles: HashMap<String, String> = HashMap::new();
        let mut out = Vec::new();
        for s in services {
            if !is_snake(&s.handle) {
                self.error(&s.handle, "handle", "handles are snake_case method names");
            }
            if let Some(other) = handles.insert(s.handle.to_string(), s.service.to_string()) {
                self.error(
                    &s.handle,
                    "handle",
                    format!(
                        "duplicate method name: service `{other}` already has handle `{}`",
                        &*s.handle
                    ),
                );
            }
            let scope = self.scope(&s.scope, "scope");
            let lane = match s.lane.as_str() {
                "key" => Lane::Key,
                "bff" => Lane::Bff,
                _ => {
                    self.error(&s.lane, "lane", "lane is `key` or `bff`");
                    Lane::Key
                }
            };
            if !s.prefix.starts_with('/') || s.prefix.ends_with('/') {
                self.error(
                    &s.prefix,
                    "prefix",
                    "a prefix starts with `/` and does not end with one",
                );
            }
            let needs_workspace = api
                .workspace_services
                .iter()
                .any(|w| w == s.service.as_str());
            let mut routes = Vec::new();
            for (name, r) in &s.routes {
                let route = self.route(
                    name,
                    r,
                    s,
                    scope.unwrap_or(ScopeNeed::Tenant),
                    needs_workspace,
                    names,
                );
                routes.push(route);
            }
            out.push(Service {
                name: s.service.to_string(),
                handle: s.handle.to_string(),
                doc: s.doc.to_string(),
                prefix: s.prefix.to_string(),
                scope: scope.unwrap_or(ScopeNeed::Tenant),
                lane,
                routes,
                source: self.source(&s.source, s.inferred),
            });
        }
        for w in &api.workspace_services {
            if !services.iter().any(|s| s.service.as_str() == w) {
                self.sources.in_file(
                    0,
                    "workspace_services",
                    format!("no service file defines `{w}`"),
                );
            }
        }
        out
    }

    fn scope(&mut self, text: &Text, field: &str) -> Option<ScopeNeed> {
        match text.as_str() {
            "public" => Some(ScopeNeed::Public),
            "tenant" => Some(ScopeNeed::Tenant),
            "workspace" => Some(ScopeNeed::Workspace),
            _ => {
                self.error(text, field, "scope is `public`, `tenant` or `workspace`");
                None
            }
        }
    }

    fn route(
        &mut self,
        name: &Text,
        r: &spec::Route,
        service: &spec::ServiceFile,
        service_scope: ScopeNeed,
        needs_workspace: bool,
        names: &Names,
    ) -> Route {
        let field = |key: &str| format!("routes.{}.{key}", &**name);
        if !is_snake(name) {
            self.error(
                name,
                format!("routes.{}", &**name),
                "route names are snake_case method names",
            );
        }
        let method = match r.method.as_str() {
            "GET" => Method::Get,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "PATCH" => Method::Patch,
            "DELETE" => Method::Delete,
            other => {
                self.error(
                    &r.method,
                    field("method"),
                    format!("unknown method `{other}`: GET, POST, PUT, PATCH or DELETE"),
                );
                Method::Get
            }
        };
        if !r.path.starts_with('/') {
            self.error(&r.path, field("path"), "a path starts with `/`");
        }
        let placeholders = placeholders(&r.path);
        for p in &placeholders {
            if !r.path_params.keys().any(|k| k.as_str() == p) {
                self.error(
                    &r.path,
                    field("path"),
                    format!("placeholder `{{{p}}}` has no entry in `path_params`"),
                );
            }
        }
        let mut path_params = Vec::new();
        for (param, ty) in &r.path_params {
            if !placeholders.iter().any(|p| p == param.as_str()) {
                self.error(
                    param,
                    field(&format!("path_params.{}", &**param)),
                    format!(
                        "path parameter `{}` is missing from the path template `{}`",
                        &**param, &*r.path
                    ),
                );
            }
            let lowered = self.type_expr(ty, &field(&format!("path_params.{}", &**param)), names);
            if let Some(t) = &lowered
                && !matches!(t, TypeExpr::Id(_) | TypeExpr::String)
            {
                self.error(
                    ty,
                    field(&format!("path_params.{}", &**param)),
                    "a path parameter is an ID type or `string`",
                );
            }
            path_params.push((param.to_string(), lowered.unwrap_or(TypeExpr::String)));
        }
        // Keep template order: the emitter renders parameters as they appear.
        path_params.sort_by_key(|(p, _)| placeholders.iter().position(|q| q == p));
        let query = r
            .query
            .iter()
            .map(|(q, ty)| {
                let t = self.type_expr(ty, &field(&format!("query.{}", &**q)), names);
                (q.to_string(), t.unwrap_or(TypeExpr::String))
            })
            .collect();
        let body = r
            .body
            .as_ref()
            .and_then(|b| self.type_expr(b, &field("body"), names));
        if body.is_some() && method == Method::Get {
            self.error(
                r.body.as_ref().expect("checked"),
                field("body"),
                "a GET route has no body",
            );
        }
        let returns = match (&r.returns, &r.stream) {
            (Some(_), Some(stream)) => {
                self.error(stream, field("stream"), "a stream route has no `returns`");
                Returns::Nothing
            }
            (None, Some(stream)) => match position(&names.streams, stream) {
                Some(i) => Returns::Stream(i),
                None => {
                    self.error(
                        stream,
                        field("stream"),
                        format!(
                            "unknown stream `{}`: expected one of {}",
                            &**stream,
                            one_of(&names.streams)
                        ),
                    );
                    Returns::Nothing
                }
            },
            (Some(t), None) if t.as_str() == "none" => Returns::Nothing,
            (Some(t), None) => Returns::Body(
                self.type_expr(t, &field("returns"), names)
                    .unwrap_or(TypeExpr::Json),
            ),
            (None, None) => {
                self.error(
                    name,
                    field("returns"),
                    "a route needs `returns` (or `stream`)",
                );
                Returns::Nothing
            }
        };
        let timeout = self.reference(
            &r.timeout,
            &field("timeout"),
            "timeout class",
            &names.timeouts,
        );
        let retry = self.reference(&r.retry, &field("retry"), "retry class", &names.retries);
        let budget = self.reference(&r.budget, &field("budget"), "budget", &names.budgets);
        let scope = match &r.scope {
            Some(s) => self.scope(s, &field("scope")).unwrap_or(service_scope),
            None => service_scope,
        };
        if scope == ScopeNeed::Workspace && service_scope != ScopeNeed::Workspace {
            self.error(
                r.scope.as_ref().unwrap_or(&service.scope),
                field("scope"),
                "a workspace route belongs to a service whose scope is `workspace` (its handle carries the workspace)",
            );
        }
        if needs_workspace && scope != ScopeNeed::Workspace {
            let at = r.scope.as_ref().unwrap_or(&service.scope);
            self.error(
                at,
                field("scope"),
                format!(
                    "`{}` is a workspace service (policy §3.2): every route needs the workspace, so scope must be `workspace`",
                    &*service.service
                ),
            );
        }
        let conflict = match r.conflict.as_ref().map(|c| c.as_str()) {
            None => Conflict::Error,
            Some("success") => Conflict::Success,
            Some("poll") => Conflict::Poll,
            Some(other) => {
                self.error(
                    r.conflict.as_ref().expect("some"),
                    field("conflict"),
                    format!("unknown conflict rule `{other}`: `success` or `poll`"),
                );
                Conflict::Error
            }
        };
        if conflict == Conflict::Success && method == Method::Get {
            self.error(
                r.conflict.as_ref().expect("some"),
                field("conflict"),
                "`conflict: success` is for create routes, not GET",
            );
        }
        if r.replay && !r.idempotent {
            self.error(
                name,
                field("replay"),
                "only idempotent routes may be replayed",
            );
        }
        Route {
            name: name.to_string(),
            doc: r.doc.to_string(),
            method,
            path: format!("{}{}", &*service.prefix, &*r.path),
            path_params,
            query,
            body,
            returns,
            idempotent: r.idempotent,
            timeout: timeout.unwrap_or(0),
            retry: retry.unwrap_or(0),
            budget: budget.unwrap_or(0),
            replay: r.replay,
            scope,
            conflict,
            pipeline_id: r.pipeline_id,
            source: self.source(&r.source, r.inferred),
        }
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

    fn rows(
        &mut self,
        taxonomy: &spec::TaxonomyFile,
        names: &Names,
        states_when: &[StateTrigger],
    ) -> Vec<Row> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for r in &taxonomy.rows {
            let field = |key: &str| format!("rows.{}.{key}", &*r.row);
            if !seen.insert(r.row.as_str()) {
                self.error(&r.row, field("row"), format!("duplicate row `{}`", &*r.row));
            }
            let m = &r.matches;
            let outcome = match m.outcome.as_str() {
                "connection" => Some(OutcomeKind::Connection),
                "status" => Some(OutcomeKind::Status),
                "decode" => Some(OutcomeKind::Decode),
                "deadline" => Some(OutcomeKind::Deadline),
                "circuit_open" => Some(OutcomeKind::CircuitOpen),
                "invalid_scope" => Some(OutcomeKind::InvalidScope),
                "stream_error" => Some(OutcomeKind::StreamError),
                "stream_timeout" => Some(OutcomeKind::StreamTimeout),
                "stream_stalled" => Some(OutcomeKind::StreamStalled),
                other => {
                    self.error(
                        &m.outcome,
                        field("match.outcome"),
                        format!("unknown outcome `{other}`"),
                    );
                    None
                }
            };
            let status = match (&m.status, &m.status_range) {
                (Some(s), None) => Some((**s, **s)),
                (None, Some(range)) if range.len() == 2 && *range[0] <= *range[1] => {
                    Some((*range[0], *range[1]))
                }
                (None, Some(_)) => {
                    self.error(
                        &r.row,
                        field("match.status_range"),
                        "a status range is `[low, high]` with low <= high",
                    );
                    None
                }
                (Some(s), Some(_)) => {
                    self.sources.at(
                        s.span(),
                        field("match.status"),
                        "give `status` or `status_range`, not both",
                    );
                    None
                }
                (None, None) => None,
            };
            let narrows = status.is_some()
                || m.detail.is_some()
                || m.retry_after.is_some()
                || m.conflict.is_some();
            if narrows && outcome.is_some_and(|o| o != OutcomeKind::Status) {
                self.error(
                    &m.outcome,
                    field("match"),
                    "status, detail, retry_after and conflict only narrow a `status` outcome",
                );
            }
            let detail = m.detail.as_ref().and_then(|d| {
                self.reference(d, &field("match.detail"), "detail set", &names.details)
            });
            let conflict = m.conflict.as_ref().and_then(|c| match c.as_str() {
                "success" => Some(Conflict::Success),
                "poll" => Some(Conflict::Poll),
                _ => {
                    self.error(
                        c,
                        field("match.conflict"),
                        "conflict is `success` or `poll`",
                    );
                    None
                }
            });
            if !is_snake(&r.class) {
                self.error(&r.class, field("class"), "error classes are snake_case");
            }
            let retry = r
                .retry
                .as_ref()
                .and_then(|c| self.reference(c, &field("retry"), "retry class", &names.retries));
            if let Some(alert) = &r.alert {
                self.reference(alert, &field("alert"), "alert", &names.alerts);
            }
            let feature_state = r.feature_state.as_ref().and_then(|st| {
                let i =
                    self.reference(st, &field("feature_state"), "feature state", &names.states)?;
                if states_when[i] != StateTrigger::Row {
                    self.error(
                        st,
                        field("feature_state"),
                        format!(
                            "state `{}` is not entered by rows (its `when` is not `row`)",
                            &**st
                        ),
                    );
                }
                Some(i)
            });
            let remember_for = r
                .remember_for
                .as_ref()
                .and_then(|d| self.duration(d, &field("remember_for")));
            out.push(Row {
                row: r.row.to_string(),
                outcome: outcome.unwrap_or(OutcomeKind::Status),
                status,
                detail,
                retry_after: m.retry_after,
                conflict,
                class: r.class.to_string(),
                retry,
                feeds_breaker: r.feeds_breaker,
                alert: r.alert.as_ref().map(|a| a.to_string()),
                alert_outside_deploy: r.alert_outside_deploy,
                feature_state,
                remember_for,
                escalate_to: None, // resolved below, once every row is known
                action: r.action.to_string(),
                source: self.source(&r.source, r.inferred),
            });
        }
        let names: Vec<String> = out.iter().map(|r| r.row.clone()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        for (i, r) in taxonomy.rows.iter().enumerate() {
            let Some(target) = &r.escalate_to else {
                continue;
            };
            let field = format!("rows.{}.escalate_to", &*r.row);
            out[i].escalate_to = self.reference(target, &field, "row", &names);
            if out[i].escalate_to == Some(i) {
                self.error(target, &field, "a row cannot escalate to itself");
            }
            if r.retry.is_none() {
                self.error(
                    target,
                    &field,
                    "escalation happens on the retry: the row needs a `retry` class",
                );
            }
        }
        for r in &taxonomy.rows {
            if r.alert_outside_deploy && r.alert.is_none() {
                self.error(
                    &r.row,
                    format!("rows.{}.alert_outside_deploy", &*r.row),
                    "needs an `alert`",
                );
            }
        }
        out
    }

    fn breaker(
        &mut self,
        b: &spec::Breaker,
        services: &[Service],
        names: &Names,
    ) -> Option<Breaker> {
        let probe = self.route_ref(&b.probe_route, "breaker.probe_route", services);
        let canary = self.route_ref(&b.canary_route, "breaker.canary_route", services);
        if let Some(p) = probe
            && services[p.service].routes[p.route].scope != ScopeNeed::Public
        {
            self.error(
                &b.probe_route,
                "breaker.probe_route",
                "the probe route must be public (it runs while auth may be broken)",
            );
        }
        if let Some(c) = canary
            && services[c.service].routes[c.route].method != Method::Get
        {
            self.error(
                &b.canary_route,
                "breaker.canary_route",
                "the canary must be a read (GET)",
            );
        }
        let probe_timeout = self.reference(
            &b.probe_timeout,
            "breaker.probe_timeout",
            "timeout class",
            &names.timeouts,
        );
        let canary_timeout = self.reference(
            &b.canary_timeout,
            "breaker.canary_timeout",
            "timeout class",
            &names.timeouts,
        );
        let warm_up = self.warm_up(b, services);
        Some(Breaker {
            threshold: self.positive(&b.threshold, "breaker.threshold"),
            window: self.duration(&b.window, "breaker.window")?,
            distinct_endpoints: b.distinct_endpoints,
            probe: probe?,
            probe_interval: self.duration(&b.probe_interval, "breaker.probe_interval")?,
            probe_timeout: probe_timeout?,
            healthy_probes: self.positive(&b.healthy_probes, "breaker.healthy_probes"),
            canary: canary?,
            canary_timeout: canary_timeout?,
            deploy_suspected: self.duration(&b.deploy_suspected, "breaker.deploy_suspected")?,
            alert_after: self.duration(&b.alert_after, "breaker.alert_after")?,
            warm_up,
            source: self.source(&b.source, b.inferred),
        })
    }

    fn warm_up(&mut self, b: &spec::Breaker, services: &[Service]) -> Vec<WarmUp> {
        let mut out = Vec::new();
        for (i, w) in b.warm_up.iter().enumerate() {
            let field = |key: &str| format!("breaker.warm_up.{i}.{key}");
            let Some(route) = self.route_ref(&w.route, &field("route"), services) else {
                continue;
            };
            let target = &services[route.service].routes[route.route];
            if w.path.len() != target.path_params.len() {
                self.error(
                    &w.route,
                    field("path"),
                    format!(
                        "`{}` has {} path parameters, the warm-up gives {}",
                        &*w.route,
                        target.path_params.len(),
                        w.path.len()
                    ),
                );
            }
            let body = w.body.as_ref().and_then(|text| {
                match serde_json::from_str::<serde_json::Value>(text) {
                    Ok(value) => Some(value.to_string()),
                    Err(e) => {
                        self.error(text, field("body"), format!("not valid JSON: {e}"));
                        None
                    }
                }
            });
            if w.body.is_some() != target.body.is_some() {
                self.error(
                    &w.route,
                    field("body"),
                    "give a body exactly when the route takes one",
                );
            }
            out.push(WarmUp {
                route,
                path: w.path.iter().map(|p| p.to_string()).collect(),
                body,
                source: self.source(&w.source, w.inferred),
            });
        }
        out
    }

    fn features(&mut self, d: &spec::DegradationFile, services: &[Service]) -> Vec<Feature> {
        let mut out = Vec::new();
        for (name, f) in &d.features {
            let field = format!("features.{}.routes", &**name);
            if f.routes.is_empty() {
                self.error(name, &field, "a feature depends on at least one route");
            }
            let routes = f
                .routes
                .iter()
                .filter_map(|r| self.route_ref(r, &field, services))
                .collect();
            out.push(Feature {
                name: name.to_string(),
                doc: f.doc.to_string(),
                routes,
                source: self.source(&f.source, f.inferred),
            });
        }
        out
    }

    fn streams(&mut self, s: &spec::StreamsFile, services: &[Service]) -> Vec<Stream> {
        let mut out = Vec::new();
        for (name, st) in &s.streams {
            let field = |key: &str| format!("streams.{}.{key}", &**name);
            let fallback = st
                .fallback
                .as_ref()
                .and_then(|f| self.route_ref(f, &field("fallback"), services));
            out.push(Stream {
                name: name.to_string(),
                doc: st.doc.to_string(),
                watchdog: self
                    .duration(&st.watchdog, &field("watchdog"))
                    .unwrap_or_default(),
                keepalive: st
                    .keepalive
                    .as_ref()
                    .and_then(|k| self.duration(k, &field("keepalive"))),
                ceiling: st
                    .ceiling
                    .as_ref()
                    .and_then(|c| self.duration(c, &field("ceiling"))),
                fallback,
                resync_after_reconnect: st.resync_after_reconnect,
                resend: st.resend,
                first_event: st.first_event.as_ref().map(|e| e.to_string()),
                terminal_events: st.terminal_events.iter().map(|e| e.to_string()).collect(),
                source: self.source(&st.source, st.inferred),
            });
        }
        out
    }
}

/// The `{name}` placeholders of a path template, in order.
pub fn placeholders(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        out.push(rest[open + 1..open + close].to_string());
        rest = &rest[open + close + 1..];
    }
    out
}

/// Parses a type expression such as `list<KbId>?`.
fn parse_type(text: &str, names: &Names) -> Result<TypeExpr, String> {
    let text = text.trim();
    if let Some(inner) = text.strip_suffix('?') {
        return Ok(TypeExpr::Optional(Box::new(parse_type(inner, names)?)));
    }
    for (prefix, wrap) in [
        ("list<", TypeExpr::List as fn(Box<TypeExpr>) -> TypeExpr),
        ("map<", TypeExpr::Map),
    ] {
        if let Some(inner) = text.strip_prefix(prefix) {
            let inner = inner
                .strip_suffix('>')
                .ok_or_else(|| format!("`{text}` is missing its closing `>`"))?;
            return Ok(wrap(Box::new(parse_type(inner, names)?)));
        }
    }
    Ok(match text {
        "string" => TypeExpr::String,
        "integer" => TypeExpr::Integer,
        "number" => TypeExpr::Number,
        "boolean" => TypeExpr::Boolean,
        "json" => TypeExpr::Json,
        "TenantId" | "WorkspaceId" => TypeExpr::Id(text.to_string()),
        _ if names.ids.contains(&text) => TypeExpr::Id(text.to_string()),
        _ if names.types.contains(&text) => TypeExpr::Named(text.to_string()),
        _ => {
            return Err(format!(
                "unknown type `{text}`: expected string, integer, number, boolean, json, an ID type, a type from `types`, list<T> or map<T>"
            ));
        }
    })
}
