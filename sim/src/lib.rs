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
//! [`testkit`] starts what a test needs: a simulator, the policy at a scale,
//! a client of tenant `knoll`.
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
mod faults;
mod handlers;
mod limits;
mod log;
pub mod openapi;
mod platform;
mod sse;
mod state;
pub mod testkit;

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use grag_client::types::{Document, Edge, Entity, Kb};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tower::ServiceExt;

pub use config::{JobStart, SimConfig};
pub use faults::{ActiveRule, ChurnPhase, Fault, Faults, MODEL_ROUTES, RetryAfter, Route, Rule};
pub use limits::PlatformLimits;
pub use log::{LoggedRequest, Note, RequestLog};
pub use platform::DEFAULT_TENANT;

/// Resolves once the simulator is stopping (or its handle is gone).
pub(crate) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// Which accepted TCP connection a request came on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnId(pub u64);

/// The address a connection came from: the egress address the platform's
/// limits are kept per.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub std::net::IpAddr);

/// Asks the connection a request came on to close: once its answer is out
/// (an unhandled error behind uvicorn: no `Connection: close` header, just
/// the FIN after the last byte), or at once, before a byte of the answer
/// (a process that died after the write took effect).
#[derive(Clone)]
pub(crate) struct CloseConn {
    after_answer: Arc<tokio::sync::Notify>,
    now: Arc<tokio::sync::Notify>,
}

