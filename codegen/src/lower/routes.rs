//! Checks and lowers the service files: services and their routes.

use std::collections::HashMap;

use crate::model::*;
use crate::naming;
use crate::spec::{self, Text};

use super::{Cx, KEY_LANE, Known, is_snake};

impl Cx<'_> {
    pub(super) fn services(
        &mut self,
        services: &[spec::ServiceFile],
        api: &Api,
        names: &Known,
        max_response: Option<u64>,
    ) -> Vec<Service> {
        let mut taken = Taken::default();
        let mut out = Vec::new();
        for s in services {
            let position = out.iter().map(|s: &Service| s.routes.len()).sum();
            let service = self.service(s, api, names, &mut taken, (position, max_response));
            out.push(service);
        }
        // `workspace_services` entries are checked at their own line (`lower`).
        for w in &api.pipeline_services {
            if !services.iter().any(|s| s.service.as_str() == w) {
                self.sources.in_file(
                    0,
                    "pipeline_services",
                    format!("no service file defines `{w}`"),
                );
            }
        }
        out
    }

    /// A service and its routes, the first at `position` among the API's,
    /// each reading at most `max_response` unless it says otherwise.
    fn service(
        &mut self,
        s: &spec::ServiceFile,
        api: &Api,
        names: &Known,
        taken: &mut Taken,
        (position, max_response): (usize, Option<u64>),
    ) -> Service {
        // The handle's struct and the service's module sit beside the
        // client struct and Rust's own crates in the generated crate root.
        let handle_type = naming::camel(&s.handle);
        let module = naming::module(&s.service);
        self.service_names(s, api, taken, &handle_type, &module);
        let scope = self.scope(&s.scope, "scope");
        let lane = self.lane(s, api);
        self.service_paths(s);
        if scope == Some(ScopeNeed::Workspace) && api.headers.workspace.is_none() {
            self.error(
                &s.scope,
                "scope",
                "a workspace service needs `headers.workspace` in api.yaml (the header its calls carry)",
            );
        }
        let listed = |list: &[String]| list.iter().any(|w| w == s.service.as_str());
        let mut routes = Vec::new();
        for (name, r) in &s.routes {
            let defaults = Defaults {
                service: leak(&s.service),
                scope: scope.unwrap_or(ScopeNeed::Tenant),
                lane,
                needs_workspace: listed(&api.workspace_services),
                needs_pipeline: listed(&api.pipeline_services),
                max_response: max_response.unwrap_or(0),
                position: position + routes.len(),
            };
            routes.push(self.route(name, r, s, &defaults, names));
        }
        Service {
            at: self.sources.locate(s.service.span()),
            name: s.service.to_string(),
            module,
            handle: s.handle.to_string(),
            handle_type,
            doc: s.doc.to_string(),
            prefix: s.prefix.to_string(),
            openapi: s.openapi.as_ref().map(|d| d.to_string()),
            scope: scope.unwrap_or(ScopeNeed::Tenant),
            lane,
            routes,
            source: self.source(&s.source, s.inferred),
        }
    }

    /// The handle (a client method), its type and the service's module: each
    /// a name of its own, and none another service's or the crate's.
    fn service_names(
        &mut self,
        s: &spec::ServiceFile,
        api: &Api,
        taken: &mut Taken,
        pascal: &str,
        module: &str,
    ) {
        if !is_snake(&s.handle) {
            self.error(&s.handle, "handle", "handles are snake_case method names");
        } else if self.name(&s.handle, "handle") {
            self.type_name(&s.handle, pascal, "handle");
            if let Some(other) =
                (taken.handle_types).insert(pascal.to_owned(), s.handle.to_string())
                && other != s.handle.as_str()
            {
                self.error(
                    &s.handle,
                    "handle",
                    format!(
                        "the handles `{other}` and `{}` would both be the type `{pascal}`",
                        &*s.handle
                    ),
                );
            }
        }
        if api.ids.iter().any(|i| i.name == pascal) {
            self.error(
                &s.handle,
                "handle",
                format!("the handle's type `{pascal}` would clash with the ID type `{pascal}`"),
            );
        }
        if pascal == api.client {
            self.error(
                &s.handle,
                "handle",
                format!(
                    "the handle's type `{pascal}` would clash with the client `{}`",
                    api.client
                ),
            );
        }
        if self.service_name(&s.service)
            && let Some(other) = (taken.modules).insert(module.to_owned(), s.service.to_string())
        {
            let message = if other == s.service.as_str() {
                format!("another service file already defines the service `{other}`")
            } else {
                format!(
                    "`{other}` and `{}` would both be the module `{module}`",
                    &*s.service
                )
            };
            self.error(&s.service, "service", message);
        }
        if let Some(other) = (taken.handles).insert(s.handle.to_string(), s.service.to_string()) {
            self.error(
                &s.handle,
                "handle",
                format!(
                    "duplicate method name: service `{other}` already has handle `{}`",
                    &*s.handle
                ),
            );
        }
    }

    /// `key`, or a lane of `auth.lanes_authenticated`: keyless until its auth lands.
    fn lane(&mut self, s: &spec::ServiceFile, api: &Api) -> Lane {
        if s.lane.as_str() == KEY_LANE {
            return Lane::Key;
        }
        match api.lanes.iter().find(|(lane, _)| lane == s.lane.as_str()) {
            Some((_, true)) => Lane::Key,
            // Until the lane's own auth lands, a proxy injects the key.
            Some((_, false)) => Lane::Keyless,
            None => {
                let known = api.lanes.iter().map(|(l, _)| format!("`{l}`"));
                let choices: Vec<String> =
                    std::iter::once("`key`".to_owned()).chain(known).collect();
                self.error(
                    &s.lane,
                    "lane",
                    format!(
                        "lane is one of {} (auth.lanes_authenticated)",
                        choices.join(", ")
                    ),
                );
                Lane::Key
            }
        }
    }

    /// The prefix of every route's path, and the path of the service's own
    /// OpenAPI document.
    fn service_paths(&mut self, s: &spec::ServiceFile) {
        if let Some(doc) = &s.openapi
            && (!doc.starts_with('/') || doc.contains(['?', '#', '{']))
        {
            self.error(
                doc,
                "openapi",
                "the document's path starts with `/` and has no query, fragment or placeholder",
            );
        }
        if !s.prefix.starts_with('/') || s.prefix.ends_with('/') {
            self.error(
                &s.prefix,
                "prefix",
                "a prefix starts with `/` and does not end with one",
            );
        }
    }

    /// A route: the checks of each of its parts, then its descriptor.
    fn route(
        &mut self,
        name: &Text,
        r: &spec::RouteEntry,
        service: &spec::ServiceFile,
        defaults: &Defaults,
        names: &Known,
    ) -> Route {
        if !is_snake(name) {
            self.error(
                name,
                format!("routes.{}", &**name),
                "route names are snake_case method names",
            );
        } else {
            self.name(name, &format!("routes.{}", &**name));
        }
        self.arguments(name, r);
        let method = self.method(name, r);
        let path_params = self.path_params(name, r, names);
        let query = (r.query.iter())
            .map(|(q, ty)| {
                let t = self.type_expr(ty, &at(name, &format!("query.{}", &**q)), names);
                (q.to_string(), t.unwrap_or(TypeExpr::String))
            })
            .collect();
        let body = self.body(name, r, method, names);
        let returns = self.returns(name, r, names);
        let scope = self.route_scope(name, r, service, defaults);
        let conflict = self.conflict(name, r, method);
        self.pipeline(name, r, service, defaults, names);
        let max_response = (r.max_response.as_ref())
            .and_then(|m| self.size(m, &at(name, "max_response")))
            .unwrap_or(defaults.max_response);
        let (timeout, retry, budget) = self.route_classes(name, r, names);
        let endpoint = Endpoint {
            service: defaults.service,
            operation: leak(name),
            method,
            path: leak(&format!("{}{}", &*service.prefix, &*r.path)),
            scope,
            lane: defaults.lane,
            timeout,
            retry,
            idempotent: r.idempotent,
            budget,
            replay: r.replay,
            conflict,
            pipeline_id: r.pipeline_id,
            stream: match returns {
                Returns::Stream(i) => Some(StreamIx::new(i as u16)),
                _ => None,
            },
            max_response: max_response as usize,
            route: RouteIx::new(defaults.position as u16),
        };
        Route {
            endpoint: Box::leak(Box::new(endpoint)),
            name: name.to_string(),
            constant: naming::screaming(name),
            reconcile: None, // resolved by `reconciles`, once every route is known
            exists: None,    // resolved by `existence`, once every route is known
            doc: r.doc.to_string(),
            path_params,
            query,
            body,
            returns,
            source: self.source(&r.source, r.inferred),
        }
    }

    /// The method's arguments (path parameters, query parameters, the body,
    /// the proof of an ID that must exist): snake_case, and no two alike.
    fn arguments(&mut self, name: &Text, r: &spec::RouteEntry) {
        let mut args: Vec<String> = r.body.iter().map(|_| "body".to_owned()).collect();
        let mut arg = |cx: &mut Self, text: &Text, key: String| {
            if !is_snake(text) {
                cx.error(
                    text,
                    &key,
                    "parameter names are snake_case (they are the method's arguments)",
                );
            }
            let argument = naming::argument(text);
            if args.contains(&argument) {
                let message = format!(
                    "`{}` would be a second argument `{argument}` of the method",
                    &**text
                );
                cx.error(text, &key, message);
            }
            args.push(argument);
        };
        for param in r.path_params.keys() {
            arg(self, param, at(name, &format!("path_params.{}", &**param)));
        }
        for param in r.query.keys() {
            arg(self, param, at(name, &format!("query.{}", &**param)));
        }
        if let Some(exists) = &r.exists {
            let stem = crate::naming::proof_argument(&exists.field);
            if !stem.is_empty() {
                let stem = Text::new(*exists.field.span(), stem.to_owned());
                arg(self, &stem, at(name, "exists.field"));
            }
        }
    }

    fn method(&mut self, name: &Text, r: &spec::RouteEntry) -> Method {
        match r.method.as_str() {
            "GET" => Method::Get,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "PATCH" => Method::Patch,
            "DELETE" => Method::Delete,
            other => {
                self.error(
                    &r.method,
                    at(name, "method"),
                    format!("unknown method `{other}`: GET, POST, PUT, PATCH or DELETE"),
                );
                Method::Get
            }
        }
    }

    /// The path's placeholders and `path_params` name the same parameters,
    /// each an ID or a string; they are kept in the template's order.
    fn path_params(
        &mut self,
        name: &Text,
        r: &spec::RouteEntry,
        names: &Known,
    ) -> Vec<(String, TypeExpr)> {
        if !r.path.starts_with('/') {
            self.error(&r.path, at(name, "path"), "a path starts with `/`");
        }
        let placeholders = placeholders(&r.path);
        for p in &placeholders {
            if !r.path_params.keys().any(|k| k.as_str() == p) {
                self.error(
                    &r.path,
                    at(name, "path"),
                    format!("placeholder `{{{p}}}` has no entry in `path_params`"),
                );
            }
        }
        let mut path_params = Vec::new();
        for (param, ty) in &r.path_params {
            let field = at(name, &format!("path_params.{}", &**param));
            if !placeholders.iter().any(|p| p == param.as_str()) {
                let message = format!(
                    "path parameter `{}` is missing from the path template `{}`",
                    &**param, &*r.path
                );
                self.error(param, &field, message);
            }
            let lowered = self.type_expr(ty, &field, names);
            if let Some(t) = &lowered
                && !matches!(t, TypeExpr::Id(_) | TypeExpr::String)
            {
                self.error(ty, &field, "a path parameter is an ID type or `string`");
            }
            path_params.push((param.to_string(), lowered.unwrap_or(TypeExpr::String)));
        }
        // Keep template order: the emitter renders parameters as they appear.
        path_params.sort_by_key(|(p, _)| placeholders.iter().position(|q| q == p));
        path_params
    }

    fn body(
        &mut self,
        name: &Text,
        r: &spec::RouteEntry,
        method: Method,
        names: &Known,
    ) -> Option<TypeExpr> {
        let text = r.body.as_ref()?;
        let body = self.type_expr(text, &at(name, "body"), names);
        if body.is_some() && method == Method::Get {
            self.error(text, at(name, "body"), "a GET route has no body");
        }
        body
    }

    /// A body's type, nothing, or a stream of `streams.yaml`.
    fn returns(&mut self, name: &Text, r: &spec::RouteEntry, names: &Known) -> Returns {
        match (&r.returns, &r.stream) {
            (Some(_), Some(stream)) => {
                self.error(
                    stream,
                    at(name, "stream"),
                    "a stream route has no `returns`",
                );
                Returns::Nothing
            }
            (None, Some(stream)) => {
                (self.reference(stream, &at(name, "stream"), "stream", &names.streams))
                    .map_or(Returns::Nothing, Returns::Stream)
            }
            (Some(t), None) if t.as_str() == "none" => Returns::Nothing,
            (Some(t), None) => Returns::Body(
                self.type_expr(t, &at(name, "returns"), names)
                    .unwrap_or(TypeExpr::Json),
            ),
            (None, None) => {
                self.error(
                    name,
                    at(name, "returns"),
                    "a route needs `returns` (or `stream`)",
                );
                Returns::Nothing
            }
        }
    }

    /// The route's timeout class, retry class and budget, by name.
    fn route_classes(
        &mut self,
        name: &Text,
        r: &spec::RouteEntry,
        names: &Known,
    ) -> (TimeoutIx, RetryIx, BudgetIx) {
        let mut index = |text: &Text, key: &str, what: &str, table: &[&str]| {
            let found = self.reference(text, &at(name, key), what, table);
            found.unwrap_or(0) as u16
        };
        let timeout = index(&r.timeout, "timeout", "timeout class", &names.timeouts);
        let retry = index(&r.retry, "retry", "retry class", &names.retries);
        let budget = index(&r.budget, "budget", "budget", &names.budgets);
        (
            TimeoutIx::new(timeout),
            RetryIx::new(retry),
            BudgetIx::new(budget),
        )
    }

    /// The service's scope unless the route names one; a workspace route
    /// only in a workspace service, and every route of one needs it.
    fn route_scope(
        &mut self,
        name: &Text,
        r: &spec::RouteEntry,
        service: &spec::ServiceFile,
        defaults: &Defaults,
    ) -> ScopeNeed {
        let service_scope = defaults.scope;
        let scope = match &r.scope {
            Some(s) => self.scope(s, &at(name, "scope")).unwrap_or(service_scope),
            None => service_scope,
        };
        let written = r.scope.as_ref().unwrap_or(&service.scope);
        if scope == ScopeNeed::Workspace && service_scope != ScopeNeed::Workspace {
            self.error(
                written,
                at(name, "scope"),
                "a workspace route belongs to a service whose scope is `workspace` (its handle carries the workspace)",
            );
        }
        if defaults.needs_workspace && scope != ScopeNeed::Workspace {
            self.error(
                written,
                at(name, "scope"),
                format!(
                    "`{}` is a workspace service (policy §3.2): every route needs the workspace, so scope must be `workspace`",
                    &*service.service
                ),
            );
        }
        scope
    }

    /// What a 409 means: an error unless the route says `success` (a create
    /// that found its object) or `poll`.
    fn conflict(&mut self, name: &Text, r: &spec::RouteEntry, method: Method) -> Conflict {
        let Some(text) = &r.conflict else {
            return Conflict::Error;
        };
        // `error` is what a route without the key means; it is not written.
        let conflict = match Conflict::named(text) {
            Some(c) if c != Conflict::Error => c,
            _ => {
                let message = format!("unknown conflict rule `{}`: `success` or `poll`", &**text);
                self.error(text, at(name, "conflict"), message);
                Conflict::Error
            }
        };
        if conflict == Conflict::Success && method == Method::Get {
            self.error(
                text,
                at(name, "conflict"),
                "`conflict: success` is for create routes, not GET",
            );
        }
        conflict
    }

    /// The pipeline header: on every route of a pipeline service, and only
    /// where the API names the header and a `PipelineId`.
    fn pipeline(
        &mut self,
        name: &Text,
        r: &spec::RouteEntry,
        service: &spec::ServiceFile,
        defaults: &Defaults,
        names: &Known,
    ) {
        let field = at(name, "pipeline_id");
        if defaults.needs_pipeline && !r.pipeline_id {
            self.error(
                name,
                &field,
                format!(
                    "every `{}` route carries the pipeline header (api.yaml `pipeline_services`): add `pipeline_id: true`",
                    &*service.service
                ),
            );
        }
        if r.pipeline_id && !names.pipeline_header {
            self.error(
                name,
                &field,
                "routes that carry the pipeline header need `headers.pipeline` in api.yaml",
            );
        }
        if r.pipeline_id && !names.ids.contains(&"PipelineId") {
            self.error(
                name,
                &field,
                "routes that carry the pipeline header need a `PipelineId` in `ids.types`",
            );
        }
    }
}

