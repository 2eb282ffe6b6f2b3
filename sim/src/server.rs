//! A running simulator: its start and stop, and the state a test reads
//! and changes behind the platform's back.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex};

use grag_client::types::{Document, Edge, Entity, Kb};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::SimConfig;
use crate::faults;
use crate::listener::accept_loop;
use crate::log::RequestLog;
use crate::scripting::Faults;
use crate::shared::Shared;
use crate::{admin, limits, openapi, platform, state};

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

    /// Starts a held ingest job ([`JobStart::Held`](crate::JobStart::Held)) now: its queue, then its
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
