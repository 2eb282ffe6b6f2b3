//! POLICY.md's list of every metric the client and its replay queue export,
//! so an operator finds each name, type and label set in one table; a part
//! the spec leaves out (no breaker, no fleet, no replay queue) says so.

use std::fmt::Write;

use crate::model::{FleetPolicy, Item, Model};

/// One exported series family: its name as scraped, type, labels, meaning and exporter.
type Metric = (
    String,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

const CLIENT: &str = "the client (`metrics_text()`)";
const QUEUE: &str = "the replay queue (`Jobs::metrics_text()`)";

fn counter(name: &str) -> String {
    format!("{name}_total")
}

/// The client's own metrics, those of the parts its spec names.
fn client(model: &Model) -> Vec<Metric> {
    let m = &model.metrics;
    let mut out = vec![
        (
            counter(m.requests),
            "counter",
            "service, error_class, retried",
            "calls by final class",
            CLIENT,
        ),
        (
            m.duration.to_owned(),
            "histogram",
            "service",
            "call duration, retries included",
            CLIENT,
        ),
    ];
    let optional = [
        (
            m.circuit_state.map(str::to_owned),
            "gauge",
            "",
            "breaker state: 0 closed, 1 half-open, 2 open",
        ),
        (
            m.circuit_open_seconds.map(counter),
            "counter",
            "",
            "seconds the breaker spent open",
        ),
        (
            m.sse_fallback.map(counter),
            "counter",
            "stream",
            "streams given up for polling",
        ),
        (
            m.sse_buffered.map(counter),
            "counter",
            "stream",
            "streams a proxy buffered",
        ),
    ];
    out.extend(
        optional
            .into_iter()
            .filter_map(|(name, ty, labels, what)| Some((name?, ty, labels, what, CLIENT))),
    );
    out.push((
        counter(m.alerts),
        "counter",
        "alert",
        "alerts the client raised, whatever their sink",
        CLIENT,
    ));
    out.push((
        counter(m.rate_limited),
        "counter",
        "retry_after",
        "429 answers, by whether Retry-After was usable",
        CLIENT,
    ));
    out.extend(model.fleet.as_ref().map(fleet).into_iter().flatten());
    out
}

/// The fleet stage's metrics, when the spec has a fleet.
fn fleet(f: &Item<FleetPolicy>) -> Vec<Metric> {
    let part = "the client, with a fleet backend";
    let n = &f.metrics;
    vec![
        (
            n.admission.to_owned(),
            "histogram",
            "backend",
            "time of the fleet stage of admission",
            part,
        ),
        (
            counter(n.decisions),
            "counter",
            "backend, outcome",
            "fleet admission decisions",
            part,
        ),
        (
            n.degraded.to_owned(),
            "gauge",
            "",
            "1 while the fleet's store is unreachable",
            part,
        ),
        (
            n.share.to_owned(),
            "gauge",
            "",
            "this replica's share of the fleet's limits",
            part,
        ),
    ]
}

/// The replay queue's metrics, the job store's among them.
fn queue(model: &Model) -> Vec<Metric> {
    let Some(r) = &model.replay else {
        return Vec::new();
    };
    vec![
        (
            r.depth_metric.to_owned(),
            "gauge",
            "kind",
            "jobs not done yet (pending, in flight, waiting to replay)",
            QUEUE,
        ),
        (
            counter(r.failures_metric),
            "counter",
            "",
            "jobs that ended failed",
            QUEUE,
        ),
        (
            r.store_rows_metric.to_owned(),
            "gauge",
            "state",
            "the job store's rows",
            QUEUE,
        ),
        (
            r.store_bytes_metric.to_owned(),
            "gauge",
            "state",
            "the bytes of the job store's payloads",
            QUEUE,
        ),
    ]
}

pub(super) fn section(md: &mut String, model: &Model) {
    let _ = writeln!(md, "\n## Metrics\n");
    let rows = client(model).into_iter().chain(queue(model));
    super::docs::table(
        md,
        &["metric", "type", "labels", "what", "exported by"],
        rows.map(|(name, ty, labels, what, by)| {
            let labels = if labels.is_empty() {
                "—".to_owned()
            } else {
                format!("`{labels}`")
            };
            vec![
                format!("`{name}`"),
                ty.to_owned(),
                labels,
                what.to_owned(),
                by.to_owned(),
            ]
        }),
    );
    if model.replay.is_none() {
        let _ = writeln!(
            md,
            "\nNo write of this API is queued for replay, so no job store runs beside this client and none of the \
             replay queue's metrics (its depth, failed jobs, the store's rows and payload bytes) is exported with it."
        );
    }
}
