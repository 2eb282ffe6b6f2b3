//! What the client remembers between calls: stable answers (dark features,
//! exhausted budget) per route, failed stages per feature, a hot 429.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Detail;
use sdk_policy::Endpoint;
use sdk_policy::policy::TaxonomyRow;

/// A remembered answer of one route.
#[derive(Debug, Clone)]
pub(crate) struct Remembered {
    pub row: &'static TaxonomyRow,
    pub status: Option<u16>,
    pub detail: Option<Detail>,
    /// When a fail-fast answer stops holding (`remember_for`); `None` holds
    /// until the route succeeds again.
    pub until: Option<Instant>,
}

#[derive(Debug, Default)]
pub(crate) struct Memory {
    /// Keyed by the templated path: one entry per route.
    routes: HashMap<&'static str, Remembered>,
    /// Feature -> the stage that failed open last.
    stages: HashMap<&'static str, String>,
    /// A 429 was seen until this instant: polling backs off meanwhile.
    hot_429_until: Option<Instant>,
}

impl Memory {
    /// The remembered answer a call of `endpoint` must fail fast with, if
    /// any; `now` is read only when one is remembered.
    pub fn fail_fast(
        &mut self,
        endpoint: &Endpoint,
        now: impl FnOnce() -> Instant,
    ) -> Option<Remembered> {
        // The common case, nothing remembered: no hashing and no clock on the call path.
        if self.routes.is_empty() {
            return None;
        }
        let entry = self.routes.get(endpoint.path)?;
        match entry.until {
            Some(until) if now() < until => Some(entry.clone()),
            Some(_) => {
                self.routes.remove(endpoint.path);
                None
            }
            None => None,
        }
    }

    /// Records the row that ended a call, when it is one worth remembering.
    pub fn record_final(
        &mut self,
        endpoint: &'static Endpoint,
        row: &'static TaxonomyRow,
        status: Option<u16>,
        detail: Option<Detail>,
        now: Instant,
    ) {
        if row.remember_for.is_none() && row.feature_state.is_none() {
            return;
        }
        let until = row.remember_for.map(|d| crate::clock::after(now, d));
        self.routes.insert(
            endpoint.path,
            Remembered {
                row,
                status,
                detail,
                until,
            },
        );
    }

    /// Another replica saw `row` on `endpoint`, holding until `until`.
    pub fn remember_until(
        &mut self,
        endpoint: &'static Endpoint,
        row: &'static TaxonomyRow,
        status: Option<u16>,
        until: Instant,
    ) -> Remembered {
        let remembered = Remembered {
            row,
            status,
            detail: Some(Detail::Shown("seen by another replica".to_string())),
            until: Some(until),
        };
        self.routes.insert(endpoint.path, remembered.clone());
        remembered
    }

    /// A success: whatever was remembered about the route no longer holds.
    pub fn record_success(&mut self, endpoint: &Endpoint) {
        // Nothing remembered (the usual case): not even the path is hashed.
        if !self.routes.is_empty() {
            self.routes.remove(endpoint.path);
        }
    }

    /// The remembered answer of a route that still holds at `now`.
    pub fn current(&self, endpoint: &Endpoint, now: Instant) -> Option<&Remembered> {
        self.routes
            .get(endpoint.path)
            .filter(|r| r.until.is_none_or(|until| now < until))
    }

    /// A deploy finished: stable answers may have changed, forget them.
    pub fn forget_routes(&mut self) {
        self.routes.clear();
    }

    pub fn stage_failed(&mut self, feature: &'static str, stage: String) {
        self.stages.insert(feature, stage);
    }

    pub fn stage_recovered(&mut self, feature: &str) {
        self.stages.remove(feature);
    }

    pub fn failed_stage(&self, feature: &str) -> Option<&str> {
        self.stages.get(feature).map(String::as_str)
    }

    pub fn saw_429(&mut self, now: Instant, hot_for: Duration) {
        self.hot_429_until = Some(crate::clock::after(now, hot_for));
    }

    pub fn hot_429(&self, now: Instant) -> bool {
        self.hot_429_until.is_some_and(|until| now < until)
    }
}
