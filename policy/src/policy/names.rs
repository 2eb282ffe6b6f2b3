//! What the wire's headers and the metrics are called.

#[cfg(feature = "bake")]
use crate::bake::{Bake, Names, bake_struct};
#[cfg(feature = "bake")]
use proc_macro2::TokenStream;

/// Names of the Prometheus metrics (counters without their `_total`). A
/// metric of a section the API does not have (no breaker, no streams) is
/// `None` and not exported.
#[derive(Debug, Clone, PartialEq, Eq)]
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

#[cfg(feature = "bake")]
impl Bake for MetricNames {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            MetricNames {
                requests,
                duration,
                circuit_state,
                circuit_open_seconds,
                sse_fallback,
                sse_buffered,
                alerts,
                rate_limited,
            }
        )
    }
}

/// Names of the headers the pipeline stamps.
#[derive(Debug, Clone, PartialEq, Eq)]
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

#[cfg(feature = "bake")]
impl Bake for HeaderNames {
    fn bake(&self, n: &dyn Names) -> TokenStream {
        bake_struct!(
            self,
            n,
            HeaderNames {
                authorization,
                auth_scheme,
                tenant,
                workspace,
                request_id,
                retry_after,
                pipeline,
            }
        )
    }
}
