//! Checks and lowers `degradation.yaml` and `streams.yaml`: states, alerts, messages, features, streams.

use std::collections::BTreeSet;

use crate::model::*;
use crate::spec;

use super::Cx;

impl Cx<'_> {
    pub(super) fn degradation(
        &mut self,
        d: &spec::DegradationFile,
    ) -> (Vec<Item<FeatureStateCopy>>, Vec<Alert>) {
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
            states.push(Item {
                value: FeatureStateCopy {
                    state: leak(name),
                    copy: s.copy.as_ref().map(|c| leak(c)),
                    when,
                },
                doc: s.doc.to_string(),
                source: self.source(&s.source, s.inferred),
            });
        }
        let mut alerts = Vec::new();
        for (name, a) in &d.alerts {
            if !d.severities.contains_key(a.severity.as_str()) {
                let known: Vec<String> =
                    d.severities.keys().map(|s| format!("`{}`", &**s)).collect();
                self.error(
                    &a.severity,
                    format!("alerts.{}.severity", &**name),
                    format!("severity is one of `severities`: {}", known.join(", ")),
                );
            }
            alerts.push(Alert {
                value: AlertSeverity {
                    alert: leak(name),
                    severity: leak(&a.severity),
                },
                doc: a.doc.to_string(),
                reaches: d
                    .severities
                    .get(a.severity.as_str())
                    .map(|r| r.to_string())
                    .unwrap_or_default(),
                source: self.source(&a.source, a.inferred),
            });
        }
        (states, alerts)
    }

    pub(super) fn messages(
        &mut self,
        d: &spec::DegradationFile,
        rows: &[Item<TaxonomyRow>],
    ) -> Vec<Item<ClassMessage>> {
        let classes: BTreeSet<&str> = rows.iter().map(|r| r.class).collect();
        let mut out = Vec::new();
        for (class, m) in &d.messages {
            if !classes.contains(class.as_str()) {
                self.error(
                    class,
                    format!("messages.{}", &**class),
                    format!("no taxonomy row has the class `{}`", &**class),
                );
            }
            out.push(Item {
                value: ClassMessage {
                    class: leak(class),
                    copy: leak(&m.copy),
                },
                doc: String::new(),
                source: self.source(&m.source, m.inferred),
            });
        }
        // Every class that can end a call as an error has its German message;
        // answers (success, a 409 that means "still processing") need none.
        let at = d.messages.keys().next();
        for row in rows {
            let answer = row.success || row.matches.conflict.is_some();
            if !answer && !d.messages.keys().any(|c| c.as_str() == row.class) {
                let message = format!(
                    "class `{}` (row {}) ends calls as an error and has no German message",
                    row.class, row.row
                );
                match at {
                    Some(at) => self.error(at, "messages", message),
                    None => self.sources.in_file(0, "messages", message),
                }
            }
        }
        out
    }

    /// The copy of an error whose outcome is unknown: required as soon as a
    /// row can leave one unknown.
    pub(super) fn unknown_outcome(
        &mut self,
        d: &spec::DegradationFile,
        taxonomy: &spec::TaxonomyFile,
    ) -> Option<&'static str> {
        let copy = d.unknown_outcome.as_ref().map(|m| {
            self.source(&m.source, m.inferred);
            leak(&m.copy)
        });
        if copy.is_none()
            && let Some(r) = taxonomy.rows.iter().find(|r| r.outcome_unknown)
        {
            self.error(
                &r.row,
                format!("rows.{}.outcome_unknown", &*r.row),
                "a row that leaves an outcome unknown needs `unknown_outcome.copy` in degradation.yaml (the UI says to check the current state before trying again)",
            );
        }
        copy
    }

    pub(super) fn features(
        &mut self,
        d: &spec::DegradationFile,
        services: &[Service],
    ) -> Vec<Item<FeaturePolicy>> {
        let mut out = Vec::new();
        for (name, f) in &d.features {
            let field = format!("features.{}.routes", &**name);
            if f.routes.is_empty() {
                self.error(name, &field, "a feature depends on at least one route");
            }
            let routes = (f.routes.iter())
                .filter_map(|r| self.endpoint_ref(r, &field, services))
                .collect();
            out.push(Item {
                value: FeaturePolicy {
                    name: leak(name),
                    routes: leak_all(routes),
                },
                doc: f.doc.to_string(),
                source: self.source(&f.source, f.inferred),
            });
        }
        out
    }

    /// The streams: the events that fail every one of them, then each stream.
    pub(super) fn streams(
        &mut self,
        s: &spec::StreamsFile,
        services: &[Service],
        types: &[TypeDef],
        features: &[&str],
    ) -> Vec<Stream> {
        let (error_event, timeout_event) = self.streams_error_events(s);
        let refs = StreamRefs {
            services,
            types,
            features,
            error_event,
            timeout_event,
        };
        let streams = s.streams.iter().enumerate();
        streams
            .map(|(index, (name, st))| self.stream(index, name, st, &refs))
            .collect()
    }

    /// The events that fail every stream: required as soon as there is one.
    fn streams_error_events(&mut self, s: &spec::StreamsFile) -> (&'static str, &'static str) {
        match (&s.error_events, s.streams.keys().next()) {
            (Some(events), _) => self.error_events(events),
            (None, Some(first)) => {
                self.error(
                    first,
                    "error_events",
                    "streams need `error_events`: the event names that fail a stream as `stream_error` and `stream_timeout`",
                );
                Default::default()
            }
            (None, None) => Default::default(),
        }
    }

    /// One stream: its name and events, its fallback and the states read
    /// off it, then the policy the runtime holds.
    fn stream(
        &mut self,
        index: usize,
        name: &spec::Text,
        st: &spec::StreamEntry,
        refs: &StreamRefs,
    ) -> Stream {
        let field = |key: &str| format!("streams.{}.{key}", &**name);
        let event_type = self.stream_event_type(name, refs.types);
        let variants = self.event_variants(name, st);
        let fallback = st
            .fallback
            .as_ref()
            .and_then(|f| self.route_ref(f, &field("fallback"), refs.services));
        if let (Some(f), Some(text)) = (fallback, &st.fallback) {
            self.fallback_fits(index, f, text, refs.services, &field("fallback"));
        }
        let status = self.stream_status(st, &field("status"));
        let events = self.stream_events(name, st, variants, refs.types);
        self.stream_states(name, st, fallback, refs);
        let fallback = (fallback.zip(status)).map(|(f, read)| {
            fallback_read(refs.services[f.service].routes[f.route].endpoint, read)
        });
        let value = self.stream_policy(name, st, fallback, refs);
        Stream {
            value,
            doc: st.doc.to_string(),
            event_type,
            events,
            source: self.source(&st.source, st.inferred),
        }
    }

    /// The stream's event type: its name is snake_case and the type's name is free.
    fn stream_event_type(&mut self, name: &spec::Text, types: &[TypeDef]) -> String {
        let at = format!("streams.{}", &**name);
        let event_type = crate::naming::event_type(name);
        if !super::is_snake(name) {
            self.error(name, &at, "stream names are snake_case");
        } else if self.name(name, &at) {
            let enum_name = &event_type;
            if types.iter().any(|t| t.name == *enum_name) {
                self.error(
                    name,
                    &at,
                    format!("the stream's event type `{enum_name}` is already a type of the service files"),
                );
            }
        }
        event_type
    }

    /// The variant of each event: a word of its own, neither another's nor `Other`.
    fn event_variants(&mut self, name: &spec::Text, st: &spec::StreamEntry) -> Vec<String> {
        let mut variants: Vec<String> = Vec::new();
        for event in st.events.keys() {
            let variant = crate::naming::camel(event);
            let at = format!("streams.{}.events.{}", &**name, &**event);
            if !super::is_camel(&variant) || variant == "Self" {
                self.error(
                    event,
                    &at,
                    "an event name is words of letters and digits, starting with a letter, joined by `_`, `-` or spaces",
                );
            } else if variant == "Other" || variants.contains(&variant) {
                self.error(
                    event,
                    &at,
                    format!("the event would be the variant `{variant}`, which another event (or `Other`, the untyped ones) already is"),
                );
            }
            variants.push(variant);
        }
        variants
    }

    /// The status read of the fallback route: there with a fallback, never without.
    fn stream_status<'a>(
        &mut self,
        st: &'a spec::StreamEntry,
        field: &str,
    ) -> Option<&'a spec::StatusRead> {
        match (&st.fallback, &st.status) {
            (Some(_), Some(read)) => {
                self.status_read(read, field);
                Some(read)
            }
            (Some(f), None) => {
                self.error(
                    f,
                    field,
                    "a fallback route needs `status`: its state field and terminal states",
                );
                None
            }
            (None, Some(read)) => {
                self.error(
                    &read.field,
                    field,
                    "`status` reads the `fallback` route: add one",
                );
                None
            }
            (None, None) => None,
        }
    }

    /// Each event with the type of its data, which is an object.
    fn stream_events(
        &mut self,
        name: &spec::Text,
        st: &spec::StreamEntry,
        variants: Vec<String>,
        types: &[TypeDef],
    ) -> Vec<Event> {
        let mut events = Vec::new();
        for ((event, ty), variant) in st.events.iter().zip(variants) {
            let at = format!("streams.{}.events.{}", &**name, &**event);
            match types.iter().position(|t| t.name == ty.as_str()) {
                Some(i) if matches!(types[i].shape, Shape::Struct(_)) => events.push(Event {
                    name: event.to_string(),
                    variant,
                    ty: i,
                }),
                Some(_) => self.error(
                    ty,
                    &at,
                    "an event's data is an object: name a type with `fields`",
                ),
                None => self.error(
                    ty,
                    &at,
                    format!("`{}` names no type of the service files", &**ty),
                ),
            }
        }
        events
    }

    /// The states the runtime reads by name are values of the fields' enums:
    /// the fallback's terminal states and the stages' failed ones.
    fn stream_states(
        &mut self,
        name: &spec::Text,
        st: &spec::StreamEntry,
        fallback: Option<RouteRef>,
        refs: &StreamRefs,
    ) {
        let field = |key: &str| format!("streams.{}.{key}", &**name);
        let types = refs.types;
        if let (Some(f), Some(read)) = (fallback, &st.status) {
            let route = &refs.services[f.service].routes[f.route];
            if let Returns::Body(TypeExpr::Named(ty)) = &route.returns {
                let at = field("status");
                for states in [&read.completed, &read.failed] {
                    self.states_listed(types, ty, &read.field, states, &at);
                }
            }
        }
        if let Some(g) = &st.stages {
            let ty = st
                .events
                .iter()
                .find(|(e, _)| e.as_str() == g.event.as_str());
            if let Some((_, ty)) = ty {
                let at = field("stages");
                self.states_listed(types, ty, &g.status_field, &g.failed, &at);
                self.states_listed(types, ty, &g.stage_field, &g.fail_closed, &at);
            }
        }
    }

    /// What the runtime holds of the stream.
    fn stream_policy(
        &mut self,
        name: &spec::Text,
        st: &spec::StreamEntry,
        fallback: Option<StreamFallback>,
        refs: &StreamRefs,
    ) -> StreamPolicy {
        let field = |key: &str| format!("streams.{}.{key}", &**name);
        StreamPolicy {
            name: leak(name),
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
            resync_after_reconnect: st.resync_after_reconnect,
            resend: st.resend,
            first_event: st.first_event.as_ref().map(|e| leak(e)),
            terminal_events: leak_texts(st.terminal_events.iter().map(|e| e.as_str())),
            ends_with_terminal: st.ends_with_terminal,
            error_event: refs.error_event,
            timeout_event: refs.timeout_event,
            fallback,
            stages: st
                .stages
                .as_ref()
                .map(|g| self.stages(g, refs.features, &field("stages"))),
            lost_copy: st.lost_copy.as_ref().map(|c| leak(c)),
        }
    }

    /// The `error_events:` names: each one word, and not the same event.
    fn error_events(&mut self, events: &spec::ErrorEvents) -> (&'static str, &'static str) {
        for (text, key) in [
            (&events.stream_error, "stream_error"),
            (&events.stream_timeout, "stream_timeout"),
        ] {
            if text.trim().is_empty() || text.contains(char::is_whitespace) {
                self.error(
                    text,
                    format!("error_events.{key}"),
                    "an event name is one word",
                );
            }
        }
        if events.stream_error.as_str() == events.stream_timeout.as_str() {
            self.error(
                &events.stream_timeout,
                "error_events.stream_timeout",
                "stream_error and stream_timeout name different events",
            );
        }
        (leak(&events.stream_error), leak(&events.stream_timeout))
    }

    /// The fallback is polled with the stream's own arguments: same scope,
    /// same path parameters, a body to read.
    fn fallback_fits(
        &mut self,
        stream: usize,
        fallback: RouteRef,
        text: &spec::Text,
        services: &[Service],
        field: &str,
    ) {
        let route = &services[fallback.service].routes[fallback.route];
        let Some(opened) = services
            .iter()
            .flat_map(|s| &s.routes)
            .find(|r| r.returns == Returns::Stream(stream))
        else {
            return;
        };
        if !matches!(route.returns, Returns::Body(_)) {
            self.error(
                text,
                field,
                "the fallback route must answer with a body (the job's status)",
            );
        }
        if route.scope != opened.scope || route.path_params != opened.path_params {
            self.error(
                text,
                field,
                format!(
                    "the fallback is polled with the arguments of `{}`: it needs the same scope and path parameters",
                    opened.name
                ),
            );
        }
    }

    fn stages(&mut self, g: &spec::Stages, features: &[&str], field: &str) -> StagePolicy {
        if !features.contains(&g.feature.as_str()) {
            self.error(
                &g.feature,
                format!("{field}.feature"),
                format!("`{}` is no feature of degradation.yaml", &*g.feature),
            );
        }
        if g.failed.is_empty() {
            self.error(
                &g.event,
                field,
                "name the status values of a failed stage (`failed`)",
            );
        }
        let texts = |v: &[spec::Text]| leak_texts(v.iter().map(|t| t.as_str()));
        StagePolicy {
            event: leak(&g.event),
            stage_field: leak(&g.stage_field),
            status_field: leak(&g.status_field),
            failed: texts(&g.failed),
            fail_closed: texts(&g.fail_closed),
            detail_field: g.detail_field.as_ref().map(|t| leak(t)),
            feature: leak(&g.feature),
        }
    }

    /// `states` must be values of the enum `ty.field_name` has, if it has one:
    /// a state the enum does not list would only ever arrive as `Unknown`.
    fn states_listed(
        &mut self,
        types: &[TypeDef],
        ty: &str,
        field_name: &str,
        states: &[spec::Text],
        at: &str,
    ) {
        let Some(Shape::Struct(fields)) = types.iter().find(|t| t.name == ty).map(|t| &t.shape)
        else {
            return;
        };
        let Some(f) = fields.iter().find(|f| f.name == field_name) else {
            return;
        };
        let inner = match &f.ty {
            TypeExpr::Optional(inner) => &**inner,
            other => other,
        };
        let TypeExpr::Named(name) = inner else {
            return;
        };
        let Some(Shape::Enum(variants)) = types.iter().find(|t| &t.name == name).map(|t| &t.shape)
        else {
            return;
        };
        for state in states {
            if !variants.iter().any(|v| v.wire == state.as_str()) {
                self.error(
                    state,
                    at,
                    format!(
                        "`{}` is no value of `{name}`, the type of `{ty}.{field_name}`",
                        &**state
                    ),
                );
            }
        }
    }

    fn status_read(&mut self, read: &spec::StatusRead, field: &str) {
        if read.completed.is_empty() || read.failed.is_empty() {
            self.error(
                &read.field,
                field,
                "name at least one `completed` and one `failed` state",
            );
        }
    }
}

/// The status route a stream falls back to, and how its answer reads.
fn fallback_read(route: &'static Endpoint, read: &spec::StatusRead) -> StreamFallback {
    let texts = |v: &[spec::Text]| leak_texts(v.iter().map(|t| t.as_str()));
    StreamFallback {
        route,
        status_field: leak(&read.field),
        completed: texts(&read.completed),
        failed: texts(&read.failed),
        error_field: read.error_field.as_ref().map(|t| leak(t)),
        reopen_after: *read.reopen_after,
    }
}

/// What a stream may refer to, and the events that fail every stream.
struct StreamRefs<'a> {
    services: &'a [Service],
    types: &'a [TypeDef],
    features: &'a [&'a str],
    error_event: &'static str,
    timeout_event: &'static str,
}
