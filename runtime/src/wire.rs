//! The wire: one request sent and its answer read, bounded, typed, never
//! a panic: the only code that touches a response.

use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use reqwest::header::HeaderName;
use sdk_policy::endpoint::Endpoint;
use sdk_policy::policy::OutcomeKind;

use crate::backoff::parse_retry_after;
use sdk_sse::error_chain;

use crate::error::bounded;
use crate::pool::Pool;

/// How an answer's 2xx body is taken: read whole (a call), or left to the
/// SSE parser (a stream's opening).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    Read,
    Stream,
}

impl Wire {
    /// The route says it: a stream route's 2xx is its event stream.
    pub(crate) fn of(endpoint: &Endpoint) -> Wire {
        match endpoint.stream {
            Some(_) => Wire::Stream,
            None => Wire::Read,
        }
    }
}

/// What one attempt brought back.
pub(crate) enum Attempt {
    Answer {
        status: u16,
        /// The parsed `Retry-After`, if the answer carried one that parses.
        retry_after: Option<Duration>,
        echoed_id: Option<String>,
        /// An error answer's `Content-Type` (bounded); `None` on a 2xx.
        content_type: Option<Box<str>>,
        /// The whole 2xx body (at most the route's cap), or the first
        /// `limits.error_body` bytes of an error answer.
        body: Bytes,
    },
    /// A 2xx whose body passed the route's cap: reading stopped there.
    TooLarge { status: u16, limit: usize },
    /// No answer. `maybe_sent`: the request may have reached the server.
    Failed { maybe_sent: bool, reason: String },
    /// The HTTP client could not build the request: nothing was sent.
    Unbuildable { reason: String },
    /// A pooled connection closed under the request before it was written:
    /// nothing was sent, and it says nothing about the origin's health.
    Stale { reason: String },
}

impl Attempt {
    /// The outcome an attempt that ends the call is classified as.
    pub(crate) fn kind(&self) -> OutcomeKind {
        match self {
            Attempt::Answer { .. } => OutcomeKind::Status,
            Attempt::TooLarge { .. } => OutcomeKind::TooLarge,
            Attempt::Failed { .. } | Attempt::Stale { .. } => OutcomeKind::Connection,
            Attempt::Unbuildable { .. } => OutcomeKind::InvalidRequest,
        }
    }

    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            Attempt::Answer { status, .. } | Attempt::TooLarge { status, .. } => Some(*status),
            Attempt::Failed { .. } | Attempt::Unbuildable { .. } | Attempt::Stale { .. } => None,
        }
    }
}

/// Whether the HTTP stack knows the request was never written: hyper calls a
/// request "canceled" when its connection closed before it was sent (a pooled
/// connection the server had just closed). Such a call is not sent: it may be
/// retried even when not idempotent.
fn never_written(e: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_canceled)
        {
            return true;
        }
        source = s.source();
    }
    false
}

/// What reading one answer needs: its size caps and the headers it reads.
#[derive(Clone, Copy)]
pub(crate) struct ReadCaps<'c> {
    /// Largest 2xx body.
    pub response: usize,
    /// Bytes of an error body read for its detail.
    pub error_body: usize,
    /// The answer headers read: the echoed request ID and the server's wait.
    pub request_id: &'c HeaderName,
    pub retry_after: &'c HeaderName,
}

/// Longest echoed request ID kept; a longer one is ignored (ours is used).
const MAX_ECHOED_ID: usize = 128;

/// What an error's detail keeps of a `Content-Type` header.
const MAX_CONTENT_TYPE: usize = 100;

/// Sends one request and reads the answer: a 2xx body incrementally up to
/// the route's cap, an error body up to `error_body` bytes; a stream's body
/// is left to the SSE parser. Redirects are never followed (the client is
/// built without), so a 3xx arrives here as an answer. The pool hears of
/// every answer before its body is read.
pub(crate) async fn perform(
    pool: &Pool,
    request: reqwest::RequestBuilder,
    wire: Wire,
    caps: ReadCaps<'_>,
) -> (Attempt, Option<reqwest::Response>) {
    let mut response = match request.send().await {
        Ok(r) => r,
        Err(e) if e.is_builder() => {
            let reason = error_chain(&e);
            return (Attempt::Unbuildable { reason }, None);
        }
        Err(e) if never_written(&e) => {
            let reason = error_chain(&e);
            return (Attempt::Stale { reason }, None);
        }
        Err(e) => {
            let maybe_sent = !e.is_connect();
            let reason = error_chain(&e);
            return (Attempt::Failed { maybe_sent, reason }, None);
        }
    };
    let status = response.status().as_u16();
    let headers = response.headers();
    pool.answered(status, headers);
    let retry_after = headers
        .get(caps.retry_after)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, SystemTime::now()));
    let echoed_id = headers
        .get(caps.request_id)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= MAX_ECHOED_ID)
        .map(str::to_owned);
    let success = (200..300).contains(&status);
    let content_type = (!success).then(|| {
        let value = headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("no content type");
        bounded(value, MAX_CONTENT_TYPE).into_boxed_str()
    });
    if wire == Wire::Stream && success {
        let answer = Attempt::Answer {
            status,
            retry_after,
            echoed_id,
            content_type,
            body: Bytes::new(),
        };
        return (answer, Some(response));
    }
    let cap = if success {
        caps.response
    } else {
        caps.error_body
    };
    let body = match read_body(&mut response, success, cap).await {
        Ok(body) => body,
        Err(attempt) => return (attempt, None),
    };
    let answer = Attempt::Answer {
        status,
        retry_after,
        echoed_id,
        content_type,
        body,
    };
    (answer, None)
}

/// Reads a body of at most `cap` bytes, incrementally: a 2xx that passes
/// it is [`Attempt::TooLarge`] (a declared length over it before a byte is
/// read); an error body is only read for its detail, the rest left unread.
async fn read_body(
    response: &mut reqwest::Response,
    success: bool,
    cap: usize,
) -> Result<Bytes, Attempt> {
    let status = response.status().as_u16();
    let too_large = Attempt::TooLarge { status, limit: cap };
    if success && response.content_length().is_some_and(|n| n > cap as u64) {
        return Err(too_large);
    }
    let mut body = BytesMut::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = cap - body.len();
                if chunk.len() > room {
                    if success {
                        return Err(too_large);
                    }
                    body.extend_from_slice(&chunk[..room]);
                    break;
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(e) => {
                let reason = error_chain(&e);
                return Err(Attempt::Failed {
                    maybe_sent: true,
                    reason,
                });
            }
        }
    }
    Ok(body.freeze())
}
