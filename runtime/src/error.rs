//! The one error type of every call: the taxonomy row decides its class.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use sdk_policy::endpoint::Endpoint;
use sdk_policy::policy::{OutcomeKind, Policy, Replay, RowIx, TaxonomyRow, UNCLASSIFIED};

/// A failed call, with the taxonomy row that classified it.
pub struct Error {
    /// Shared only by the open breaker's refusals of one route, which are
    /// the same error every time ([`Error::shared`]); a builder method on
    /// a shared one copies it first.
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    kind: OutcomeKind,
    /// `None`: no row of the taxonomy matched (unclassified).
    row: Option<&'static TaxonomyRow>,
    /// The policy that classified it (a scaled copy or an override
    /// included): its API's name and route table.
    policy: &'static Policy,
    endpoint: &'static str,
    status: Option<u16>,
    /// What Display shows of the answer: the platform's own `detail`, a
    /// page's one line, a withheld body's summary, or the client's reason.
    /// Bounded: server text is cut to the policy's `limits.detail` before it gets here.
    detail: Option<Cow<'static, str>>,
    /// Server text kept out of Display and Debug ([`Error::server_text`]).
    withheld: Option<Box<str>>,
    request_id: Option<String>,
    /// The wait the server asked for (`Retry-After`) when it outlasted the call.
    retry_after: Option<Duration>,
    attempts: u32,
    message: Option<&'static str>,
    replayable: bool,
    /// The row's `replay`: what the failure means for a queued write.
    replay: Replay,
    outcome_unknown: bool,
    answer_lost: bool,
    /// A stream's opening timed out before its head: something between holds it.
    head_withheld: bool,
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

/// The row an error is classified by.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Class {
    /// The first row of an outcome the client decides alone (a connection
    /// failure, the deadline, a refusal): the kind is all there is to match.
    Of(OutcomeKind),
    /// The row the judge found for an outcome of this kind; `None`: none
    /// matched, the error is unclassified.
    Judged(OutcomeKind, Option<&'static TaxonomyRow>),
}

impl From<OutcomeKind> for Class {
    fn from(kind: OutcomeKind) -> Self {
        Class::Of(kind)
    }
}

impl Error {
    /// A failure of `endpoint` classified by `class` under `policy`, with
    /// the class's German message, marked replayable on a replay route.
    /// One allocation, the error's `Arc`: everything else it starts with is
    /// static (the open breaker's refusal of a route is built once and
    /// shared after).
    pub(crate) fn classified(policy: &'static Policy, class: Class, endpoint: &Endpoint) -> Error {
        let (kind, row) = match class {
            Class::Of(kind) => (kind, policy.row_of(kind)),
            Class::Judged(kind, row) => (kind, row),
        };
        let message = match row {
            Some(r) => r.message,
            None => policy.message(UNCLASSIFIED),
        };
        Error {
            inner: Arc::new(Inner {
                kind,
                row,
                policy,
                endpoint: endpoint.operation,
                status: None,
                detail: None,
                withheld: None,
                request_id: None,
                retry_after: None,
                attempts: 0,
                message,
                replayable: endpoint.replay,
                replay: row.map_or(Replay::Never, |r| r.replay),
                outcome_unknown: false,
                answer_lost: false,
                head_withheld: false,
                source: None,
            }),
        }
    }
}

impl Error {
    /// The error itself, to change: copied first if it is shared.
    fn inner_mut(&mut self) -> &mut Inner {
        Arc::make_mut(&mut self.inner)
    }

    /// The same error again without building it: for a refusal that is
    /// identical every time (the open breaker's of one route).
    pub(crate) fn shared(&self) -> Error {
        Error {
            inner: Arc::clone(&self.inner),
        }
    }

    pub(crate) fn with_status(mut self, status: u16, detail: Option<Detail>) -> Self {
        self.inner_mut().status = Some(status);
        self.with_server_detail(detail)
    }

    /// What the server said: shown, or withheld behind its summary.
    pub(crate) fn with_server_detail(mut self, detail: Option<Detail>) -> Self {
        let inner = self.inner_mut();
        (inner.detail, inner.withheld) = match detail {
            None => (None, None),
            Some(Detail::Shown(text)) => (Some(Cow::Owned(text)), None),
            Some(Detail::Withheld { text, summary }) => {
                (Some(Cow::Owned(summary)), Some(text.into_boxed_str()))
            }
        };
        self
    }