impl CloseConn {
    fn new() -> Self {
        CloseConn {
            after_answer: Arc::new(tokio::sync::Notify::new()),
            now: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// A guard that closes the connection when it is dropped: put it in the
    /// answer's body, which hyper drops once the body is written, after the
    /// headers went out without `Connection: close`.
    pub(crate) fn after_answer(self) -> CloseAfter {
        CloseAfter(self.after_answer)
    }

    /// Drops the connection now, unanswered.
    pub(crate) fn now(&self) {
        self.now.notify_one();
    }
}

pub(crate) struct CloseAfter(Arc<tokio::sync::Notify>);

impl Drop for CloseAfter {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

/// State shared by the accept loop, the handlers and the handles.
pub(crate) struct Shared {
    pub config: SimConfig,
    pub log: RequestLog,
    pub faults: faults::FaultState,
    pub platform: Mutex<state::Platform>,
    pub in_flight: AtomicUsize,
    /// The platform's limits per address and tenant, when configured.
    pub limits: limits::Counters,
    pub agent_plane: AtomicBool,
    pub shutdown: watch::Receiver<bool>,
    /// `true` while the listener is closed (deploy churn).
    pub listener_closed: watch::Sender<bool>,
}

/// A running simulator. Stops when dropped; [`Sim::stop`] stops gracefully.
pub struct Sim {
    shared: Arc<Shared>,
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Sim {
    /// Binds 127.0.0.1 on `config.port` (0 picks a free port) and serves.
    pub async fn start(config: SimConfig) -> io::Result<Sim> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, config.port)).await?;
        let addr = listener.local_addr()?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            log: RequestLog::new(Instant::now()),
            faults: faults::FaultState::default(),
            platform: Mutex::default(),
            in_flight: AtomicUsize::new(0),
            limits: limits::Counters::default(),
            agent_plane: AtomicBool::new(config.agent_plane),
            shutdown: shutdown_rx,
            listener_closed: watch::channel(false).0,
            config,
        });
        let router = openapi::routes(admin::routes())
            .fallback_service(platform::service(shared.clone()))
            .with_state(shared.clone());
        let task = tokio::spawn(accept_loop(shared.clone(), listener, addr, router));
        Ok(Sim {
            shared,
            addr,
            shutdown,
            task: Some(task),
        })
    }

    /// `http://127.0.0.1:<port>`, the base URL for a client.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn config(&self) -> &SimConfig {
        &self.shared.config
    }

    /// The request log.
    pub fn log(&self) -> RequestLog {
        self.shared.log.clone()
    }

    /// The fault scripting handle.
    pub fn faults(&self) -> Faults {
        Faults {
            shared: self.shared.clone(),
        }
    }

    /// Stops accepting, ends open streams, waits for open connections
    /// (at most [`SimConfig::shutdown_grace`]), then returns.
    pub async fn stop(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    fn platform<T>(&self, f: impl FnOnce(&mut state::Platform) -> T) -> T {
        let mut p = self
            .shared
            .platform
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        f(&mut p)
    }

    /// Tenants that have any state (`default` among them if a request came
    /// without `X-Tenant-ID`).
    pub fn tenants(&self) -> Vec<String> {
        self.platform(|p| {
            let mut t: Vec<String> = p.tenants.keys().cloned().collect();
            t.sort();
            t
        })
    }

    /// Knowledge bases of a tenant.
    pub fn kbs(&self, tenant: &str) -> Vec<Kb> {
        self.platform(|p| {
            p.tenants
                .get(tenant)
                .map(|t| t.kbs.values().map(|k| k.kb.clone()).collect())
                .unwrap_or_default()
        })
    }

    /// Documents of a tenant's knowledge base (status as stored at upload).
    pub fn documents(&self, tenant: &str, kb: &str) -> Vec<Document> {
        self.platform(|p| {
            p.tenants
                .get(tenant)
                .and_then(|t| t.kbs.get(kb))
                .map(|k| k.documents.values().map(|d| d.document.clone()).collect())
                .unwrap_or_default()
        })
    }

    /// Conversion ids started for a document, oldest first: more than one
    /// means a convert was sent twice.
    pub fn conversions_of(&self, tenant: &str, document: &str) -> Vec<String> {
        self.platform(|p| {
            p.tenants
                .get(tenant)
                .and_then(|t| t.conversions_by_document.get(document))
                .cloned()
                .unwrap_or_default()
        })
    }

    /// The platform loses a document after the fact (a purge, an operator's
    /// cleanup): the document and the points of its chunks (`<doc>-…` ids)
    /// are gone; its conversions stay. Whether it had the document.
    pub fn lose_document(&self, tenant: &str, kb: &str, document: &str) -> bool {
        self.platform(|p| {
            let Some(k) = p.tenants.get_mut(tenant).and_then(|t| t.kbs.get_mut(kb)) else {
                return false;
            };
            let prefix = format!("{document}-");
            k.points.retain(|id, _| !id.starts_with(&prefix));
            k.documents.remove(document).is_some()
        })
    }

    /// Point ids stored in a tenant's knowledge base.
    pub fn points(&self, tenant: &str, kb: &str) -> Vec<String> {
        self.platform(|p| {
            p.tenants
                .get(tenant)
                .and_then(|t| t.kbs.get(kb))
                .map(|k| k.points.keys().cloned().collect())
                .unwrap_or_default()
        })
    }

    /// KG edges of a tenant's workspace.
    pub fn edges(&self, tenant: &str, workspace: &str) -> Vec<Edge> {
        self.platform(|p| {
            p.tenants
                .get(tenant)
                .map(|t| {
                    t.edges
                        .iter()
                        .filter(|((ws, _), _)| ws == workspace)
                        .map(|(_, e)| e.clone())
                        .collect()
                })
                .unwrap_or_default()
        })
    }

    /// Persisted messages of a conversation, as (role, text).
    pub fn messages(&self, tenant: &str, conversation: &str) -> Vec<(String, String)> {
        self.platform(|p| {
            p.tenants
                .get(tenant)
                .and_then(|t| t.conversations.get(conversation))
                .map(|c| c.messages.clone())
                .unwrap_or_default()
        })
    }

    /// A KG entity of a tenant's workspace.
    pub fn entity(&self, tenant: &str, workspace: &str, id: &str) -> Option<Entity> {
        self.platform(|p| {
            p.tenants
                .get(tenant)
                .and_then(|t| t.entities.get(&(workspace.to_owned(), id.to_owned())))
                .cloned()
        })
    }

    /// Starts a held ingest job ([`JobStart::Held`]) now: its queue, then its
    /// nodes run from this moment, so it is `completed` (or `failed`) after
    /// [`SimConfig::job_duration`]. Whether the tenant has a job of that id
    /// that had not started yet.
    pub fn start_job(&self, tenant: &str, job_id: &str) -> bool {
        self.platform(|p| {
            match p
                .tenants
                .get_mut(tenant)
                .and_then(|t| t.jobs.get_mut(job_id))
            {
                Some(job) if job.start.is_none() => {
                    job.start = Some(Instant::now());
                    true
                }
                _ => false,
            }
        })
    }

    /// Finishes a docfold conversion now: its result route answers 200 from
    /// here on instead of 409. Whether the tenant has a conversion of that id.
    /// With a [`SimConfig::conversion_time`] longer than any test, the test,
    /// not the clock, decides when a conversion is done.
    pub fn finish_conversion(&self, tenant: &str, conversion_id: &str) -> bool {
        self.platform(|p| {
            let conversion = p
                .tenants
                .get_mut(tenant)
                .and_then(|t| t.conversions.get_mut(conversion_id));
            match conversion {
                Some(c) => {
                    c.ready_at = c.ready_at.min(Instant::now());
                    true
                }
                None => false,
            }
        })
    }

    /// A tenant's settings, if ever written.
    pub fn settings(&self, tenant: &str) -> Option<Value> {
        self.platform(|p| p.tenants.get(tenant).and_then(|t| t.settings.clone()))
    }

    /// Forgets all platform state, rules and log.
    pub fn reset(&self) {
        self.faults().clear();
        self.shared.log.clear();
        self.platform(|p| *p = state::Platform::default());
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

enum Turn {
    Shutdown,
    Churn,
    Accepted(io::Result<(TcpStream, SocketAddr)>),
    Reaped,
}

/// Accepts connections; on a deploy churn closes the listener, cuts every
/// open connection, and binds the same port again when the refusal ends.
async fn accept_loop(shared: Arc<Shared>, listener: TcpListener, addr: SocketAddr, router: Router) {
    let mut listener = Some(listener);
    let mut shutdown = shared.shutdown.clone();
    let mut conns = JoinSet::new();
    let mut next_conn = 0u64;
    loop {
        let turn = match &listener {
            Some(l) => tokio::select! {
                _ = crate::stopped(&mut shutdown) => Turn::Shutdown,
                _ = shared.faults.churn_started.notified() => Turn::Churn,
                r = l.accept() => Turn::Accepted(r),
                Some(_) = conns.join_next(), if !conns.is_empty() => Turn::Reaped,
            },
            None => Turn::Churn,
        };
        match turn {
            Turn::Shutdown => break,
            Turn::Reaped | Turn::Accepted(Err(_)) => {}
            Turn::Accepted(Ok((stream, peer))) => {
                next_conn += 1;
                let _ = stream.set_nodelay(true);
                conns.spawn(connection(
                    stream,
                    ConnId(next_conn),
                    Peer(peer.ip()),
                    router.clone(),
                    shared.clone(),
                ));
            }
            Turn::Churn => {
                if shared.faults.refused_until(Instant::now()).is_none() {
                    if listener.is_none() {
                        listener = rebind(addr).await;
                    }
                    continue;
                }
                listener = None;
                conns.abort_all();
                shared.listener_closed.send_replace(true);
                shared
                    .log
                    .note("deploy churn: listener closed, open connections cut");
                // Refused until the clock (timed churn) or a step ends it.
                while let Some(until) = shared.faults.refused_until(Instant::now()) {
                    let clock = async {
                        match until {
                            Some(t) => tokio::time::sleep_until(t).await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        _ = crate::stopped(&mut shutdown) => break,
                        _ = clock => {}
                        _ = shared.faults.churn_stepped.notified() => {}
                    }
                }
                if *shutdown.borrow() {
                    break;
                }
                listener = rebind(addr).await;
                shared.listener_closed.send_replace(false);
                shared.log.note(match listener {
                    Some(_) => "deploy churn: listener open again",
                    None => "deploy churn: could not bind the port again",
                });
                if listener.is_none() {
                    break;
                }
            }
        }
    }
    drop(listener);
    let grace = tokio::time::sleep(shared.config.shutdown_grace);
    tokio::pin!(grace);
    loop {
        tokio::select! {
            next = conns.join_next() => if next.is_none() { break },
            _ = &mut grace => { conns.abort_all(); break }
        }
    }
}

/// Binds the port again (retrying a little while a port in TIME_WAIT frees up).
async fn rebind(addr: SocketAddr) -> Option<TcpListener> {
    for _ in 0..200 {
        if let Ok(l) = TcpListener::bind(addr).await {
            return Some(l);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// Serves one connection (HTTP/1.1, keep-alive) until it closes or the sim
/// stops. An idle connection is closed after [`SimConfig::keep_alive_timeout`]
/// (hyper's header-read timer runs from the moment the connection waits for
/// its next request), and one whose request asked for it ([`CloseConn`]) once
/// its answer is out.
async fn connection(
    stream: TcpStream,
    id: ConnId,
    peer: Peer,
    router: Router,
    shared: Arc<Shared>,
) {
    let close = CloseConn::new();
    let on_request = close.clone();
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(id);
        req.extensions_mut().insert(peer);
        req.extensions_mut().insert(on_request.clone());
        router.clone().oneshot(req.map(Body::new))
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(hyper_util::rt::TokioTimer::new());
    builder.header_read_timeout(shared.config.keep_alive_timeout);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let mut shutdown = shared.shutdown.clone();
    tokio::select! {
        done = conn.as_mut() => {
            if let Err(e) = done
                && e.is_timeout()
            {
                shared.log.note(format!(
                    "keep-alive timeout: connection {} closed idle",
                    id.0
                ));
            }
        }
        _ = close.now.notified() => {
            shared.log.note(format!(
                "connection {} dropped before the answer",
                id.0
            ));
        }
        _ = close.after_answer.notified() => {
            // The answer is written and flushed (hyper dropped its body in
            // the poll that wrote its end). From here the connection is not
            // polled: uvicorn logs the traceback, reads nothing, then closes
            // without having said so. A request that came meanwhile was never
            // seen; the close resets it.
            tokio::time::sleep(shared.config.unhandled_close_after).await;
            shared.log.note(format!(
                "unhandled error: connection {} closed after its answer",
                id.0
            ));
        }
        _ = crate::stopped(&mut shutdown) => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}
