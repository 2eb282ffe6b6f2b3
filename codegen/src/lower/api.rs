//! Checks and lowers `api.yaml`: identity, auth, headers and ID types.

use crate::model::*;
use crate::spec;

use super::{Cx, KEY_LANE, is_camel, is_snake};

impl Cx<'_> {
    /// `ids.pattern`, or `None` with the error recorded.
    pub(super) fn id_pattern(&mut self, api: &spec::ApiFile) -> Option<IdPattern<'static>> {
        match super::id_pattern::parse(&api.ids.pattern) {
            Ok(pattern) => Some(pattern),
            Err(message) => {
                self.error(&api.ids.pattern, "ids.pattern", message);
                None
            }
        }
    }

    /// The API file: its identity, auth, headers and ID types, each checked.
    pub(super) fn api(&mut self, api: &spec::ApiFile, pattern: Option<&IdPattern<'static>>) -> Api {
        self.auth_scheme(&api.auth.scheme);
        let ids = self.id_types(api);
        self.reserved_tenants(api, pattern);
        let lanes = self.lanes(api);
        if *api.ids.opaque_max_len == 0 || *api.ids.opaque_max_len > 4096 {
            self.sources.at(
                api.ids.opaque_max_len.span(),
                "ids.opaque_max_len",
                "must be between 1 and 4096 bytes",
            );
        }
        self.header_names(&api.headers);
        let at = self.identity(api);
        let id_rules = id_rules(api, pattern, &ids);
        let services = |s: Option<&Vec<spec::Text>>| -> Vec<String> {
            s.into_iter().flatten().map(|s| s.to_string()).collect()
        };
        Api {
            license: api.document.as_ref().map(|d| d.license.to_string()),
            contact: api.document.as_ref().map(|d| {
                let c = &d.contact;
                let text = |t: &Option<spec::Text>| t.as_ref().map(|t| t.to_string());
                (c.name.to_string(), text(&c.url), text(&c.email))
            }),
            at,
            crate_at: self.sources.locate(api.crate_name.span()),
            lanes,
            name: api.api.to_string(),
            title: api.title.to_string(),
            crate_name: api.crate_name.to_string(),
            client: api.client.to_string(),
            doc: api.doc.to_string(),
            origin_env: api.origin.env.to_string(),
            key_env: api.auth.env.to_string(),
            tenant_env: api.auth.tenant_env.to_string(),
            production_env: api.auth.production_env.as_ref().map(|e| e.to_string()),
            headers: header_values(api),
            id_rules,
            ids,
            workspace_services: services(api.workspace_services.as_ref().map(|w| &w.services)),
            pipeline_services: services(api.pipeline_services.as_ref().map(|p| &p.services)),
            workspace_source: api
                .workspace_services
                .as_ref()
                .map(|w| self.source(&w.source, w.inferred)),
            pipeline_source: api
                .pipeline_services
                .as_ref()
                .map(|p| self.source(&p.source, p.inferred)),
            tenant_source: self.source(&api.auth.source, api.auth.inferred),
            ids_source: self.source(&api.ids.source, api.ids.inferred),
            source: self.source(&api.origin.source, api.origin.inferred),
        }
    }

    /// RFC 9110 §11.1: an auth scheme is a token.
    fn auth_scheme(&mut self, scheme: &spec::Text) {
        if scheme.is_empty() || !scheme.bytes().all(is_token_byte) {
            self.error(
                scheme,
                "auth.scheme",
                "an auth scheme is a token (letters, digits and !#$%&'*+-.^_`|~), as sent: `Bearer`",
            );
        }
    }

    /// The ID types: CamelCase names ending in `Id`, none a built-in one,
    /// each validated by the pattern or opaque.
    fn id_types(&mut self, api: &spec::ApiFile) -> Vec<IdType> {
        let mut ids = Vec::new();
        for (name, id) in &api.ids.types {
            let field = format!("ids.types.{}", &**name);
            if !is_camel(name) || !name.ends_with("Id") {
                self.error(name, &field, "ID types are CamelCase names ending in `Id`");
            }
            if ["TenantId", "WorkspaceId"].contains(&name.as_str()) {
                self.error(name, &field, "TenantId and WorkspaceId are built in");
            } else {
                self.type_name(name, name, &field);
            }
            let opaque = match id.rule.as_str() {
                "pattern" => false,
                "opaque" => true,
                other => {
                    self.error(
                        &id.rule,
                        format!("{field}.rule"),
                        format!("unknown ID rule `{other}`: expected `pattern` or `opaque`"),
                    );
                    false
                }
            };
            ids.push(IdType {
                name: name.to_string(),
                doc: id.doc.to_string(),
                opaque,
                source: self.source(&id.source, id.inferred),
            });
        }
        ids
    }

    /// A reserved tenant matches the pattern; checked only against a
    /// pattern that lowered (a broken one is its own error).
    fn reserved_tenants(&mut self, api: &spec::ApiFile, pattern: Option<&IdPattern<'static>>) {
        for reserved in pattern.iter().flat_map(|p| {
            api.ids
                .reserved_tenants
                .iter()
                .filter(move |t| !p.matches(t))
        }) {
            self.error(
                reserved,
                "ids.reserved_tenants",
                "a reserved tenant must itself match `ids.pattern`",
            );
        }
    }

    /// The auth lanes and whether each sends the key yet.
    fn lanes(&mut self, api: &spec::ApiFile) -> Vec<(String, bool)> {
        let mut lanes = Vec::new();
        for (lane, &authenticated) in &api.auth.lanes_authenticated {
            if lane.as_str() == KEY_LANE || !is_snake(lane) {
                self.error(
                    lane,
                    format!("auth.lanes_authenticated.{}", &**lane),
                    "a lane is a snake_case name other than `key` (the lane that always sends the key)",
                );
                continue;
            }
            lanes.push((lane.to_string(), authenticated));
        }
        lanes
    }

    /// The API's name (its folder's), crate, title and client type; the
    /// `api:` line, which the crate root's files are blamed on.
    fn identity(&mut self, api: &spec::ApiFile) -> Location {
        let at = self.sources.locate(api.api.span());
        let folder = at
            .file
            .parent()
            .and_then(|d| d.file_name())
            .map(|n| n.to_string_lossy().into_owned());
        self.api_name(&api.api, folder.as_deref());
        self.crate_name(&api.crate_name);
        self.title(&api.title);
        if !is_camel(&api.client) {
            self.error(&api.client, "client", "the client is a CamelCase type name");
        } else if self.name(&api.client, "client") {
            self.type_name(&api.client, &api.client, "client");
        }
        at
    }
}

