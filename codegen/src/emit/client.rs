//! `src/lib.rs` and `src/client.rs`: the crate root and the client.

use proc_macro2::TokenStream;
use quote::quote;

use super::docs::{doc, ident, inner_doc, source};
use crate::model::{Model, ScopeNeed, UNCLASSIFIED};

pub fn lib_rs(model: &Model) -> TokenStream {
    let client = ident(&model.api.client);
    let modules = model.services.iter().map(|s| {
        let m = ident(&s.module);
        quote!(pub mod #m;)
    });
    let handles = model.services.iter().map(|s| {
        let (m, h) = (ident(&s.module), ident(&s.handle_type));
        quote!(pub use #m::#h;)
    });
    let ids = model.api.ids.iter().map(|i| ident(&i.name));
    let existing = model.routes().any(|(_, r)| r.exists.is_some()).then(|| {
        quote!(
            pub use ids::Existing;
        )
    });
    let text = format!(
        "{}\n\n{}\n\n\
         Generated from `spec/{}/` by `cargo xtask codegen`; [`POLICY.md`](policy_tables) \
         beside this crate shows the whole policy as tables, and each method's docs list its \
         route's classes: timeout, retry, budget and the error classes it can end in.\n\n\
         {}\n\n\
         Or with every part given:\n\n\
         ```no_run\n\
         # async fn demo() -> Result<(), Box<dyn std::error::Error>> {{\n\
         {}\
         # Ok(())\n\
         # }}\n\
         ```",
        model.api.title,
        model.api.doc,
        model.api.name,
        from_env_example(model),
        example(model, &model.api.client),
    );
    let scope_ids = if model.api.headers.workspace.is_some() {
        quote!(AsWorkspace, TenantId, WorkspaceId)
    } else {
        quote!(TenantId)
    };
    let streams = (!model.streams.is_empty()).then(|| {
        quote!(
            pub use sdk_runtime::{Events, JobDone, JobProgress, JobUpdate, Turn, TurnUpdate};
        )
    });
    let module_doc = inner_doc(&text);
    quote! {
        #module_doc

        /// The whole policy as tables: `POLICY.md` beside this crate, generated from the
        /// same spec.
        #[doc = include_str!("../POLICY.md")]
        pub mod policy_tables {}

        pub mod client;
        pub mod error;
        pub mod ids;
        pub mod log;
        pub mod policy;
        pub mod types;
        #(#modules)*

        pub use client::{#client, Config};
        pub use error::{Error, ErrorClass};
        pub use ids::{#scope_ids, #(#ids),*};
        #existing
        #(#handles)*
        pub use sdk_runtime::{Created, InvalidId, OutcomeKind, Progress, RequestRef, RequestRefs};
        #streams
    }
}

/// The configuration of a policy whose linear retry the caller may tune
/// (the Core client's `retry_attempts` and `retry_backoff_seconds`); empty
/// for a policy without one.
#[derive(Default)]
struct RetryConfig {
    methods: TokenStream,
}

impl RetryConfig {
    fn of(model: &Model) -> RetryConfig {
        let Some((class, bounds)) = model
            .retries
            .iter()
            .find_map(|r| Some((r, r.configurable?)))
        else {
            return RetryConfig::default();
        };
        let (min_attempts, max_attempts, min_step) =
            (bounds.min_attempts, bounds.max_attempts, bounds.min_step);
        let crate::model::RetrySchedule::Linear { attempts, step } = class.schedule else {
            return RetryConfig::default();
        };
        let attempts_doc = doc(&format!(
            "Attempts in all, the first included, of retry class `{}` (default {attempts}, from {min_attempts} to {max_attempts}); \
             fewer or more is refused when the client is built.",
            class.name
        ));
        let backoff_doc = doc(&format!(
            "The step of retry class `{}`: the wait before retry `n` is `backoff × n` (default {}, at least {}); \
             less is refused when the client is built.",
            class.name,
            super::docs::duration_text(step),
            super::docs::duration_text(min_step)
        ));
        RetryConfig {
            methods: quote! {
                #attempts_doc
                pub fn retry_attempts(mut self, attempts: u32) -> Self {
                    self.runtime = self.runtime.retry_attempts(attempts);
                    self
                }

                #backoff_doc
                pub fn retry_backoff(mut self, backoff: std::time::Duration) -> Self {
                    self.runtime = self.runtime.retry_backoff(backoff);
                    self
                }
            },
        }
    }
}

/// The fleet's store URL in the config, for an API whose replicas can share
/// the throttle (a `fleet` section).
#[derive(Default)]
struct FleetConfig {
    method: TokenStream,
    from_env: TokenStream,
    env_doc: String,
}

impl FleetConfig {
    fn of(model: &Model) -> FleetConfig {
        let Some(fleet) = &model.fleet else {
            return FleetConfig {
                from_env: quote!(Ok(config)),
                ..FleetConfig::default()
            };
        };
        let env = &fleet.url_env;
        let method_doc = doc(&format!(
            "Share the throttle with the other replicas through the Redis at `url` \
             (`redis://host:port/db`): the budgets, the in-flight caps, Retry-After pauses, dark \
             features and the breaker's probe are kept by the whole fleet. A URL that cannot \
             work is refused when the client is built; an unreachable Redis is degraded mode \
             (each replica at its share) with the `{}` alert.{}",
            fleet.alert,
            if fleet.shared {
                " The policy requires it."
            } else {
                ""
            }
        ));
        let sentinel_doc = doc(
            "Share the throttle through the Redis primary that the Sentinels at `sentinels` \
             (`host:port` each) name as `master`, as [`redis_url`](Self::redis_url) does with \
             one server: a failover is followed to the promoted replica, and the fleet books \
             again what it sent (the replica may lack the last writes). The same as a \
             `redis+sentinel://host:port,host:port/<master>` URL.",
        );
        FleetConfig {
            method: quote! {
                #method_doc
                pub fn redis_url(mut self, url: impl Into<String>) -> Self {
                    self.runtime = self.runtime.redis_url(url);
                    #[cfg(feature = "redis")]
                    {
                        self.runtime = self.runtime.fleet_backend(sdk_fleet_redis::Redis);
                    }
                    self
                }

                #sentinel_doc
                pub fn redis_sentinel(self, master: &str, sentinels: &[&str]) -> Self {
                    let url = sdk_runtime::sentinel_url(master, sentinels);
                    self.redis_url(url)
                }
            },
            from_env: quote! {
                match std::env::var(#env) {
                    Ok(url) if !url.is_empty() => Ok(config.redis_url(url)),
                    _ => Ok(config),
                }
            },
            env_doc: format!(
                ", and `{env}` when set (several replicas; \
                 `redis+sentinel://host:port,host:port/<master>` for Sentinels)"
            ),
        }
    }
}

/// The production switch of `Config`, for an API that names its variable
/// (`auth.production_env`): in production a lane whose auth has not landed
/// is refused. Nothing for an API without one.
#[derive(Default)]
struct ProductionKnob {
    method: TokenStream,
    from_env: TokenStream,
    env_doc: String,
}

impl ProductionKnob {
    fn of(model: &Model) -> ProductionKnob {
        let Some(env) = &model.api.production_env else {
            return ProductionKnob::default();
        };
        let unauthenticated: Vec<String> = model
            .api
            .lanes
            .iter()
            .filter(|(_, keyed)| !keyed)
            .map(|(lane, _)| format!("`{lane}`"))
            .collect();
        let refused = if unauthenticated.is_empty() {
            "every lane presents the key today, so nothing is refused".to_owned()
        } else {
            format!(
                "the calls of a lane whose auth has not landed (`auth.lanes_authenticated`: {}) \
                 are refused unsent",
                unauthenticated.join(", ")
            )
        };
        let method_doc = doc(&format!("A production deployment (`{env}`): {refused}."));
        ProductionKnob {
            method: quote! {
                #method_doc
                pub fn production(mut self, production: bool) -> Self {
                    self.runtime = self.runtime.production(production);
                    self
                }
            },
            from_env: quote! {
                let config = config.production(sdk_runtime::env_flag(#env)?);
            },
            env_doc: format!(", `{env}` (`true` or `1` in production)"),
        }
    }
}

/// The crate root's first example: the client from the environment, one
/// call, and a `match` on the class of its error.
fn from_env_example(model: &Model) -> String {
    let krate = model.api.crate_name.replace('-', "_");
    let client = &model.api.client;
    let api = &model.api;
    // The taxonomy's first class: every API's error type has it.
    let class = model
        .rows
        .iter()
        .find(|r| !r.success)
        .map(|r| r.class)
        .unwrap_or(UNCLASSIFIED);
    let Some((service, route, ids)) = first_read(model) else {
        return String::new();
    };
    let args: Vec<String> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| format!("&{id}::parse(\"id-{}\")?", i + 1))
        .collect();
    let read = format!(
        "client.{}().{}({})",
        service.handle,
        route.name,
        args.join(", ")
    );
    let imports: String = ids.iter().map(|id| format!(", {id}")).collect();
    format!(
        "Built from the environment ([`Config::from_env`] reads `{}`, `{}` and `{}`), \
         one call, and its error matched on its class ([`ErrorClass`], one variant per class \
         of the taxonomy):\n\n\
         ```no_run\n\
         # async fn demo() -> Result<(), Box<dyn std::error::Error>> {{\n\
         use {krate}::{{{client}, Config, ErrorClass{imports}}};\n\n\
         let client = {client}::new(Config::from_env()?)?;\n\
         match {read}.await {{\n    \
             Ok(answer) => println!(\"{{answer:?}}\"),\n    \
             // `e.message()`: the spec's text for the class, for the UI.\n    \
             Err(e) if e.class() == ErrorClass::{} => eprintln!(\"{{:?}}\", e.message()),\n    \
             Err(e) => return Err(e.into()),\n\
         }}\n\
         # Ok(())\n\
         # }}\n\
         ```",
        api.origin_env,
        api.key_env,
        api.tenant_env,
        model.variant(class),
    )
}

/// A first read: a tenant GET without query or body whose path takes IDs
/// only, the fewest parameters first; with the ID types of its path.
fn first_read(model: &Model) -> Option<(&crate::model::Service, &crate::model::Route, Vec<&str>)> {
    let mut reads: Vec<(&crate::model::Service, &crate::model::Route, Vec<&str>)> = model
        .services
        .iter()
        .filter(|s| s.scope == ScopeNeed::Tenant)
        .flat_map(|s| s.routes.iter().map(move |r| (s, r)))
        .filter(|(_, r)| {
            r.scope == ScopeNeed::Tenant
                && r.method == crate::model::Method::Get
                && r.query.is_empty()
                && r.body.is_none()
                && !matches!(r.returns, crate::model::Returns::Stream(_))
        })
        .filter_map(|(s, r)| {
            let ids = r
                .path_params
                .iter()
                .map(|(_, t)| match t {
                    crate::model::TypeExpr::Id(name) => Some(name.as_str()),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?;
            Some((s, r, ids))
        })
        .collect();
    reads.sort_by_key(|(_, _, ids)| ids.len());
    reads.into_iter().next()
}

/// The crate doc's example: building the client, a first read (the one
/// taking the fewest IDs, see `first_read`), and a workspace handle when
/// the API has one.
fn example(model: &Model, client: &str) -> String {
    let krate = model.api.crate_name.replace('-', "_");
    let workspace = model
        .services
        .iter()
        .find(|s| s.scope == ScopeNeed::Workspace);
    let first = first_read(model);
    let ids_used: Vec<&str> = first
        .as_ref()
        .map(|(_, _, ids)| ids.clone())
        .unwrap_or_default();
    let read = first.as_ref().map(|(s, r, ids)| {
        let args: Vec<String> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| format!("&{id}::parse(\"id-{}\")?", i + 1))
            .collect();
        format!(
            "let first = client.{}().{}({}).await?;\n",
            s.handle,
            r.name,
            args.join(", ")
        )
    });
    let mut text = format!(
        "use {krate}::{{{client}, Config, TenantId{}{}}};\n\n\
         let tenant = TenantId::parse(\"tenant-1\")?;\n\
         let client = {client}::new(Config::new(\"http://127.0.0.1:8080\", \"secret\", tenant))?;\n",
        ids_used
            .iter()
            .map(|id| format!(", {id}"))
            .collect::<String>(),
        if workspace.is_some() {
            ", WorkspaceId"
        } else {
            ""
        }
    );
    text.push_str(read.as_deref().unwrap_or("let first = ();\n"));
    match workspace {
        Some(s) => text.push_str(&format!(
            "let workspace = WorkspaceId::parse(\"ws-7\")?;\n\
             let scoped = client.{}(&workspace);\n\
             # let _ = (first, scoped);\n",
            s.handle
        )),
        None => text.push_str("# let _ = first;\n"),
    }
    text
}

/// `src/client.rs`: the `Config` the caller fills and the client it builds.
pub fn client_rs(model: &Model) -> TokenStream {
    let knobs = Knobs::of(model);
    let module_doc = inner_doc(&format!(
        "The {} client. It cannot be built without a [`TenantId`], and every call goes through \
         the runtime pipeline, the one place that assembles headers.",
        model.api.title
    ));
    let scope_imports = scope_imports(model);
    let config = config_type(model);
    let config_impl = config_impl(model, &knobs);
    let config_debug = config_debug();
    let client = client_type(model);
    quote! {
        #module_doc

        use std::fmt;

        use sdk_runtime::alerts::AlertSink;
        use sdk_runtime::{Client, ClientConfig, ConfigError, Policy, RequestRefs};

        #scope_imports
        use crate::policy::POLICY;

        #config
        #config_impl
        #config_debug
        #client
    }
}

/// The knobs of `Config` whose presence depends on the spec: each is empty
/// for an API whose spec has nothing for it to set.
struct Knobs {
    retry: RetryConfig,
    fleet: FleetConfig,
    production: ProductionKnob,
    warm: WarmUpKnob,
}

impl Knobs {
    /// The knobs `model`'s spec calls for.
    fn of(model: &Model) -> Self {
        Knobs {
            retry: RetryConfig::of(model),
            fleet: FleetConfig::of(model),
            production: ProductionKnob::of(model),
            warm: WarmUpKnob::of(model),
        }
    }
}

/// The ids `client.rs` imports: the tenant always, the scope ids the API's
/// headers call for.
fn scope_imports(model: &Model) -> TokenStream {
    let workspace = model.api.headers.workspace.is_some();
    let pipeline = model.api.headers.pipeline.is_some();
    match (workspace, pipeline) {
        (true, true) => quote!(
            use crate::ids::{AsWorkspace, PipelineId, TenantId};
        ),
        (true, false) => quote!(
            use crate::ids::{AsWorkspace, TenantId};
        ),
        (false, true) => quote!(
            use crate::ids::{PipelineId, TenantId};
        ),
        (false, false) => quote!(
            use crate::ids::TenantId;
        ),
    }
}

/// The `Config` struct: the runtime's configuration, with the tenant as
/// this API's type.
fn config_type(model: &Model) -> TokenStream {
    let config_doc = doc(&format!(
        "Where and as whom the client talks to the {}: origin, API key and tenant, all required.",
        model.api.title
    ));
    quote! {
        #config_doc
        #[derive(Clone)]
        pub struct Config {
            runtime: ClientConfig,
            tenant: TenantId,
        }
    }
}

/// `Config`'s constructors and setters: the required parts, then each knob
/// the spec calls for, each set on the runtime's configuration.
fn config_impl(model: &Model, knobs: &Knobs) -> TokenStream {
    let Knobs {
        retry,
        fleet,
        production,
        warm,
    } = knobs;
    let (retry_methods, fleet_method, prod_method, warm_method) = (
        &retry.methods,
        &fleet.method,
        &production.method,
        &warm.method,
    );
    let from_env = config_from_env(model, knobs);
    quote! {
        impl Config {
            pub fn new(base_url: impl Into<String>, api_key: impl Into<String>, tenant: TenantId) -> Self {
                let runtime = ClientConfig::new(base_url, api_key, tenant.id().clone());
                Self { runtime, tenant }
            }

            #retry_methods

            #fleet_method

            #prod_method

            /// Where the spec's alerts go (`POLICY.md`, Alerts); by default a `warn` log event.
            pub fn alerts(mut self, sink: impl AlertSink) -> Self {
                self.runtime = self.runtime.alerts(sink);
                self
            }

            #warm_method

            /// How long an idle pooled connection is kept (the spec's `connections.pool_idle` by
            /// default): below the keep-alive of a proxy in front that closes sooner. Below the
            /// spec's `pool_idle_floor` the client is refused.
            pub fn pool_idle(mut self, idle: std::time::Duration) -> Self {
                self.runtime = self.runtime.pool_idle(idle);
                self
            }

            #from_env

            pub fn tenant(&self) -> &TenantId {
                &self.tenant
            }
        }
    }
}

/// `Config::from_env`: the API's variables, the knobs' own after them.
fn config_from_env(model: &Model, knobs: &Knobs) -> TokenStream {
    let (url_env, key_env, tenant_env) = (
        &model.api.origin_env,
        &model.api.key_env,
        &model.api.tenant_env,
    );
    let (production, fleet) = (&knobs.production, &knobs.fleet);
    let from_env_doc = doc(&format!(
        "Reads `{url_env}`, `{key_env}` and `{tenant_env}`{}{}.",
        production.env_doc, fleet.env_doc
    ));
    let (prod_from_env, fleet_from_env) = (&production.from_env, &fleet.from_env);
    quote! {
        #from_env_doc
        pub fn from_env() -> Result<Self, ConfigError> {
            let tenant = TenantId::parse(&sdk_runtime::env_var(#tenant_env)?)
                .map_err(ConfigError::Tenant)?;
            let config = Self::new(sdk_runtime::env_var(#url_env)?, sdk_runtime::env_var(#key_env)?, tenant);
            #prod_from_env
            #fleet_from_env
        }
    }
}

/// `Config`'s `Debug`: the runtime configuration's, which never shows the API key.
fn config_debug() -> TokenStream {
    quote! {
        impl fmt::Debug for Config {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.runtime, f)
            }
        }
    }
}

/// The client type: its construction, its variants and one accessor per service.
fn client_type(model: &Model) -> TokenStream {
    let client = ident(&model.api.client);
    // The breaker only for an API that has one.
    let (shared, underneath) = match model.breaker {
        Some(_) => ("the breaker, ", "breaker state, "),
        None => ("", ""),
    };
    let client_doc = doc(&format!(
        "The {} client. Cheap to clone: clones share {shared}the throttle and the telemetry.",
        model.api.title
    ));
    let runtime_doc = doc(&format!(
        "The runtime underneath: {underneath}throttle, telemetry."
    ));
    let construction = client_construction();
    let for_queue = deferring_server_waits(model);
    let accessors = model.services.iter().map(|s| service_accessor(model, s));
    let modes = budget_modes(model);
    quote! {
        #client_doc
        #[derive(Clone)]
        pub struct #client {
            client: Client,
        }

        impl #client {
            #construction

            /// The same client, noting the request ID of every call that reaches
            /// the server in `refs`, while every method returns what it always returns:
            /// `let refs = RequestRefs::new(); client.noting_requests(&refs)...; refs.take()`.
            pub fn noting_requests(&self, refs: &RequestRefs) -> Self {
                Self { client: self.client.noting_requests(refs) }
            }

            #for_queue

            #runtime_doc
            pub fn runtime(&self) -> &Client {
                &self.client
            }

            #(#accessors)*

            #(#modes)*
        }
    }
}

/// `new` and `with_policy`: the config handed to the runtime.
fn client_construction() -> TokenStream {
    quote! {
        /// A client of the spec's policy (`POLICY.md`) built from `config`: an invalid
        /// configuration is refused here, before any request is sent.
        pub fn new(config: Config) -> Result<Self, ConfigError> {
            Self::with_policy(config, &POLICY)
        }

        /// A client running `policy` instead of the spec's: an override, or the
        /// spec's own policy with compressed durations for tests. An override
        /// that changes the scope headers, the ID rules, the reserved tenants or
        /// the route table is refused.
        pub fn with_policy(config: Config, policy: &'static Policy) -> Result<Self, ConfigError> {
            let client = Client::with_override(&POLICY, policy, config.runtime)?;
            Ok(Self { client })
        }
    }
}

/// The replay queue's variant of the client, for an API with a replay queue.
fn deferring_server_waits(model: &Model) -> Option<TokenStream> {
    model.replay.is_some().then(|| {
        quote! {
            /// The same client, for the replay queue: a wait the platform asks for
            /// (`Retry-After`) ends the call with `Error::retry_after()` instead of
            /// being slept out inside it; the queue re-schedules the job.
            pub fn deferring_server_waits(&self) -> Self {
                Self { client: self.client.deferring_server_waits() }
            }
        }
    })
}

/// One variant of the client per budget a caller may opt into.
fn budget_modes(model: &Model) -> impl Iterator<Item = TokenStream> + '_ {
    model.caller_budgets().map(|(index, b)| {
        let method = ident(b.name);
        let constant = ident(&model.constants.budgets[index.get()]);
        let text = doc(&format!(
            "The same client, every call of it also drawing from the `{}` budget: {} (policy {}).",
            b.name,
            b.doc.trim().trim_end_matches('.'),
            super::docs::source(&b.source)
        ));
        quote! {
            #text
            pub fn #method(&self) -> Self {
                Self { client: self.client.within_budget(crate::policy::budget::#constant) }
            }
        }
    })
}

/// The accessor of a service's handle: it takes the scope ids the
/// service's calls carry, and says so in its doc.
fn service_accessor(model: &Model, s: &crate::model::Service) -> TokenStream {
    let (module, handle) = (ident(&s.module), ident(&s.handle_type));
    let method = ident(&s.handle);
    let mut text = format!("Calls of `{}`.", s.name);
    let (mut params, mut args) = (Vec::new(), vec![quote!(&self.client)]);
    if s.scope == ScopeNeed::Workspace {
        text = format!(
            "Calls of `{}`. They exist only behind a workspace: each one carries `{}`{}.",
            s.name,
            model.api.headers.workspace.unwrap_or_default(),
            super::docs::workspace_section(model)
        );
        params.push(quote!(workspace: &'c impl AsWorkspace));
        args.push(quote!(workspace.workspace_id()));
    }
    if s.carries_pipeline() {
        text.push_str(&format!(
            " They exist only behind a pipeline id: its calls carry `{}`{}.",
            model.api.headers.pipeline.unwrap_or_default(),
            super::docs::pipeline_section(model)
        ));
        params.push(quote!(pipeline: &'c PipelineId));
        args.push(quote!(pipeline.id()));
    }
    let text = doc(&text);
    if params.is_empty() {
        return quote! {
            #text
            pub fn #method(&self) -> crate::#module::#handle<'_> {
                crate::#module::#handle::new(&self.client)
            }
        };
    }
    quote! {
        #text
        pub fn #method<'c>(&'c self, #(#params),*) -> crate::#module::#handle<'c> {
            crate::#module::#handle::new(#(#args),*)
        }
    }
}

/// The `warm_up` knob of `Config`, for an API whose spec has warm-up calls;
/// nothing for one without (a knob that could do nothing is not offered).
#[derive(Default)]
struct WarmUpKnob {
    method: TokenStream,
}

impl WarmUpKnob {
    fn of(model: &Model) -> Self {
        let calls = &model.warm_up;
        if calls.is_empty() {
            return Self::default();
        }
        let mut sources: Vec<String> = calls.iter().map(|c| source(&c.source)).collect();
        sources.dedup();
        let method_doc = doc(&format!(
            "Fire the spec's warm-up calls once after every breaker close (policy {}).",
            sources.join(", ")
        ));
        Self {
            method: quote! {
                #method_doc
                pub fn warm_up(mut self, enabled: bool) -> Self {
                    self.runtime = self.runtime.warm_up(enabled);
                    self
                }
            },
        }
    }
}
