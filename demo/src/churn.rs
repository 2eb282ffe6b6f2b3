//! The deploy churn: a compressed client's breaker goes through its whole
//! cycle, open, failing fast, probing, and closed by one canary.

use std::time::Duration;

use anyhow::{Context, Result};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use grag_client::types::{SearchRequest, SpendGrouping};
use grag_client::{Grag, KbId, PipelineId};
use grag_sim::Sim;
use sdk_runtime::policy::BreakerPolicy;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::scene::stamp;
use crate::stage::{QUESTION, SPEED, Walk};

/// The deploy churn runs at 1/CHURN_SPEED of the platform's time, client and
/// simulator alike: the breaker's 5 s probe interval becomes 100 ms.
const CHURN_SPEED: u32 = 50;

fn stamp_at(since: Instant, at: Instant) -> String {
    format!(
        "[{:5.2} s]",
        at.saturating_duration_since(since).as_secs_f64()
    )
}

/// One failed call, as the UI would learn it.
fn failed(since: Instant, what: &str, error: &grag_client::Error) {
    println!(
        "   {} ✗ {what}: {} ({}) after {} attempt(s) — „{}“",
        stamp(since),
        error.class_name(),
        error.row(),
        error.attempts(),
        error.message().unwrap_or("")
    );
}

/// The breaker's states as a UI sees them, each with when it was first seen.
type Seen = Vec<(Instant, &'static str)>;

/// A deploy takes the platform away and brings it back. A second client with
/// the same policy, compressed, goes through the whole breaker cycle in well
/// under a second; the walk keeps it for its metrics.
pub(crate) fn deploy_churn(walk: &mut Walk) -> BoxFuture<'_, Result<()>> {
    async move {
        let policy = grag_client::policy::POLICY.scaled(CHURN_SPEED);
        let breaker = policy.breaker.as_ref().expect("GRAG has a breaker");
        let grag = Grag::with_policy(walk.config()?, policy)?;
        let (sim, kb) = (&walk.sim, &walk.kb);
        let shrink = SPEED / f64::from(CHURN_SPEED);
        let refused = sim.config().churn_refused.mul_f64(shrink);
        let flaky = sim.config().churn_flaky.mul_f64(shrink);
        println!(
            "   a second client runs the same policy at 1/{CHURN_SPEED}: probes every {} ms instead of 5 s,",
            breaker.probe_interval.as_millis()
        );
        println!(
            "   deploy-suspected for {:.1} s instead of 2 min. The platform refuses connections for {:.2} s,",
            breaker.deploy_suspected.as_secs_f64(),
            refused.as_secs_f64()
        );
        println!(
            "   then answers 401/404/422 for {:.2} s while /workspaces/health already says 200.",
            flaky.as_secs_f64()
        );
        let watcher = watch_breaker(&grag);
        let churn = Instant::now();
        sim.faults().deploy_churn_for(refused, flaky).await;
        println!("   {} the deploy starts", stamp(churn));
        open_the_breaker(&grag, kb, churn, breaker).await?;
        println!(
            "   … the probe loop takes over: GET /workspaces/health every {} ms, then one canary read",
            breaker.probe_interval.as_millis()
        );
        let seen = tokio::time::timeout(Duration::from_secs(10), watcher)
            .await
            .context("the breaker did not close within 10 s")?
            .context("the breaker watcher")?;
        timeline(sim, churn, &seen);
        let closed_at = seen.last().map_or(churn, |(at, _)| *at);
        after_the_close(&grag, kb, churn, closed_at, breaker).await?;
        walk.churned = Some(grag);
        Ok(())
    }
    .boxed()
}

