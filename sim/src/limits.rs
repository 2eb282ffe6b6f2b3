//! The platform's own limits, as the platform keeps them: per
//! egress address and tenant, Traefik's request ceiling and the AI
//! gateway's retrieval bucket. Past either, the answer is a 429 without
//! `Retry-After`, as Traefik's rate limiter sends it; each such answer is
//! marked in the request log (`platform_limit:traefik`,
//! `platform_limit:gateway`), so a test counts them there.
//!
//! Both are counted as sliding logs: at most `limit` requests in any rolling
//! window, the strictest reading of a ceiling.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use grag_client::policy::budget;
use sdk_runtime::Endpoint;
use tokio::time::Instant;

/// The numbers, off by default ([`crate::SimConfig::with_platform_limits`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlatformLimits {
    /// Traefik: requests of one address and tenant per `second`.
    pub ceiling: usize,
    pub second: Duration,
    /// The gateway: retrieval calls of one address and tenant per `minute`.
    pub retrieval: usize,
    pub minute: Duration,
}

impl PlatformLimits {
    /// The platform's: Traefik's 100 req/s (the policy's 50/s is half of
    /// it, §8) and the gateway's 120 retrieval calls per minute.
    pub fn platform() -> Self {
        Self {
            ceiling: 100,
            second: Duration::from_secs(1),
            retrieval: 120,
            minute: Duration::from_secs(60),
        }
    }

    /// The same numbers with their windows divided by `divisor`, as a
    /// client's policy scaled by the same divisor counts.
    pub fn scaled(divisor: u32) -> Self {
        let p = Self::platform();
        Self {
            second: p.second / divisor.max(1),
            minute: p.minute / divisor.max(1),
            ..p
        }
    }
}

/// Which limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    Traefik,
    Gateway,
}

impl Refused {
    pub fn fault(self) -> &'static str {
        match self {
            Refused::Traefik => "platform_limit:traefik",
            Refused::Gateway => "platform_limit:gateway",
        }
    }
}

/// The windows of every (address, tenant) seen.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    windows: Mutex<HashMap<(IpAddr, String), Windows>>,
}

#[derive(Debug, Default)]
struct Windows {
    all: VecDeque<Instant>,
    retrieval: VecDeque<Instant>,
}

fn admit(log: &mut VecDeque<Instant>, limit: usize, width: Duration, now: Instant) -> bool {
    while log
        .front()
        .is_some_and(|&t| now.saturating_duration_since(t) >= width)
    {
        log.pop_front();
    }
    log.len() < limit
}

impl Counters {
    /// Counts a request of `endpoint` from `peer` as `tenant` at `now`;
    /// `Some` when a limit refuses it (a refused request counts as well, as
    /// it does at Traefik).
    pub fn check(
        &self,
        limits: &PlatformLimits,
        peer: IpAddr,
        tenant: &str,
        endpoint: &Endpoint,
        now: Instant,
    ) -> Option<Refused> {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let w = windows.entry((peer, tenant.to_owned())).or_default();
        let traefik = admit(&mut w.all, limits.ceiling, limits.second, now);
        w.all.push_back(now);
        if !traefik {
            return Some(Refused::Traefik);
        }
        if endpoint.budget == budget::RETRIEVAL {
            let gateway = admit(&mut w.retrieval, limits.retrieval, limits.minute, now);
            w.retrieval.push_back(now);
            if !gateway {
                return Some(Refused::Gateway);
            }
        }
        None
    }
}
