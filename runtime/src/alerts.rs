//! The alert hook (policy §10.4): the backend decides where alerts go.

use std::sync::Mutex;

use sdk_policy::log::{AlertLine, LogLines};

/// One alert, named as in the spec's `alerts` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    /// The alert's name (`breaker_open_long`, `budget_exhausted`, ...).
    pub name: &'static str,
    /// Its severity in the spec (degradation.yaml: GRAG's `page` wakes the
    /// on-call, `ops` goes to the operations channel): what a sink routes on.
    /// The client sets it from the policy when it raises the alert; empty only
    /// for a name the policy does not list.
    pub severity: &'static str,
    /// `service.operation` of the call that raised it, if a call did.
    pub endpoint: Option<&'static str>,
    /// The taxonomy row, if a row raised it.
    pub row: Option<&'static str>,
    pub detail: Option<String>,
    pub request_id: Option<String>,
}

/// Where alerts go. Implemented by the backend (pager, ops channel), routing
/// on [`Alert::severity`]:
///
/// ```
/// # use sdk_runtime::alerts::{Alert, AlertSink};
/// struct Route;
/// impl AlertSink for Route {
///     fn alert(&self, alert: Alert) {
///         match alert.severity {
///             "page" => { /* wake the on-call */ }
///             _ => { /* the operations channel */ }
///         }
///     }
/// }
/// ```
pub trait AlertSink: Send + Sync + 'static {
    fn alert(&self, alert: Alert);
}

/// The default sink: a log line written by the API's [`LogLines`] (a `warn`
/// event on its alert target). The platform's `detail` is part of a response
/// body and may quote the request (FastAPI validation errors do), so only its
/// length and sha256 are logged.
#[derive(Debug)]
pub struct LogAlerts {
    lines: &'static dyn LogLines,
}

impl LogAlerts {
    pub fn new(lines: &'static dyn LogLines) -> Self {
        LogAlerts { lines }
    }
}

impl AlertSink for LogAlerts {
    fn alert(&self, alert: Alert) {
        let detail = alert.detail.as_deref().unwrap_or("");
        self.lines.alert(&AlertLine {
            alert: alert.name,
            severity: alert.severity,
            endpoint: alert.endpoint,
            row: alert.row,
            detail_len: detail.len(),
            detail_sha256: &crate::digest::sha256_hex(detail.as_bytes()),
            request_id: alert.request_id.as_deref(),
        });
    }
}

/// A sink that keeps every alert, for tests and demos.
#[derive(Debug, Default)]
pub struct CollectAlerts {
    alerts: Mutex<Vec<Alert>>,
}

impl CollectAlerts {
    /// Every alert raised so far, oldest first.
    pub fn taken(&self) -> Vec<Alert> {
        self.alerts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The names of the alerts raised so far.
    pub fn names(&self) -> Vec<&'static str> {
        self.taken().iter().map(|a| a.name).collect()
    }
}

impl AlertSink for CollectAlerts {
    fn alert(&self, alert: Alert) {
        self.alerts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(alert);
    }
}

impl<T: AlertSink + ?Sized> AlertSink for std::sync::Arc<T> {
    fn alert(&self, alert: Alert) {
        (**self).alert(alert);
    }
}
