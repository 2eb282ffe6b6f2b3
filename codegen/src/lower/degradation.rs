//! Checks and lowers `degradation.yaml` and `streams.yaml`: states, alerts, messages, features, streams.

use std::collections::BTreeSet;

use crate::model::*;
use crate::spec;

use super::Cx;

impl Cx<'_> {
    pub(super) fn degradation(&mut self, d: &spec::DegradationFile) -> (Vec<State>, Vec<Alert>) {
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

    pub(super) fn messages(&mut self, d: &spec::DegradationFile, rows: &[Row]) -> Vec<Message> {
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
        // Every class that can end a call as an error has its German message;
        // answers (success, a 409 that means "still processing") need none.
        let at = d.messages.keys().next();
        for row in rows {
            let answer = row.class == "success" || row.conflict.is_some();
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

    pub(super) fn features(
        &mut self,
        d: &spec::DegradationFile,
        services: &[Service],
    ) -> Vec<Feature> {
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

    pub(super) fn streams(&mut self, s: &spec::StreamsFile, services: &[Service]) -> Vec<Stream> {
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
                ends_with_terminal: st.ends_with_terminal,
                source: self.source(&st.source, st.inferred),
            });
        }
        out
    }
}
