//! The recorder: everything a call leaves behind for its operators. Metrics,
//! alerts (with the policy's severities), the retry-exhaustion and
//! stream-fallback alarms, and the proxy-buffering verdict.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use sdk_policy::endpoint::Endpoint;
use sdk_policy::log::ExhaustedLine;
use sdk_policy::policy::{BufferingRule, Policy, TaxonomyRow};
use sdk_policy::scope::Id;
use tokio::time::Instant;

use crate::alerts::{Alert, AlertSink};
use crate::call::Call;
use crate::error::Error;
use crate::metrics::Metrics;
use crate::rate::RateAlarm;
use crate::telemetry::{self, PendingLine};

pub(crate) struct Recorder {
    pub policy: &'static Policy,
    /// The tenant every line and alert of this client names.
    pub tenant: Id,
    pub metrics: Metrics,
    alerts: Arc<dyn AlertSink>,
    /// Exhausted calls, when the policy alerts on their rate only.
    exhaustion: Option<Mutex<RateAlarm>>,
    /// Fallbacks to polling, when the policy alerts on their rate.
    fallbacks: Option<Mutex<RateAlarm>>,
    /// A proxy was seen buffering event streams: jobs are followed by
    /// polling alone for the rest of the client's life (§6.4).
    proxy_buffering: AtomicBool,
    /// Streams seen buffered so far.
    buffered_streams: AtomicU32,
}

impl Recorder {
    pub fn new(
        policy: &'static Policy,
        tenant: Id,
        metrics: Metrics,
        alerts: Arc<dyn AlertSink>,
    ) -> Self {
        let alarm = |rate| Mutex::new(RateAlarm::new(rate));
        Recorder {
            policy,
            tenant,
            metrics,
            alerts,
            exhaustion: policy.alerts.retry_exhausted_rate.map(alarm),
            fallbacks: policy.fallbacks_sustained.map(|(rate, _)| alarm(rate)),
            proxy_buffering: AtomicBool::new(false),
            buffered_streams: AtomicU32::new(0),
        }
    }

    /// Sends `alert` to the sink and counts it; its severity is the
    /// policy's for its name, whatever the caller set.
    pub fn alert(&self, mut alert: Alert) {
        self.metrics.alert(alert.name);
        if let Some(severity) = self.policy.severity(alert.name) {
            alert.severity = severity;
        }
        self.alerts.alert(alert);
    }

    /// An alert named `name` with its severity from the policy and nothing else set.
    pub fn alert_of(&self, name: &'static str) -> Alert {
        Alert {
            name,
            severity: self.policy.severity(name).unwrap_or_default(),
            endpoint: None,
            row: None,
            detail: None,
            request_id: None,
        }
    }

    pub fn raise(&self, name: &'static str, error: &Error) {
        self.raise_with(name, error, error.detail().map(str::to_owned));
    }

    /// [`Recorder::raise`] with a detail of the alert's own.
    pub fn raise_with(&self, name: &'static str, error: &Error, detail: Option<String>) {
        self.alert(Alert {
            endpoint: Some(error.endpoint()),
            row: Some(error.row()),
            detail,
            request_id: error.request_id().map(str::to_owned),
            ..self.alert_of(name)
        });
    }

    /// Counts one finished call in the metrics.
    pub fn count_call(
        &self,
        endpoint: &Endpoint,
        class: &'static str,
        retried: bool,
        started: Instant,
    ) {
        (self.metrics).call(endpoint.service, class, retried, started.elapsed());
    }

    /// Writes a successful attempt's line once its body is decoded.
    pub fn emit(&self, line: &PendingLine, endpoint: &Endpoint, row: Option<&'static TaxonomyRow>) {
        line.emit(self.policy, self.tenant.as_str(), endpoint, row);
    }

    /// A call whose retries were used up: logged with its context; alerted
    /// every time, or when the rate the policy names is reached.
    pub fn exhausted(&self, error: &Error, call: &Call<'_>) {
        let policy = self.policy;
        let values = telemetry::path_values(policy, call);
        let fields = policy.log.path_fields.len().min(values.len());
        policy.log_lines.retry_exhausted(&ExhaustedLine {
            operation: error.endpoint(),
            row: error.row(),
            status: error.status(),
            attempts: error.attempts(),
            request_id: error.request_id(),
            tenant: self.tenant.as_str(),
            workspace: call.workspace.map(|w| w.as_str()),
            path_values: &values[..fields],
            pipeline_id: call.pipeline.filter(|_| call.endpoint.pipeline_id),
        });
        let name = policy.alerts.retry_exhausted;
        let Some(alarm) = &self.exhaustion else {
            self.raise(name, error);
            return;
        };
        let mut alarm = alarm.lock().unwrap_or_else(|e| e.into_inner());
        if alarm.record(Instant::now()) {
            let rate = alarm.rate();
            drop(alarm);
            let detail = format!(
                "{} calls exhausted their retries within {} s; the last: {}",
                rate.at_least,
                rate.within.as_secs(),
                error.detail().unwrap_or("no detail")
            );
            self.raise_with(name, error, Some(detail));
        }
    }

    /// Whether jobs are followed by polling alone: a proxy between client
    /// and platform was confirmed buffering event streams.
    pub fn polling_only(&self) -> bool {
        self.proxy_buffering.load(Ordering::Relaxed)
    }

    /// A stream arrived in one burst at its end: counted; once the policy's
    /// `confirm_after` streams did, buffering is confirmed (alert, and jobs
    /// are polled from then on).
    pub fn stream_buffered(
        &self,
        stream: &'static str,
        endpoint: &'static Endpoint,
        rule: &BufferingRule,
    ) {
        self.metrics.sse_buffered(stream);
        let seen = self.buffered_streams.fetch_add(1, Ordering::Relaxed) + 1;
        if seen >= rule.confirm_after && !self.proxy_buffering.swap(true, Ordering::Relaxed) {
            self.alert(Alert {
                endpoint: Some(endpoint.operation),
                detail: Some(format!(
                    "a proxy buffers event streams: {seen} arrived in one burst at their end or sent no head within the open timeout; jobs are followed by polling from now on"
                )),
                ..self.alert_of(rule.alert)
            });
        }
    }

    /// A stream's opening timed out before its head: counted as a buffered
    /// stream (a live relay sends its head at once).
    pub fn stream_withheld(&self, stream: &'static str, endpoint: &'static Endpoint) {
        if let Some(rule) = &self.policy.buffering {
            self.stream_buffered(stream, endpoint, rule);
        }
    }

    /// A stream was given up for polling: counted, and alerted once the
    /// policy's rate of fallbacks is reached (once per window while it lasts).
    pub fn stream_fell_back(&self, stream: &'static str, error: &Error) {
        self.metrics.sse_fallback(stream);
        let (Some(alarm), Some((rate, alert))) = (&self.fallbacks, self.policy.fallbacks_sustained)
        else {
            return;
        };
        let raise = alarm
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .record(Instant::now());
        if raise {
            let detail = format!(
                "{} stream fallbacks to polling within {} s; the last: {}",
                rate.at_least,
                rate.within.as_secs(),
                error.detail().unwrap_or(error.class_name())
            );
            self.raise_with(alert, error, Some(detail));
        }
    }
}
