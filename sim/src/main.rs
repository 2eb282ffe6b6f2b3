//! `cargo run -p grag-sim -- [--port 8080] [--scenario NAME] [--scale F] [--api-key KEY] [--strict-tenant]`
//!
//! The simulator as a stand-alone server, until Ctrl-C.

use std::process::ExitCode;
use std::time::Duration;

use grag_sim::{Fault, RetryAfter, Rule, Sim, SimConfig};

const SCENARIOS: &[(&str, &str)] = &[
    ("healthy", "no faults (the default)"),
    (
        "deploy-churn",
        "a deploy every --every seconds (default 120, first after 10): ~20 s refused, ~10 s of 401/404/422",
    ),
    (
        "cold-start",
        "the first call of each model route waits the cold-start delay (40 s)",
    ),
    (
        "dark-agents",
        "the agent plane is not running: 503 on the agent stream",
    ),
    (
        "rate-limited",
        "every search/rerank call answers 429 with Retry-After: 2 after the first 5",
    ),
    ("budget", "every ai-gateway call answers 402"),
    (
        "buffered",
        "every SSE stream is held back until it ends (proxy buffering)",
    ),
    (
        "drifted",
        "each service's /<service>/openapi.json has routes, fields and enum values moved",
    ),
];

fn usage() -> String {
    let mut s = String::from(
        "usage: grag-sim [--port N] [--scenario NAME] [--scale F] [--every SECS] [--api-key KEY] [--strict-tenant]\n\nscenarios:\n",
    );
    for (name, doc) in SCENARIOS {
        s.push_str(&format!("  {name:<13} {doc}\n"));
    }
    s.push_str(
        "\nadmin routes: GET/DELETE /_sim/log, GET/POST/DELETE /_sim/faults, POST /_sim/churn,\n",
    );
    s.push_str("              POST /_sim/agent-plane, POST /_sim/cold-start, GET /_sim/config, POST /_sim/reset\n");
    s
}

struct Args {
    port: u16,
    scenario: String,
    scale: f64,
    every: u64,
    api_key: Option<String>,
    strict_tenant: bool,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut out = Args {
        port: 8080,
        scenario: "healthy".into(),
        scale: 1.0,
        every: 120,
        api_key: None,
        strict_tenant: false,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--port" => out.port = value()?.parse().map_err(|e| format!("--port: {e}"))?,
            "--scenario" => out.scenario = value()?,
            "--scale" => {
                out.scale = value()?.parse().map_err(|e| format!("--scale: {e}"))?;
                if !(out.scale.is_finite() && out.scale > 0.0) {
                    return Err("--scale must be positive".into());
                }
            }
            "--every" => out.every = value()?.parse().map_err(|e| format!("--every: {e}"))?,
            "--api-key" => out.api_key = Some(value()?),
            "--strict-tenant" => out.strict_tenant = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if !SCENARIOS.iter().any(|(n, _)| *n == out.scenario) {
        return Err(format!("unknown scenario {}", out.scenario));
    }
    Ok(out)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse(&args) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("error: {e}\n");
            }
            eprint!("{}", usage());
            return ExitCode::from(2);
        }
    };
    let mut config = SimConfig::scaled(args.scale).with_port(args.port);
    config.api_key = args.api_key;
    config.allow_default_tenant = !args.strict_tenant;
    config.drifted_documents = args.scenario == "drifted";
    let sim = match Sim::start(config).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: cannot listen on 127.0.0.1:{}: {e}", args.port);
            return ExitCode::FAILURE;
        }
    };
    let faults = sim.faults();
    match args.scenario.as_str() {
        "cold-start" => faults.cold_start(),
        "dark-agents" => faults.set_agent_plane(false),
        "rate-limited" => {
            faults.push(
                Rule::new(Fault::RateLimited {
                    retry_after: Some(RetryAfter::Seconds(2)),
                })
                .on("search_rerank")
                .skip(5),
            );
        }
        "budget" => {
            faults.push(Rule::new(Fault::Budget).on("service:ai-gateway"));
        }
        "buffered" => {
            for op in ["orchestrator_events", "chat_stream", "agent_session_stream"] {
                faults.push(Rule::new(Fault::SseBuffered).on(op));
            }
        }
        "deploy-churn" => {
            let every = Duration::from_secs(args.every).mul_f64(args.scale);
            let first = Duration::from_secs(10).mul_f64(args.scale);
            let f = faults.clone();
            tokio::spawn(async move {
                tokio::time::sleep(first).await;
                loop {
                    println!("grag-sim: deploy starts (connections refused, then 401/404/422)");
                    f.deploy_churn().await;
                    tokio::time::sleep(every).await;
                }
            });
        }
        _ => {}
    }
    println!(
        "grag-sim listening on {} (scenario {}, time scale {})",
        sim.url(),
        args.scenario,
        args.scale
    );
    println!(
        "  GRAG_URL={} GRAG_TENANT=<tenant> GRAG_API_KEY=<any>",
        sim.url()
    );
    println!("  request log: GET {}/_sim/log   Ctrl-C stops", sim.url());
    let _ = tokio::signal::ctrl_c().await;
    println!("grag-sim: stopping");
    sim.stop().await;
    ExitCode::SUCCESS
}
