//! `src/<service>.rs`: the endpoint descriptors and the typed handle of one service.

use proc_macro2::TokenStream;
use quote::quote;

use super::docs::{
    doc, duration_text, field_ident, ident, inner_doc, rust_type, source, type_text,
};
use crate::model::{
    Conflict, Existence, Item, Lane, Model, Returns, Route, RouteRef, ScopeNeed, Service,
    TaxonomyRow, TypeExpr,
};
use crate::naming;

/// Rust module of a service (`kg-service` -> `kg_service`).
pub fn module_name(service: &Service) -> String {
    service.module.clone()
}

/// Name of the handle struct (`kg` -> `Kg`).
pub fn handle_type(service: &Service) -> String {
    service.handle_type.clone()
}

pub fn service_rs(model: &Model, index: usize) -> TokenStream {
    let service = &model.services[index];
    let endpoints = service.routes.iter().map(|r| endpoint(model, r));
    let methods = service.routes.iter().map(|r| method(model, r));
    let mut proofs: Vec<&Existence> = model
        .routes()
        .filter_map(|(_, r)| r.exists.as_ref())
        .filter(|e| model.services[e.proven_by.service].name == service.name)
        .collect();
    proofs.dedup_by_key(|e| (e.proven_by.service, e.proven_by.route));
    let ensures = proofs.into_iter().map(|e| ensure(model, e));
    let handle = ident(&service.handle_type);
    let scoped = service.scope == ScopeNeed::Workspace;
    let pipelined = service.carries_pipeline();
    let mut fields = vec![quote!(client: &'c Client)];
    let mut names = vec![quote!(client)];
    if scoped {
        fields.push(quote!(workspace: &'c Id));
        names.push(quote!(workspace));
    }
    if pipelined {
        fields.push(quote!(pipeline: &'c Id));
        names.push(quote!(pipeline));
    }
    let ctor = quote! {
        pub(crate) fn new(#(#fields),*) -> Self {
            Self { #(#names),* }
        }
    };
    let fields = quote!(#(#fields),*);
    let id_import = (scoped || pipelined).then(|| {
        quote!(
            use sdk_runtime::Id;
        )
    });
    let streams = service
        .routes
        .iter()
        .any(|r| matches!(r.returns, Returns::Stream(_)));
    let policy_import = if streams {
        quote!(
            use crate::policy::{budget, retry, stream, timeout};
        )
    } else {
        quote!(
            use crate::policy::{budget, retry, timeout};
        )
    };
    let module_doc = inner_doc(&format!(
        "`{}`: {}\n\nEvery path starts with `{}`. Policy {}.",
        service.name,
        service.doc,
        service.prefix,
        source(&service.source)
    ));
    let mut handle_doc = if scoped {
        format!(
            "Calls of `{}`, bound to one workspace: every request carries `{}`{}.",
            service.name,
            model.api.headers.workspace.unwrap_or_default(),
            super::docs::workspace_section(model)
        )
    } else {
        format!("Calls of `{}`.", service.name)
    };
    if pipelined {
        handle_doc.push_str(&format!(
            " Bound to one pipeline id: every call of a route that carries `{}` sends it{}.",
            model.api.headers.pipeline.unwrap_or_default(),
            super::docs::pipeline_section(model)
        ));
    }
    let handle_doc = doc(&handle_doc);
    quote! {
        #module_doc

        use sdk_runtime::policy::Conflict;
        use crate::Error;
        use sdk_runtime::{Call, Client, Endpoint, Lane, Method, RouteIx, ScopeNeed};
        #id_import

        #policy_import

        #(#endpoints)*

        #handle_doc
        #[derive(Clone, Copy)]
        pub struct #handle<'c> {
            #fields
        }

        impl<'c> #handle<'c> {
            #ctor

            #(#methods)*
            #(#ensures)*
        }
    }
}

/// The descriptor of `r`, at position `route` of the policy's routes.
fn endpoint(model: &Model, r: &Route) -> TokenStream {
    use sdk_policy::bake::Bake;
    let name = ident(&r.constant);
    let text = format!(" `{} {}`", r.method.as_str(), r.path);
    let names = super::policy::CrateNames {
        model,
        statics: false,
    };
    let value = r.endpoint.bake(&names);
    quote! {
        #[doc = #text]
        pub static #name: Endpoint = #value;
    }
}

/// The rustdoc link to a route's reconcile read: `Self::read` on its own
/// handle, the other handle's method otherwise.
pub fn reconcile_link(model: &Model, r: &Route, read: &RouteRef) -> String {
    let service = &model.services[read.service];
    let target = &service.routes[read.route];
    if service.routes.iter().any(|x| std::ptr::eq(x, r)) {
        format!("[`Self::{}`]", target.name)
    } else {
        format!(
            "[`{handle}::{name}`](crate::{module}::{handle}::{name})",
            handle = service.handle_type,
            name = target.name,
            module = service.module
        )
    }
}

/// The rustdoc of a method: the spec's words, then the route's policy.
fn method_doc(model: &Model, r: &Route) -> TokenStream {
    let timeout = model.timeout(r.timeout);
    let retry = model.retry(r.retry);
    let budget = model.budget(r.budget);
    // The class's own doc is on its index constant: link it, do not repeat it.
    let mut timeout_text = format!(
        "[`{}`](crate::policy::timeout::{}), {} per attempt",
        timeout.name,
        naming::screaming(timeout.name),
        duration_text(timeout.per_attempt)
    );
    if let Some(longer) = timeout.deploy_suspected {
        timeout_text.push_str(&format!(
            " ({} while deploy-suspected)",
            duration_text(longer)
        ));
    }
    let mut lines = vec![
        r.doc.clone(),
        String::new(),
        format!("- Route: `{} {}`", r.method.as_str(), r.path),
        format!("- Timeout class: {timeout_text}"),
        format!(
            "- Retry class: [`{}`](crate::policy::retry::{}), {}",
            retry.name,
            naming::screaming(retry.name),
            super::markdown::schedule_text(&retry.schedule)
        ),
        format!(
            "- Idempotent: {}",
            if r.idempotent {
                "yes"
            } else {
                "no: never retried once the request may have reached the server"
            }
        ),
        format!("- Budget: `{}`", budget.name),
    ];
    if let Some(read) = &r.reconcile {
        lines.push(format!(
            "- Outcome unknown ([`Error::outcome_unknown`](sdk_runtime::Error::outcome_unknown)): \
             read the state with {} before sending it again",
            reconcile_link(model, r, read)
        ));
    }
    if r.replay {
        lines.push(
            "- Replayable: refused while the breaker is open with `Error::replayable()`; a replay queue keeps the write and sends it again after the close"
                .into(),
        );
    }
    match r.conflict {
        Conflict::Success => lines.push(
            "- 409: already there, returned as [`Created::Existing`](sdk_runtime::Created)".into(),
        ),
        Conflict::Poll => lines.push(
            "- 409: still processing, returned as [`Progress::Processing`](sdk_runtime::Progress)"
                .into(),
        ),
        Conflict::Error => {}
    }
    if let Some(e) = &r.exists {
        let (service, prover) = model.route(e.proven_by);
        lines.push(format!(
            "- Takes only an existing `{}`: the [`Existing`](crate::Existing) that \
             `{}().{}` hands out (the platform silently drops calls for an unknown one)",
            e.field,
            service.handle,
            prover.name.replacen("create_", "ensure_", 1)
        ));
    }
    if r.pipeline_id {
        lines.push(format!(
            "- Carries `{}`: the pipeline id the handle was made with",
            model.api.headers.pipeline.unwrap_or_default()
        ));
    }
    lines.push(endings_line(model, r));
    lines.push(format!("- Policy: {}", source(&r.source)));
    doc(&lines.join("\n"))
}

/// The error classes a call of `r` can end in, each with the taxonomy rows
/// that give it: what a caller's `match` on [`Error::class`] covers.
fn endings_line(model: &Model, r: &Route) -> String {
    let applying: Vec<&Item<TaxonomyRow>> = model
        .rows
        .iter()
        .filter(|row| applies(model, r, row))
        .collect();
    let mut classes: Vec<(&str, Vec<&str>)> = Vec::new();
    for (at, row) in applying.iter().enumerate() {
        // A success row, or a 409 that is success or progress, is no error.
        let success = row.success || row.matches.conflict.is_some_and(|c| c != Conflict::Error);
        if success || shadowed(row, &applying[..at]) {
            continue;
        }
        match classes.iter_mut().find(|(c, _)| *c == row.class) {
            Some((_, rows)) => rows.push(row.row),
            None => classes.push((row.class, vec![row.row])),
        }
    }
    let listed: Vec<String> = classes
        .iter()
        .map(|(class, rows)| {
            let variant = model.variant(class);
            format!(
                "[`{variant}`](crate::ErrorClass::{variant}) ({})",
                rows.join(", ")
            )
        })
        .collect();
    format!(
        "- Errors ([`Error::class`](crate::Error::class), taxonomy rows): {}",
        listed.join(", ")
    )
}

/// Whether taxonomy row `row` can match an outcome of a call of `r`.
fn applies(model: &Model, r: &Route, row: &Item<TaxonomyRow>) -> bool {
    use crate::model::OutcomeKind as K;
    let keyless = r.scope == ScopeNeed::Public
        || model
            .services
            .iter()
            .find(|s| s.routes.iter().any(|x| std::ptr::eq(x, r)))
            .is_some_and(|s| s.lane == Lane::Keyless);
    let stream = matches!(r.returns, Returns::Stream(_));
    let kind = match row.matches.outcome {
        K::StreamError | K::StreamTimeout | K::StreamStalled | K::JobFailed => stream,
        K::Decode | K::TooLarge => !matches!(r.returns, Returns::Nothing),
        K::CircuitOpen => model.breaker.is_some(),
        _ => true,
    };
    let m = &row.matches;
    kind && m.keyless.is_none_or(|k| k == keyless)
        && m.conflict.is_none_or(|c| c == r.conflict)
        && m.routes
            .is_none_or(|only| only.iter().any(|e| std::ptr::eq(*e, r.endpoint)))
}

/// Whether an earlier row without a further condition catches every
/// status of `row` first (rows match in order).
fn shadowed(row: &Item<TaxonomyRow>, earlier: &[&Item<TaxonomyRow>]) -> bool {
    let Some((lo, hi)) = row.matches.status else {
        return false;
    };
    earlier.iter().any(|e| {
        let e = &e.matches;
        e.detail.is_none()
            && e.retry_after.is_none()
            && e.status.is_some_and(|(elo, ehi)| elo <= lo && hi <= ehi)
    })
}

fn method(model: &Model, r: &Route) -> TokenStream {
    let name = ident(&r.name);
    let endpoint = ident(&r.constant);
    let docs = method_doc(model, r);
    let mut args = Vec::new();
    let mut steps = Vec::new();
    if r.scope == ScopeNeed::Workspace {
        steps.push(quote!(.workspace(self.workspace)));
    }
    if r.pipeline_id {
        steps.push(quote!(.pipeline(self.pipeline)));
    }
    for (param, ty) in &r.path_params {
        let arg = field_ident(param);
        let (arg_ty, value) = arg_type(ty, quote!(#arg));
        args.push(quote!(#arg: #arg_ty));
        steps.push(quote!(.path(#value)));
    }
    for (param, ty) in &r.query {
        let arg = field_ident(param);
        match ty {
            // A string enum is text already (`AsRef<str>`): passed as it is.
            TypeExpr::Optional(inner) if matches!(**inner, TypeExpr::Named(_)) => {
                let arg_ty = rust_type(inner);
                args.push(quote!(#arg: Option<&#arg_ty>));
                steps.push(quote!(.query_opt(#param, #arg)));
            }
            TypeExpr::Named(_) => {
                let arg_ty = rust_type(ty);
                args.push(quote!(#arg: &#arg_ty));
                steps.push(quote!(.query(#param, #arg)));
            }
            TypeExpr::Optional(inner) => {
                let (arg_ty, value) = arg_type(inner, quote!(v));
                args.push(quote!(#arg: Option<#arg_ty>));
                steps.push(quote!(.query_opt(#param, #arg.map(|v| #value))));
            }
            _ => {
                let (arg_ty, value) = arg_type(ty, quote!(#arg));
                args.push(quote!(#arg: #arg_ty));
                steps.push(quote!(.query(#param, #value)));
            }
        }
    }
    let proof = r.exists.as_ref().map(|e| {
        let arg = field_ident(e.field.strip_suffix("_id").unwrap_or(&e.field));
        let id = ident(&e.id);
        let field = field_ident(&e.field);
        let detail = format!("the body's `{}` is not the one proven to exist", e.field);
        args.push(quote!(#arg: &crate::ids::Existing<crate::ids::#id>));
        quote! {
            if body.#field != *#arg.id() {
                return Err(self.client.refused(&#endpoint, #detail).into());
            }
        }
    });
    let body = r.body.as_ref().map(|b| {
        let ty = rust_type(b);
        args.push(quote!(body: &#ty));
        quote!(.json(body))
    });
    let build = quote!(#proof let call = Call::new(&#endpoint) #(#steps)* #body;);
    let (ret, finish) = match &r.returns {
        Returns::Nothing => (
            quote!(()),
            quote!(Ok(self.client.send(call).await?.empty()?)),
        ),
        Returns::Stream(i) => {
            let stream = &model.streams[*i];
            let event = if stream.events.is_empty() {
                quote!(sdk_runtime::sse::SseEvent)
            } else {
                let e = ident(&stream.event_type);
                quote!(crate::types::#e)
            };
            match stream
                .fallback
                .as_ref()
                .map(|f| &model.route_of(f.route).1.returns)
            {
                Some(Returns::Body(status)) => {
                    let status = rust_type(status);
                    // Lazy: nothing is sent until the stream is first polled.
                    return quote! {
                        #docs
                        pub fn #name(&self, #(#args),*) -> sdk_runtime::JobProgress<#event, #status> {
                            #build
                            self.client.follow_job(call)
                        }
                    };
                }
                _ if !stream.events.is_empty() || stream.stages.is_some() => (
                    quote!(sdk_runtime::Turn<#event>),
                    quote!(Ok(self.client.turn(self.client.open_stream(call).await?))),
                ),
                _ => (
                    quote!(sdk_runtime::Events),
                    quote!(Ok(self.client.open_stream(call).await?)),
                ),
            }
        }
        Returns::Body(t) => {
            let ty = rust_type(t);
            match r.conflict {
                Conflict::Success => (
                    quote!(sdk_runtime::Created<#ty>),
                    quote!(Ok(self.client.send(call).await?.created()?)),
                ),
                Conflict::Poll => (
                    quote!(sdk_runtime::Progress<#ty>),
                    quote!(Ok(self.client.send(call).await?.progress()?)),
                ),
                Conflict::Error => (ty, quote!(Ok(self.client.send(call).await?.json()?))),
            }
        }
    };
    quote! {
        #docs
        pub async fn #name(&self, #(#args),*) -> Result<#ret, Error> {
            #build
            self.client.fail_fast(&call)?;
            #finish
        }
    }
}

/// `ensure_…` of a create route that proves an ID exists: a create whose
/// 409 means already there, so either answer proves it.
fn ensure(model: &Model, e: &Existence) -> TokenStream {
    let (_, prover) = model.route(e.proven_by);
    let create = ident(&prover.name);
    let name = ident(&prover.name.replacen("create_", "ensure_", 1));
    let body = rust_type(prover.body.as_ref().expect("checked in lowering"));
    let field = field_ident(&e.field);
    let id = ident(&e.id);
    let docs = doc(&format!(
        "[`Self::{}`], and the proof that the `{}` exists (created now, or already there: a 409), which the routes that need an existing one take.",
        prover.name, e.field
    ));
    quote! {
        #docs
        pub async fn #name(&self, body: &#body) -> Result<crate::ids::Existing<crate::ids::#id>, Error> {
            self.#create(body).await?;
            Ok(crate::ids::Existing::vouched(body.#field.clone()))
        }
    }
}

/// The argument type of a path or query parameter, and how it becomes text.
fn arg_type(ty: &TypeExpr, arg: TokenStream) -> (TokenStream, TokenStream) {
    match ty {
        TypeExpr::Id(_) => {
            let t = rust_type(ty);
            (quote!(&#t), quote!(#arg.as_str()))
        }
        TypeExpr::Named(_) => {
            let t = rust_type(ty);
            (quote!(&#t), quote!(#arg.as_str()))
        }
        TypeExpr::String => (quote!(&str), arg),
        other => (rust_type(other), quote!(#arg.to_string())),
    }
}

/// How a type reads in generated docs (used by POLICY.md too).
pub fn returns_text(model: &Model, r: &Route) -> String {
    match &r.returns {
        Returns::Nothing => "none".into(),
        Returns::Body(t) => type_text(t),
        Returns::Stream(i) => format!("SSE `{}`", model.streams[*i].name),
    }
}
