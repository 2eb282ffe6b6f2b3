//! What every test against the simulator starts with: the spec's policy in
//! compressed time, a simulator on 127.0.0.1 (port 0), and a client of tenant
//! [`TENANT`] with the test key on it.
//!
//! ```no_run
//! # async fn demo() {
//! use grag_sim::testkit::{self, Kit};
//!
//! // The simulator at 1/1000, the client's policy at 1/100.
//! let kit = Kit::start(testkit::sim_config(1000), testkit::policy(100)).await;
//! kit.grag.workspaces().list_kbs().await.unwrap();
//! assert_eq!(kit.sim.log().count("list_kbs"), 1);
//! # }
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use grag_client::policy::POLICY;
use grag_client::types::{CreateKb, JobStatus, OrchestratorEvent, UploadDocument};
use grag_client::{Config, Created, DocumentId, Grag, JobId, KbId, PipelineId, TenantId};
use sdk_runtime::Policy;
use sdk_runtime::alerts::CollectAlerts;
use sdk_runtime::{JobProgress, JobUpdate};

use crate::config::SimConfig;
use crate::server::Sim;

/// The key the tests' clients present (the simulator accepts any by default).
pub const KEY: &str = "test-key";

/// The tenant of [`Kit`]'s client and of [`client`] when a test has no
/// reason to pick another.
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

/// The run the tests' ai-gateway calls belong to (every one carries a
/// pipeline id).
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

/// A simulator and one client of [`TENANT`] on it, whose alerts are collected.
pub struct Kit {
    pub sim: Sim,
    pub grag: Grag,
    pub alerts: Arc<CollectAlerts>,
}

impl Kit {
    /// A simulator on `sim` and a client of [`TENANT`] with `policy`.
    pub async fn start(sim: SimConfig, policy: &'static Policy) -> Kit {
        Kit::start_with(sim, policy, |c| c).await
    }

    /// Like [`Kit::start`], with the client's configuration adjusted by
    /// `adjust` (after the alert sink is set), e.g. `|c| c.warm_up(true)`.
    pub async fn start_with(
        sim: SimConfig,
        policy: &'static Policy,
        adjust: impl FnOnce(Config) -> Config,
    ) -> Kit {
        let sim = start(sim).await;
        let alerts = Arc::new(CollectAlerts::default());
        let config = adjust(config(&sim, TENANT).alerts(alerts.clone()));
        let grag = client_with(config, policy);
        Kit { sim, grag, alerts }
    }
}

/// "Die Brücke wird alle sechs Jahre geprüft." in base64: the document the
/// stream tests upload.
pub const TEXT_B64: &str = "RGllIEJyw7xja2Ugd2lyZCBhbGxlIHNlY2hzIEphaHJlIGdlcHLDvGZ0Lg==";

/// Creates `kb-1`, uploads `document` into it and returns the id of the
/// ingest job the upload started.
pub async fn upload_for_job(grag: &Grag, document: &str) -> JobId {
    let kb = KbId::parse("kb-1").expect("a valid KB id");
    grag.workspaces()
        .create_kb(&CreateKb::new(kb.clone(), "Brückenprüfung"))
        .await
        .expect("the KB is created");
    let upload = UploadDocument::new(
        DocumentId::parse(document).expect("a valid document id"),
        format!("{document}.txt"),
        "text/plain",
        TEXT_B64,
    );
    match grag.workspaces().upload_document(&kb, &upload).await {
        Ok(Created::New(d)) => d.job_id.expect("an upload starts a job"),
        Ok(Created::Existing) => panic!("a fresh simulator has no documents"),
        Err(e) => panic!("the upload fails: {e}"),
    }
}

/// Follows a job to its end, at most `guard` long: what it yielded, in
/// words (`subscribed`, `status running`, `fell back: connection`,
/// `completed`), and the error it ended with, if any.
pub async fn follow(
    progress: &mut JobProgress<OrchestratorEvent, JobStatus>,
    guard: std::time::Duration,
) -> (Vec<String>, Option<sdk_runtime::Error>) {
    tokio::time::timeout(guard, async {
        let mut seen = Vec::new();
        while let Some(next) = progress.next().await {
            seen.push(match next {
                Ok(JobUpdate::Event(e)) => e.name().to_owned(),
                Ok(JobUpdate::Status(s)) => format!("status {}", s.status),
                Ok(JobUpdate::FellBack(e)) => format!("fell back: {}", e.class_name()),
                Ok(JobUpdate::Completed(_)) => "completed".to_owned(),
                Err(e) => return (seen, Some(e)),
            });
        }
        (seen, None)
    })
    .await
    .expect("the job is followed to its end")
}

/// The most arrivals in any half-open window `[t, t + width)`; only windows
/// starting at an arrival can hold a maximum. `times` must be sorted.
pub fn max_in_any_window(times: &[tokio::time::Instant], width: std::time::Duration) -> usize {
    times
        .iter()
        .enumerate()
        .map(|(i, &start)| {
            times[i..]
                .iter()
                .take_while(|&&t| t.duration_since(start) < width)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// When each of `entries` arrived, in order.
pub fn arrivals<'a>(
    entries: impl IntoIterator<Item = &'a crate::log::LoggedRequest>,
) -> Vec<tokio::time::Instant> {
    let mut times: Vec<tokio::time::Instant> = entries.into_iter().map(|e| e.arrived).collect();
    times.sort();
    times
}
