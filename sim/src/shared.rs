//! The state every part of the simulator shares: the accept loop, the
//! platform's stages and handlers, the admin routes and the handles.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize};

use tokio::sync::watch;

use crate::config::SimConfig;
use crate::log::RequestLog;
use crate::{faults, limits, state};

/// Resolves once the simulator is stopping (or its handle is gone).
pub(crate) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
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
