//! What the tests against the simulator share: a simulator and a client of
//! it with its alerts collected ([`Kit`]), a job uploaded and followed, and
//! raw HTTP for what the typed client never sends. The simulator's own
//! start-up (`grag_sim::embedded`) is what these build on.

use std::sync::Arc;
use std::time::Duration;

use grag_client::types::{CreateKb, JobStatus, OrchestratorEvent, UploadDocument};
use grag_client::{Config, Created, DocumentId, Grag, JobId, KbId};
use grag_sim::embedded::{self, KEY, TENANT};
use grag_sim::{Sim, SimConfig};
use sdk_runtime::alerts::CollectAlerts;
use sdk_runtime::{JobProgress, JobUpdate, Policy};

use super::document::TEXT_B64;
use super::resilience;

/// The simulator's timings at 1/1000: 20 ms keepalive, 1.8 s ceiling, 3 ms per job node.
pub fn config() -> SimConfig {
    embedded::sim_config(1000)
}

/// A simulator on [`config`].
pub async fn sim() -> Sim {
    embedded::start(config()).await
}

/// A client of `tenant` on the simulator, with the policy at 1/100
/// ([`resilience::policy`]): the client's real rules, in test time.
pub fn client(sim: &Sim, tenant: &str) -> Grag {
    embedded::client(sim, tenant, resilience::policy())
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
        let sim = embedded::start(sim).await;
        let alerts = Arc::new(CollectAlerts::default());
        let config = adjust(embedded::config(&sim, TENANT).alerts(alerts.clone()));
        let grag = embedded::client_with(config, policy);
        Kit { sim, grag, alerts }
    }
}

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
    guard: Duration,
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
