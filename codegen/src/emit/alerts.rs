//! The API's alerts as Prometheus alerting rules (`alerts.rules.yml`) over
//! the metrics the client exports, and a `promtool test rules` file
//! (`alerts.test.yml`) with a series each rule fires on and one it does not.
//!
//! A rule reads the raw metric where Prometheus can judge the condition
//! itself (the breaker's state, stream fallbacks, replay failures), and the
//! raised-alerts counter (`metrics.alerts`) where only the client knows the
//! context (a 401 outside the deploy window, a rate the client counted).
//! Every string is written as a JSON string, which YAML reads as a
//! double-quoted scalar.

use std::fmt::Write;
use std::time::Duration;

use crate::model::{Alert, Model};

/// One rule, and the series of its two test cases.
struct Rule<'m> {
    alert: &'m Alert,
    expr: String,
    /// How long the condition must hold (`for:`).
    hold: Option<Duration>,
    /// How the rule reads the client, for the description.
    how: String,
    /// Input series (name, minute-by-minute values) that make it fire at `fires_at`.
    firing: Vec<(String, String)>,
    fires_at: u64,
    /// Series it must stay silent on at `silent_at`.
    silent: Vec<(String, String)>,
    silent_at: u64,
}

/// The rules of `model`, one per alert of its `alerts` table.
fn rules(model: &Model) -> Vec<Rule<'_>> {
    let m = &model.metrics;
    let raised = format!("{}_total", m.alerts);
    model
        .alerts
        .iter()
        .map(|alert| {
            let name = alert.name.as_str();
            let breaker = model.breaker.as_ref().zip(m.circuit_state.as_ref());
            if let (Some((b, state)), true) =
                (breaker, model.breaker_alert.as_deref() == Some(name))
            {
                let hold = minutes(b.alert_after);
                return Rule {
                    alert,
                    expr: format!("max({state}) >= 1"),
                    hold: Some(b.alert_after),
                    how: format!(
                        "{state} not closed (1 half-open, 2 open) for {}",
                        secs(b.alert_after)
                    ),
                    firing: vec![(state.clone(), format!("0 2+0x{}", hold + 2))],
                    fires_at: hold + 2,
                    // Open a minute short of the hold, then closed again.
                    silent: vec![(
                        state.clone(),
                        format!("0 2+0x{} 0+0x{}", hold - 1, hold + 2),
                    )],
                    silent_at: hold + 2,
                };
            }
            if let Some(r) = model.replay.as_ref().filter(|r| r.failure_alert == name) {
                let series = format!("{}_total", r.failures_metric);
                return counter_rule(
                    alert,
                    &series,
                    &series,
                    model.alert_look_back,
                    "replay jobs failed",
                );
            }
            let fallbacks = model
                .fallbacks_sustained
                .as_ref()
                .filter(|(_, _, a)| a == name)
                .zip(m.sse_fallback.as_ref());
            if let Some(((at_least, within, _), fallback)) = fallbacks {
                let series = format!("{fallback}_total");
                let window = secs(*within);
                let mut expr = format!("sum(increase({series}[{window}])) >= {at_least}");
                let mut how =
                    format!("at least {at_least} stream fallbacks to polling within {window}");
                let mut silent = vec![(
                    format!("{series}{{stream=\"orchestrator\"}}"),
                    ramp(at_least - 1, minutes(*within)),
                )];
                let buffered = model
                    .buffering
                    .as_ref()
                    .filter(|b| b.alert == name)
                    .zip(m.sse_buffered.as_ref());
                if let Some((b, buffered)) = buffered {
                    let _ = write!(expr, " or sum({buffered}_total) >= {}", b.confirm_after);
                    let _ = write!(how, ", or {} streams a proxy buffered", b.confirm_after);
                    silent.push((
                        format!("{buffered}_total{{stream=\"chat\"}}"),
                        format!("0+0x2 {}+0x10", b.confirm_after - 1),
                    ));
                }
                return Rule {
                    alert,
                    expr,
                    hold: None,
                    how,
                    firing: vec![(
                        format!("{series}{{stream=\"orchestrator\"}}"),
                        ramp(*at_least, minutes(*within)),
                    )],
                    fires_at: 2 + u64::from(*at_least),
                    silent,
                    silent_at: 2 + u64::from(*at_least),
                };
            }
            let window = match (
                name == model.retry_exhausted_alert,
                model.retry_exhausted_rate,
            ) {
                // Raised at most once per window while the rate holds.
                (true, Some((_, within))) => within,
                _ => model.alert_look_back,
            };
            counter_rule(
                alert,
                &format!("{raised}{{alert=\"{name}\"}}"),
                &format!("{raised}{{alert=\"{name}\"}}"),
                window,
                "the client raised it",
            )
        })
        .collect()
}

