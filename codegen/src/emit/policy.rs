//! `src/policy.rs`: the whole policy as one `static`, plus named indices;
//! or the same as a policy module of its own, routes included, for a crate
//! that builds on `sdk-policy` directly (the runtime's test fixture).

use proc_macro2::TokenStream;
use quote::quote;
use sdk_policy::bake::{Bake, Names, Part};
use sdk_policy::{BudgetIx, RetryIx, RouteIx, StreamIx, TimeoutIx};

use super::docs::{doc, ident, inner_doc, int, source};
use crate::model::{Model, Route, Service};

/// Where the emitted policy lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Home {
    /// `src/policy.rs` of a generated crate: the routes are its services'
    /// statics, the log lines its `log` module's, the runtime `sdk_runtime`.
    Crate,
    /// A policy module alone, inside a crate that names `sdk_policy` itself:
    /// the routes are statics of the module, the log lines its parent's `LINES`.
    Module,
}

/// How the generated code names what a baked value points to: each route's
/// static, the named indices of the policy, and (in `POLICY` itself) the
/// tables kept in statics of their own.
pub(crate) struct CrateNames<'m> {
    pub model: &'m Model,
    /// Whether the tables and the breaker's routes are the statics of the policy.
    pub statics: bool,
    pub home: Home,
}

