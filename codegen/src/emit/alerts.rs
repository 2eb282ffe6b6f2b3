//! The API's alerts as Prometheus alerting rules (`alerts.rules.yml`) over
//! the metrics the client exports, and a `promtool test rules` file
//! (`alerts.test.yml`) with cases each rule fires on, resolves after and
//! stays silent on.
//!
//! A rule reads the raw metric where Prometheus can judge the condition
//! itself (the breaker's state, stream fallbacks and buffering, the job
//! store's payload bytes), and the
//! raised-alerts counter (`metrics.alerts`) where only the client knows the
//! context (a 401 outside the deploy window, a rate the client counted, a
//! job that failed on its replay). Every counter a rule reads is exported at
//! 0 from the client's start, so the test series start at 0 as the client's
//! do; windows make every rule clear, and a condition one process owns
//! (its breaker, its proxy's buffering) is judged per scraped instance.
//! Every string is written as a JSON string, which YAML reads as a
//! double-quoted scalar.

use std::fmt::Write;
use std::time::Duration;

use crate::model::{Alert, Model};

/// One rule and its promtool cases.
struct Rule<'m> {
    alert: &'m Alert,
    expr: String,
    /// How long the condition must hold (`for:`), compressed as the rule is.
    hold: Option<Duration>,
    /// How the rule reads the client, for the description.
    how: String,
    cases: Vec<Case>,
}

/// At minute `.0`: firing with these labels beside the rule's own, or
/// silent (`None`).
type Check = (u64, Option<Vec<(&'static str, String)>>);

/// One promtool test: input series sampled once a minute from the client's
/// start, and what the rule shows at given minutes.
struct Case {
    name: String,
    series: Vec<(String, String)>,
    checks: Vec<Check>,
}

impl Case {
    fn new(name: &str, series: Vec<(String, String)>, checks: Vec<Check>) -> Self {
        Case {
            name: name.to_owned(),
            series,
            checks,
        }
    }
}

/// Time in the rules: the spec's (1), or divided by this for a test on a
/// real Prometheus server, whose clock cannot be paused.
#[derive(Debug, Clone, Copy)]
struct TimeScale(u32);

impl TimeScale {
    fn of(self, d: Duration) -> Duration {
        d / self.0.max(1)
    }

    /// As Prometheus writes a duration: `300s`, or `3500ms` below a second's step.
    fn text(self, d: Duration) -> String {
        let d = self.of(d);
        if d.as_millis().is_multiple_of(1000) {
            format!("{}s", d.as_secs())
        } else {
            format!("{}ms", d.as_millis())
        }
    }
}

/// The scrape labels of the test series: one replica of the application.
const JOB: &str = "app";

/// The labels Prometheus adds to what it scrapes from replica `n`.
fn replica(n: u32) -> Vec<(&'static str, String)> {
    vec![
        ("job", JOB.to_owned()),
        ("instance", format!("replica-{n}")),
    ]
}

/// A test series: `name{labels…}` as scraped from replica `n`.
fn series(name: &str, labels: &[(&str, &str)], n: u32) -> String {
    let all: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{v}\""))
        .chain(replica(n).into_iter().map(|(k, v)| format!("{k}=\"{v}\"")))
        .collect();
    format!("{name}{{{}}}", all.join(","))
}

/// The rules of `model`, one per alert of its `alerts` table, with time divided by `by`.
fn rules(model: &Model, by: u32) -> Vec<Rule<'_>> {
    let t = TimeScale(by);
    model
        .alerts
        .iter()
        .map(|alert| rule(model, alert, t))
        .collect()
}