    /// A body that did not decode: the decoder's message quotes the values
    /// it refused, so it is withheld and the source says only where and how.
    pub(crate) fn with_decode_failure(mut self, e: &serde_json::Error, max: usize) -> Self {
        self.inner_mut().withheld = Some(bounded(&e.to_string(), max).into_boxed_str());
        self.with_source(Undecodable::of(e))
    }

    pub(crate) fn with_retry_after(mut self, wait: Duration) -> Self {
        self.inner_mut().retry_after = Some(wait);
        self
    }

    pub(crate) fn with_request_id(mut self, id: impl Into<String>) -> Self {
        self.inner_mut().request_id = Some(id.into());
        self
    }

    pub(crate) fn with_attempts(mut self, attempts: u32) -> Self {
        self.inner_mut().attempts = attempts;
        self
    }

    pub(crate) fn with_message(mut self, message: Option<&'static str>) -> Self {
        self.inner_mut().message = message;
        self
    }

    pub(crate) fn with_source(
        mut self,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        self.inner_mut().source = Some(Arc::from(source.into()));
        self
    }

    pub(crate) fn with_detail(mut self, detail: impl Into<Cow<'static, str>>) -> Self {
        self.inner_mut().detail = Some(detail.into());
        self
    }

    pub(crate) fn with_detail_prefix(mut self, prefix: &str) -> Self {
        let inner = self.inner_mut();
        inner.detail = Some(match inner.detail.take() {
            Some(d) => Cow::Owned(format!("{prefix}: {d}")),
            None => Cow::Owned(prefix.to_owned()),
        });
        self
    }

    /// A call that is not idempotent may have reached the server and ended
    /// without an answer that settles it (no answer, the deadline in flight,
    /// or a status whose taxonomy row says `outcome_unknown`: a 500, a
    /// gateway's 502/504): whether it took effect is unknown. Read the state
    /// it changes (the route's docs name the read) before sending it again;
    /// the client never sends it twice on its own, and [`Error::message`]
    /// says to check the current state first.
    pub fn outcome_unknown(&self) -> bool {
        self.inner.outcome_unknown
    }

    /// Marks an unknown outcome, with the row's copy for it (check the
    /// current state before trying again) in place of the class's.
    pub(crate) fn with_outcome_unknown(mut self, unknown: bool) -> Self {
        let inner = self.inner_mut();
        inner.outcome_unknown = unknown;
        let copy = inner.row.and_then(|r| r.unknown_message);
        if let Some(copy) = copy.filter(|_| unknown) {
            inner.message = Some(copy);
        }
        self
    }

    /// A chat turn ended without its answer (a failed `generate`, the
    /// watchdog, `event: error`, a drop mid-answer): the user's message was
    /// saved (the platform persists it first), the answer was likely not.
    /// The UI offers a conscious resend („Erneut senden“, [`Error::message`]
    /// says so); the client never sends the turn again on its own.
    pub fn answer_lost(&self) -> bool {
        self.inner.answer_lost
    }

    /// Marks a lost chat answer, with the stream's copy for it.
    /// Whether a stream's opening timed out waiting for its response head: a
    /// live relay sends it at once, a buffering proxy holds it until the
    /// stream ends (§6.4).
    pub(crate) fn head_withheld(&self) -> bool {
        self.inner.head_withheld
    }

    pub(crate) fn with_head_withheld(mut self, withheld: bool) -> Self {
        self.inner_mut().head_withheld = withheld;
        self
    }

    pub(crate) fn with_answer_lost(mut self, copy: Option<&'static str>) -> Self {
        let inner = self.inner_mut();
        inner.answer_lost = true;
        if copy.is_some() {
            inner.message = copy;
        }
        self
    }

    /// The call is a write of a replay route: the caller may queue it and send it
    /// again once the breaker closes (the replay queue does).
    pub fn replayable(&self) -> bool {
        self.inner.replayable
    }

    /// What the row that classified the error means for a queued write
    /// (its `replay` column): replayed after an outage, later, only while a
    /// deploy is suspected, or never. [`Error::replayable`] says whether the
    /// route may be queued at all; this says whether this failure waits.
    pub fn replay(&self) -> Replay {
        self.inner.replay
    }

