//! `src/<service>.rs`: the endpoint descriptors and the typed handle of one service.

use proc_macro2::{Ident, TokenStream};
use quote::quote;

use super::docs::{
    doc, duration_text, field_ident, ident, inner_doc, rust_type, schedule_text, source,
};
use super::policy::Home;
use crate::model::{
    Conflict, Existence, Item, Lane, Model, Returns, Route, RouteRef, ScopeNeed, Service, Stream,
    TaxonomyRow, TypeExpr,
};

/// Rust module of a service (`kg-service` -> `kg_service`).
pub fn module_name(service: &Service) -> String {
    service.module.clone()
}

/// Name of the handle struct (`kg` -> `Kg`).
pub fn handle_type(service: &Service) -> String {
    service.handle_type.clone()
}

/// `src/<service>.rs`: the service's route descriptors and its typed handle.
pub fn service_rs(model: &Model, index: usize) -> TokenStream {
    let service = &model.services[index];
    let endpoints = (service.routes.iter()).map(|r| super::policy::endpoint(model, r, Home::Crate));
    let methods = service.routes.iter().map(|r| method(model, r));
    let ensures = ensures(model, index);
    let handle = ident(&service.handle_type);
    let (fields, names) = handle_fields(service);
    let ctor = quote! {
        pub(crate) fn new(#(#fields),*) -> Self {
            Self { #(#names),* }
        }
    };
    let fields = quote!(#(#fields),*);
    let imports = service_imports(service);
    let module_doc = inner_doc(&format!(
        "`{}`: {}\n\nEvery path starts with `{}`. Policy {}.",
        service.name,
        service.doc,
        service.prefix,
        source(&service.source)
    ));
    let handle_doc = handle_doc(model, service);
    quote! {
        #module_doc

        #imports

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

/// The `ensure_…` methods of the service `index`: one per create route of
/// this service that proves an ID exists, however many routes take it.
fn ensures(model: &Model, index: usize) -> impl Iterator<Item = TokenStream> + '_ {
    let mut proofs: Vec<&Existence> = model
        .routes()
        .filter_map(|(_, r)| r.exists.as_ref())
        .filter(|e| e.proven_by.service == index)
        .collect();
    proofs.dedup_by_key(|e| (e.proven_by.service, e.proven_by.route));
    proofs.into_iter().map(|e| ensure(model, e))
}

/// The handle's fields and their names: the client, then the scope ids
/// the service's calls carry.
fn handle_fields(service: &Service) -> (Vec<TokenStream>, Vec<TokenStream>) {
    let mut fields = vec![quote!(client: &'c Client)];
    let mut names = vec![quote!(client)];
    if service.scope == ScopeNeed::Workspace {
        fields.push(quote!(workspace: &'c Id));
        names.push(quote!(workspace));
    }
    if service.carries_pipeline() {
        fields.push(quote!(pipeline: &'c Id));
        names.push(quote!(pipeline));
    }
    (fields, names)
}

/// The module's imports: `Id` only for a scoped handle, the stream
/// classes only for a service with a stream.
fn service_imports(service: &Service) -> TokenStream {
    let scoped = service.scope == ScopeNeed::Workspace || service.carries_pipeline();
    let id_import = scoped.then(|| {
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
    quote! {
        use sdk_runtime::policy::Conflict;
        use crate::Error;
        use sdk_runtime::{Call, Client, Endpoint, Lane, Method, RouteIx, ScopeNeed};
        #id_import

        #policy_import
    }
}

/// The handle's doc: the service, and the scope it is bound to.
fn handle_doc(model: &Model, service: &Service) -> TokenStream {
    let mut handle_doc = if service.scope == ScopeNeed::Workspace {
        format!(
            "Calls of `{}`, bound to one workspace: every request carries `{}`{}.",
            service.name,
            model.api.headers.workspace.unwrap_or_default(),
            super::docs::workspace_section(model)
        )
    } else {
        format!("Calls of `{}`.", service.name)
    };
    if service.carries_pipeline() {
        handle_doc.push_str(&format!(
            " Bound to one pipeline id: every call of a route that carries `{}` sends it{}.",
            model.api.headers.pipeline.unwrap_or_default(),
            super::docs::pipeline_section(model)
        ));
    }
    doc(&handle_doc)
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
    let retry = model.retry(r.retry);
    let mut lines = vec![
        r.doc.clone(),
        String::new(),
        format!("- Route: `{} {}`", r.method.as_str(), r.path),
        format!("- Timeout class: {}", timeout_text(model, r)),
        format!(
            "- Retry class: [`{}`](crate::policy::retry::{}), {}",
            retry.name,
            model.constants.retries[r.retry.get()],
            schedule_text(&retry.schedule)
        ),
        format!(
            "- Idempotent: {}",
            if r.idempotent {
                "yes"
            } else {
                "no: never retried once the request may have reached the server"
            }
        ),
        format!("- Budget: `{}`", model.budget(r.budget).name),
    ];
    lines.extend(caveat_lines(model, r));
    lines.push(endings_line(model, r));
    lines.push(format!("- Policy: {}", source(&r.source)));
    doc(&lines.join("\n"))
}

/// The timeout class, linked (its own doc is on its index constant: not
/// repeated), and how long an attempt may take.
fn timeout_text(model: &Model, r: &Route) -> String {
    let timeout = model.timeout(r.timeout);
    let mut timeout_text = format!(
        "[`{}`](crate::policy::timeout::{}), {} per attempt",
        timeout.name,
        model.constants.timeouts[r.timeout.get()],
        duration_text(timeout.per_attempt)
    );
    if let Some(longer) = timeout.deploy_suspected {
        timeout_text.push_str(&format!(
            " ({} while deploy-suspected)",
            duration_text(longer)
        ));
    }
    timeout_text
}

/// What a caller must know beyond the classes: how to reconcile an
/// unknown outcome, replay, what a 409 is, the proof and the pipeline id.
fn caveat_lines(model: &Model, r: &Route) -> Vec<String> {
    let mut lines = Vec::new();
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
        let (service, _) = model.route(e.proven_by);
        lines.push(format!(
            "- Takes only an existing `{}`: the [`Existing`](crate::Existing) that \
             `{}().{}` hands out (the platform silently drops calls for an unknown one)",
            e.field, service.handle, e.ensure
        ));
    }
    if r.pipeline_id {
        lines.push(format!(
            "- Carries `{}`: the pipeline id the handle was made with",
            model.api.headers.pipeline.unwrap_or_default()
        ));
    }
    lines
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

/// The handle's method of route `r`: its arguments, the call it builds, what it returns.
fn method(model: &Model, r: &Route) -> TokenStream {
    let name = ident(&r.name);
    let endpoint = ident(&r.constant);
    let docs = method_doc(model, r);
    let (mut args, steps) = call_arguments(r);
    let proof = r.exists.as_ref().map(|e| {
        let (arg, check) = existence_proof(e, &endpoint);
        args.push(arg);
        check
    });
    let body = r.body.as_ref().map(|b| {
        let ty = rust_type(b);
        args.push(quote!(body: &#ty));
        quote!(.json(body))
    });
    let build = quote!(#proof let call = Call::new(&#endpoint) #(#steps)* #body;);
    match answer(model, r) {
        // Lazy: nothing is sent until the stream is first polled.
        Answer::Job { event, status } => quote! {
            #docs
            pub fn #name(&self, #(#args),*) -> sdk_runtime::JobProgress<#event, #status> {
                #build
                self.client.follow_job(call)
            }
        },
        Answer::Awaited { ret, finish } => quote! {
            #docs
            pub async fn #name(&self, #(#args),*) -> Result<#ret, Error> {
                #build
                self.client.fail_fast(&call)?;
                #finish
            }
        },
    }
}

/// What a method returns and how it gets it from the call.
enum Answer {
    /// A job followed through its stream, polled when the stream fails.
    Job {
        event: TokenStream,
        status: TokenStream,
    },
    /// A call awaited: its result type and the expression that finishes it.
    Awaited {
        ret: TokenStream,
        finish: TokenStream,
    },
}

/// The method's arguments and the call's builder steps: the scope the
/// handle carries, then the path placeholders and the query.
fn call_arguments(r: &Route) -> (Vec<TokenStream>, Vec<TokenStream>) {
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
        let (arg, step) = query_argument(param, ty);
        args.push(arg);
        steps.push(step);
    }
    (args, steps)
}

/// A query parameter's argument and its step; an optional one is skipped when `None`.
fn query_argument(param: &str, ty: &TypeExpr) -> (TokenStream, TokenStream) {
    let arg = field_ident(param);
    match ty {
        // A string enum is text already (`AsRef<str>`): passed as it is.
        TypeExpr::Optional(inner) if matches!(**inner, TypeExpr::Named(_)) => {
            let arg_ty = rust_type(inner);
            (
                quote!(#arg: Option<&#arg_ty>),
                quote!(.query_opt(#param, #arg)),
            )
        }
        TypeExpr::Named(_) => {
            let arg_ty = rust_type(ty);
            (quote!(#arg: &#arg_ty), quote!(.query(#param, #arg)))
        }
        TypeExpr::Optional(inner) => {
            let (arg_ty, value) = arg_type(inner, quote!(v));
            (
                quote!(#arg: Option<#arg_ty>),
                quote!(.query_opt(#param, #arg.map(|v| #value))),
            )
        }
        _ => {
            let (arg_ty, value) = arg_type(ty, quote!(#arg));
            (quote!(#arg: #arg_ty), quote!(.query(#param, #value)))
        }
    }
}

/// The proof of existence a create route takes, and the check that the
/// body names the proven object.
fn existence_proof(e: &Existence, endpoint: &Ident) -> (TokenStream, TokenStream) {
    let arg = field_ident(&e.argument);
    let id = ident(&e.id);
    let field = field_ident(&e.field);
    let detail = format!("the body's `{}` is not the one proven to exist", e.field);
    let check = quote! {
        if body.#field != *#arg.id() {
            return Err(self.client.refused(&#endpoint, #detail).into());
        }
    };
    (quote!(#arg: &crate::ids::Existing<crate::ids::#id>), check)
}

/// What the route answers: nothing, a body (plain, created or in
/// progress), or a stream.
fn answer(model: &Model, r: &Route) -> Answer {
    let (ret, finish) = match &r.returns {
        Returns::Nothing => (
            quote!(()),
            quote!(Ok(self.client.send(call).await?.empty()?)),
        ),
        Returns::Stream(i) => return stream_answer(model, &model.streams[*i]),
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
    Answer::Awaited { ret, finish }
}

/// A stream's answer: a job when it falls back to polling a status, typed
/// turns when it has events or stages, raw events otherwise.
fn stream_answer(model: &Model, stream: &Stream) -> Answer {
    let event = if stream.events.is_empty() {
        quote!(sdk_runtime::sse::SseEvent)
    } else {
        let e = ident(&stream.event_type);
        quote!(crate::types::#e)
    };
    let fallback = (stream.fallback.as_ref()).map(|f| &model.route_of(f.route).1.returns);
    let (ret, finish) = match fallback {
        Some(Returns::Body(status)) => {
            let status = rust_type(status);
            return Answer::Job { event, status };
        }
        _ if !stream.events.is_empty() || stream.stages.is_some() => (
            quote!(sdk_runtime::Turn<#event>),
            quote!(Ok(self.client.turn(self.client.open_stream(call).await?))),
        ),
        _ => (
            quote!(sdk_runtime::Events),
            quote!(Ok(self.client.open_stream(call).await?)),
        ),
    };
    Answer::Awaited { ret, finish }
}

/// `ensure_…` of a create route that proves an ID exists: a create whose
/// 409 means already there, so either answer proves it.
fn ensure(model: &Model, e: &Existence) -> TokenStream {
    let (_, prover) = model.route(e.proven_by);
    let create = ident(&prover.name);
    let name = ident(&e.ensure);
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
