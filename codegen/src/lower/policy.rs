//! Checks and lowers `policy.yaml`: timeouts, retries, throttle and breaker.

use std::time::Duration;

use crate::model::*;
use crate::spec::{self, Text};

use super::{Cx, Known, is_snake};

impl Cx<'_> {
    pub(super) fn timeouts(&mut self, policy: &spec::PolicyFile) -> Vec<Item<TimeoutClass>> {
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
            out.push(Item {
                value: TimeoutClass {
                    name: leak(name),
                    per_attempt: per_attempt.unwrap_or_default(),
                    deploy_suspected,
                },
                doc: t.doc.to_string(),
                source: self.source(&t.source, t.inferred),
            });
        }
        out
    }

    pub(super) fn retries(&mut self, policy: &spec::PolicyFile) -> Vec<Item<RetryClass>> {
        let mut out = Vec::new();
        for (name, r) in &policy.retries {
            let field = format!("retries.{}", &**name);
            self.constant_name(name, &field);
            let schedule = self.schedule(r, &field);
            let configurable = r.configurable.as_ref().and_then(|c| {
                let at = format!("{field}.configurable");
                let min_attempts = self.positive(&c.min_attempts, &format!("{at}.min_attempts"));
                let max_attempts = *c.max_attempts;
                let min_step = self.duration(&c.min_step, &format!("{at}.min_step"))?;
                match schedule {
                    Some(RetrySchedule::Linear { attempts, step })
                        if attempts < min_attempts || step < min_step =>
                    {
                        self.error(
                            &r.kind,
                            at,
                            "the class's own attempts and step are below its minimums",
                        );
                        None
                    }
                    Some(RetrySchedule::Linear { attempts, .. }) if attempts > max_attempts => {
                        self.sources.at(
                            c.max_attempts.span(),
                            format!("{at}.max_attempts"),
                            "is below the class's own attempts",
                        );
                        None
                    }
                    Some(RetrySchedule::Linear { .. }) => Some(RetryBounds {
                        min_attempts,
                        max_attempts,
                        min_step,
                    }),
                    _ => {
                        self.error(&r.kind, at, "only a `linear` class is configurable");
                        None
                    }
                }
            });
            out.push(Item {
                value: RetryClass {
                    name: leak(name),
                    schedule: schedule.unwrap_or(RetrySchedule::Never),
                    configurable,
                },
                doc: r.doc.to_string(),
                source: self.source(&r.source, r.inferred),
            });
        }
        out
    }

    /// A retry class's schedule: its kind, the numbers the kind takes, each lowered.
    fn schedule(&mut self, r: &spec::Retry, field: &str) -> Option<RetrySchedule> {
        let allowed = self.schedule_keys(r, field)?;
        if !self.schedule_keys_fit(r, field, allowed) {
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
            "linear" => RetrySchedule::Linear {
                attempts: attempts?,
                step: d(self, &r.step, "step")?,
            },
            _ => RetrySchedule::RetryAfter {
                attempts: attempts?,
                floor: d(self, &r.floor, "floor")?,
                jitter: d(self, &r.jitter, "jitter")?,
            },
        })
    }

    /// Which optional numbers the retry's kind takes; `None` for an unknown kind.
    fn schedule_keys(&mut self, r: &spec::Retry, field: &str) -> Option<&'static [&'static str]> {
        Some(match r.kind.as_str() {
            "never" => &[],
            "exponential" => &["attempts", "base", "factor", "cap"],
            "deploy_window" | "once" => &["attempts"],
            "retry_after" => &["attempts", "floor", "jitter"],
            "linear" => &["attempts", "step"],
            other => {
                self.error(
                    &r.kind,
                    format!("{field}.kind"),
                    format!(
                        "unknown retry kind `{other}`: expected `never`, `exponential`, `deploy_window`, `retry_after`, `once` or `linear`"
                    ),
                );
                return None;
            }
        })
    }

    /// Whether the retry gives exactly the numbers its kind takes; each one
    /// missing or out of place is an error.
    fn schedule_keys_fit(&mut self, r: &spec::Retry, field: &str, allowed: &[&str]) -> bool {
        let present = [
            ("attempts", r.attempts.as_ref().map(|a| a.span())),
            ("base", r.base.as_ref().map(|a| a.span())),
            ("factor", r.factor.as_ref().map(|a| a.span())),
            ("cap", r.cap.as_ref().map(|a| a.span())),
            ("floor", r.floor.as_ref().map(|a| a.span())),
            ("jitter", r.jitter.as_ref().map(|a| a.span())),
            ("step", r.step.as_ref().map(|a| a.span())),
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
        ok
    }

    pub(super) fn throttle(&mut self, t: &spec::ThrottleSection) -> Throttle {
        let mut budgets = Vec::new();
        for (name, b) in &t.budgets {
            let field = format!("throttle.budgets.{}", &**name);
            if !is_snake(name) {
                self.error(name, &field, "budget names are snake_case");
            } else {
                self.name(name, &field);
            }
            budgets.push(Item {
                value: BudgetPolicy {
                    name: leak(name),
                    max_in_flight: b
                        .max_in_flight
                        .as_ref()
                        .map(|v| self.positive(v, &format!("{field}.max_in_flight"))),
                    per_minute: b
                        .per_minute
                        .as_ref()
                        .map(|v| self.positive(v, &format!("{field}.per_minute"))),
                },
                doc: b.doc.to_string(),
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
        let value = ThrottlePolicy {
            max_in_flight: self.positive(&t.max_in_flight, "throttle.max_in_flight"),
            per_second: self.positive(&t.per_second, "throttle.per_second"),
            // The units the spec's names give: `per_second`, `per_minute`.
            rate_period: Duration::from_secs(1),
            budget_period: Duration::from_secs(60),
            budgets: leak_all(budgets.iter().map(|b| b.value.clone()).collect()),
            polling: PollingPolicy {
                interval,
                floor,
                hot_factor: self.positive(&p.hot_factor, "throttle.polling.hot_factor"),
            },
        };
        Throttle {
            value,
            budgets,
            source: self.source(&t.source, t.inferred),
        }
    }

    /// The limits, and the largest 2xx body of a route that names none (`limits.response`).
    pub(super) fn limits(&mut self, l: &spec::SizeLimits) -> Option<(Limits, u64)> {
        let response = self.size(&l.response, "limits.response");
        let error_body = self.size(&l.error_body, "limits.error_body");
        let detail = self.size(&l.detail, "limits.detail");
        let sse_line = self.size(&l.sse_line, "limits.sse_line");
        let sse_event = self.size(&l.sse_event, "limits.sse_event");
        if let (Some(detail), Some(error_body)) = (detail, error_body)
            && detail > error_body
        {
            self.error(
                &l.detail,
                "limits.detail",
                "a detail cannot be longer than the error body it is read from",
            );
        }
        self.source(&l.source, l.inferred);
        let bytes = |size: Option<u64>| size.map(|s| s as usize);
        let limits = Limits {
            error_body: bytes(error_body)?,
            detail: bytes(detail)?,
            sse_line: bytes(sse_line)?,
            sse_event: bytes(sse_event)?,
        };
        Some((limits, response?))
    }

    /// An open stream holds its budget's slot for as long as it is open, so
    /// the budget of a stream route must bound how many may be open.
    pub(super) fn streams_bounded(
        &mut self,
        services: &[Service],
        throttle: &Throttle,
        raw: &[spec::ServiceFile],
    ) {
        for (service, file) in services.iter().zip(raw) {
            for (route, (name, r)) in service.routes.iter().zip(&file.routes) {
                let unbounded = throttle
                    .budgets
                    .get(route.budget.get())
                    .is_some_and(|b| b.max_in_flight.is_none());
                if matches!(route.returns, Returns::Stream(_)) && unbounded {
                    self.error(
                        &r.budget,
                        format!("routes.{}.budget", &**name),
                        format!(
                            "`{}` has no `max_in_flight`: an open stream holds its slot, so a stream route needs a budget that bounds open streams",
                            &*r.budget
                        ),
                    );
                }
            }
        }
    }

    /// The breaker: its probe a public route, its canary a read, its
    /// timeouts those of classes of `timeouts`.
    pub(super) fn breaker(
        &mut self,
        b: &spec::Breaker,
        services: &[Service],
        timeouts: &[Item<TimeoutClass>],
        open_alert: &'static str,
    ) -> Option<Item<BreakerPolicy>> {
        let probe = self.endpoint_ref(&b.probe_route, "breaker.probe_route", services);
        let canary = self.endpoint_ref(&b.canary_route, "breaker.canary_route", services);
        if probe.is_some_and(|p| p.scope != ScopeNeed::Public) {
            self.error(
                &b.probe_route,
                "breaker.probe_route",
                "the probe route must be public (it runs while auth may be broken)",
            );
        }
        if canary.is_some_and(|c| c.method != Method::Get) {
            self.error(
                &b.canary_route,
                "breaker.canary_route",
                "the canary must be a read (GET)",
            );
        }
        let names: Vec<&str> = timeouts.iter().map(|t| t.name).collect();
        let timeout = |cx: &mut Self, text: &spec::Text, field: &str| {
            let i = cx.reference(text, field, "timeout class", &names)?;
            Some(timeouts[i].per_attempt)
        };
        let probe_timeout = timeout(self, &b.probe_timeout, "breaker.probe_timeout");
        let canary_timeout = timeout(self, &b.canary_timeout, "breaker.canary_timeout");
        let value = BreakerPolicy {
            threshold: self.positive(&b.threshold, "breaker.threshold"),
            window: self.duration(&b.window, "breaker.window")?,
            distinct_endpoints: b.distinct_endpoints,
            probe: probe?,
            canary: canary?,
            probe_interval: self.duration(&b.probe_interval, "breaker.probe_interval")?,
            probe_timeout: probe_timeout?,
            healthy_probes: self.positive(&b.healthy_probes, "breaker.healthy_probes"),
            canary_timeout: canary_timeout?,
            deploy_suspected: self.duration(&b.deploy_suspected, "breaker.deploy_suspected")?,
            alert_after: self.duration(&b.alert_after, "breaker.alert_after")?,
            open_alert,
        };
        Some(Item {
            value,
            doc: String::new(),
            source: self.source(&b.source, b.inferred),
        })
    }

    /// The calls fired once after a close: each a route of the spec with
    /// its path parameters and its body exactly when it takes one.
    pub(super) fn warm_up(
        &mut self,
        b: &spec::Breaker,
        services: &[Service],
        names: &Known,
        ids: Option<&IdPattern<'static>>,
    ) -> Vec<Item<WarmUpCall>> {
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
                    Ok(value) => Some(leak(&value.to_string())),
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
            let timeout = w.timeout.as_ref().and_then(|t| {
                self.reference(t, &field("timeout"), "timeout class", &names.timeouts)
            });
            let pipeline_id = self.warm_up_pipeline(w, target, ids, &field("pipeline_id"));
            let value = WarmUpCall {
                endpoint: target.endpoint,
                path: leak_texts(w.path.iter().map(|p| p.as_str())),
                body,
                timeout: timeout.map(|t| TimeoutIx::new(t as u16)),
                pipeline_id,
            };
            out.push(Item {
                value,
                doc: String::new(),
                source: self.source(&w.source, w.inferred),
            });
        }
        out
    }
}

impl Cx<'_> {
    /// A warm-up call carries a pipeline id exactly when its route carries
    /// the pipeline header, one that is a valid ID.
    fn warm_up_pipeline(
        &mut self,
        w: &spec::WarmUp,
        target: &Route,
        ids: Option<&IdPattern<'static>>,
        field: &str,
    ) -> Option<&'static str> {
        match (&w.pipeline_id, target.pipeline_id) {
            (None, true) => {
                let message = "the route carries the pipeline header: give the warm-up call its own `pipeline_id`";
                self.error(&w.route, field, message);
                None
            }
            (Some(id), false) => {
                self.error(id, field, "the route carries no pipeline header");
                None
            }
            // Checked only against a pattern that lowered: a broken one is its own error.
            (Some(id), true) if ids.is_some_and(|p| !p.matches(id)) => {
                let text = ids.map_or("", |p| p.text);
                let message = format!("`{}` does not match `ids.pattern` ({text})", &**id);
                self.error(id, field, message);
                None
            }
            (id, _) => id.as_ref().map(|id| leak(id)),
        }
    }
}

