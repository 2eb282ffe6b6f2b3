//! What the commands run against: the platform `GRAG_URL` names, or the
//! embedded simulator when it is unset.

use grag_client::{Config, Grag, TenantId};
use grag_sim::{Fault, Rule, Sim, embedded};

/// The embedded simulator runs this many times faster than the platform.
const SPEED: u32 = 10;
/// The tenant of a run against the embedded simulator.
pub const SIM_TENANT: &str = "knoll";

/// How the embedded simulator behaves (no effect with `GRAG_URL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// No faults.
    Healthy,
    /// Per-service documents with a few routes, fields and enum values moved.
    Drifted,
    /// `/health` answers 429 with `Retry-After: 1` after its first 10 requests.
    RateLimited,
    /// Every ai-gateway call answers 402.
    Budget,
    /// Every SSE stream held back until it ends (proxy buffering).
    Buffered,
    /// The search route answers the feature-flag 503.
    Dark,
}

pub struct Target {
    pub grag: Grag,
    /// `GRAG_URL`, or the simulator's address.
    pub origin: String,
    /// `true` against a platform, `false` against the embedded simulator.
    pub live: bool,
    sim: Option<Sim>,
}

impl Target {
    /// The platform of `GRAG_URL`/`GRAG_API_KEY`/`GRAG_TENANT`, or the
    /// embedded simulator in `scenario` when `GRAG_URL` is unset or empty.
    pub async fn connect(scenario: Scenario) -> Result<Target, String> {
        if std::env::var("GRAG_URL").is_ok_and(|u| !u.is_empty()) {
            let config = Config::from_env().map_err(|e| format!("configuration: {e}"))?;
            let grag = Grag::new(config).map_err(|e| format!("configuration: {e}"))?;
            let origin = grag.runtime().base_url().to_owned();
            return Ok(Target {
                grag,
                origin,
                live: true,
                sim: None,
            });
        }
        Target::embedded(scenario).await
    }

    /// The embedded simulator in `scenario`, whatever `GRAG_URL` says.
    pub async fn embedded(scenario: Scenario) -> Result<Target, String> {
        let mut config = embedded::sim_config(SPEED);
        config.drifted_documents = scenario == Scenario::Drifted;
        let sim = Sim::start(config)
            .await
            .map_err(|e| format!("the embedded simulator cannot listen: {e}"))?;
        stage(&sim, scenario);
        let tenant = TenantId::parse(SIM_TENANT).expect("a valid tenant");
        let grag = Grag::with_policy(
            Config::new(sim.url(), "verify-key", tenant),
            // A proxy's burst is one write however fast the clock runs.
            embedded::buffering_policy(SPEED),
        )
        .map_err(|e| format!("configuration: {e}"))?;
        Ok(Target {
            grag,
            origin: sim.url(),
            live: false,
            sim: Some(sim),
        })
    }

    pub async fn stop(self) {
        if let Some(sim) = self.sim {
            sim.stop().await;
        }
    }
}

fn stage(sim: &Sim, scenario: Scenario) {
    let faults = sim.faults();
    match scenario {
        Scenario::Healthy | Scenario::Drifted => {}
        Scenario::RateLimited => {
            faults.push(Rule::new(Fault::rate_limited_secs(1)).on("health").skip(10));
        }
        Scenario::Budget => {
            faults.push(Rule::new(Fault::Budget).on("service:ai-gateway"));
        }
        Scenario::Buffered => {
            for op in ["orchestrator_events", "chat_stream"] {
                faults.push(Rule::new(Fault::SseBuffered).on(op));
            }
        }
        Scenario::Dark => {
            faults.push(Rule::new(Fault::Dark).on("search_rerank"));
        }
    }
}
