//! The read-only part of the demo against the platform named by `GRAG_URL`.

use std::time::Duration;

use anyhow::{Context, Result};
use grag_client::types::SpendGrouping;
use grag_client::{Config, Grag};

use super::step;

/// The read-only part against the platform named by the environment.
pub(super) async fn read_only() -> Result<()> {
    let config = Config::from_env().context("GRAG_URL, GRAG_API_KEY and GRAG_TENANT")?;
    let tenant = config.tenant().clone();
    let grag = Grag::new(config)?;
    let url = std::env::var("GRAG_URL").unwrap_or_default();
    println!("GRAG demo, read-only, against {url} as tenant `{tenant}`");
    let mut failed = 0;
    let mut report = |what: &str, e: grag_client::Error| {
        failed += 1;
        println!(
            "   ✗ {what}: {} ({}){}",
            e.class_name(),
            e.row(),
            e.message().map(|m| format!(" — „{m}“")).unwrap_or_default()
        );
        println!("     {e}");
    };

    step(1, "Is the platform up?", "GET /workspaces/health  (public)");
    match tokio::time::timeout(Duration::from_secs(10), grag.workspaces().health()).await {
        Ok(Ok(h)) => println!("   → {}", h.status),
        Ok(Err(e)) => report("health", e),
        Err(_) => println!("   ✗ no answer within 10 s"),
    }

    step(
        2,
        "Knowledge bases of the tenant",
        "GET /workspaces/api/v1/kbs",
    );
    let mut first = None;
    match grag.workspaces().list_kbs().await {
        Ok(kbs) => {
            println!("   → {} knowledge bases", kbs.len());
            for kb in kbs.iter().take(10) {
                println!("     {}  {}", kb.kb_id, kb.name.as_deref().unwrap_or(""));
            }
            first = kbs.into_iter().next().map(|k| k.kb_id);
        }
        Err(e) => report("list_kbs", e),
    }

    let mut n = 3;
    if let Some(kb) = first {
        step(
            n,
            &format!("Documents of {kb}"),
            &format!("GET /workspaces/api/v1/kbs/{kb}/documents"),
        );
        match grag.workspaces().list_documents(&kb).await {
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
            Err(e) => report("list_documents", e),
        }
        n += 1;
    }

    step(
        n,
        "The tenant's spend",
        "GET /ledger/api/v1/ledger/spend?group_by=service|provider",
    );
    for group in [SpendGrouping::Service, SpendGrouping::Provider] {
        match grag.ledger().spend(&group).await {
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
            Err(e) => report("spend", e),
        }
    }
    println!();
    anyhow::ensure!(failed == 0, "{failed} read-only calls failed");
    println!("Done: every read-only call answered.");
    Ok(())
}