/// The header names the runtime sends, and the auth scheme.
fn header_values(api: &spec::ApiFile) -> HeaderNames {
    let h = &api.headers;
    HeaderNames {
        authorization: leak(&h.authorization),
        auth_scheme: leak(&api.auth.scheme),
        tenant: leak(&h.tenant),
        workspace: h.workspace.as_ref().map(|w| leak(w)),
        request_id: leak(&h.request_id),
        retry_after: leak(&h.retry_after),
        pipeline: h.pipeline.as_ref().map(|p| leak(p)),
    }
}

/// The rules the runtime checks IDs with.
fn id_rules(api: &spec::ApiFile, pattern: Option<&IdPattern<'static>>, ids: &[IdType]) -> IdRules {
    IdRules {
        // A pattern that did not lower (its error recorded) matches nothing.
        pattern: pattern.cloned().unwrap_or(IdPattern {
            text: leak(&api.ids.pattern),
            first: &[],
            rest: &[],
            min_len: 1,
            max_len: 0,
        }),
        reserved_tenants: leak_texts(api.ids.reserved_tenants.iter().map(|t| t.as_str())),
        opaque: leak_texts((ids.iter().filter(|i| i.opaque)).map(|i| i.name.as_str())),
        opaque_max_len: *api.ids.opaque_max_len as usize,
    }
}

impl Cx<'_> {
    /// Every header name is an RFC 9110 token, and no two name the same
    /// header (names are case-insensitive): a bad one would make every
    /// request unbuildable, a clash would send one value under two roles.
    fn header_names(&mut self, h: &spec::Headers) {
        let named = [
            (Some(&h.authorization), "authorization"),
            (Some(&h.tenant), "tenant"),
            (h.workspace.as_ref(), "workspace"),
            (Some(&h.request_id), "request_id"),
            (Some(&h.retry_after), "retry_after"),
            (h.pipeline.as_ref(), "pipeline"),
        ];
        let mut seen: Vec<(String, &str)> = Vec::new();
        for (text, key) in named {
            let Some(text) = text else { continue };
            let field = format!("headers.{key}");
            if text.is_empty() || !text.bytes().all(is_token_byte) {
                self.error(text, field, "a header name is an RFC 9110 token (letters, digits, `-` and the like; no space)");
                continue;
            }
            let lower = text.to_ascii_lowercase();
            if let Some((_, other)) = seen.iter().find(|(n, _)| *n == lower) {
                let message = format!("`{}` is already the {other} header", &**text);
                self.error(text, field, message);
            }
            seen.push((lower, key));
        }
    }
}

/// `tchar` of RFC 9110 §5.6.2.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
