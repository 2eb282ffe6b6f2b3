//! What every request goes to and carries, prepared once when the client is
//! built: the base URL parsed and the policy's header names made. A request's
//! URL is the base with its path and query set, so its host is never parsed
//! again (parsing one URL string costs reqwest ~7 000 instructions, most of
//! them the host), and no header name is parsed per request.

use reqwest::Url;
use reqwest::header::{HeaderName, HeaderValue};

use crate::error::ConfigError;
use sdk_policy::endpoint::Endpoint;
use sdk_policy::policy::HeaderNames;

pub(crate) struct Origin {
    base: Url,
    /// The base URL's own path without its trailing `/` (usually empty):
    /// every route's path is appended to it.
    prefix: String,
    pub request_id: HeaderName,
    pub authorization: HeaderName,
    pub tenant: HeaderName,
    pub workspace: Option<HeaderName>,
    pub pipeline: Option<HeaderName>,
    pub retry_after: HeaderName,
    /// The tenant header's value, the same on every request.
    pub tenant_value: HeaderValue,
    /// The URL of each route whose path has no parameters, by the route's
    /// position, with its template: such a call without a query is sent to
    /// a clone of it, where setting the path costs the url crate about
    /// 2 000 instructions.
    fixed: Box<[Option<(&'static str, Url)>]>,
}

impl Origin {
    /// `base`: a base URL `check_base_url` accepted.
    /// `routes`: the policy's route table.
    pub(crate) fn new(
        base: Url,
        names: &HeaderNames,
        tenant: &str,
        routes: &[&'static Endpoint],
    ) -> Result<Self, ConfigError> {
        let prefix = base.path().trim_end_matches('/').to_owned();
        let name = |n: &str| {
            HeaderName::from_bytes(n.as_bytes())
                .map_err(|_| ConfigError::Policy("a header name that is not one"))
        };
        let mut origin = Origin {
            base,
            prefix,
            request_id: name(names.request_id)?,
            authorization: name(names.authorization)?,
            tenant: name(names.tenant)?,
            workspace: names.workspace.map(name).transpose()?,
            pipeline: names.pipeline.map(name).transpose()?,
            retry_after: name(names.retry_after)?,
            tenant_value: HeaderValue::from_str(tenant)
                .map_err(|_| ConfigError::Policy("a tenant that is not a header value"))?,
            fixed: Box::default(),
        };
        origin.fixed = (routes.iter())
            .map(|route| {
                let template = route.path;
                (!template.contains('{')).then(|| (template, origin.url(template, &[])))
            })
            .collect();
        Ok(origin)
    }

    /// [`url`](Self::url) for a call of `endpoint`: the route's URL made
    /// once when its path has no parameters and the call no query (the
    /// rendered `path` is then the template itself, compared to be sure).
    pub(crate) fn route_url(
        &self,
        endpoint: &Endpoint,
        path: &str,
        query: &[(&'static str, String)],
    ) -> Url {
        if query.is_empty()
            && let Some(Some((template, url))) = self.fixed.get(endpoint.route.get())
            && *template == path
        {
            return url.clone();
        }
        self.url(path, query)
    }

    /// The base URL, parsed.
    pub(crate) fn base(&self) -> &Url {
        &self.base
    }

    /// The parsed base URL as text, without its trailing `/`: what the
    /// client reports, and what a route's path is appended to. It comes from
    /// the parsed URL, never the configured text, so the two cannot differ
    /// (the parser drops a trailing space or newline and reads `\` as `/`).
    pub(crate) fn base_url(&self) -> &str {
        self.base.as_str().trim_end_matches('/')
    }

    /// The URL of a route's rendered (percent-encoded) `path` with `query`:
    /// what the base URL string, the path and the query joined would parse to.
    pub(crate) fn url(&self, path: &str, query: &[(&'static str, String)]) -> Url {
        let mut url = self.base.clone();
        if self.prefix.is_empty() {
            url.set_path(path);
        } else {
            url.set_path(&format!("{}{path}", self.prefix));
        }
        if !query.is_empty() {
            let mut encoded = String::new();
            for (i, (name, value)) in query.iter().enumerate() {
                if i > 0 {
                    encoded.push('&');
                }
                crate::call::encode_segment(name, &mut encoded);
                encoded.push('=');
                crate::call::encode_segment(value, &mut encoded);
            }
            url.set_query(Some(&encoded));
        }
        url
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test policy's header names, with a workspace header.
    fn names() -> HeaderNames {
        HeaderNames {
            workspace: Some("X-Workspace-ID"),
            ..crate::testing::POLICY.headers.clone()
        }
    }

    /// The URL as it was built before: the strings joined, then parsed.
    fn joined(base: &str, path: &str, query: &[(&'static str, String)]) -> Url {
        let mut url = format!("{}{path}", base.trim_end_matches('/'));
        for (i, (name, value)) in query.iter().enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            crate::call::encode_segment(name, &mut url);
            url.push('=');
            crate::call::encode_segment(value, &mut url);
        }
        Url::parse(&url).unwrap()
    }

    #[test]
    fn a_url_is_what_the_joined_string_parses_to() {
        let bases = [
            "http://127.0.0.1:8080",
            "http://127.0.0.1:8080/",
            "https://api.example.com",
            "https://api.example.com:443/grag/",
            "http://h/x/./y/..",
            "http://H.example/a b/",
            "http://[::1]:9/p%20q",
        ];
        let paths = [
            "/workspaces/api/v1/kbs",
            "/kbs/kb%2F1/documents",
            "/a/%C3%A4/",
        ];
        let queries: [&[(&'static str, String)]; 3] = [
            &[],
            &[("limit", "10".into())],
            &[("q", "a b&c=d#e".into()), ("after", "ä/..".into())],
        ];
        for base in bases {
            let origin = Origin::new(Url::parse(base).unwrap(), &names(), "knoll", &[]).unwrap();
            for path in paths {
                for query in queries {
                    assert_eq!(
                        origin.url(path, query),
                        joined(base, path, query),
                        "{base} {path} {query:?}"
                    );
                }
            }
        }
    }

    /// Text the URL parser drops or reads otherwise (a trailing space, tab or
    /// newline, a `\`): the base URL the client reports, with a route's path
    /// appended, is still exactly where its requests go.
    #[test]
    fn the_reported_base_url_is_where_requests_go() {
        let bases = [
            ("http://h/api/ ", "http://h/api"),
            ("http://h/api/\t", "http://h/api"),
            ("http://h/api\n", "http://h/api"),
            (" http://h/api", "http://h/api"),
            ("http://h/api\\", "http://h/api"),
            ("http://h/a%20b/", "http://h/a%20b"),
            ("http://h", "http://h"),
        ];
        for (raw, reported) in bases {
            let origin = Origin::new(Url::parse(raw).unwrap(), &names(), "knoll", &[]).unwrap();
            assert_eq!(origin.base_url(), reported, "{raw:?}");
            let query = [("limit", "10".to_owned())];
            assert_eq!(
                origin.url("/kbs/kb%2F1", &query),
                joined(origin.base_url(), "/kbs/kb%2F1", &query),
                "{raw:?}"
            );
        }
    }

    #[test]
    fn a_route_made_once_is_the_url_its_call_would_get() {
        let routes = crate::testing::POLICY.routes;
        let bases = [
            "http://127.0.0.1:8080",
            "https://api.example.com:443/grag/",
            "http://h/x/./y/..",
        ];
        let paths = ["/chat/stream", "/jobs/j-1", "/other/path"];
        let queries: [&[(&'static str, String)]; 2] = [&[], &[("limit", "10".into())]];
        for base in bases {
            let origin = Origin::new(Url::parse(base).unwrap(), &names(), "knoll", routes).unwrap();
            assert!(
                origin.fixed.iter().any(Option::is_some),
                "no route made once"
            );
            for route in routes {
                // Its own path, and another path or a query it must not take the made URL for.
                for path in paths.iter().copied().chain([route.path]) {
                    for query in queries {
                        assert_eq!(
                            origin.route_url(route, path, query),
                            joined(base, path, query),
                            "{base} {} {path} {query:?}",
                            route.path
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn names_that_are_not_header_names_are_refused() {
        let names = HeaderNames {
            tenant: "X Tenant",
            ..names()
        };
        assert!(matches!(
            Origin::new(Url::parse("http://h").unwrap(), &names, "knoll", &[]),
            Err(ConfigError::Policy(_))
        ));
    }
}
