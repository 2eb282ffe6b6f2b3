//! A successful answer, decoded into the route's declared shape.

use bytes::Bytes;
use serde::de::DeserializeOwned;

use crate::Endpoint;
use crate::error::{Error, ErrorKind};
use crate::policy::{OutcomeKind, Policy};

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

/// A successful answer with its status and body.
#[derive(Debug)]
pub struct Reply {
    policy: &'static Policy,
    endpoint: &'static Endpoint,
    status: u16,
    body: Bytes,
    request_id: String,
}

impl Reply {
    pub(crate) fn new(
        policy: &'static Policy,
        endpoint: &'static Endpoint,
        status: u16,
        body: Bytes,
        request_id: String,
    ) -> Self {
        Reply {
            policy,
            endpoint,
            status,
            body,
            request_id,
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
        serde_json::from_slice(&self.body).map_err(|e| self.decode_error(e))
    }

    /// Ignores the body.
    pub fn empty(self) -> Result<(), Error> {
        Ok(())
    }

    /// `Existing` for the 409 of a create route, else the decoded body.
    pub fn created<T: DeserializeOwned>(self) -> Result<Created<T>, Error> {
        if self.status == 409 {
            return Ok(Created::Existing);
        }
        self.json().map(Created::New)
    }

    /// `Processing` for the 409 of a poll route, else the decoded body.
    pub fn progress<T: DeserializeOwned>(self) -> Result<Progress<T>, Error> {
        if self.status == 409 {
            return Ok(Progress::Processing);
        }
        self.json().map(Progress::Ready)
    }

    fn decode_error(&self, e: serde_json::Error) -> Error {
        let row = self
            .policy
            .taxonomy
            .iter()
            .find(|r| r.matches.outcome == OutcomeKind::Decode);
        let (name, class) = row.map(|r| (r.row, r.class)).unwrap_or(("-", "decode"));
        Error::new(ErrorKind::Decode, name, class, self.endpoint.operation)
            .with_status(self.status, None)
            .with_request_id(self.request_id.clone())
            .with_message(self.policy.message(class))
            .with_source(e)
    }
}
