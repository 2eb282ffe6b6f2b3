//! `grag-demo` (run by `cargo xtask demo`): a narrated walk through the generated client.
//!
//! Without `GRAG_URL` it starts the GRAG simulator in-process (time running
//! ten times faster than the platform's) and walks the whole flow: KB, upload
//! and ingest progress, documents, search, chat, ledger, and a deploy churn
//! that takes the breaker through open, probes, canary and close; then, when
//! Redis is reachable (`GRAG_REDIS_URL`, or a `redis-server` it starts),
//! three replicas sharing one budget, before and after Redis stops. With `GRAG_URL`,
//! `GRAG_API_KEY` and `GRAG_TENANT` it runs only the read-only part against
//! that platform.

mod churn;
mod fleet;
mod live;
mod replay;
mod scene;
mod stage;
mod walk;

use std::process::ExitCode;

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: no tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let live = std::env::var("GRAG_URL").is_ok_and(|u| !u.is_empty());
    let result = runtime.block_on(async {
        if live {
            live::read_only().await
        } else {
            walk::simulated().await
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("\ndemo failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}
