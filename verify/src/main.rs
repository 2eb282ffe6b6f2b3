//! `grag-verify canary|probe|drift`: the report on stdout, progress on
//! stderr, exit 0 when all is well, 1 when the platform is at fault, 2 when
//! our side is.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use grag_client::JobId;
use grag_verify::drift::Override;
use grag_verify::probe::{MAX_BURST, ProbeOptions};
use grag_verify::progress::Progress;
use grag_verify::target::{Scenario, Target};
use grag_verify::{Exit, canary, drift, probe};

/// Checks a GRAG deploy through the generated client. Without GRAG_URL it
/// runs against the embedded simulator; with GRAG_URL, GRAG_API_KEY and
/// GRAG_TENANT against that platform.
#[derive(Parser)]
#[command(name = "grag-verify", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The report as JSON on stdout.
    #[arg(long, global = true)]
    json: bool,
    /// The embedded simulator's scenario (ignored with GRAG_URL).
    #[arg(long, global = true, value_enum, default_value = "healthy")]
    scenario: Scenario,
    /// Allow writes against GRAG_URL (always allowed against the simulator).
    #[arg(long, global = true)]
    write: bool,
}

#[derive(Subcommand)]
enum Command {
    /// The knoll flow end to end: KB, fixture upload and ingest, search, chat, ledger.
    Canary,
    /// Appendix B: Retry-After on 429, and whether the SSE lanes are buffered.
    Probe {
        /// Send up to N GET /health (unauthenticated) until the first 429.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=MAX_BURST as i64))]
        burst: Option<u32>,
        /// A file of the backend's metrics (Prometheus text) to read 429 counts from.
        #[arg(long)]
        metrics: Vec<std::path::PathBuf>,
        /// A running job to follow instead of the canary's.
        #[arg(long)]
        job: Option<String>,
    },
    /// The spec against each service's own OpenAPI document.
    Drift {
        /// [SERVICE=]FILE|URL: a document for one service, or one for the whole platform.
        #[arg(long)]
        openapi: Vec<Override>,
        /// Only this service.
        #[arg(long)]
        service: Option<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: no tokio runtime: {e}");
            return ExitCode::from(Exit::Ours.code());
        }
    };
    let exit = runtime.block_on(run(cli));
    ExitCode::from(exit.code())
}

async fn run(cli: Cli) -> Exit {
    let progress = Progress::stderr();
    let target = match Target::connect(cli.scenario).await {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Ours;
        }
    };
    progress.note(&format!(
        "against {} ({})",
        target.origin,
        if target.live {
            "GRAG_URL"
        } else {
            "the embedded simulator"
        }
    ));
    let writes = cli.write || !target.live;
    let exit = match cli.command {
        Command::Canary => {
            let report = canary::run(&target.grag, writes, &progress).await;
            print(cli.json, &report, &report);
            report.verdict.exit
        }
        Command::Probe {
            burst,
            metrics,
            job,
        } => match probe_options(burst, &metrics, job, writes) {
            Ok(options) => {
                let report = probe::run(&target.grag, &options, &progress).await;
                print(cli.json, &report, &report);
                report.exit()
            }
            Err(e) => {
                eprintln!("error: {e}");
                Exit::Ours
            }
        },
        Command::Drift { openapi, service } => {
            match drift::run(&target.origin, &openapi, service.as_deref(), &progress).await {
                Ok(report) => {
                    print(cli.json, &report, &report);
                    report.exit()
                }
                Err(e) => {
                    eprintln!("error: {}", e.0);
                    Exit::Ours
                }
            }
        }
    };
    target.stop().await;
    exit
}

fn probe_options(
    burst: Option<u32>,
    metrics: &[std::path::PathBuf],
    job: Option<String>,
    writes: bool,
) -> Result<ProbeOptions, String> {
    let mut texts = Vec::new();
    for path in metrics {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        texts.push(text);
    }
    let job = job
        .map(|j| JobId::parse(&j).map_err(|e| format!("--job: {e}")))
        .transpose()?;
    Ok(ProbeOptions {
        burst,
        metrics: texts,
        job,
        writes,
    })
}

fn print(json: bool, value: &impl serde::Serialize, text: &impl std::fmt::Display) {
    if json {
        match serde_json::to_string_pretty(value) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("error: the report does not serialize: {e}"),
        }
    } else {
        print!("{text}");
    }
}
