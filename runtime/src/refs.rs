//! The request IDs of a caller's calls (policy §10.1: stored in
//! `ai_runs.refs`, so a Knoll record joins the platform's logs), without
//! every method returning a wrapper: a handle the caller gives a client.

use std::sync::{Arc, Mutex};

/// One call that reached the platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRef {
    /// The service and operation of the call (`workspaces`, `list_kbs`).
    pub service: &'static str,
    pub operation: &'static str,
    /// The ID the platform's logs know the request by: its echo of
    /// `X-Request-ID`, else the one we sent. Of the call's last attempt.
    pub request_id: String,
    /// The status that ended the call, `None` when no answer came.
    pub status: Option<u16>,
    /// The call succeeded.
    pub ok: bool,
}

/// Collects the [`RequestRef`] of every call of the clients it was given to
/// (`grag.noting_requests(&refs)`), in the order the calls ended. One per
/// unit of work (an AI run): it keeps what it was given until it is taken.
#[derive(Debug, Clone, Default)]
pub struct RequestRefs(Arc<Mutex<Vec<RequestRef>>>);

impl RequestRefs {
    pub fn new() -> Self {
        Self::default()
    }

    /// Everything noted so far, oldest first; the handle is empty afterwards.
    pub fn take(&self) -> Vec<RequestRef> {
        std::mem::take(&mut *self.lock())
    }

    /// The last call's, if any.
    pub fn last(&self) -> Option<RequestRef> {
        self.lock().last().cloned()
    }

    pub(crate) fn note(&self, r: RequestRef) {
        self.lock().push(r);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<RequestRef>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