fn rule<'m>(model: &'m Model, alert: &'m Alert, t: TimeScale) -> Rule<'m> {
    let name = alert.alert;
    let m = &model.metrics;
    let breaker = model
        .breaker
        .as_ref()
        .zip(m.circuit_state.as_ref())
        .filter(|(b, _)| b.open_alert == name);
    if let Some((b, state)) = breaker {
        return breaker_rule(alert, state, b.alert_after, t);
    }
    if let Some(r) = model.replay.as_ref().filter(|r| r.store_alert == name) {
        let hold = model.alert_look_back;
        return store_rule(alert, r.store_bytes_metric, r.store_bound, hold, t);
    }
    let fallbacks = model
        .fallbacks_sustained
        .as_ref()
        .filter(|(_, a)| *a == name)
        .zip(m.sse_fallback);
    if let Some(((rate, _), fallback)) = fallbacks {
        let buffered = model
            .buffering
            .as_ref()
            .filter(|b| b.alert == name)
            .zip(m.sse_buffered)
            .map(|(b, metric)| (b.confirm_after, metric));
        let rate = (rate.at_least, rate.within);
        return fallback_rule(alert, rate, fallback, buffered, model.alert_look_back, t);
    }
    let window = match (
        name == model.alert_names.retry_exhausted,
        model.alert_names.retry_exhausted_rate,
    ) {
        // Raised at most once per window while the rate holds.
        (true, Some(rate)) => rate.within,
        _ => model.alert_look_back,
    };
    let what = match &model.replay {
        Some(r) if r.failure_alert == name => "the replay queue raised it (a replayed job failed)",
        _ => "the client raised it",
    };
    let raised = format!("{}_total", m.alerts);
    counter_rule(alert, &raised, window, what, t)
}

/// Firing while one replica's breaker is not closed for the hold.
fn breaker_rule<'m>(alert: &'m Alert, state: &str, hold: Duration, t: TimeScale) -> Rule<'m> {
    let h = minutes(hold);
    let one = series(state, &[], 1);
    let mut cases = vec![
        Case::new(
            "fires once open for the hold, and resolves when closed",
            vec![(one.clone(), format!("0 2+0x{} 0+0x3", h + 2))],
            vec![(h + 2, Some(replica(1))), (h + 5, None)],
        ),
        Case::new(
            "stays silent when open a minute short of the hold",
            vec![(one.clone(), format!("0 2+0x{} 0+0x{}", h - 1, h + 2))],
            vec![(h + 2, None)],
        ),
    ];
    if h >= 3 {
        // Open in turn, back to back: together longer than the hold.
        let two = series(state, &[], 2);
        cases.push(Case::new(
            "stays silent when two replicas are open in turn, each shorter than the hold",
            vec![
                (one, format!("0 2+0x{} 0+0x{}", h - 2, h + 2)),
                (two, format!("0+0x{} 2+0x{} 0+0x3", h - 1, h - 2)),
            ],
            vec![(h + 1, None), (2 * h - 2, None)],
        ));
    }
    Rule {
        alert,
        expr: format!("max by (job, instance) ({state}) >= 1"),
        hold: Some(t.of(hold)),
        how: format!(
            "{state} of one replica is not closed (1 half-open, 2 open) for {}",
            t.text(hold)
        ),
        cases,
    }
}

/// Firing while the job store holds more payload bytes than `bound` for the
/// hold: its states summed, and the largest figure any replica reports,
/// because replicas sharing one PostgreSQL store each report all of it.
fn store_rule<'m>(
    alert: &'m Alert,
    bytes: &str,
    bound: u64,
    hold: Duration,
    t: TimeScale,
) -> Rule<'m> {
    let h = minutes(hold);
    let (half, rest) = (bound / 2, bound - bound / 2);
    let state = |s: &str, n, values: String| (series(bytes, &[("state", s)], n), values);
    let app = || Some(vec![("job", JOB.to_owned())]);
    Rule {
        alert,
        expr: format!("max by (job) (sum by (job, instance) ({bytes})) > {bound}"),
        hold: Some(t.of(hold)),
        how: format!(
            "the job store's payload bytes ({bytes}, its states summed, the largest figure a replica reports) \
             stay above {bound} for {}",
            t.text(hold)
        ),
        cases: vec![
            Case::new(
                "fires once pending and failed jobs together stay above the bound for the hold, and resolves when the failed ones are pruned",
                vec![
                    state("pending", 1, format!("0 {half}+0x{} {half}+0x3", h + 2)),
                    state("failed", 1, format!("0 {}+0x{} 0+0x3", rest + 1, h + 2)),
                ],
                vec![(h + 2, app()), (h + 5, None)],
            ),
            Case::new(
                "stays silent at the bound",
                vec![
                    state("pending", 1, format!("0 {half}+0x{}", h + 3)),
                    state("failed", 1, format!("0 {rest}+0x{}", h + 3)),
                ],
                vec![(h + 2, None)],
            ),
            Case::new(
                "stays silent when above the bound a minute short of the hold",
                vec![state(
                    "pending",
                    1,
                    format!("0 {}+0x{} 0+0x{}", bound + 1, h - 1, h + 2),
                )],
                vec![(h, None), (h + 2, None)],
            ),
            Case::new(
                "stays silent when two replicas sharing a store each report it under the bound",
                vec![
                    state("pending", 1, format!("0 {}+0x{}", rest + 1, h + 3)),
                    state("pending", 2, format!("0 {}+0x{}", rest + 1, h + 3)),
                ],
                vec![(h + 2, None)],
            ),
        ],
    }
}

