//! The stage of the simulated walk: the in-process simulator, the client the
//! scenes share, and what a scene leaves for a later one.

use anyhow::{Context, Result};
use grag_client::{Config, Grag, KbId, PipelineId, TenantId};
use grag_sim::{Sim, SimConfig};
use tokio::time::Instant;

/// How much faster than the platform the simulator runs in the demo.
pub(crate) const SPEED: f64 = 10.0;

pub(crate) const QUESTION: &str = "Wie oft werden Brücken nach DIN 1076 geprüft?";

pub(crate) struct Walk {
    pub started: Instant,
    pub sim: Sim,
    /// The client at the platform's own speed.
    pub grag: Grag,
    pub kb: KbId,
    /// The pipeline id the search and the ledger scenes share.
    pub pipeline: PipelineId,
    /// The deploy churn's client, kept for its metrics at the end.
    pub churned: Option<Grag>,
}

impl Walk {
    /// Starts the simulator and the client on it.
    pub async fn open() -> Result<Walk> {
        let started = Instant::now();
        let sim = Sim::start(SimConfig::scaled(1.0 / SPEED))
            .await
            .context("starting the simulator")?;
        let grag = Grag::new(Config::new(sim.url(), "demo-key", tenant()?))?;
        Ok(Walk {
            started,
            sim,
            grag,
            kb: KbId::parse("kb-demo")?,
            pipeline: PipelineId::parse("demo-run")?,
            churned: None,
        })
    }

    /// The configuration of a further client on this simulator.
    pub fn config(&self) -> Result<Config> {
        Ok(Config::new(self.sim.url(), "demo-key", tenant()?))
    }
}

impl crate::scene::Stage for Walk {
    fn kb(&self) -> Option<String> {
        Some(self.kb.to_string())
    }
}

fn tenant() -> Result<TenantId> {
    Ok(TenantId::parse("knoll")?)
}