impl Names for CrateNames<'_> {
    fn endpoint(&self, route: RouteIx) -> TokenStream {
        let (service, route) = self
            .model
            .routes()
            .nth(route.get())
            .expect("the policy's routes are the model's");
        match self.home {
            Home::Crate => endpoint_path(service, route),
            Home::Module => {
                let name = ident(&route.constant);
                quote!(&#name)
            }
        }
    }

    fn timeout(&self, index: TimeoutIx) -> TokenStream {
        let name = ident(&self.model.constants.timeouts[index.get()]);
        quote!(timeout::#name)
    }

    fn retry(&self, index: RetryIx) -> TokenStream {
        let name = ident(&self.model.constants.retries[index.get()]);
        quote!(retry::#name)
    }

    fn budget(&self, index: BudgetIx) -> TokenStream {
        let name = ident(&self.model.constants.budgets[index.get()]);
        quote!(budget::#name)
    }

    fn stream(&self, index: StreamIx) -> TokenStream {
        let name = ident(&self.model.constants.streams[index.get()]);
        quote!(stream::#name)
    }

    fn part(&self, part: Part) -> Option<TokenStream> {
        self.statics.then(|| match part {
            Part::Timeouts => quote!(&TIMEOUTS),
            Part::Retries => quote!(&RETRIES),
            Part::Budgets => quote!(&BUDGETS),
            Part::Routes => quote!(&ENDPOINTS),
            Part::Probe => quote!(PROBE),
            Part::Canary => quote!(CANARY),
        })
    }

    fn log_lines(&self) -> TokenStream {
        match self.home {
            Home::Crate => quote!(&crate::log::LINES),
            Home::Module => quote!(&super::LINES),
        }
    }
}

/// `src/policy.rs`: the named indices, the tables and the baked `POLICY`.
pub fn policy_rs(model: &Model) -> TokenStream {
    let module_doc = inner_doc(&format!(
        "The {} policy as data, lowered from `spec/{}/`. The runtime executes it; nothing here is code.",
        model.api.title, model.api.name
    ));
    let imports = quote! {
        use sdk_runtime::Endpoint;
        use sdk_runtime::log::LogNames;
        use sdk_runtime::policy::*;
    };
    let documents = openapi_documents(model);
    let policy_doc = policy_doc(model, &format!("[`crate::{}`]", model.api.client));
    policy_items(
        model,
        Home::Crate,
        module_doc,
        imports,
        documents,
        policy_doc,
    )
}

/// A policy module alone, lowered from the spec in `dir`: the policy of
/// `src/policy.rs` with its routes' statics beside it and no client around
/// it. Its parent holds `LINES`, the log lines the policy writes to.
pub fn policy_module(model: &Model, dir: &str) -> TokenStream {
    let module_doc = inner_doc(&format!(
        "The {} policy as data, lowered from `{dir}/`. The runtime executes it; nothing here is code.",
        model.api.title
    ));
    let imports = quote! {
        use sdk_policy::log::LogNames;
        use sdk_policy::policy::*;
        use sdk_policy::{Endpoint, Lane, Method, ScopeNeed};
    };
    let routes = (model.routes()).map(|(_, r)| endpoint(model, r, Home::Module));
    let routes = quote!(#(#routes)*);
    let policy_doc = policy_doc(model, "the code around this module");
    policy_items(model, Home::Module, module_doc, imports, routes, policy_doc)
}

/// What both homes hold: the named indices, the tables, the breaker's
/// routes and `POLICY`, around the items only one of them has.
fn policy_items(
    model: &Model,
    home: Home,
    module_doc: TokenStream,
    imports: TokenStream,
    own: TokenStream,
    policy_doc: TokenStream,
) -> TokenStream {
    let policy = model.policy();
    let names = CrateNames {
        model,
        statics: true,
        home,
    };
    let index_modules = index_modules(model, home);
    let tables = tables(&policy, &names);
    let breaker_statics = breaker_statics(&policy, &names);
    let policy = policy.bake(&names);
    quote! {
        #module_doc

        #imports

        #(#index_modules)*

        #tables

        #own

        #breaker_statics

        #policy_doc
        pub static POLICY: Policy = #policy;
    }
}

/// The statics the policy's classes and routes are indexed into.
fn tables(policy: &sdk_policy::Policy, names: &CrateNames) -> TokenStream {
    let table = |items: Vec<TokenStream>| quote!([#(#items),*]);
    let timeouts = table(policy.timeouts.iter().map(|t| t.bake(names)).collect());
    let retries = table(policy.retries.iter().map(|r| r.bake(names)).collect());
    let budgets = table(
        (policy.throttle.budgets.iter())
            .map(|b| b.bake(names))
            .collect(),
    );
    let endpoints = table(
        policy
            .routes
            .iter()
            .map(|e| names.endpoint(e.route))
            .collect(),
    );
    let n_timeouts = int(policy.timeouts.len() as u64);
    let n_retries = int(policy.retries.len() as u64);
    let n_budgets = int(policy.throttle.budgets.len() as u64);
    let n_endpoints = int(policy.routes.len() as u64);
    quote! {
        /// Every timeout class, indexed by [`timeout`].
        pub static TIMEOUTS: [TimeoutClass; #n_timeouts] = #timeouts;

        /// Every retry class, indexed by [`retry`].
        pub static RETRIES: [RetryClass; #n_retries] = #retries;

        /// Every throttle budget, indexed by [`budget`].
        pub static BUDGETS: [BudgetPolicy; #n_budgets] = #budgets;

        /// Every route of the API, in spec order.
        pub static ENDPOINTS: [&Endpoint; #n_endpoints] = #endpoints;
    }
}

/// Where each service serves its own OpenAPI document, and the document
/// generated from the spec beside the crate.
fn openapi_documents(model: &Model) -> TokenStream {
    let documents: Vec<TokenStream> = model
        .services
        .iter()
        .filter_map(|s| {
            let (name, path) = (&s.name, s.openapi.as_ref()?);
            Some(quote!((#name, #path)))
        })
        .collect();
    let n_documents = int(documents.len() as u64);
    quote! {
        /// Where each service serves its own OpenAPI document on the platform
        /// (`services/*.yaml openapi`): `(service, path)`.
        pub static OPENAPI_DOCUMENTS: [(&str, &str); #n_documents] = [#(#documents),*];

        /// The OpenAPI 3.1 document generated from the same spec, beside this crate.
        pub const OPENAPI: &str = include_str!("../openapi.json");
    }
}

/// The breaker's probe and canary routes, for an API with a breaker.
fn breaker_statics(policy: &sdk_policy::Policy, names: &CrateNames) -> Option<TokenStream> {
    policy.breaker.as_ref().map(|b| {
        let (probe, canary) = (
            names.endpoint(b.probe.route),
            names.endpoint(b.canary.route),
        );
        quote! {
            /// The public liveness route the open breaker probes.
            pub static PROBE: &Endpoint = #probe;

            /// The authenticated read sent alone while the breaker is half-open.
            pub static CANARY: &Endpoint = #canary;
        }
    })
}

/// The doc of `POLICY`: who hands it to the runtime, and the sources of
/// its deadline, breaker and throttle.
fn policy_doc(model: &Model, handed_by: &str) -> TokenStream {
    doc(&format!(
        "The whole policy, handed to the runtime by {handed_by}.\n\n\
         Deadline: policy {}. Breaker: {}. Throttle: policy {}.",
        source(&model.deadline_source),
        model
            .breaker
            .as_ref()
            .map_or("none".to_string(), |b| format!(
                "policy {}",
                source(&b.source)
            )),
        source(&model.throttle.source)
    ))
}

/// `pub mod timeout { … }` and its kin: the named index of every item of a table.
fn index_modules(model: &Model, home: Home) -> [TokenStream; 4] {
    [
        (
            "timeout",
            "Timeout classes, by name.",
            names(
                home,
                "TimeoutIx",
                (model.constants.timeouts.iter()).zip(model.timeouts.iter().map(|t| &t.doc)),
            ),
        ),
        (
            "retry",
            "Retry classes, by name.",
            names(
                home,
                "RetryIx",
                (model.constants.retries.iter()).zip(model.retries.iter().map(|r| &r.doc)),
            ),
        ),
        (
            "budget",
            "Throttle budgets, by name.",
            names(
                home,
                "BudgetIx",
                (model.constants.budgets.iter()).zip(model.throttle.budgets.iter().map(|b| &b.doc)),
            ),
        ),
        (
            "stream",
            "Stream contracts, by name.",
            names(
                home,
                "StreamIx",
                (model.constants.streams.iter()).zip(model.streams.iter().map(|s| &s.doc)),
            ),
        ),
    ]
    .map(|(module, text, consts)| {
        let module = ident(module);
        let text = format!(" {text}");
        quote! {
            #[doc = #text]
            pub mod #module {
                #consts
            }
        }
    })
}

/// The descriptor of `r`, at position `route` of the policy's routes.
pub(super) fn endpoint(model: &Model, r: &Route, home: Home) -> TokenStream {
    let name = ident(&r.constant);
    let text = format!(" `{} {}`", r.method.as_str(), r.path);
    let names = CrateNames {
        model,
        statics: false,
        home,
    };
    let value = r.endpoint.bake(&names);
    quote! {
        #[doc = #text]
        pub static #name: Endpoint = #value;
    }
}

fn endpoint_path(service: &Service, route: &Route) -> TokenStream {
    let (module, name) = (ident(&service.module), ident(&route.constant));
    quote!(&crate::#module::#name)
}

/// `pub const NAME: TimeoutIx = TimeoutIx::new(i);` for each named item, typed by its table.
fn names<'a>(
    home: Home,
    ty: &str,
    items: impl Iterator<Item = (&'a String, &'a String)>,
) -> TokenStream {
    let ty = ident(ty);
    let consts = items.enumerate().map(|(i, (name, text))| {
        let docs = doc(text);
        let name = ident(name);
        let i = int(i as u64);
        quote! {
            #docs
            pub const #name: #ty = #ty::new(#i);
        }
    });
    let consts: Vec<_> = consts.collect();
    if consts.is_empty() {
        return TokenStream::new();
    }
    let vocabulary = match home {
        Home::Crate => quote!(sdk_runtime::policy),
        Home::Module => quote!(sdk_policy::policy),
    };
    quote! {
        use #vocabulary::#ty;

        #(#consts)*
    }
}