/// Firing on a rate of fallbacks across the replicas, or on one replica's
/// confirmed buffering.
fn fallback_rule<'m>(
    alert: &'m Alert,
    (at_least, within): (u32, Duration),
    fallback: &str,
    buffered: Option<(u32, &str)>,
    look_back: Duration,
    t: TimeScale,
) -> Rule<'m> {
    let f = format!("{fallback}_total");
    let w = minutes(within);
    let mut expr = format!("sum(increase({f}[{}])) >= {at_least}", t.text(within));
    let mut how = format!(
        "at least {at_least} stream fallbacks to polling within {} across the replicas",
        t.text(within)
    );
    let fell = |n, to| {
        (
            series(&f, &[("stream", "orchestrator")], n),
            ramp(to, w + 3),
        )
    };
    let mut cases = vec![
        Case::new(
            &format!("fires on {at_least} fallbacks within the window, and resolves after it"),
            vec![fell(1, at_least)],
            vec![
                (2 + u64::from(at_least), Some(vec![])),
                (3 + u64::from(at_least) + w, None),
            ],
        ),
        Case::new(
            "stays silent one fallback short",
            vec![fell(1, at_least.saturating_sub(1))],
            vec![(2 + u64::from(at_least), None)],
        ),
    ];
    if let Some((confirm, buffered)) = buffered {
        let b = format!("{buffered}_total");
        let lb = minutes(look_back);
        let _ = write!(
            expr,
            " or sum by (job, instance) (increase({b}[{}])) >= {confirm}",
            t.text(look_back)
        );
        let _ = write!(
            how,
            ", or {confirm} streams one replica's proxy buffered within {}",
            t.text(look_back)
        );
        let buffer = |n, to| (series(&b, &[("stream", "chat")], n), ramp(to, lb + 3));
        let c = u64::from(confirm);
        cases.push(Case::new(
            &format!("fires when one replica sees {confirm} buffered streams, and resolves"),
            vec![buffer(1, confirm)],
            vec![(2 + c, Some(replica(1))), (3 + c + lb, None)],
        ));
        cases.push(Case::new(
            "stays silent when two replicas each see one buffered stream too few",
            vec![buffer(1, confirm - 1), buffer(2, confirm - 1)],
            vec![(2 + c, None)],
        ));
    }
    Rule {
        alert,
        expr,
        hold: None,
        how,
        cases,
    }
}

/// Firing for `window` after the raised-alerts counter of the alert went up.
fn counter_rule<'m>(
    alert: &'m Alert,
    raised: &str,
    window: Duration,
    what: &str,
    t: TimeScale,
) -> Rule<'m> {
    let name = alert.alert;
    let s = series(raised, &[("alert", name)], 1);
    let w = minutes(window);
    Rule {
        alert,
        expr: format!(
            "sum(increase({raised}{{alert=\"{name}\"}}[{}])) > 0",
            t.text(window)
        ),
        hold: None,
        how: format!("{what} within the last {}", t.text(window)),
        cases: vec![
            // 0 from the client's start; raised once at minute 2.
            Case::new(
                "fires on the first raise, and resolves once the look-back has passed",
                vec![(s.clone(), format!("0 0 1+0x{}", w + 3))],
                vec![(3, Some(vec![])), (w + 3, None)],
            ),
            Case::new(
                "stays silent while the client raises nothing",
                vec![(s, format!("0+0x{}", w + 3))],
                vec![(1, None), (w + 2, None)],
            ),
        ],
    }
}