/// A rule firing for `window` after `selector` went up.
fn counter_rule<'m>(
    alert: &'m Alert,
    selector: &str,
    series: &str,
    window: Duration,
    what: &str,
) -> Rule<'m> {
    let w = minutes(window);
    Rule {
        alert,
        expr: format!("sum(increase({selector}[{}])) > 0", secs(window)),
        hold: None,
        how: format!("{what} within the last {}", secs(window)),
        // Raised at minute 1: firing a minute later...
        firing: vec![(series.to_owned(), format!("0 1+0x{}", w + 4))],
        fires_at: 2,
        // ...and silent once the window has passed.
        silent: vec![(series.to_owned(), format!("0 1+0x{}", w + 4))],
        silent_at: w + 3,
    }
}

/// A counter flat at 0 for 2 minutes, rising by one a minute to `to`, then
/// flat for `after` minutes.
fn ramp(to: u32, after: u64) -> String {
    if to == 0 {
        return format!("0+0x{}", after + 3);
    }
    format!("0+0x2 1+1x{} {to}+0x{after}", to.saturating_sub(1))
}

/// `alerts.rules.yml`.
pub fn rules_yml(model: &Model) -> String {
    let mut out = header(model);
    let _ = writeln!(out, "groups:");
    let _ = writeln!(
        out,
        "  - name: {}",
        q(&format!("{}-client", model.api.name))
    );
    let _ = writeln!(out, "    rules:");
    for rule in rules(model) {
        let a = rule.alert;
        let _ = writeln!(out, "      - alert: {}", q(&a.name));
        let _ = writeln!(out, "        expr: {}", q(&rule.expr));
        if let Some(hold) = rule.hold {
            let _ = writeln!(out, "        for: {}", secs(hold));
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
    for rule in rules(model) {
        let a = rule.alert;
        for (firing, series, at) in [
            (true, &rule.firing, rule.fires_at),
            (false, &rule.silent, rule.silent_at),
        ] {
            let verb = if firing { "fires" } else { "stays silent" };
            let _ = writeln!(out, "  - name: {}", q(&format!("{} {verb}", a.name)));
            let _ = writeln!(out, "    interval: 1m");
            let _ = writeln!(out, "    input_series:");
            for (name, values) in series {
                let _ = writeln!(out, "      - series: {}", q(name));
                let _ = writeln!(out, "        values: {}", q(values));
            }
            let _ = writeln!(out, "    alert_rule_test:");
            let _ = writeln!(out, "      - eval_time: {at}m");
            let _ = writeln!(out, "        alertname: {}", q(&a.name));
            if !firing {
                let _ = writeln!(out, "        exp_alerts: []");
                continue;
            }
            let _ = writeln!(out, "        exp_alerts:");
            let _ = writeln!(out, "          - exp_labels:");
            for (k, v) in labels(model, a) {
                let _ = writeln!(out, "              {k}: {}", q(&v));
            }
            let _ = writeln!(out, "            exp_annotations:");
            for (k, v) in annotations(a, &rule.how) {
                let _ = writeln!(out, "              {k}: {}", q(&v));
            }
        }
    }
    out
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
        ("severity", a.severity.clone()),
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

/// A duration as Prometheus writes it, in seconds (`300s`).
fn secs(d: Duration) -> String {
    format!("{}s", d.as_secs())
}

/// Whole minutes, rounded up: test series are one sample a minute.
fn minutes(d: Duration) -> u64 {
    d.as_secs().div_ceil(60)
}

/// A YAML double-quoted scalar (JSON's string syntax is a subset of it).
fn q(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}
