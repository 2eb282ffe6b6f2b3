//! What the canary and probe suites share: a simulator, optionally behind a
//! real nginx of the test's own, and a client on it.

#![allow(dead_code)]

#[path = "../../../tests/nginx/harness.rs"]
pub mod harness;

use std::time::Duration;

use grag_client::{Config, Grag, TenantId};
use grag_sim::embedded::{self, KEY, TENANT};
use grag_sim::{Sim, SimConfig};
use harness::{Nginx, Setup};
use sdk_runtime::Policy;

/// The spec's policy at 1/5 (buffering seen after 1 s of silence), the
/// buffering burst at the spec's 250 ms.
pub fn policy() -> &'static Policy {
    embedded::buffering_policy(5)
}

/// The simulator at 1/1000, each job held until its first subscriber and
/// then queued `job` long, a chat's silence as long: the silence a
/// buffering proxy turns into a late burst.
pub fn sim_config(job: Duration) -> SimConfig {
    let mut sim = embedded::sim_config(1000).with_held_jobs();
    sim.job_queue = job;
    sim.job_node_pace = Duration::from_millis(5);
    sim.stream_ceiling = Duration::from_secs(600);
    sim.chat_silence = job;
    sim
}

/// A simulator, maybe an nginx in front, and a client of [`TENANT`] on the front.
pub struct Stage {
    pub sim: Sim,
    pub nginx: Option<Nginx>,
    pub grag: Grag,
}

impl Stage {
    pub async fn direct(sim: SimConfig) -> Stage {
        let sim = embedded::start(sim).await;
        let grag = client(&sim.url());
        Stage {
            sim,
            nginx: None,
            grag,
        }
    }

    /// `None` when nginx is absent and not required (the harness said so).
    pub async fn behind(sim: SimConfig, setup: Setup) -> Option<Stage> {
        let binary = harness::binary()?;
        let sim = embedded::start(sim).await;
        let nginx = Nginx::start(&binary, sim.addr(), &setup);
        let grag = client(&nginx.url());
        Some(Stage {
            sim,
            nginx: Some(nginx),
            grag,
        })
    }
}

fn client(url: &str) -> Grag {
    let config = Config::new(url, KEY, TenantId::parse(TENANT).unwrap());
    Grag::with_policy(config, policy()).expect("a client")
}
