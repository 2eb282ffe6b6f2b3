//! What the wire's headers and the metrics are called.

/// Names of the Prometheus metrics (counters without their `_total`). A
/// metric of a section the API does not have (no breaker, no streams) is
/// `None` and not exported.
#[derive(Debug, Clone, PartialEq, Eq, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct MetricNames {
    /// Calls by service, final error class and whether they were retried.
    pub requests: &'static str,
    /// Call duration, retries included.
    pub duration: &'static str,
    pub circuit_state: Option<&'static str>,
    pub circuit_open_seconds: Option<&'static str>,
    pub sse_fallback: Option<&'static str>,
    /// Streams a proxy held back and delivered in one burst (§6.4).
    pub sse_buffered: Option<&'static str>,
    /// Alerts the client raised, by name (`{alert}`): what the generated
    /// Prometheus rules read where the client's own context decides.
    pub alerts: &'static str,
    /// Every 429 the client saw, by whether it carried `Retry-After`
    /// (`{retry_after}`: `present` or `absent`).
    pub rate_limited: &'static str,
}

/// Names of the headers the pipeline stamps.
#[derive(Debug, Clone, PartialEq, Eq, Scale)]
#[cfg_attr(feature = "bake", derive(Bake))]
pub struct HeaderNames {
    pub authorization: &'static str,
    /// The scheme the key is sent under: `<scheme> <key>` (`Bearer`).
    pub auth_scheme: &'static str,
    pub tenant: &'static str,
    /// `None`: the API has no workspace scope.
    pub workspace: Option<&'static str>,
    /// Sent fresh on every request; the answer's echo of it is logged.
    pub request_id: &'static str,
    /// The answer header with the server's wait (`Retry-After`).
    pub retry_after: &'static str,
    /// `None`: no route carries a pipeline id.
    pub pipeline: Option<&'static str>,
}
