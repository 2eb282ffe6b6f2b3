//! The request log: one entry per platform request (admin routes are not
//! logged), plus notes on what the simulator did on its own (listener closed,
//! connections cut), so a test can count concurrency, rate and retries.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

/// One request as it arrived, and how it was answered.
#[derive(Debug, Clone, Serialize)]
pub struct LoggedRequest {
    /// Arrival order, from 0; never reused, also across [`RequestLog::clear`].
    pub seq: u64,
    /// The TCP connection it came on (numbered in accept order).
    pub connection: u64,
    pub method: String,
    /// The path as sent, without the query.
    pub path: String,
    pub query: Option<String>,
    /// Request headers, names lowercase, in arrival order.
    pub headers: Vec<(String, String)>,
    /// When the request arrived.
    #[serde(skip)]
    pub arrived: Instant,
    /// Milliseconds from the simulator's start to the arrival.
    pub at_ms: f64,
    /// Platform requests in flight when it arrived, itself included. A request
    /// stays in flight until its response body is finished or dropped.
    pub in_flight: usize,
    /// The route (`list_kbs`), when the path and method name one.
    pub operation: Option<&'static str>,
    /// The tenant the platform served it as (`default` without `X-Tenant-ID`).
    pub tenant: Option<String>,
    /// The answer's status; `None` while the handler runs (or for a cut
    /// connection that never got one).
    pub status: Option<u16>,
    /// Faults that shaped this answer (`rate_limited`, `deploy_churn`, ...).
    pub faults: Vec<String>,
    /// When its answer was done (body finished or dropped); `None` while in flight.
    #[serde(skip)]
    pub ended: Option<Instant>,
}

impl LoggedRequest {
    /// A request header by (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether a fault with this name shaped the answer.
    pub fn has_fault(&self, name: &str) -> bool {
        self.faults
            .iter()
            .any(|f| f == name || f.starts_with(&format!("{name}:")))
    }
}

/// Something the simulator did outside a request.
#[derive(Debug, Clone, Serialize)]
pub struct Note {
    #[serde(skip)]
    pub at: Instant,
    pub at_ms: f64,
    pub what: String,
}

#[derive(Default)]
struct Inner {
    entries: Vec<LoggedRequest>,
    notes: Vec<Note>,
    next_seq: u64,
}

/// Handle on the request log; cheap to clone.
#[derive(Clone)]
pub struct RequestLog {
    inner: Arc<Mutex<Inner>>,
    started: Instant,
}

impl RequestLog {
    pub(crate) fn new(started: Instant) -> Self {
        RequestLog {
            inner: Arc::default(),
            started,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn ms(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.started).as_secs_f64() * 1000.0
    }

    /// Appends an entry and returns its sequence number.
    pub(crate) fn push(&self, mut entry: LoggedRequest) -> u64 {
        entry.at_ms = self.ms(entry.arrived);
        let mut inner = self.lock();
        entry.seq = inner.next_seq;
        inner.next_seq += 1;
        let seq = entry.seq;
        inner.entries.push(entry);
        seq
    }

    pub(crate) fn update(&self, seq: u64, f: impl FnOnce(&mut LoggedRequest)) {
        let mut inner = self.lock();
        if let Ok(i) = inner.entries.binary_search_by_key(&seq, |e| e.seq) {
            f(&mut inner.entries[i]);
        }
    }

    pub(crate) fn note(&self, what: impl Into<String>) {
        let at = Instant::now();
        let note = Note {
            at,
            at_ms: self.ms(at),
            what: what.into(),
        };
        self.lock().notes.push(note);
    }

    /// Every entry so far, in arrival order.
    pub fn entries(&self) -> Vec<LoggedRequest> {
        self.lock().entries.clone()
    }

    /// Entries of one route (`list_kbs`).
    pub fn of(&self, operation: &str) -> Vec<LoggedRequest> {
        self.lock()
            .entries
            .iter()
            .filter(|e| e.operation == Some(operation))
            .cloned()
            .collect()
    }

    /// How many requests were answered `status` (429: the platform's limits
    /// and scripted rate limits alike).
    pub fn count_status(&self, status: u16) -> usize {
        self.lock()
            .entries
            .iter()
            .filter(|e| e.status == Some(status))
            .count()
    }

    /// How many requests reached one route: attempts, retries included.
    pub fn count(&self, operation: &str) -> usize {
        self.lock()
            .entries
            .iter()
            .filter(|e| e.operation == Some(operation))
            .count()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The highest in-flight count any request saw on arrival.
    pub fn max_in_flight(&self) -> usize {
        self.lock()
            .entries
            .iter()
            .map(|e| e.in_flight)
            .max()
            .unwrap_or(0)
    }

    /// Gaps between consecutive arrivals on one route (retry spacing).
    pub fn gaps(&self, operation: &str) -> Vec<Duration> {
        let entries = self.of(operation);
        entries
            .windows(2)
            .map(|w| w[1].arrived.saturating_duration_since(w[0].arrived))
            .collect()
    }

    /// Notes so far (listener closed/reopened, connections cut, ...).
    pub fn notes(&self) -> Vec<Note> {
        self.lock().notes.clone()
    }

    /// Forgets entries and notes (sequence numbers keep counting).
    pub fn clear(&self) {
        let mut inner = self.lock();
        inner.entries.clear();
        inner.notes.clear();
    }

    /// Waits (polling every 5 ms) until `pred` holds for the entries, or
    /// `timeout` passes; returns whether it held.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        mut pred: impl FnMut(&[LoggedRequest]) -> bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if pred(&self.lock().entries) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// When each of `entries` arrived, in order: what [`max_in_any_window`]
/// measures a rate on.
pub fn arrivals<'a>(entries: impl IntoIterator<Item = &'a LoggedRequest>) -> Vec<Instant> {
    let mut times: Vec<Instant> = entries.into_iter().map(|e| e.arrived).collect();
    times.sort();
    times
}

/// The most arrivals in any half-open window `[t, t + width)`; only windows
/// starting at an arrival can hold a maximum. `times` must be sorted.
pub fn max_in_any_window(times: &[Instant], width: Duration) -> usize {
    times
        .iter()
        .enumerate()
        .map(|(i, &start)| {
            times[i..]
                .iter()
                .take_while(|&&t| t.duration_since(start) < width)
                .count()
        })
        .max()
        .unwrap_or(0)
}