impl Cx<'_> {
    /// A budget no route draws from becomes a method on the client (a
    /// caller's mode): its name must be a free method name there.
    pub(super) fn caller_budgets(&mut self, t: &spec::ThrottleSection, services: &[Service]) {
        for (index, name) in t.budgets.keys().enumerate() {
            let used = services
                .iter()
                .flat_map(|s| &s.routes)
                .any(|r| r.budget.get() == index);
            if used {
                continue;
            }
            // A name that is no snake_case identifier is reported by `throttle`.
            if !is_snake(name) {
                continue;
            }
            let field = format!("throttle.budgets.{}", &**name);
            if CLIENT_METHODS.contains(&name.as_str())
                || services.iter().any(|s| s.handle == name.as_str())
            {
                self.error(
                    name,
                    &field,
                    format!("a budget no route uses becomes a client method, and the client already has `{}`", &**name),
                );
            }
        }
    }
}

impl Cx<'_> {
    /// The replay queue: its budget must bound how many jobs run at once, its
    /// timings and sizes must be usable.
    pub(super) fn replay(
        &mut self,
        r: &spec::ReplayQueue,
        throttle: &Throttle,
        names: &Known,
        deadline: Option<std::time::Duration>,
    ) -> Option<(Item<ReplayPolicy>, Source)> {
        let (budget, lease) = self.replay_budget_and_lease(r, throttle, names, deadline);
        let pause = self.duration(&r.pause, "replay.pause");
        let split = self.positive(&r.split, "replay.split");
        self.replay_kinds(r);
        let lock_attempts = self.positive(&r.lock_retry.attempts, "replay.lock_retry.attempts");
        let lock_step = self.duration(&r.lock_retry.step, "replay.lock_retry.step");
        let depth_metric = self.metric_name(&r.depth_metric, "replay.depth_metric");
        let failures_metric = self.metric_name(&r.failures_metric, "replay.failures_metric");
        let store_rows_metric = self.metric_name(&r.store_rows_metric, "replay.store_rows_metric");
        let store_bytes_metric =
            self.metric_name(&r.store_bytes_metric, "replay.store_bytes_metric");
        self.reference(
            &r.failure_alert,
            "replay.failure_alert",
            "alert",
            &names.alerts,
        );
        let keep_done = self.duration(&r.retention.done, "replay.retention.done");
        let keep_failed = self.duration(&r.retention.failed, "replay.retention.failed");
        let prune_batch = self.positive(&r.retention.batch, "replay.retention.batch");
        let prune_every = self.duration(&r.retention.every, "replay.retention.every");
        let store_bound = self.size(&r.retention.alert_above, "replay.retention.alert_above");
        self.reference(
            &r.retention.alert,
            "replay.retention.alert",
            "alert",
            &names.alerts,
        );
        let retention = self.source(&r.retention.source, r.retention.inferred);
        let source = self.source(&r.source, r.inferred);
        let value = ReplayPolicy {
            budget: BudgetIx::new(budget? as u16),
            lease: lease?,
            pause: pause?,
            split: split as usize,
            kinds: leak_texts(r.kinds.iter().map(|k| k.as_str())),
            lock_attempts,
            lock_step: lock_step?,
            depth_metric,
            failures_metric,
            store_rows_metric,
            store_bytes_metric,
            failure_alert: leak(&r.failure_alert),
            keep_done: keep_done?,
            keep_failed: keep_failed?,
            prune_batch: prune_batch as usize,
            prune_every: prune_every?,
            store_bound: store_bound?,
            store_alert: leak(&r.retention.alert),
        };
        let replay = Item {
            value,
            doc: String::new(),
            source,
        };
        Some((replay, retention))
    }

    /// The replay budget (it must bound the jobs run at once) and the lease
    /// (it must outlast a call).
    fn replay_budget_and_lease(
        &mut self,
        r: &spec::ReplayQueue,
        throttle: &Throttle,
        names: &Known,
        deadline: Option<std::time::Duration>,
    ) -> (Option<usize>, Option<std::time::Duration>) {
        let budget = self.reference(&r.budget, "replay.budget", "budget", &names.budgets);
        if let Some(b) = budget
            && throttle.budgets[b].max_in_flight.is_none()
        {
            self.error(
                &r.budget,
                "replay.budget",
                "replays need a budget with `max_in_flight`: it bounds the jobs a worker runs at once",
            );
        }
        let lease = self.duration(&r.lease, "replay.lease");
        if let (Some(lease), Some(deadline)) = (lease, deadline)
            && lease <= deadline
        {
            self.error(
                &r.lease,
                "replay.lease",
                "must outlast `deadline.interactive`: a lease that runs out mid-call hands a live job to a second worker",
            );
        }
        (budget, lease)
    }

    /// The job kinds: at least one, each snake_case.
    fn replay_kinds(&mut self, r: &spec::ReplayQueue) {
        if r.kinds.is_empty() {
            self.sources.at(
                r.source.span(),
                "replay.kinds",
                "name at least one job kind",
            );
        }
        for kind in &r.kinds {
            if !is_snake(kind) {
                self.error(kind, "replay.kinds", "a job kind is snake_case");
            }
        }
    }

    /// The fleet section: how replicas share the throttle through Redis.
    /// The bounds come from what the fleet promises: an outage is
    /// seen within 1 s, a returned Redis is used again within 2 s, and a
    /// crashed replica's slots come back within one lease.
    pub(super) fn fleet(
        &mut self,
        f: &spec::Fleet,
        throttle: &Throttle,
        names: &Known,
    ) -> Option<Item<FleetPolicy>> {
        let shared = self.fleet_backend(f);
        let degraded = self.fleet_degraded(f);
        if !is_env_name(&f.url_env) {
            self.error(
                &f.url_env,
                "fleet.url_env",
                "an environment variable name is SCREAMING_SNAKE_CASE",
            );
        }
        let outage = self.fleet_outage(f);
        let (lease, heartbeat) = self.fleet_lease(f, outage.deadline);
        let margin = self.fleet_margin(f);
        let per_replica = self.fleet_per_replica(f, throttle, names);
        let metrics = self.fleet_metrics(&f.metrics);
        self.reference(&f.alert, "fleet.alert", "alert", &names.alerts);
        let source = self.source(&f.source, f.inferred);
        let value = FleetPolicy {
            shared: shared?,
            url_env: leak(&f.url_env),
            deadline: outage.deadline?,
            breaker_failures: outage.failures,
            breaker_over: outage.over?,
            breaker_retry: outage.retry?,
            lease: lease?,
            heartbeat: heartbeat?,
            margin_percent: margin?,
            degraded: degraded?,
            per_replica: leak_all(per_replica),
            metrics,
            alert: leak(&f.alert),
        };
        Some(Item {
            value,
            doc: String::new(),
            source,
        })
    }

    /// Whether the replicas share the throttle: `local` or `redis`.
    fn fleet_backend(&mut self, f: &spec::Fleet) -> Option<bool> {
        match f.backend.as_str() {
            "local" => Some(false),
            "redis" => Some(true),
            other => {
                self.error(
                    &f.backend,
                    "fleet.backend",
                    format!("unknown fleet backend `{other}`: expected `local` or `redis`"),
                );
                None
            }
        }
    }

    /// What a replica does while Redis is out: admit or refuse.
    fn fleet_degraded(&mut self, f: &spec::Fleet) -> Option<Degraded> {
        match f.fail.as_str() {
            "open" => Some(Degraded::Open),
            "closed" => Some(Degraded::Closed),
            other => {
                self.error(
                    &f.fail,
                    "fleet.fail",
                    format!("unknown degraded rule `{other}`: expected `open` or `closed`"),
                );
                None
            }
        }
    }

    /// The deadline and the breaker over Redis: an outage is seen within
    /// 1 s, and a returned Redis is shared again within 2 s.
    fn fleet_outage(&mut self, f: &spec::Fleet) -> FleetOutage {
        let second = std::time::Duration::from_secs(1);
        let deadline = self.duration(&f.deadline, "fleet.deadline");
        let failures = self.positive(&f.breaker.failures, "fleet.breaker.failures");
        if let Some(d) = deadline
            && d * failures > second
        {
            self.error(
                &f.deadline,
                "fleet.deadline",
                "`breaker.failures` calls of this deadline take over 1 s: a Redis outage must be seen within 1 s",
            );
        }
        let over = self.duration(&f.breaker.over, "fleet.breaker.over");
        if let (Some(o), Some(d)) = (over, deadline)
            && o + d >= second
        {
            self.error(
                &f.breaker.over,
                "fleet.breaker.over",
                "with the deadline, must be under 1 s: a Redis outage must be seen within 1 s",
            );
        }
        let retry = self.duration(&f.breaker.retry, "fleet.breaker.retry");
        if let Some(r) = retry
            && r >= 2 * second
        {
            self.error(
                &f.breaker.retry,
                "fleet.breaker.retry",
                "must be under 2 s: a returned Redis is shared again within 2 s",
            );
        }
        FleetOutage {
            deadline,
            failures,
            over,
            retry,
        }
    }

    /// The lease of a replica's slots and its heartbeat: one missed beat
    /// loses nothing, and a lease outlasts the deadline.
    fn fleet_lease(
        &mut self,
        f: &spec::Fleet,
        deadline: Option<std::time::Duration>,
    ) -> (Option<std::time::Duration>, Option<std::time::Duration>) {
        let lease = self.duration(&f.lease, "fleet.lease");
        let heartbeat = self.duration(&f.heartbeat, "fleet.heartbeat");
        if let (Some(lease), Some(heartbeat)) = (lease, heartbeat)
            && heartbeat * 2 > lease
        {
            self.error(
                &f.heartbeat,
                "fleet.heartbeat",
                "must be at most half the lease: leases are renewed with the heartbeat, and one missed beat must not lose them",
            );
        }
        if let (Some(lease), Some(deadline)) = (lease, deadline)
            && lease <= deadline
        {
            self.error(&f.lease, "fleet.lease", "must outlast `fleet.deadline`");
        }
        (lease, heartbeat)
    }

    /// The share of a budget kept back from the fleet, a percentage below 100.
    fn fleet_margin(&mut self, f: &spec::Fleet) -> Option<u32> {
        let margin = f
            .margin
            .strip_suffix('%')
            .and_then(|n| n.trim().parse::<u32>().ok())
            .filter(|&n| n < 100);
        if margin.is_none() {
            self.error(
                &f.margin,
                "fleet.margin",
                format!(
                    "`{}` is not a margin: write a percentage below 100, e.g. `5%`",
                    &*f.margin
                ),
            );
        }
        margin
    }

    /// The budgets each replica keeps to itself: each has a limit, named once.
    fn fleet_per_replica(
        &mut self,
        f: &spec::Fleet,
        throttle: &Throttle,
        names: &Known,
    ) -> Vec<BudgetIx> {
        let mut per_replica: Vec<BudgetIx> = Vec::new();
        for name in &f.per_replica {
            let Some(b) = self.reference(name, "fleet.per_replica", "budget", &names.budgets)
            else {
                continue;
            };
            let budget = &throttle.budgets[b];
            if budget.max_in_flight.is_none() && budget.per_minute.is_none() {
                self.error(
                    name,
                    "fleet.per_replica",
                    format!("`{}` has no limit of its own to keep per replica", &**name),
                );
            } else if per_replica.contains(&BudgetIx::new(b as u16)) {
                self.error(
                    name,
                    "fleet.per_replica",
                    format!("`{}` is named twice", &**name),
                );
            } else {
                per_replica.push(BudgetIx::new(b as u16));
            }
        }
        per_replica
    }

    /// The names of the fleet's metrics.
    fn fleet_metrics(&mut self, m: &spec::FleetMetrics) -> FleetMetricNames {
        FleetMetricNames {
            admission: self.metric_name(&m.admission, "fleet.metrics.admission"),
            decisions: self.metric_name(&m.decisions, "fleet.metrics.decisions"),
            degraded: self.metric_name(&m.degraded, "fleet.metrics.degraded"),
            share: self.metric_name(&m.share, "fleet.metrics.share"),
        }
    }
}

/// How fast the fleet sees a Redis outage and uses Redis again; a `None`
/// is a value that did not lower (its error recorded).
struct FleetOutage {
    deadline: Option<std::time::Duration>,
    failures: u32,
    over: Option<std::time::Duration>,
    retry: Option<std::time::Duration>,
}

/// `SCREAMING_SNAKE_CASE`, as an environment variable is named.
fn is_env_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_uppercase())
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}
