//! Checks and lowers `taxonomy.yaml`: detail sets and error rows.

use std::collections::BTreeSet;

use crate::model::*;
use crate::spec;

use super::{Cx, Known, is_snake, one_of};

/// The optional sections an API has, which decide what outcomes can happen.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sections {
    pub breaker: bool,
    pub streams: bool,
    /// A stream follows a job (it has a `fallback`): a job can end failed.
    pub jobs: bool,
    /// Writes are queued for replay: every row says what it means for one.
    pub replay: bool,
}

/// The class of a row that turns its outcome into a success.
const SUCCESS_CLASS: &str = "success";

/// What the rows may refer to: names, states, routes, and the copies of
/// degradation.yaml each row carries.
pub(super) struct RowsKnow<'a> {
    pub names: &'a Known<'a>,
    pub states: &'a [Item<FeatureStateCopy>],
    pub services: &'a [Service],
    pub degradation: &'a spec::DegradationFile,
}

/// Statuses a 2xx route answers with: decoded by the route's shape, never classified.
const SUCCESS: (u16, u16) = (200, 299);

impl Cx<'_> {
    /// Every outcome must have a row: each client-side outcome kind, and every
    /// status 100–999 outside 2xx by a row that matches it whatever its detail,
    /// headers or route (narrowed rows may come first, but cannot be the last word).
    /// Without a breaker, `circuit_open` cannot happen and needs no row;
    /// without streams, neither can the stream outcomes; without a job stream,
    /// no job can fail.
    fn total(&mut self, taxonomy: &spec::TaxonomyFile, rows: &[Item<TaxonomyRow>], has: Sections) {
        let at = taxonomy.rows.first().map(|r| &r.row);
        let mut missing = Vec::new();
        for kind in OutcomeKind::ALL {
            let possible = match kind {
                OutcomeKind::CircuitOpen => has.breaker,
                OutcomeKind::StreamError
                | OutcomeKind::StreamTimeout
                | OutcomeKind::StreamStalled => has.streams,
                OutcomeKind::JobFailed => has.jobs,
                _ => true,
            };
            if possible
                && kind != OutcomeKind::Status
                && !rows.iter().any(|r| r.matches.outcome == kind)
            {
                missing.push(format!("outcome `{}`", kind.as_str()));
            }
        }
        let covers = |s: u16| {
            rows.iter().any(|r| {
                let m = &r.matches;
                m.outcome == OutcomeKind::Status
                    && m.status.is_none_or(|(lo, hi)| (lo..=hi).contains(&s))
                    && m.detail.is_none()
                    && m.retry_after.is_none()
                    && m.conflict.is_none()
                    && m.keyless.is_none()
                    && m.routes.is_none()
            })
        };
        let mut gap: Option<(u16, u16)> = None;
        for s in (100..=999u16).filter(|s| !(SUCCESS.0..=SUCCESS.1).contains(s)) {
            match (covers(s), gap) {
                (false, Some((lo, hi))) if hi + 1 == s => gap = Some((lo, s)),
                (false, _) => {
                    missing.extend(gap.map(status_span));
                    gap = Some((s, s));
                }
                (true, _) => missing.extend(gap.take().map(status_span)),
            }
        }
        missing.extend(gap.map(status_span));
        if missing.is_empty() {
            return;
        }
        let message = format!(
            "the taxonomy is not total: no row matches {} (every outcome needs a row; a status row that narrows by detail, Retry-After, conflict, lane or route does not count)",
            missing.join(", ")
        );
        match at {
            Some(at) => self.error(at, "rows", message),
            None => self.sources.in_file(0, "rows", message),
        }
    }

    pub(super) fn details(&mut self, taxonomy: &spec::TaxonomyFile) -> Vec<Item<DetailSet>> {
        let mut out = Vec::new();
        for (name, set) in &taxonomy.details {
            if set.contains.is_empty() {
                self.error(
                    name,
                    format!("details.{}.contains", &**name),
                    "a detail set needs at least one substring",
                );
            }
            let contains: Vec<String> = set.contains.iter().map(|c| c.to_lowercase()).collect();
            out.push(Item {
                value: DetailSet {
                    name: leak(name),
                    contains: leak_texts(contains.iter().map(String::as_str)),
                },
                doc: set.doc.to_string(),
                source: self.source(&set.source, set.inferred),
            });
        }
        out
    }

    pub(super) fn rows(
        &mut self,
        taxonomy: &spec::TaxonomyFile,
        known: &RowsKnow,
        has: Sections,
    ) -> (Vec<Item<TaxonomyRow>>, Vec<Class>) {
        let mut seen = BTreeSet::new();
        // Each class with its `ErrorClass` variant: two classes may not share one.
        let mut classes: Vec<Class> = Vec::new();
        let mut out = Vec::new();
        for r in &taxonomy.rows {
            if !seen.insert(r.row.as_str()) {
                let field = format!("rows.{}.row", &*r.row);
                self.error(&r.row, field, format!("duplicate row `{}`", &*r.row));
            }
            self.class(r, &mut classes);
            let value = self.row(r, RowIx::new(out.len() as u16), known, has);
            out.push(Item {
                value,
                doc: String::new(),
                source: self.source(&r.source, r.inferred),
            });
        }
        self.escalations(taxonomy, &mut out);
        self.total(taxonomy, &out, has);
        for r in &taxonomy.rows {
            if r.alert_outside_deploy && r.alert.is_none() {
                self.error(
                    &r.row,
                    format!("rows.{}.alert_outside_deploy", &*r.row),
                    "needs an `alert`",
                );
            }
        }
        // A success row ends no call in an error; an error no row matched is the runtime's.
        classes.retain(|c| c.name != SUCCESS_CLASS);
        if !classes.iter().any(|c| c.name == UNCLASSIFIED) {
            classes.push(Class {
                name: UNCLASSIFIED,
                variant: crate::naming::camel(UNCLASSIFIED),
                rows: Vec::new(),
                action: "No taxonomy row matched the outcome.",
            });
        }
        (out, classes)
    }

    /// The row at `index`, its escalation left for [`Self::escalations`].
    fn row(&mut self, r: &spec::Row, index: RowIx, known: &RowsKnow, has: Sections) -> TaxonomyRow {
        let field = |key: &str| format!("rows.{}.{key}", &*r.row);
        let matches = self.row_match(r, known);
        let retry = (r.retry.as_ref())
            .and_then(|c| self.reference(c, &field("retry"), "retry class", &known.names.retries));
        if let Some(alert) = &r.alert {
            self.reference(alert, &field("alert"), "alert", &known.names.alerts);
        }
        let feature_state = self.feature_state(r, known);
        // Only an attempt that may have reached the server can leave its
        // outcome unknown: a client-side refusal sent nothing.
        let client_side = matches!(
            matches.outcome,
            OutcomeKind::InvalidScope | OutcomeKind::InvalidRequest | OutcomeKind::CircuitOpen
        );
        if r.outcome_unknown && client_side {
            self.error(
                &r.row,
                field("outcome_unknown"),
                format!(
                    "outcome `{}` is decided before anything is sent: its outcome is never unknown",
                    &*r.matches.outcome
                ),
            );
        }
        let remember_for =
            (r.remember_for.as_ref()).and_then(|d| self.duration(d, &field("remember_for")));
        // The German copy is resolved here, so an error finds it without a lookup.
        let message = known.degradation.messages.get(r.class.as_str());
        let unknown = known.degradation.unknown_outcome.as_ref();
        TaxonomyRow {
            index,
            row: leak(&r.row),
            matches,
            class: leak(&r.class),
            success: r.class.as_str() == SUCCESS_CLASS,
            retry: retry.map(|i| RetryIx::new(i as u16)),
            feeds_breaker: r.feeds_breaker,
            outcome_unknown: r.outcome_unknown,
            alert: r.alert.as_ref().map(|a| leak(a)),
            alert_outside_deploy: r.alert_outside_deploy,
            feature_state,
            remember_for,
            escalate_to: None, // resolved by `escalations`, once every row is known
            replay: self.replay_of(r, has.replay),
            action: leak(&r.action),
            message: message.map(|m| leak(&m.copy)),
            unknown_message: unknown.filter(|_| r.outcome_unknown).map(|u| leak(&u.copy)),
        }
    }

    /// What the row matches: an outcome, narrowed (a status outcome only)
    /// by statuses, a detail set, Retry-After, the route's 409, its lane or
    /// the routes themselves.
    fn row_match(&mut self, r: &spec::Row, known: &RowsKnow) -> RowMatch {
        let field = |key: &str| format!("rows.{}.{key}", &*r.row);
        let m = &r.matches;
        let outcome = OutcomeKind::named(&m.outcome);
        if outcome.is_none() {
            let known: Vec<&str> = OutcomeKind::ALL.iter().map(|k| k.as_str()).collect();
            self.error(
                &m.outcome,
                field("match.outcome"),
                format!(
                    "unknown outcome `{}`: expected one of {}",
                    &*m.outcome,
                    one_of(&known)
                ),
            );
        }
        let status = self.status(r);
        let narrows = status.is_some()
            || m.detail.is_some()
            || m.retry_after.is_some()
            || m.conflict.is_some()
            || m.keyless.is_some()
            || m.routes.is_some();
        if narrows && outcome.is_some_and(|o| o != OutcomeKind::Status) {
            self.error(
                &m.outcome,
                field("match"),
                "status, detail, retry_after, conflict, keyless and routes only narrow a `status` outcome",
            );
        }
        let routes = m.routes.as_ref().map(|list| {
            if list.is_empty() {
                self.error(
                    &r.row,
                    field("match.routes"),
                    "`routes` names at least one route (`handle.route`)",
                );
            }
            let list = (list.iter())
                .filter_map(|t| self.endpoint_ref(t, &field("match.routes"), known.services));
            leak_all(list.collect())
        });
        let detail = m.detail.as_ref().and_then(|d| {
            self.reference(
                d,
                &field("match.detail"),
                "detail set",
                &known.names.details,
            )
        });
        let conflict = m.conflict.as_ref().and_then(|c| match Conflict::named(c) {
            Some(conflict) if conflict != Conflict::Error => Some(conflict),
            _ => {
                let message = "conflict is `success` or `poll`";
                self.error(c, field("match.conflict"), message);
                None
            }
        });
        RowMatch {
            outcome: outcome.unwrap_or(OutcomeKind::Status),
            status,
            detail: detail.map(|d| DetailIx::new(d as u16)),
            retry_after: m.retry_after,
            conflict,
            keyless: m.keyless,
            routes,
        }
    }

    /// `status` or `status_range`: the statuses a row matches, inclusive.
    fn status(&mut self, r: &spec::Row) -> Option<(u16, u16)> {
        let m = &r.matches;
        match (&m.status, &m.status_range) {
            (Some(s), None) => Some((**s, **s)),
            (None, Some(range)) if range.len() == 2 && *range[0] <= *range[1] => {
                Some((*range[0], *range[1]))
            }
            (None, Some(_)) => {
                self.error(
                    &r.row,
                    format!("rows.{}.match.status_range", &*r.row),
                    "a status range is `[low, high]` with low <= high",
                );
                None
            }
            (Some(s), Some(_)) => {
                self.sources.at(
                    s.span(),
                    format!("rows.{}.match.status", &*r.row),
                    "give `status` or `status_range`, not both",
                );
                None
            }
            (None, None) => None,
        }
    }

    /// The row's class: snake_case, its `ErrorClass` variant no keyword and
    /// no other class's. A new class joins `classes`.
    fn class(&mut self, r: &spec::Row, classes: &mut Vec<Class>) {
        let field = format!("rows.{}.class", &*r.row);
        let variant = crate::naming::camel(&r.class);
        if !is_snake(&r.class) {
            self.error(&r.class, &field, "error classes are snake_case");
        } else if variant == "Self" {
            let message = "the class would be `ErrorClass::Self`, a Rust keyword";
            self.error(&r.class, &field, message);
        }
        match classes.iter_mut().find(|c| c.variant == variant) {
            Some(c) if c.name != r.class.as_str() => self.error(
                &r.class,
                &field,
                format!(
                    "class `{}` and class `{}` would both be `ErrorClass::{variant}`",
                    &*r.class, c.name
                ),
            ),
            Some(c) => c.rows.push(leak(&r.row)),
            None => classes.push(Class {
                name: leak(&r.class),
                variant,
                rows: vec![leak(&r.row)],
                action: leak(&r.action),
            }),
        }
    }

    /// The feature state a row puts its features in: one that rows enter.
    fn feature_state(&mut self, r: &spec::Row, known: &RowsKnow) -> Option<&'static str> {
        let st = r.feature_state.as_ref()?;
        let field = format!("rows.{}.feature_state", &*r.row);
        let i = self.reference(st, &field, "feature state", &known.names.states)?;
        if known.states[i].when != StateTrigger::Row {
            let message = format!(
                "state `{}` is not entered by rows (its `when` is not `row`)",
                &**st
            );
            self.error(st, &field, message);
        }
        Some(known.states[i].state)
    }

    /// Each row's `escalate_to`, once every row is known: another row, and
    /// only from a row that is retried (the escalation happens on the retry).
    fn escalations(&mut self, taxonomy: &spec::TaxonomyFile, out: &mut [Item<TaxonomyRow>]) {
        let names: Vec<&str> = out.iter().map(|r| r.row).collect();
        for (i, r) in taxonomy.rows.iter().enumerate() {
            let Some(target) = &r.escalate_to else {
                continue;
            };
            let field = format!("rows.{}.escalate_to", &*r.row);
            let escalate_to = self.reference(target, &field, "row", &names);
            out[i].value.escalate_to = escalate_to.map(|to| RowIx::new(to as u16));
            if escalate_to == Some(i) {
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
    }
}

impl Cx<'_> {
    /// The row's `replay`: required with a replay queue (a new row cannot
    /// leave the queue guessing), refused without one (nothing to decide).
    fn replay_of(&mut self, r: &spec::Row, queue: bool) -> Replay {
        let field = format!("rows.{}.replay", &*r.row);
        let Some(text) = &r.replay else {
            if queue {
                self.error(
                    &r.row,
                    field,
                    format!(
                        "policy.yaml has a replay queue: say what this row means for a queued write (`replay: {}`)",
                        Replay::ALL.map(Replay::as_str).join(" | ")
                    ),
                );
            }
            return Replay::Never;
        };
        if !queue {
            self.error(
                text,
                field,
                "policy.yaml has no replay queue: no write is queued, drop `replay`",
            );
            return Replay::Never;
        }
        match Replay::named(text) {
            Some(replay) => replay,
            None => {
                let known = Replay::ALL.map(Replay::as_str);
                self.error(
                    text,
                    field,
                    format!(
                        "unknown replay `{}`: expected one of {}",
                        &**text,
                        one_of(&known)
                    ),
                );
                Replay::Never
            }
        }
    }
}

fn status_span((lo, hi): (u16, u16)) -> String {
    if lo == hi {
        format!("status {lo}")
    } else {
        format!("statuses {lo}–{hi}")
    }
}
