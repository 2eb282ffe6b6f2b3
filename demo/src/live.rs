//! The read-only part of the demo against the platform named by `GRAG_URL`:
//! a table of scenes that report a failed call and go on.

use std::time::Duration;

use anyhow::{Context, Result};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use grag_client::types::SpendGrouping;
use grag_client::{Config, Grag, KbId};

use crate::scene::{Scene, Stage, play};

/// The read-only walk, scene by scene; the documents scene needs a
/// knowledge base the tenant has.
const SCENES: &[Scene<Live>] = &[
    Scene {
        say: "Is the platform up?",
        route: "GET /workspaces/health  (public)",
        act: health,
    },
    Scene {
        say: "Knowledge bases of the tenant",
        route: "GET /workspaces/api/v1/kbs",
        act: kbs,
    },
    Scene {
        say: "Documents of {kb}",
        route: "GET /workspaces/api/v1/kbs/{kb}/documents",
        act: documents,
    },
    Scene {
        say: "The tenant's spend",
        route: "GET /ledger/api/v1/ledger/spend?group_by=service|provider",
        act: spend,
    },
];

/// The client on the platform, what it found, and how many calls failed.
struct Live {
    grag: Grag,
    first: Option<KbId>,
    failed: usize,
}

impl Stage for Live {
    fn kb(&self) -> Option<String> {
        self.first.as_ref().map(ToString::to_string)
    }
}

impl Live {
    /// A failed call, as the UI would learn it; the walk goes on.
    fn report(&mut self, what: &str, e: grag_client::Error) {
        self.failed += 1;
        println!(
            "   ✗ {what}: {} ({}){}",
            e.class_name(),
            e.row(),
            e.message().map(|m| format!(" — „{m}“")).unwrap_or_default()
        );
        println!("     {e}");
    }
}

/// The read-only part against the platform named by the environment.
pub(crate) async fn read_only() -> Result<()> {
    let config = Config::from_env().context("GRAG_URL, GRAG_API_KEY and GRAG_TENANT")?;
    let tenant = config.tenant().clone();
    let grag = Grag::new(config)?;
    let url = std::env::var("GRAG_URL").unwrap_or_default();
    println!("GRAG demo, read-only, against {url} as tenant `{tenant}`");
    let mut live = Live {
        grag,
        first: None,
        failed: 0,
    };
    play(&mut live, SCENES).await?;
    println!();
    anyhow::ensure!(live.failed == 0, "{} read-only calls failed", live.failed);
    println!("Done: every read-only call answered.");
    Ok(())
}

fn health(live: &mut Live) -> BoxFuture<'_, Result<()>> {
    async move {
        match tokio::time::timeout(Duration::from_secs(10), live.grag.workspaces().health()).await {
            Ok(Ok(h)) => println!("   → {}", h.status),
            Ok(Err(e)) => live.report("health", e),
            Err(_) => println!("   ✗ no answer within 10 s"),
        }
        Ok(())
    }
    .boxed()
}

fn kbs(live: &mut Live) -> BoxFuture<'_, Result<()>> {
    async move {
        match live.grag.workspaces().list_kbs().await {
            Ok(kbs) => {
                println!("   → {} knowledge bases", kbs.len());
                for kb in kbs.iter().take(10) {
                    println!("     {}  {}", kb.kb_id, kb.name.as_deref().unwrap_or(""));
                }
                live.first = kbs.into_iter().next().map(|k| k.kb_id);
            }
            Err(e) => live.report("list_kbs", e),
        }
        Ok(())
    }
    .boxed()
}

fn documents(live: &mut Live) -> BoxFuture<'_, Result<()>> {
    async move {
        let kb = live.first.clone().context("no knowledge base to list")?;
        match live.grag.workspaces().list_documents(&kb).await {
            Ok(docs) => {
                println!("   → {} documents", docs.len());
                for d in docs.iter().take(10) {
                    println!(
                        "     {}  {}  {}",
                        d.document_id,
                        d.filename,
                        d.status.as_deref().unwrap_or("")
                    );
                }
            }
            Err(e) => live.report("list_documents", e),
        }
        Ok(())
    }
    .boxed()
}

fn spend(live: &mut Live) -> BoxFuture<'_, Result<()>> {
    async move {
        for group in [SpendGrouping::Service, SpendGrouping::Provider] {
            match live.grag.ledger().spend(&group).await {
                Ok(spend) => {
                    let items: Vec<String> = spend
                        .items
                        .iter()
                        .map(|i| format!("{} {:.4}", i.key, i.cost))
                        .collect();
                    let items = if items.is_empty() {
                        "nothing yet".to_owned()
                    } else {
                        items.join(", ")
                    };
                    println!("   → by {}: {items}", group.as_str());
                }
                Err(e) => live.report("spend", e),
            }
        }
        Ok(())
    }
    .boxed()
}
