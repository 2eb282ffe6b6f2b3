//! What a generated method hands the pipeline: a route and its arguments.
//! Headers are not here: the pipeline alone assembles them.

use std::borrow::Cow;

use bytes::Bytes;
use serde::Serialize;

use sdk_policy::Endpoint;
use sdk_policy::Id;
use sdk_policy::policy::TimeoutIx;

/// One call of a route, before it becomes a request.
pub struct Call<'a> {
    pub(crate) endpoint: &'static Endpoint,
    pub(crate) workspace: Option<&'a Id>,
    /// The pipeline header's value, on a route that carries it.
    pub(crate) pipeline: Option<&'a str>,
    pub(crate) path: Vec<&'a str>,
    pub(crate) query: Vec<(&'static str, String)>,
    pub(crate) body: Option<Bytes>,
    /// Why the body could not be encoded: the pipeline refuses the call
    /// (the taxonomy's `invalid_request` row) before anything is sent.
    pub(crate) unencodable: Option<String>,
    /// A timeout class instead of the route's own (the warm-up pair).
    pub(crate) timeout: Option<TimeoutIx>,
}

impl<'a> Call<'a> {
    pub fn new(endpoint: &'static Endpoint) -> Self {
        Call {
            endpoint,
            workspace: None,
            pipeline: None,
            path: Vec::new(),
            query: Vec::new(),
            body: None,
            unencodable: None,
            timeout: None,
        }
    }

    /// The workspace of a workspace-scoped route.
    pub fn workspace(mut self, workspace: &'a Id) -> Self {
        self.workspace = Some(workspace);
        self
    }

    /// The pipeline id of a route that carries the pipeline header (the join
    /// key of a run's cost); such a route is refused without one.
    pub fn pipeline(mut self, pipeline: &'a Id) -> Self {
        self.pipeline = Some(pipeline.as_str());
        self
    }

    /// A pipeline id the policy itself names (a warm-up call's).
    pub(crate) fn pipeline_text(mut self, pipeline: &'a str) -> Self {
        self.pipeline = Some(pipeline);
        self
    }

    /// The next `{placeholder}` of the path template, in template order.
    pub fn path(mut self, value: &'a str) -> Self {
        self.path.push(value);
        self
    }

    pub fn query(mut self, name: &'static str, value: impl AsRef<str>) -> Self {
        self.query.push((name, value.as_ref().to_owned()));
        self
    }

    /// A query parameter that is left out when `None`.
    pub fn query_opt(self, name: &'static str, value: Option<impl AsRef<str>>) -> Self {
        match value {
            Some(v) => self.query(name, v),
            None => self,
        }
    }

    /// The JSON body. A body serde cannot encode (a map with non-string
    /// keys, a failing `Serialize`) fails the call when it is sent, classified
    /// like any request the client cannot build.
    pub fn json<B: Serialize + ?Sized>(mut self, body: &B) -> Self {
        match serde_json::to_vec(body) {
            Ok(bytes) => {
                self.body = Some(Bytes::from(bytes));
                self.unencodable = None;
            }
            Err(e) => {
                self.body = None;
                self.unencodable = Some(format!("the request body could not be encoded: {e}"));
            }
        }
        self
    }

    /// Runs every attempt under the timeout class `timeout` instead of the
    /// route's own.
    pub(crate) fn timeout_class(mut self, timeout: Option<TimeoutIx>) -> Self {
        self.timeout = timeout;
        self
    }

    /// A body that is already JSON text (the spec's warm-up calls).
    pub(crate) fn raw_json(mut self, body: &'static str) -> Self {
        self.body = Some(Bytes::from_static(body.as_bytes()));
        self
    }

    /// The path with its placeholders filled in, each value percent-encoded.
    pub(crate) fn render_path(&self) -> Result<Cow<'static, str>, String> {
        let template = self.endpoint.path;
        // A path without parameters is its template: nothing to allocate.
        if self.path.is_empty() && !template.contains('{') {
            return Ok(Cow::Borrowed(template));
        }
        let mut out = String::with_capacity(template.len() + 32);
        let mut values = self.path.iter();
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| format!("unclosed placeholder in {template}"))?;
            out.push_str(&rest[..open]);
            let value = values
                .next()
                .ok_or_else(|| format!("missing value for {}", &rest[open..open + close + 1]))?;
            // `.` and `..` would be folded by the URL parser onto another route.
            if value.is_empty() || *value == "." || *value == ".." {
                return Err(format!(
                    "{value:?} is not a value for {}",
                    &rest[open..open + close + 1]
                ));
            }
            encode_segment(value, &mut out);
            rest = &rest[open + close + 1..];
        }
        out.push_str(rest);
        if values.next().is_some() {
            return Err(format!("more path values than placeholders in {template}"));
        }
        Ok(Cow::Owned(out))
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
pub(crate) fn encode_segment(value: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 0xf)] as char);
        }
    }
}
