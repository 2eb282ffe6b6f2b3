//! Helpers shared by the simulator's test binaries.
#![allow(dead_code)]

use std::time::Duration;

use base64::Engine;
use grag_client::Grag;
use grag_sim::testkit;
use grag_sim::{Sim, SimConfig};
use sdk_runtime::Policy;

pub use grag_sim::testkit::KEY;

/// The simulator's timings at 1/1000: 20 ms keepalive, 1.8 s ceiling, 3 ms per job node.
pub fn config() -> SimConfig {
    testkit::sim_config(1000)
}

pub async fn sim() -> Sim {
    start(config()).await
}

pub async fn start(config: SimConfig) -> Sim {
    testkit::start(config).await
}

/// The spec's policy at 1/100 (R1 backoff from 5 ms, 429 floor 20 ms, 450 ms
/// orchestrator watchdog): the client's real rules, in test time.
pub fn policy() -> &'static Policy {
    testkit::policy(100)
}

/// A client of `tenant` on the simulator, with the scaled policy.
pub fn client(sim: &Sim, tenant: &str) -> Grag {
    testkit::client(sim, tenant, policy())
}

/// A plain HTTP client, for what the typed client never sends.
pub fn raw() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("reqwest")
}

/// A raw request with the full header set of tenant `knoll`.
pub fn scoped(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
) -> reqwest::RequestBuilder {
    http.request(method, url)
        .header("Authorization", format!("Bearer {KEY}"))
        .header("X-Tenant-ID", "knoll")
}

pub fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

pub const TEXT: &str = "Das Gutachten bewertet die Standsicherheit der Brücke.\n\n\
    Die Prüfung der Tragwerke erfolgt alle sechs Jahre nach DIN 1076.\n\n\
    Schäden an Lagern werden in der Schadensklasse 3 eingeordnet.";

/// Reads a raw SSE body chunk by chunk until it ends, with arrival times.
pub async fn read_all(
    mut response: reqwest::Response,
) -> (Vec<(tokio::time::Instant, String)>, Option<reqwest::Error>) {
    let mut chunks = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(bytes)) => chunks.push((
                tokio::time::Instant::now(),
                String::from_utf8_lossy(&bytes).into_owned(),
            )),
            Ok(None) => return (chunks, None),
            Err(e) => return (chunks, Some(e)),
        }
    }
}

/// Event names in an SSE text, in order.
pub fn event_names(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .map(str::to_owned)
        .collect()
}

/// Polls `cond` every 2 ms until it holds (true) or `timeout` passes (false).
/// For conditions that become true by themselves; the timeout only bounds a
/// failing test, it is no assertion about speed.
pub async fn wait_for<F, Fut>(timeout: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if cond().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