/// The field `key` of the route `name`: `routes.upsert_entity.timeout`.
fn at(name: &Text, key: &str) -> String {
    format!("routes.{}.{key}", &**name)
}

/// The names the services took so far: a handle, a handle's type, a module
/// each belong to one service.
#[derive(Default)]
struct Taken {
    handles: HashMap<String, String>,
    handle_types: HashMap<String, String>,
    modules: HashMap<String, String>,
}

/// What a route of a service has unless it says otherwise.
struct Defaults {
    service: &'static str,
    scope: ScopeNeed,
    lane: Lane,
    /// The route's position among every route of the API.
    position: usize,
    /// A workspace service (policy §3.2): every route needs the workspace.
    needs_workspace: bool,
    /// A pipeline service (policy §10.1): every route carries the pipeline header.
    needs_pipeline: bool,
    /// `limits.response`.
    max_response: u64,
}

/// The `{name}` placeholders of a path template, in order.
pub fn placeholders(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        out.push(rest[open + 1..open + close].to_string());
        rest = &rest[open + close + 1..];
    }
    out
}

impl Cx<'_> {
    /// Resolves every route's `reconcile`: a route that is not idempotent
    /// names the GET that settles an unknown outcome (§5.3.3, Core
    /// "Idempotency": read the state before sending again), as `route` of its
    /// own service or `handle.route`; an idempotent route has none.
    pub(super) fn reconciles(&mut self, raw: &[spec::ServiceFile], services: &mut [Service]) {
        for (si, s) in raw.iter().enumerate() {
            for (ri, (name, r)) in s.routes.iter().enumerate() {
                let at = format!("routes.{}.reconcile", &**name);
                let Some(read) = &r.reconcile else {
                    if !r.idempotent {
                        self.error(
                            name,
                            &at,
                            "a route that is not idempotent names the read that settles an unknown outcome: `reconcile: <GET route of this service>` or `reconcile: handle.route`",
                        );
                    }
                    continue;
                };
                if r.idempotent {
                    self.error(
                        read,
                        &at,
                        "only a route that is not idempotent has an outcome to reconcile",
                    );
                    continue;
                }
                let target = if read.contains('.') {
                    self.route_ref(read, &at, services)
                } else {
                    let found = services[si]
                        .routes
                        .iter()
                        .position(|x| x.name == read.as_str());
                    if found.is_none() {
                        self.error(
                            read,
                            &at,
                            format!(
                                "`{}` is not a GET route of service `{}`",
                                &**read, &*s.service
                            ),
                        );
                    }
                    found.map(|route| RouteRef { service: si, route })
                };
                let Some(target) = target else { continue };
                if services[target.service].routes[target.route].method != Method::Get {
                    self.error(
                        read,
                        &at,
                        format!(
                            "`{}` is not a GET route of service `{}`",
                            &**read, services[target.service].name
                        ),
                    );
                    continue;
                }
                services[si].routes[ri].reconcile = Some(target);
            }
        }
    }

    /// Resolves every route's `exists`: the field is an ID of the body, the
    /// proving route is a create (409 = already there) whose body carries
    /// the same ID in a field of the same name.
    pub(super) fn existence(
        &mut self,
        raw: &[spec::ServiceFile],
        services: &mut [Service],
        types: &[TypeDef],
    ) {
        let id_field = |body: &Option<TypeExpr>, field: &str| -> Option<String> {
            let TypeExpr::Named(name) = body.as_ref()? else {
                return None;
            };
            let Shape::Struct(fields) = &types.iter().find(|t| &t.name == name)?.shape else {
                return None;
            };
            match &fields.iter().find(|f| f.name == field)?.ty {
                TypeExpr::Id(id) => Some(id.clone()),
                _ => None,
            }
        };
        for (si, s) in raw.iter().enumerate() {
            for (ri, (name, r)) in s.routes.iter().enumerate() {
                let Some(exists) = &r.exists else { continue };
                let at = format!("routes.{}.exists", &**name);
                let Some(proof) =
                    self.route_ref(&exists.proven_by, &format!("{at}.proven_by"), services)
                else {
                    continue;
                };
                let Some(id) = id_field(&services[si].routes[ri].body, &exists.field) else {
                    self.error(
                        &exists.field,
                        format!("{at}.field"),
                        "not an ID field of the route's body",
                    );
                    continue;
                };
                let prover = &services[proof.service].routes[proof.route];
                let proves = prover.conflict == Conflict::Success
                    && prover.name.starts_with("create_")
                    && prover.path_params.is_empty()
                    && prover.query.is_empty()
                    && id_field(&prover.body, &exists.field).as_deref() == Some(id.as_str());
                if !proves {
                    self.error(
                        &exists.proven_by,
                        format!("{at}.proven_by"),
                        format!(
                            "a proof is a `create_…` route with a body only, whose 409 means already there (`conflict: success`) and whose body has `{}: {id}`",
                            &*exists.field
                        ),
                    );
                    continue;
                }
                services[si].routes[ri].exists = Some(Existence {
                    field: exists.field.to_string(),
                    id,
                    proven_by: proof,
                    argument: crate::naming::proof_argument(&exists.field).to_owned(),
                    ensure: crate::naming::ensure(&prover.name),
                });
            }
        }
    }
}