    /// The outcome that ended the call: the taxonomy's `outcome` its row matched.
    pub fn kind(&self) -> OutcomeKind {
        self.inner.kind
    }

    /// The taxonomy row (`T13`); `-` when none matched.
    pub fn row(&self) -> &'static str {
        self.inner.row.map_or("-", |r| r.row)
    }

    /// The row's position in its policy's taxonomy; `None` when none matched.
    /// A generated crate reads its `ErrorClass` from it.
    pub fn row_index(&self) -> Option<RowIx> {
        self.inner.row.map(|r| r.index)
    }

    /// The policy that classified the error: the spec's, a scaled copy or
    /// an override of it (its API's name is `policy().api`). A generated
    /// crate reads its `ErrorClass` only from an error its own policy's
    /// route table classified.
    pub fn policy(&self) -> &'static Policy {
        self.inner.policy
    }

    /// The error class as the spec spells it (`feature_dark`), for logs and
    /// metrics; a generated crate's error gives it as that API's
    /// `ErrorClass` enum.
    pub fn class_name(&self) -> &'static str {
        self.inner.row.map_or(UNCLASSIFIED, |r| r.class)
    }

    /// `service.operation` of the call.
    pub fn endpoint(&self) -> &'static str {
        self.inner.endpoint
    }

    pub fn status(&self) -> Option<u16> {
        self.inner.status
    }

    /// What the error says of the answer, as Display shows it: the
    /// platform's own `detail` (from its JSON error shape, bounded, without
    /// pydantic's echo of the request), an HTML page's one line, or for any
    /// other body its content type, length and sha256; or the client's
    /// reason for a client-side refusal.
    pub fn detail(&self) -> Option<&str> {
        self.inner.detail.as_deref()
    }

    /// The server's own text that [`Error::detail`] withholds, bounded to
    /// the policy's `limits.detail`: the body of an answer not in the
    /// platform's JSON error shape (a text/plain 500, a stream's error
    /// frame), or the decoder's message on a body that did not decode
    /// (it quotes the values it refused). It is kept out of Display and
    /// Debug because errors end up in logs, and such text may carry
    /// Mandanten content (a stack trace, an echoed request): show it only
    /// where you have decided that is safe.
    pub fn server_text(&self) -> Option<&str> {
        self.inner.withheld.as_deref()
    }

    /// How long the server asked the client to wait (`Retry-After`), when
    /// that wait ended the call: it reached past the call's deadline, or the
    /// client defers server waits to its caller (a job queue).
    pub fn retry_after(&self) -> Option<Duration> {
        self.inner.retry_after
    }

    /// `X-Request-ID` of the last attempt: the join key with platform logs.
    pub fn request_id(&self) -> Option<&str> {
        self.inner.request_id.as_deref()
    }

    /// Attempts made, the first one included (0 when refused before sending).
    pub fn attempts(&self) -> u32 {
        self.inner.attempts
    }

    /// The German message the UI shows for this class, if the spec has one.
    pub fn message(&self) -> Option<&'static str> {
        self.inner.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.inner;
        write!(f, "{}: {} ({})", i.endpoint, self.class_name(), self.row())?;
        if let Some(status) = i.status {
            write!(f, ", status {status}")?;
        }
        if let Some(detail) = &i.detail {
            write!(f, ": {detail}")?;
        }
        if let Some(source) = &i.source {
            write!(f, ": {source}")?;
        }
        if let Some(wait) = i.retry_after {
            write!(f, " (the server asked to wait {} s)", wait.as_secs())?;
        }
        if let Some(id) = &i.request_id {
            write!(f, " [request {id}]")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.inner;
        f.debug_struct("Error")
            .field("kind", &i.kind)
            .field("row", &self.row())
            .field("class", &self.class_name())
            .field("endpoint", &i.endpoint)
            .field("status", &i.status)
            .field("detail", &i.detail)
            .field("server_text_bytes", &i.withheld.as_ref().map(|t| t.len()))
            .field("request_id", &i.request_id)
            .field("retry_after", &i.retry_after)
            .field("attempts", &i.attempts)
            .finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner
            .source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("environment variable {0} is not set")]
    MissingEnv(&'static str),
    #[error("invalid tenant: {0}")]
    Tenant(sdk_policy::scope::InvalidId),
    #[error("the tenant must be a TenantId, got a {0}")]
    NotATenant(&'static str),
    #[error("invalid base URL {url:?}: {reason}")]
    BaseUrl { url: String, reason: &'static str },
    #[error("invalid API key: {0}")]
    ApiKey(&'static str),
    #[error("the policy override changes {0}, which no override may change")]
    Override(&'static str),
    #[error("the policy does not hold together: {0}")]
    Policy(&'static str),
    #[error("the HTTP client could not be built: {0}")]
    Http(String),
    #[error("invalid retry configuration: {0}")]
    Retry(String),
    #[error("invalid connection pool configuration: {0}")]
    PoolIdle(String),
    #[error("invalid fleet configuration: {0}")]
    Fleet(String),
    #[error("environment variable {name} is {value:?}: expected true, false, 1 or 0")]
    Flag { name: &'static str, value: String },
}

/// Reads a required environment variable.
/// A yes/no environment variable: unset or empty is `false`; `true`/`1` and
/// `false`/`0` as written; anything else is refused, never guessed.
pub fn env_flag(name: &'static str) -> Result<bool, ConfigError> {
    match std::env::var(name).unwrap_or_default().trim() {
        "" | "0" | "false" => Ok(false),
        "1" | "true" => Ok(true),
        other => Err(ConfigError::Flag {
            name,
            value: other.chars().take(64).collect(),
        }),
    }
}

pub fn env_var(name: &'static str) -> Result<String, ConfigError> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .ok_or(ConfigError::MissingEnv(name))
}

impl Error {
    pub(crate) fn with_status_opt(self, status: Option<u16>, detail: Option<Detail>) -> Self {
        match status {
            Some(s) => self.with_status(s, detail),
            None => self.with_server_detail(detail),
        }
    }
}

/// What an error answer (or a stream's error frame) said, as an error keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Detail {
    /// The platform's own JSON `detail`, a proxy page's one line, or the
    /// client's reason: shown in Display.
    Shown(String),
    /// Text in no shape of the platform's: kept bounded for
    /// [`Error::server_text`], shown only as its `summary`.
    Withheld { text: String, summary: String },
}

impl Detail {
    /// `body` (of `kind`: its content type) withheld behind a summary of its
    /// kind, length and sha256; its text cut to `max` bytes.
    pub(crate) fn withheld(kind: &str, body: &[u8], max: usize) -> Detail {
        /// A content type is a header, not a body: still bounded.
        const MAX_KIND: usize = 120;
        let summary = format!(
            "not the platform's error shape: {}, {} bytes, sha256 {}",
            bounded(kind, MAX_KIND),
            body.len(),
            crate::digest::sha256_hex(body),
        );
        // One byte past the cap, so a longer text is cut and marked as such.
        let text = String::from_utf8_lossy(&body[..body.len().min(max + 1)]);
        Detail::Withheld {
            text: bounded(&text, max),
            summary,
        }
    }

    /// The text the taxonomy's detail sets match and a retry compares: the
    /// server's own, withheld or not.
    pub(crate) fn text(&self) -> &str {
        match self {
            Detail::Shown(text) | Detail::Withheld { text, .. } => text,
        }
    }
}

/// Why a body did not decode, without the decoder's words: serde quotes the
/// values it refused, and those are the platform's (Mandanten) text.
#[derive(Debug, Clone, Copy)]
struct Undecodable {
    category: serde_json::error::Category,
    line: usize,
    column: usize,
}

impl Undecodable {
    fn of(e: &serde_json::Error) -> Self {
        Undecodable {
            category: e.classify(),
            line: e.line(),
            column: e.column(),
        }
    }
}

impl fmt::Display for Undecodable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use serde_json::error::Category;
        let what = match self.category {
            Category::Syntax => "not JSON",
            Category::Data => "JSON of another shape",
            Category::Eof => "JSON that ends too early",
            Category::Io => "a body that could not be read",
        };
        write!(f, "{what} at line {} column {}", self.line, self.column)
    }
}

impl std::error::Error for Undecodable {}

/// `text` cut to at most `max` bytes on a char boundary, marked as cut:
/// server text (a `detail`, an SSE error frame) never grows an error unbounded.
pub(crate) fn bounded(text: &str, max: usize) -> String {
    const CUT: &str = "… [cut]";
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub(CUT.len()).min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end + CUT.len());
    out.push_str(&text[..end]);
    out.push_str(CUT);
    out
}