/// A counter at 0 for 2 minutes after the start, rising by one a minute to
/// `to`, then flat for `after` minutes.
fn ramp(to: u32, after: u64) -> String {
    if to == 0 {
        return format!("0+0x{}", after + 3);
    }
    format!("0+0x2 1+1x{} {to}+0x{after}", to.saturating_sub(1))
}

/// `alerts.rules.yml`.
pub fn rules_yml(model: &Model) -> String {
    rules_yml_compressed(model, 1)
}

/// `alerts.rules.yml` with every window and hold divided by `by`: the
/// same expressions, for a test on a real Prometheus server in seconds.
pub fn rules_yml_compressed(model: &Model, by: u32) -> String {
    let mut out = header(model);
    let _ = writeln!(out, "groups:");
    let _ = writeln!(
        out,
        "  - name: {}",
        q(&format!("{}-client", model.api.name))
    );
    let _ = writeln!(out, "    rules:");
    for rule in rules(model, by) {
        let a = rule.alert;
        let _ = writeln!(out, "      - alert: {}", q(a.alert));
        let _ = writeln!(out, "        expr: {}", q(&rule.expr));
        if let Some(hold) = rule.hold {
            let _ = writeln!(out, "        for: {}", TimeScale(1).text(hold));
        }
        let _ = writeln!(out, "        labels:");
        for (k, v) in labels(model, a) {
            let _ = writeln!(out, "          {k}: {}", q(&v));
        }
        let _ = writeln!(out, "        annotations:");
        for (k, v) in annotations(a, &rule.how) {
            let _ = writeln!(out, "          {k}: {}", q(&v));
        }
    }
    out
}

/// `alerts.test.yml`, for `promtool test rules alerts.test.yml`.
pub fn tests_yml(model: &Model) -> String {
    let mut out = header(model);
    let _ = writeln!(
        out,
        "rule_files:\n  - alerts.rules.yml\nevaluation_interval: 1m\ntests:"
    );
    for rule in rules(model, 1) {
        for case in &rule.cases {
            test_case(&mut out, model, &rule, case);
        }
    }
    out
}

fn test_case(out: &mut String, model: &Model, rule: &Rule, case: &Case) {
    let a = rule.alert;
    let _ = writeln!(
        out,
        "  - name: {}",
        q(&format!("{} {}", a.alert, case.name))
    );
    let _ = writeln!(out, "    interval: 1m");
    let _ = writeln!(out, "    input_series:");
    for (name, values) in &case.series {
        let _ = writeln!(out, "      - series: {}", q(name));
        let _ = writeln!(out, "        values: {}", q(values));
    }
    let _ = writeln!(out, "    alert_rule_test:");
    for (at, firing) in &case.checks {
        let _ = writeln!(out, "      - eval_time: {at}m");
        let _ = writeln!(out, "        alertname: {}", q(a.alert));
        let Some(extra) = firing else {
            let _ = writeln!(out, "        exp_alerts: []");
            continue;
        };
        let _ = writeln!(out, "        exp_alerts:");
        let _ = writeln!(out, "          - exp_labels:");
        for (k, v) in extra.iter().cloned().chain(labels(model, a)) {
            let _ = writeln!(out, "              {k}: {}", q(&v));
        }
        let _ = writeln!(out, "            exp_annotations:");
        for (k, v) in annotations(a, &rule.how) {
            let _ = writeln!(out, "              {k}: {}", q(&v));
        }
    }
}

fn header(model: &Model) -> String {
    format!(
        "# @generated by `cargo xtask codegen` from spec/{}/. Do not edit: change the spec and regenerate.\n",
        model.api.name
    )
}

fn labels(model: &Model, a: &Alert) -> [(&'static str, String); 2] {
    [
        ("api", model.api.name.clone()),
        ("severity", a.severity.to_owned()),
    ]
}

fn annotations(a: &Alert, how: &str) -> [(&'static str, String); 2] {
    [
        ("summary", a.doc.trim().to_owned()),
        (
            "description",
            format!(
                "Fires when {how}. Severity {}: {}. Policy {}.",
                a.severity,
                a.reaches,
                super::docs::source(&a.source)
            ),
        ),
    ]
}

/// Whole minutes, rounded up: test series are one sample a minute.
fn minutes(d: Duration) -> u64 {
    d.as_secs().div_ceil(60)
}

/// A YAML double-quoted scalar (JSON's string syntax is a subset of it).
fn q(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}