/// The breaker as a UI sees it: its state, sampled every millisecond, until
/// it has closed again.
fn watch_breaker(grag: &Grag) -> JoinHandle<Seen> {
    let grag = grag.clone();
    tokio::spawn(async move {
        let mut seen: Seen = Vec::new();
        loop {
            let state = grag.runtime().circuit_state().as_str();
            if seen.last().is_none_or(|(_, last)| *last != state) {
                seen.push((Instant::now(), state));
            }
            if state == "closed" && seen.len() > 1 {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
}

/// Three distinct endpoints fail at the connection level (R1 retries each)
/// and open the breaker; an interactive call then fails fast.
async fn open_the_breaker(
    grag: &Grag,
    kb: &KbId,
    churn: Instant,
    breaker: &BreakerPolicy,
) -> Result<()> {
    match grag.workspaces().list_documents(kb).await {
        Ok(_) => anyhow::bail!("list_documents answered during the refusal"),
        Err(e) => failed(churn, "GET /workspaces/api/v1/kbs/kb-demo/documents", &e),
    }
    match grag.workspaces().get_settings().await {
        Ok(_) => anyhow::bail!("get_settings answered during the refusal"),
        Err(e) => failed(churn, "GET /workspaces/api/v1/settings", &e),
    }
    match grag.ledger().spend(&SpendGrouping::Service).await {
        Ok(_) => anyhow::bail!("spend answered during the refusal"),
        Err(e) => failed(churn, "GET /ledger/api/v1/ledger/spend", &e),
    }
    let state = grag.runtime().circuit_state().as_str();
    anyhow::ensure!(
        state == "open",
        "the breaker is {state} after three endpoints failed"
    );
    println!(
        "   {} breaker open: 3 distinct endpoints failed within {:.1} s (30 s at platform speed)",
        stamp(churn),
        breaker.window.as_secs_f64()
    );
    // Interactive calls now fail fast, with the state text for the UI.
    let asked = Instant::now();
    let query = SearchRequest::new(QUESTION, 2);
    let pipeline = PipelineId::parse("demo-churn")?;
    match grag.ai_gateway(&pipeline).search_rerank(kb, &query).await {
        Ok(_) => anyhow::bail!("search went through an open breaker"),
        Err(e) => println!(
            "   {} ✗ search (interactive): {} ({}) in {} µs, {} attempts, nothing sent — „{}“",
            stamp(churn),
            e.class_name(),
            e.row(),
            asked.elapsed().as_micros(),
            e.attempts(),
            e.message().unwrap_or("")
        ),
    }
    if let Some(chat) = grag.runtime().feature_state("chat") {
        println!(
            "   {} feature chat: {} — „{}“",
            stamp(churn),
            chat.state,
            chat.copy.unwrap_or("")
        );
    }
    Ok(())
}

/// What the platform saw since the churn began, merged with the breaker
/// states seen client-side.
fn timeline(sim: &Sim, churn: Instant, seen: &Seen) {
    let log = sim.log();
    let mut timeline: Vec<(Instant, String)> = log
        .notes()
        .into_iter()
        .filter(|n| n.at >= churn)
        .map(|n| (n.at, format!("platform: {}", n.what)))
        .collect();
    let mut probes = 0;
    let mut canaries = Vec::new();
    for e in log.entries().into_iter().filter(|e| e.arrived >= churn) {
        let status = e.status.map_or("—".to_owned(), |s| s.to_string());
        let churned = if e.has_fault("deploy_churn") {
            " (deploy churn)"
        } else {
            ""
        };
        let line = match e.operation {
            Some("health") => {
                probes += 1;
                format!("platform: probe  {} {} → {status}", e.method, e.path)
            }
            Some("list_kbs") => {
                canaries.push(e.status);
                let outcome = if e.status == Some(200) {
                    "closes the breaker"
                } else {
                    "the breaker reopens"
                };
                format!(
                    "platform: canary {} {} → {status}{churned}: {outcome}",
                    e.method, e.path
                )
            }
            _ => format!(
                "platform: call   {} {} → {status}{churned}",
                e.method, e.path
            ),
        };
        timeline.push((e.arrived, line));
    }
    timeline.extend(
        seen.iter()
            .skip(1)
            .map(|(at, state)| (*at, format!("breaker {state} (as the client sees it)"))),
    );
    timeline.sort_by_key(|(at, _)| *at);
    println!("   what the platform saw meanwhile, and the breaker as the client saw it:");
    for (at, what) in &timeline {
        println!("   {} {what}", stamp_at(churn, *at));
    }
    println!(
        "   Probes during the refusal were refused and never reached the platform; {probes} did.\n   \
         After each pair of healthy probes exactly one canary read went out: {} canary read(s), answered {}.",
        canaries.len(),
        canaries
            .iter()
            .map(|s| s.map_or("—".to_owned(), |s| s.to_string()))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// Deploy-suspected after the close: the UI says the first answers may be
/// slow, and a search goes through again.
async fn after_the_close(
    grag: &Grag,
    kb: &KbId,
    churn: Instant,
    closed_at: Instant,
    breaker: &BreakerPolicy,
) -> Result<()> {
    anyhow::ensure!(
        grag.runtime().deploy_suspected(),
        "not deploy-suspected after the close"
    );
    if let Some(chat) = grag.runtime().feature_state("chat") {
        println!(
            "   {} deploy-suspected ({:.1} s here, 2 min at platform speed): feature chat is {} — „{}“",
            stamp(churn),
            breaker.deploy_suspected.as_secs_f64(),
            chat.state,
            chat.copy.unwrap_or("")
        );
    }
    let query = SearchRequest::new(QUESTION, 2);
    let pipeline = PipelineId::parse("demo-churn")?;
    let hits = grag
        .ai_gateway(&pipeline)
        .search_rerank(kb, &query)
        .await?
        .results;
    println!(
        "   {} ✓ search: 200, {} hit(s), {:.2} s after the close (while deploy-suspected, search waits up to 1 min instead of 30 s)",
        stamp(churn),
        hits.len(),
        closed_at.elapsed().as_secs_f64()
    );
    Ok(())
}
