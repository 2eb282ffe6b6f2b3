//! `src/policy.rs`: the whole policy as one `static`, plus named indices.

use proc_macro2::{Literal, TokenStream};
use quote::quote;

use super::docs::{doc, duration, ident, inner_doc, int, option, screaming, source};
use crate::model::{Conflict, IdPattern, Model, OutcomeKind, RetrySchedule};

/// `ids.pattern` as the byte ranges the runtime checks: `(b'a', b'z')`.
fn id_pattern(p: &IdPattern) -> TokenStream {
    let ranges = |class: &[(u8, u8)]| {
        let items = class.iter().map(|&(lo, hi)| {
            let (lo, hi) = (Literal::byte_character(lo), Literal::byte_character(hi));
            quote!((#lo, #hi))
        });
        quote!(&[#(#items),*])
    };
    let (text, first, rest) = (&p.text, ranges(&p.first), ranges(&p.rest));
    let (min_len, max_len) = (int(p.min_len as u64), int(p.max_len as u64));
    quote!(IdPattern {
        text: #text,
        first: #first,
        rest: #rest,
        min_len: #min_len,
        max_len: #max_len,
    })
}

pub fn policy_rs(model: &Model) -> TokenStream {
    let api = &model.api.name;
    let h = &model.api.headers;
    let (auth, tenant, request_id) = (&h.authorization, &h.tenant, &h.request_id);
    let retry_after = &h.retry_after;
    let auth_scheme = &h.auth_scheme;
    let workspace = option(h.workspace.as_ref(), |w| quote!(#w));
    let pipeline = option(h.pipeline.as_ref(), |p| quote!(#p));
    let reserved = &model.api.reserved_tenants;
    let opaque = model.api.ids.iter().filter(|i| i.opaque).map(|i| &i.name);
    let opaque_max_len = int(model.api.opaque_max_len);
    let id_pattern = id_pattern(&model.api.id_pattern);
    let pool_idle = duration(model.pool_idle);
    let pool_idle_floor = duration(model.pool_idle_floor);
    let keep_alive_margin = option(model.keep_alive_margin.as_ref(), |m| duration(*m));
    let fresh_after = &model.fresh_after;
    let log_target = &model.log.target;
    let log_path_fields = model
        .log
        .path_fields
        .iter()
        .map(|(field, names)| quote!((#field, &[#(#names),*])));
    let m = &model.metrics;
    let (requests, duration_metric, alerts_metric, rate_limited) =
        (&m.requests, &m.duration, &m.alerts, &m.rate_limited);
    let text = |s: &Option<String>| option(s.as_ref(), |s| quote!(#s));
    let (circuit_state, circuit_open, sse_fallback, sse_buffered) = (
        text(&m.circuit_state),
        text(&m.circuit_open_seconds),
        text(&m.sse_fallback),
        text(&m.sse_buffered),
    );
    let fallbacks_sustained = option(
        model.fallbacks_sustained.as_ref(),
        |(at_least, within, alert)| {
            let (at_least, within) = (int(u64::from(*at_least)), duration(*within));
            quote!((AlertRate { at_least: #at_least, within: #within }, #alert))
        },
    );
    let buffering = option(model.buffering.as_ref(), |b| {
        let (min, confirm, alert) = (b.min_events, b.confirm_after, &b.alert);
        let (burst, silent) = (duration(b.burst), duration(b.silent_for));
        quote!(BufferingRule {
            min_events: #min,
            burst: #burst,
            silent_for: #silent,
            confirm_after: #confirm,
            alert: #alert,
        })
    });
    let l = &model.limits;
    let (error_body, detail, sse_line, sse_event) = (
        int(l.error_body),
        int(l.detail),
        int(l.sse_line),
        int(l.sse_event),
    );
    let timeouts = model.timeouts.iter().map(|t| {
        let name = &t.name;
        let per_attempt = duration(t.per_attempt);
        let deploy = option(t.deploy_suspected, duration);
        quote!(TimeoutClass { name: #name, per_attempt: #per_attempt, deploy_suspected: #deploy })
    });
    let retries = model.retries.iter().map(|r| {
        let name = &r.name;
        let schedule = schedule(&r.schedule);
        let configurable = option(r.configurable, |b| {
            let (min, max, step) = (
                int(b.min_attempts),
                int(b.max_attempts),
                duration(b.min_step),
            );
            quote!(RetryBounds { min_attempts: #min, max_attempts: #max, min_step: #step })
        });
        quote!(RetryClass { name: #name, schedule: #schedule, configurable: #configurable })
    });
    let budgets = model.throttle.budgets.iter().map(|b| {
        let name = &b.name;
        let max = option(b.max_in_flight, |v| {
            let v = int(v);
            quote!(#v)
        });
        let per_minute = option(b.per_minute, |v| {
            let v = int(v);
            quote!(#v)
        });
        quote!(BudgetPolicy { name: #name, max_in_flight: #max, per_minute: #per_minute })
    });
    let details = model.details.iter().map(|d| {
        let name = &d.name;
        let contains = &d.contains;
        quote!(DetailSet { name: #name, contains: &[#(#contains),*] })
    });
    let rows = model.rows.iter().enumerate().map(|(index, r)| {
        let (row, class, action) = (&r.row, &r.class, &r.action);
        let index = int(index as u64);
        let success = r.class == "success";
        let outcome = outcome(r.outcome);
        let status = option(r.status, |(lo, hi)| {
            let (lo, hi) = (int(lo), int(hi));
            quote!((#lo, #hi))
        });
        let detail = option(r.detail, |d| {
            let d = int(d as u64);
            quote!(DetailIx::new(#d))
        });
        let retry_after = option(r.retry_after, |b| quote!(#b));
        let conflict = option(r.conflict, conflict);
        let retry = option(r.retry, |i| {
            let name = ident(&screaming(&model.retries[i].name));
            quote!(retry::#name)
        });
        let feeds = r.feeds_breaker;
        let unknown = r.outcome_unknown;
        let replay = row_replay(r.replay);
        let unknown_message = option(model.unknown_outcome.as_ref().filter(|_| unknown), |m| {
            let copy = &m.copy;
            quote!(#copy)
        });
        let outside = r.alert_outside_deploy;
        let feature_state = option(r.feature_state, |i| {
            let name = &model.states[i].name;
            quote!(#name)
        });
        let remember = option(r.remember_for, duration);
        let escalate = option(r.escalate_to, |i| {
            let i = int(i as u64);
            quote!(RowIx::new(#i))
        });
        let alert = option(r.alert.as_ref(), |a| quote!(#a));
        let keyless = option(r.keyless, |b| quote!(#b));
        let routes = option(r.routes.as_ref(), |list| {
            let routes = list.iter().map(|r| {
                let (s, r) = model.route(*r);
                endpoint_path(s, &r.name)
            });
            quote!(&[#(#routes),*])
        });
        let message = option(model.messages.iter().find(|m| m.class == r.class), |m| {
            let copy = &m.copy;
            quote!(#copy)
        });
        quote! {
            TaxonomyRow {
                index: RowIx::new(#index),
                row: #row,
                matches: RowMatch {
                    outcome: #outcome,
                    status: #status,
                    detail: #detail,
                    retry_after: #retry_after,
                    conflict: #conflict,
                    keyless: #keyless,
                    routes: #routes,
                },
                class: #class,
                success: #success,
                retry: #retry,
                feeds_breaker: #feeds,
                outcome_unknown: #unknown,
                alert: #alert,
                alert_outside_deploy: #outside,
                feature_state: #feature_state,
                remember_for: #remember,
                escalate_to: #escalate,
                replay: #replay,
                action: #action,
                message: #message,
                unknown_message: #unknown_message,
            }
        }
    });
    let streams = model.streams.iter().map(|s| {
        let name = &s.name;
        let watchdog = duration(s.watchdog);
        let keepalive = option(s.keepalive, duration);
        let ceiling = option(s.ceiling, duration);
        let resync = s.resync_after_reconnect;
        let resend = s.resend;
        let ends = s.ends_with_terminal;
        let first = option(s.first_event.as_ref(), |e| quote!(#e));
        let (error_event, timeout_event) = (&s.error_event, &s.timeout_event);
        let terminal = &s.terminal_events;
        let fallback = match (s.fallback, &s.status) {
            (Some(f), Some(read)) => {
                let (service, route) = model.route(f);
                let route = endpoint_path(service, &route.name);
                let field = &read.field;
                let completed = &read.completed;
                let failed = &read.failed;
                let error_field = option(read.error_field.as_ref(), |e| quote!(#e));
                let reopen = read.reopen_after;
                quote!(Some(StreamFallback {
                    route: #route,
                    status_field: #field,
                    completed: &[#(#completed),*],
                    failed: &[#(#failed),*],
                    error_field: #error_field,
                    reopen_after: #reopen,
                }))
            }
            _ => quote!(None),
        };
        let stages = option(s.stages.as_ref(), |g| {
            let (event, stage, status) = (&g.event, &g.stage_field, &g.status_field);
            let (failed, closed) = (&g.failed, &g.fail_closed);
            let detail = option(g.detail_field.as_ref(), |d| quote!(#d));
            let feature = &g.feature;
            quote!(StagePolicy {
                event: #event,
                stage_field: #stage,
                status_field: #status,
                failed: &[#(#failed),*],
                fail_closed: &[#(#closed),*],
                detail_field: #detail,
                feature: #feature,
            })
        });
        let lost = option(s.lost_copy.as_ref(), |c| quote!(#c));
        quote! {
            StreamPolicy {
                name: #name,
                watchdog: #watchdog,
                keepalive: #keepalive,
                ceiling: #ceiling,
                resync_after_reconnect: #resync,
                resend: #resend,
                ends_with_terminal: #ends,
                error_event: #error_event,
                timeout_event: #timeout_event,
                first_event: #first,
                terminal_events: &[#(#terminal),*],
                fallback: #fallback,
                stages: #stages,
                lost_copy: #lost,
            }
        }
    });
    let states = model.states.iter().map(|s| {
        let name = &s.name;
        let copy = option(s.copy.as_ref(), |c| quote!(#c));
        let when = ident(&format!("{:?}", s.when));
        quote!(FeatureStateCopy { state: #name, copy: #copy, when: StateTrigger::#when })
    });
    let messages = model.messages.iter().map(|m| {
        let (class, copy) = (&m.class, &m.copy);
        quote!(ClassMessage { class: #class, copy: #copy })
    });
    let breaker = option(model.breaker.as_ref(), |b| breaker(model, b));
    let replay = option(model.replay.as_ref(), |r| replay(model, r));
    let fleet = option(model.fleet.as_ref(), |f| fleet(model, f));
    let breaker_statics = model.breaker.as_ref().map(|b| {
        let (probe_s, probe_r) = model.route(b.probe);
        let (canary_s, canary_r) = model.route(b.canary);
        let probe = endpoint_path(probe_s, &probe_r.name);
        let canary = endpoint_path(canary_s, &canary_r.name);
        quote! {
            /// The public liveness route the open breaker probes.
            pub static PROBE: &Endpoint = #probe;

            /// The authenticated read sent alone while the breaker is half-open.
            pub static CANARY: &Endpoint = #canary;
        }
    });
    let t = &model.throttle;
    let (max_in_flight, per_second, hot) = (
        int(t.max_in_flight),
        int(t.per_second),
        int(t.polling_hot_factor),
    );
    let poll_interval = duration(t.polling_interval);
    let poll_floor = duration(t.polling_floor);
    let deadline = duration(model.deadline);
    let n_timeouts = int(model.timeouts.len() as u64);
    let n_retries = int(model.retries.len() as u64);
    let n_budgets = int(model.throttle.budgets.len() as u64);
    let n_endpoints = int(model.routes().count() as u64);
    let documents: Vec<TokenStream> = model
        .services
        .iter()
        .filter_map(|s| {
            let (name, path) = (&s.name, s.openapi.as_ref()?);
            Some(quote!((#name, #path)))
        })
        .collect();
    let n_documents = int(documents.len() as u64);
    let endpoints = model.routes().map(|(s, r)| {
        let module = ident(&super::services::module_name(s));
        let name = ident(&screaming(&r.name));
        quote!(&crate::#module::#name)
    });
    let index_modules = [
        (
            "timeout",
            "Timeout classes, by name.",
            names(
                "TimeoutIx",
                model.timeouts.iter().map(|t| (&t.name, &t.doc)),
            ),
        ),
        (
            "retry",
            "Retry classes, by name.",
            names("RetryIx", model.retries.iter().map(|r| (&r.name, &r.doc))),
        ),
        (
            "budget",
            "Throttle budgets, by name.",
            names(
                "BudgetIx",
                model.throttle.budgets.iter().map(|b| (&b.name, &b.doc)),
            ),
        ),
        (
            "stream",
            "Stream contracts, by name.",
            names("StreamIx", model.streams.iter().map(|s| (&s.name, &s.doc))),
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
    });
    let warm_ups = model.breaker.iter().flat_map(|b| &b.warm_up);
    let warm_up = warm_ups.map(|w| {
        let (s, r) = model.route(w.route);
        let endpoint = endpoint_path(s, &r.name);
        let path = &w.path;
        let body = option(w.body.as_ref(), |b| quote!(#b));
        let timeout = option(w.timeout, |i| {
            let name = ident(&screaming(&model.timeouts[i].name));
            quote!(timeout::#name)
        });
        let pipeline_id = option(w.pipeline_id.as_ref(), |p| quote!(#p));
        quote!(WarmUpCall { endpoint: #endpoint, path: &[#(#path),*], body: #body, timeout: #timeout, pipeline_id: #pipeline_id })
    });
    let features = model.features.iter().map(|f| {
        let name = &f.name;
        let routes = f.routes.iter().map(|r| {
            let (s, r) = model.route(*r);
            endpoint_path(s, &r.name)
        });
        quote!(FeaturePolicy { name: #name, routes: &[#(#routes),*] })
    });
    let retry_alert = &model.retry_exhausted_alert;
    let retry_rate = option(model.retry_exhausted_rate, |(at_least, within)| {
        let (at_least, within) = (int(at_least), duration(within));
        quote!(AlertRate { at_least: #at_least, within: #within })
    });
    let severities = model.alerts.iter().map(|a| {
        let (alert, severity) = (&a.name, &a.severity);
        quote!(AlertSeverity { alert: #alert, severity: #severity })
    });
    let module_doc = inner_doc(&format!(
        "The {} policy as data, lowered from `spec/{api}/`. The runtime executes it; nothing here is code.",
        model.api.title
    ));
    let policy_doc = doc(&format!(
        "The whole policy, handed to the runtime by [`crate::{}`].\n\n\
         Deadline: policy {}. Breaker: {}. Throttle: policy {}.",
        model.api.client,
        source(&model.deadline_source),
        model
            .breaker
            .as_ref()
            .map_or("none".to_string(), |b| format!(
                "policy {}",
                source(&b.source)
            )),
        source(&t.source)
    ));
    quote! {
        #module_doc

        use sdk_runtime::Endpoint;
        use sdk_runtime::log::LogNames;
        use sdk_runtime::policy::*;

        #(#index_modules)*

        /// Every timeout class, indexed by [`timeout`].
        pub static TIMEOUTS: [TimeoutClass; #n_timeouts] = [#(#timeouts),*];

        /// Every retry class, indexed by [`retry`].
        pub static RETRIES: [RetryClass; #n_retries] = [#(#retries),*];

        /// Every throttle budget, indexed by [`budget`].
        pub static BUDGETS: [BudgetPolicy; #n_budgets] = [#(#budgets),*];

        /// Every route of the API, in spec order.
        pub static ENDPOINTS: [&Endpoint; #n_endpoints] = [#(#endpoints),*];

        /// Where each service serves its own OpenAPI document on the platform
        /// (`services/*.yaml openapi`): `(service, path)`.
        pub static OPENAPI_DOCUMENTS: [(&str, &str); #n_documents] = [#(#documents),*];

        /// The OpenAPI 3.1 document generated from the same spec, beside this crate.
        pub const OPENAPI: &str = include_str!("../openapi.json");

        #breaker_statics

        #policy_doc
        pub static POLICY: Policy = Policy {
            api: #api,
            headers: HeaderNames {
                authorization: #auth,
                auth_scheme: #auth_scheme,
                tenant: #tenant,
                workspace: #workspace,
                request_id: #request_id,
                retry_after: #retry_after,
                pipeline: #pipeline,
            },
            ids: IdRules {
                pattern: #id_pattern,
                reserved_tenants: &[#(#reserved),*],
                opaque: &[#(#opaque),*],
                opaque_max_len: #opaque_max_len,
            },
            reserved_floor: &[#(#reserved),*],
            limits: Limits {
                error_body: #error_body,
                detail: #detail,
                sse_line: #sse_line,
                sse_event: #sse_event,
            },
            routes: &ENDPOINTS,
            pool_idle: #pool_idle,
            pool_idle_floor: #pool_idle_floor,
            keep_alive_margin: #keep_alive_margin,
            fresh_after: &[#(#fresh_after),*],
            log: LogNames {
                target: #log_target,
                path_fields: &[#(#log_path_fields),*],
            },
            log_lines: &crate::log::LINES,
            metrics: MetricNames {
                requests: #requests,
                duration: #duration_metric,
                circuit_state: #circuit_state,
                circuit_open_seconds: #circuit_open,
                sse_fallback: #sse_fallback,
                sse_buffered: #sse_buffered,
                alerts: #alerts_metric,
                rate_limited: #rate_limited,
            },
            timeouts: &TIMEOUTS,
            deadline: #deadline,
            retries: &RETRIES,
            breaker: #breaker,
            throttle: ThrottlePolicy {
                max_in_flight: #max_in_flight,
                per_second: #per_second,
                rate_period: ::std::time::Duration::from_secs(1),
                budget_period: ::std::time::Duration::from_secs(60),
                budgets: &BUDGETS,
                polling: PollingPolicy {
                    interval: #poll_interval,
                    floor: #poll_floor,
                    hot_factor: #hot,
                },
            },
            taxonomy: &[#(#rows),*],
            detail_sets: &[#(#details),*],
            streams: &[#(#streams),*],
            buffering: #buffering,
            fallbacks_sustained: #fallbacks_sustained,
            states: &[#(#states),*],
            messages: &[#(#messages),*],
            warm_up: &[#(#warm_up),*],
            features: &[#(#features),*],
            alerts: AlertNames {
                retry_exhausted: #retry_alert,
                retry_exhausted_rate: #retry_rate,
                severities: &[#(#severities),*],
            },
            replay: #replay,
            fleet: #fleet,
        };
    }
}

/// The replay queue's numbers; its budget by its named index.
fn replay(model: &Model, r: &crate::model::Replay) -> TokenStream {
    let budget = ident(&screaming(&model.throttle.budgets[r.budget].name));
    let (lease, pause, lock_step) = (duration(r.lease), duration(r.pause), duration(r.lock_step));
    let split = int(u64::from(r.split));
    let lock_attempts = int(r.lock_attempts);
    let kinds = &r.kinds;
    let (depth, failures, alert) = (&r.depth_metric, &r.failures_metric, &r.failure_alert);
    quote! {
        ReplayPolicy {
            budget: budget::#budget,
            lease: #lease,
            pause: #pause,
            split: #split,
            kinds: &[#(#kinds),*],
            lock_attempts: #lock_attempts,
            lock_step: #lock_step,
            depth_metric: #depth,
            failures_metric: #failures,
            failure_alert: #alert,
        }
    }
}

/// How replicas share the throttle; budgets by their named index.
fn fleet(model: &Model, f: &crate::model::Fleet) -> TokenStream {
    let shared = f.shared;
    let url_env = &f.url_env;
    let (deadline, retry, lease, heartbeat) = (
        duration(f.deadline),
        duration(f.breaker_retry),
        duration(f.lease),
        duration(f.heartbeat),
    );
    let (failures, margin) = (int(f.breaker_failures), int(f.margin_percent));
    let over = duration(f.breaker_over);
    let degraded = if f.fail_closed {
        quote!(Degraded::Closed)
    } else {
        quote!(Degraded::Open)
    };
    let per_replica = f.per_replica.iter().map(|&b| {
        let name = ident(&screaming(&model.throttle.budgets[b].name));
        quote!(budget::#name)
    });
    let (admission, decisions, degraded_metric, share) = (
        &f.admission_metric,
        &f.decisions_metric,
        &f.degraded_metric,
        &f.share_metric,
    );
    let alert = &f.alert;
    quote! {
        FleetPolicy {
            shared: #shared,
            url_env: #url_env,
            deadline: #deadline,
            breaker_failures: #failures,
            breaker_over: #over,
            breaker_retry: #retry,
            lease: #lease,
            heartbeat: #heartbeat,
            margin_percent: #margin,
            degraded: #degraded,
            per_replica: &[#(#per_replica),*],
            metrics: FleetMetricNames {
                admission: #admission,
                decisions: #decisions,
                degraded: #degraded_metric,
                share: #share,
            },
            alert: #alert,
        }
    }
}

/// The breaker's policy; its probe and canary are the `PROBE` and `CANARY` statics.
fn breaker(model: &Model, b: &crate::model::Breaker) -> TokenStream {
    let (threshold, distinct, healthy) = (
        int(b.threshold),
        b.distinct_endpoints,
        int(b.healthy_probes),
    );
    let window = duration(b.window);
    let probe_interval = duration(b.probe_interval);
    let probe_timeout = duration(model.timeouts[b.probe_timeout].per_attempt);
    let canary_timeout = duration(model.timeouts[b.canary_timeout].per_attempt);
    let deploy = duration(b.deploy_suspected);
    let alert_after = duration(b.alert_after);
    let open_alert = model.breaker_alert.as_deref().unwrap_or_default();
    quote! {
        BreakerPolicy {
            threshold: #threshold,
            window: #window,
            distinct_endpoints: #distinct,
            probe: PROBE,
            canary: CANARY,
            probe_interval: #probe_interval,
            probe_timeout: #probe_timeout,
            healthy_probes: #healthy,
            canary_timeout: #canary_timeout,
            deploy_suspected: #deploy,
            alert_after: #alert_after,
            open_alert: #open_alert,
        }
    }
}

fn endpoint_path(service: &crate::model::Service, route: &str) -> TokenStream {
    let module = ident(&super::services::module_name(service));
    let name = ident(&screaming(route));
    quote!(&crate::#module::#name)
}

/// `pub const NAME: TimeoutIx = TimeoutIx::new(i);` for each named item, typed by its table.
fn names<'a>(ty: &str, items: impl Iterator<Item = (&'a String, &'a String)>) -> TokenStream {
    let ty = ident(ty);
    let consts = items.enumerate().map(|(i, (name, text))| {
        let docs = doc(text);
        let name = ident(&screaming(name));
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
    quote! {
        use sdk_runtime::policy::#ty;

        #(#consts)*
    }
}

fn schedule(s: &RetrySchedule) -> TokenStream {
    match *s {
        RetrySchedule::Never => quote!(RetrySchedule::Never),
        RetrySchedule::Exponential {
            attempts,
            base,
            factor,
            cap,
        } => {
            let (base, cap) = (duration(base), duration(cap));
            let (attempts, factor) = (int(attempts), int(factor));
            quote!(RetrySchedule::Exponential { attempts: #attempts, base: #base, factor: #factor, cap: #cap })
        }
        RetrySchedule::DeployWindow { attempts } => {
            let attempts = int(attempts);
            quote!(RetrySchedule::DeployWindow { attempts: #attempts })
        }
        RetrySchedule::RetryAfter {
            attempts,
            floor,
            jitter,
        } => {
            let (floor, jitter) = (duration(floor), duration(jitter));
            let attempts = int(attempts);
            quote!(RetrySchedule::RetryAfter { attempts: #attempts, floor: #floor, jitter: #jitter })
        }
        RetrySchedule::Once { attempts } => {
            let attempts = int(attempts);
            quote!(RetrySchedule::Once { attempts: #attempts })
        }
        RetrySchedule::Linear { attempts, step } => {
            let (attempts, step) = (int(attempts), duration(step));
            quote!(RetrySchedule::Linear { attempts: #attempts, step: #step })
        }
    }
}

fn row_replay(r: crate::model::RowReplay) -> TokenStream {
    let name = ident(&format!("{r:?}"));
    quote!(Replay::#name)
}

fn outcome(o: OutcomeKind) -> TokenStream {
    let name = ident(&format!("{o:?}"));
    quote!(OutcomeKind::#name)
}

pub fn conflict(c: Conflict) -> TokenStream {
    let name = ident(&format!("{c:?}"));
    quote!(Conflict::#name)
}
