//! A local GRAG platform: a real HTTP server on loopback with every route of
//! the generated client, the platform's behaviour (per-tenant state, the
//! missing-tenant hazard, 404 across tenants, `{"detail": ...}` errors, SSE
//! streams with keepalives and ceilings) and scriptable faults (deploy churn,
//! 429/402/403/502/503, cold starts, resets, stalled/dropped/buffered streams).
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use grag_sim::{Fault, Rule, Sim, SimConfig};
//!
//! let sim = Sim::start(SimConfig::scaled(0.01)).await?;
//! sim.faults().push(Rule::new(Fault::BadGateway).on("list_kbs").once());
//! // ... point a client at sim.url() ...
//! assert_eq!(sim.log().count("list_kbs"), 0);
//! sim.stop().await;
//! # Ok(())
//! # }
//! ```
//!
//! Routes come from `grag_client::policy::ENDPOINTS` and bodies are the
//! generated `grag_client::types`, so the simulator cannot drift from the
//! client. Admin routes live under `/_sim/` (see [`admin`]).
//!
//! # Faults
//!
//! From Rust, `sim.faults().push(Rule::new(fault).on("list_kbs").times(n))`
//! (also `.skip(n)`, `.on("service:kg-service")`, `.on("*")`); over HTTP,
//! `POST /_sim/faults` with the same rule as JSON, e.g.
//! `{"route": "list_kbs", "fault": {"kind": "rate_limited", "retry_after": {"seconds": 2}}, "times": 1}`.
//! Every answer a fault shaped names it in [`LoggedRequest::faults`].
//!
//! # Tests and the clock
//!
//! A test must not depend on how fast the machine is, so it drives the
//! simulator's phases itself: a deploy with [`Faults::deploy_churn_stepped`]
//! and [`Faults::churn_step`], ingest jobs with [`JobStart::Held`]
//! ([`SimConfig::with_held_jobs`], [`Sim::start_job`]), conversions with a
//! long [`SimConfig::conversion_time`] and [`Sim::finish_conversion`]. The
//! clock-driven forms remain for the demo and the binary's scenarios.
//!
//! [`embedded`] starts the simulator inside a program with clients of it:
//! a simulator, the policy at a scale, a client of tenant `knoll`. The
//! request log measures what arrived ([`arrivals`], [`max_in_any_window`]).
//!
//! | fault | `kind` | answer |
//! |---|---|---|
//! | deploy churn | `Faults::deploy_churn()` (phases by the clock) / `Faults::deploy_churn_stepped(n)` + `Faults::churn_step()` (phases by steps and answer counts: for tests) / `POST /_sim/churn` | listener closed (refused) and open connections cut, then 401/404/422 in turn (health 200), then healthy |
//! | rate limit | `rate_limited` | 429 text, `Retry-After` seconds, HTTP date or none |
//! | budget | `budget` | 402 |
//! | admin gate | `admin_gate` | 403, detail names the admin role |
//! | bad gateway | `bad_gateway` | 502 text |
//! | dark flag | `dark` | 503, the same feature-flag detail every time |
//! | safety / admission | `safety` | 503, transient detail |
//! | WAL backpressure | `backpressure` | 503 + `Retry-After` |
//! | any status | `status` | status + detail (+ `Retry-After`) |
//! | slow answer | `delay` / `cold_start` (`Faults::cold_start()`, `POST /_sim/cold-start`) | answer after a delay |
//! | reset mid-body | `reset_mid_body` | status line and half the body, then the connection is cut |
//! | SSE stall | `sse_stall` | after N events not one byte, connection open |
//! | SSE drop | `sse_drop` | after N events half an event, then the connection is cut |
//! | SSE buffered | `sse_buffered` | the whole stream in one burst at its end |
//! | SSE error | `sse_error` | after N events `event: error` |
//! | chat stage | `stage_fails` | that stage `failed` on the trace; `generate` ends the turn with `event: error` |
//! | ingest job | `job_fails` | the upload's job fails in that node (`node_fail`, `failed`) |
//! | validation echo | `validation_echo` (`max_length`, default 200) | FastAPI/pydantic 422: `[{"type": "string_too_long", "loc": ["body", <field>], "msg", "input": <the body's first string field>, "ctx": {"max_length"}}]` |
//! | unhandled error | `unhandled` | plain-text 500 `Internal Server Error`, then, [`SimConfig::unhandled_close_after`] later (50 ms; uvicorn logs the traceback first), the connection is closed without `Connection: close`; a request sent in between is never read |
//! | applied, then lost | `applied_then_lost` | the handler runs (the write takes effect), then the connection is dropped before a byte of the answer |
//! | SSE ends early | `sse_ends_early` | after N events the stream ends cleanly, without its terminal event |
//! | sse-starlette | `sse_starlette` (`ping_ms`, default 15000) | the stream's lines end in CRLF; `: ping - <date>` at the start and every `ping_ms` |
//! | keep-alive timeout | [`SimConfig::keep_alive_timeout`] (5 s as on uvicorn and Node; not scaled) | an idle connection is closed |
//! | agent plane | `Faults::set_agent_plane(false)` / `POST /_sim/agent-plane` | 503 "not running" on the agent stream |

pub mod admin;
mod config;
pub mod embedded;
mod faults;
mod handlers;
mod limits;
mod listener;
mod log;
pub mod openapi;
mod platform;
mod scripting;
mod server;
mod shared;
mod sse;
mod state;

pub use config::{JobStart, SimConfig};
pub use faults::{ActiveRule, ChurnPhase, Fault, MODEL_ROUTES, RetryAfter, Route, Rule};
pub use limits::PlatformLimits;
pub use log::{LoggedRequest, Note, RequestLog, arrivals, max_in_any_window};
pub use platform::DEFAULT_TENANT;
pub use scripting::Faults;
pub use server::Sim;
