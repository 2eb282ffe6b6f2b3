//! The simulator embedded in a program beside clients of it, both in
//! compressed time: the spec's policy at a scale, the simulator's timings at
//! the same kind of scale, a simulator on 127.0.0.1 (port 0), and clients of
//! a tenant with the key it is given. The integration suites, the operator's
//! checks and the benches start from here.
//!
//! ```no_run
//! # async fn demo() {
//! use grag_sim::embedded;
//!
//! // The simulator at 1/1000, the client's policy at 1/100.
//! let sim = embedded::start(embedded::sim_config(1000)).await;
//! let grag = embedded::client(&sim, embedded::TENANT, embedded::policy(100));
//! grag.workspaces().list_kbs().await.unwrap();
//! assert_eq!(sim.log().count("list_kbs"), 1);
//! # }
//! ```

use std::collections::HashMap;
use std::sync::Mutex;

use grag_client::policy::POLICY;
use grag_client::{Config, Grag, PipelineId, TenantId};
use sdk_runtime::Policy;

use crate::config::SimConfig;
use crate::server::Sim;

/// The key the clients present (the simulator accepts any by default).
pub const KEY: &str = "test-key";

/// The tenant of a client that has no reason to pick another.
pub const TENANT: &str = "knoll";

/// The spec's policy with every duration divided by `divisor` (100: the
/// 30 s attempt timeout is 300 ms, the 5 min open alert 3 s). Made once per
/// divisor and kept for the life of the process.
pub fn policy(divisor: u32) -> &'static Policy {
    static SCALED: Mutex<Option<HashMap<u32, &'static Policy>>> = Mutex::new(None);
    let mut scaled = SCALED.lock().unwrap_or_else(|e| e.into_inner());
    let scaled = scaled.get_or_insert_with(HashMap::new);
    scaled
        .entry(divisor)
        .or_insert_with(|| POLICY.scaled(divisor))
}

/// [`policy`] with its buffering rule's burst left at the spec's 250 ms:
/// a proxy's burst is one write however fast the machine is, so only the
/// silence that reveals it (`silent_for`) is scaled. For the tests behind a
/// real buffering proxy.
pub fn buffering_policy(divisor: u32) -> &'static Policy {
    static SCALED: Mutex<Option<HashMap<u32, &'static Policy>>> = Mutex::new(None);
    let mut scaled = SCALED.lock().unwrap_or_else(|e| e.into_inner());
    let scaled = scaled.get_or_insert_with(HashMap::new);
    scaled.entry(divisor).or_insert_with(|| {
        let policy = self::policy(divisor);
        let rule = POLICY
            .buffering
            .as_ref()
            .expect("GRAG has a buffering rule");
        let buffering = Some(sdk_runtime::policy::BufferingRule {
            silent_for: policy.buffering.as_ref().unwrap().silent_for,
            ..rule.clone()
        });
        Box::leak(Box::new(Policy {
            buffering,
            ..policy.clone()
        }))
    })
}

/// The simulator's real timings divided by `divisor` (1000: the 20 s
/// keepalive is 20 ms), see [`SimConfig::scaled`].
pub fn sim_config(divisor: u32) -> SimConfig {
    SimConfig::scaled(1.0 / f64::from(divisor))
}

/// The run the ai-gateway calls of a client on the simulator belong to
/// (every one carries a pipeline id).
pub fn pipeline() -> PipelineId {
    PipelineId::parse("test-run").expect("a valid pipeline id")
}

/// Starts a simulator on `config`; panics if it cannot bind.
pub async fn start(config: SimConfig) -> Sim {
    Sim::start(config).await.expect("the simulator starts")
}

/// A client configuration of `tenant` on `sim` with [`KEY`].
pub fn config(sim: &Sim, tenant: &str) -> Config {
    let tenant = TenantId::parse(tenant).expect("a valid tenant");
    Config::new(sim.url(), KEY, tenant)
}

/// A client on `config` with `policy`.
pub fn client_with(config: Config, policy: &'static Policy) -> Grag {
    Grag::with_policy(config, policy).expect("a client")
}

/// A client of `tenant` on `sim` with `policy`.
pub fn client(sim: &Sim, tenant: &str, policy: &'static Policy) -> Grag {
    client_with(config(sim, tenant), policy)
}
