//! A successful answer, decoded into the route's declared shape.

use bytes::Bytes;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use std::sync::Arc;

use sdk_policy::endpoint::Endpoint;
use sdk_policy::policy::{OutcomeKind, TaxonomyRow};

use crate::error::{Class, Error};
use crate::recorder::Recorder;
use crate::telemetry::PendingLine;

/// What a create route answered: made now, or already there (409, T7).
#[derive(Debug, Clone, PartialEq)]
pub enum Created<T> {
    New(T),
    /// The platform already had it: success for an idempotent create or replay.
    Existing,
}

impl<T> Created<T> {
    pub fn is_new(&self) -> bool {
        matches!(self, Created::New(_))
    }
}

/// What a poll route answered: the result, or still processing (409, T8).
#[derive(Debug, Clone, PartialEq)]
pub enum Progress<T> {
    Ready(T),
    /// Poll again later.
    Processing,
}

/// A successful answer with its status and body. The call is counted in the
/// metrics once the body is decoded (or fails to), so a 2xx that does not fit
/// its shape counts as a decode error, not a success.
pub struct Reply {
    /// Where the call is counted and its line written once decoded.
    recorder: Arc<Recorder>,
    endpoint: &'static Endpoint,
    status: u16,
    body: Bytes,
    request_id: String,
    ledger: Ledger,
}

/// What is left to record once the body is decoded: the call's metrics and
/// its last attempt's log line.
pub(crate) struct Ledger {
    pub started: Instant,
    /// Attempts made, the answered one included: a body that does not
    /// decode came from a request that was sent.
    pub attempts: u32,
    pub line: Option<PendingLine>,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reply")
            .field("endpoint", &self.endpoint.operation)
            .field("status", &self.status)
            .field("body_len", &self.body.len())
            .field("request_id", &self.request_id)
            .finish()
    }
}

impl Reply {
    pub(crate) fn new(
        recorder: Arc<Recorder>,
        endpoint: &'static Endpoint,
        status: u16,
        body: Bytes,
        request_id: String,
        ledger: Ledger,
    ) -> Self {
        Reply {
            recorder,
            endpoint,
            status,
            body,
            request_id,
            ledger,
        }
    }

    pub fn status(&self) -> u16 {
        self.status
    }

    /// `X-Request-ID` as the platform echoed it.
    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// Decodes the body; a body that does not fit is a typed decode error (T24).
    pub fn json<T: DeserializeOwned>(self) -> Result<T, Error> {
        match serde_json::from_slice(&self.body) {
            Ok(value) => {
                self.count("ok");
                Ok(value)
            }
            Err(e) => Err(self.decode_error(e)),
        }
    }

    /// Ignores the body.
    pub fn empty(self) -> Result<(), Error> {
        self.count("ok");
        Ok(())
    }

    /// The head of a stream that carries an answer (a chat turn): its
    /// attempt line now; the call is counted when the stream ends, with the
    /// class it ended with (a failed turn is not an `ok` call). Gives the
    /// call's start and whether it was retried.
    pub(crate) fn opened(self) -> (Instant, bool) {
        if let Some(line) = &self.ledger.line {
            self.recorder.emit(line, self.endpoint, None);
        }
        (self.ledger.started, self.ledger.attempts > 1)
    }

    /// `Existing` for the 409 of a create route, else the decoded body.
    pub fn created<T: DeserializeOwned>(self) -> Result<Created<T>, Error> {
        if self.status == 409 {
            self.count("ok");
            return Ok(Created::Existing);
        }
        self.json().map(Created::New)
    }

    /// `Processing` for the 409 of a poll route, else the decoded body.
    pub fn progress<T: DeserializeOwned>(self) -> Result<Progress<T>, Error> {
        if self.status == 409 {
            self.count("ok");
            return Ok(Progress::Processing);
        }
        self.json().map(Progress::Ready)
    }

    /// Counts the call and writes its attempt line: `row` is `None` for a
    /// decoded answer, T24 for a body that does not fit its shape.
    fn count(&self, class: &'static str) {
        self.finish(class, None);
    }

    fn finish(&self, class: &'static str, row: Option<&'static TaxonomyRow>) {
        let ledger = &self.ledger;
        if let Some(line) = &ledger.line {
            self.recorder.emit(line, self.endpoint, row);
        }
        self.recorder
            .count_call(self.endpoint, class, ledger.attempts > 1, ledger.started);
    }

    /// T24: counted as such, with the row's alert (contract drift). The
    /// request was sent and answered: its attempts are never 0 (0 is "refused
    /// before sending"), so a caller never takes an applied write for unsent.
    fn decode_error(&self, e: serde_json::Error) -> Error {
        let policy = self.recorder.policy;
        let row = policy.row_of(OutcomeKind::Decode);
        let error = Error::classified(policy, Class::Of(OutcomeKind::Decode), self.endpoint)
            .with_status(self.status, None)
            .with_request_id(self.request_id.clone())
            .with_attempts(self.ledger.attempts)
            .with_decode_failure(&e, policy.limits.detail);
        if let Some(alert) = row.and_then(|r| r.alert) {
            self.recorder.raise(alert, &error);
        }
        self.finish(error.class_name(), row);
        error
    }
}
