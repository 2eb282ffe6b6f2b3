//! The canary against the simulator, each step made to fail in turn: the
//! report must name the step, its row and the verdict.

mod common;

use std::time::Duration;

use common::harness::Setup;
use common::{Stage, sim_config};
use grag_sim::{Fault, Rule};
use grag_verify::Exit;
use grag_verify::canary::{self, CanaryReport, Outcome, STEPS};
use grag_verify::progress::Progress;

const JOB: Duration = Duration::from_secs(2);

async fn canary(stage: &Stage) -> CanaryReport {
    canary::run(&stage.grag, true, &Progress::quiet()).await
}

fn step<'r>(report: &'r CanaryReport, name: &str) -> &'r canary::StepReport {
    report.steps.iter().find(|s| s.step == name).unwrap()
}

#[tokio::test]
async fn a_healthy_platform_passes_every_step_and_a_rerun_adds_nothing() {
    let stage = Stage::direct(sim_config(Duration::from_millis(50))).await;
    let first = canary(&stage).await;
    let names: Vec<&str> = first.steps.iter().map(|s| s.step).collect();
    assert_eq!(names, STEPS);
    for s in &first.steps {
        assert_eq!(s.outcome, Outcome::Ok, "{first}");
        assert!(s.request_id.is_some(), "{first}");
    }
    assert_eq!(
        (first.verdict.exit, first.verdict.failing_step),
        (Exit::Ok, None)
    );
    assert!(
        step(&first, "search")
            .detail
            .contains("the fixture among them"),
        "{first}"
    );

    let again = canary(&stage).await;
    assert!(
        step(&again, "kb").detail.contains("already there (409)"),
        "{again}"
    );
    assert!(
        step(&again, "upload").detail.contains("already there"),
        "{again}"
    );
    assert_eq!(again.verdict.exit, Exit::Ok, "{again}");
    let uploads = stage.sim.log().of("upload_document");
    let statuses: Vec<Option<u16>> = uploads.iter().map(|e| e.status).collect();
    assert_eq!(
        statuses,
        [Some(201), Some(409)],
        "the re-run's upload is the same document"
    );
}

#[tokio::test]
async fn a_dark_search_fails_the_search_step_as_a_platform_fault() {
    let stage = Stage::direct(sim_config(Duration::from_millis(50))).await;
    stage
        .sim
        .faults()
        .push(Rule::new(Fault::Dark).on("search_rerank"));
    let report = canary(&stage).await;
    let search = step(&report, "search");
    assert_eq!(search.outcome, Outcome::Failed, "{report}");
    assert_eq!(
        (search.row, search.class),
        (Some("T13"), Some("feature_dark")),
        "{report}"
    );
    assert!(search.request_id.is_some(), "{report}");
    assert_eq!(report.verdict.failing_step, Some("search"));
    assert_eq!(report.verdict.exit, Exit::Platform);
    assert!(
        report
            .verdict
            .summary
            .starts_with("platform fault: `search` failed on T13"),
        "{report}"
    );
    // The steps after it still ran.
    assert_eq!(step(&report, "chat").outcome, Outcome::Ok, "{report}");
}

#[tokio::test]
async fn a_402_on_the_chat_fails_the_chat_step_as_budget_exhausted() {
    let stage = Stage::direct(sim_config(Duration::from_millis(50))).await;
    stage
        .sim
        .faults()
        .push(Rule::new(Fault::Budget).on("chat_stream"));
    let report = canary(&stage).await;
    let chat = step(&report, "chat");
    assert_eq!(chat.outcome, Outcome::Failed, "{report}");
    assert_eq!(
        (chat.row, chat.class),
        (Some("T5"), Some("budget_exhausted")),
        "{report}"
    );
    assert_eq!(report.verdict.failing_step, Some("chat"));
    assert_eq!(report.verdict.exit, Exit::Platform);
    assert!(
        report.verdict.summary.starts_with("platform fault: `chat`"),
        "{report}"
    );
}

#[tokio::test]
async fn a_deploy_under_way_is_a_platform_regression_named_at_the_first_step() {
    let stage = Stage::direct(sim_config(Duration::from_millis(50))).await;
    stage.sim.faults().deploy_churn_stepped(None).await;
    let report = canary(&stage).await;
    let health = step(&report, "health");
    assert_eq!(health.outcome, Outcome::Failed, "{report}");
    assert_eq!(
        (health.row, health.class),
        (Some("T1"), Some("connection")),
        "{report}"
    );
    assert!(report.health_after.is_some(), "{report}");
    assert_eq!(report.verdict.failing_step, Some("health"));
    assert_eq!(report.verdict.exit, Exit::Platform);
    assert!(
        report.verdict.summary.starts_with(
            "platform regression: `health` failed on T1 connection, while /health fails"
        ),
        "{report}"
    );
    assert!(
        report.steps.iter().any(|s| s.breaker == "open"),
        "refused connections on distinct routes open the breaker: {report}"
    );
}

#[tokio::test]
async fn behind_nginx_defaults_the_ingest_step_degrades_on_buffering() {
    let Some(stage) = Stage::behind(sim_config(JOB), Setup::plesk_defaults()).await else {
        return;
    };
    let report = canary(&stage).await;
    let ingest = step(&report, "ingest");
    assert_eq!(ingest.outcome, Outcome::Degraded, "{report}");
    assert!(ingest.detail.contains("a proxy buffers it"), "{report}");
    assert_eq!(step(&report, "chat").outcome, Outcome::Degraded, "{report}");
    assert_eq!(report.verdict.failing_step, Some("ingest"));
    assert_eq!(report.verdict.exit, Exit::Platform);
    assert!(
        report
            .verdict
            .summary
            .starts_with("platform fault: `ingest` degraded"),
        "{report}"
    );
}

#[tokio::test]
async fn behind_nginx_without_buffering_the_canary_passes() {
    let Some(stage) = Stage::behind(sim_config(JOB), Setup::unbuffered()).await else {
        return;
    };
    let report = canary(&stage).await;
    assert_eq!(report.verdict.exit, Exit::Ok, "{report}");
}

#[tokio::test]
async fn read_only_the_canary_writes_nothing_and_says_what_it_skipped() {
    let stage = Stage::direct(sim_config(Duration::from_millis(50))).await;
    let report = canary::run(&stage.grag, false, &Progress::quiet()).await;
    assert!(!report.writes);
    assert_eq!(step(&report, "kb").outcome, Outcome::Ok, "{report}");
    assert!(step(&report, "kb").detail.contains("absent"), "{report}");
    for skipped in ["upload", "ingest", "search", "chat"] {
        assert_eq!(step(&report, skipped).outcome, Outcome::Skipped, "{report}");
    }
    let writes = stage
        .sim
        .log()
        .entries()
        .iter()
        .filter(|e| e.method != "GET")
        .count();
    assert_eq!(writes, 0, "{report}");
}

/// The operator's command in production: read from the backend's own
/// environment, the client refuses the keyless BFF lane unsent, so the
/// canary names the steps on it as not run, with the reason, and judges
/// the rest (a refusal of our own would otherwise fail it as our side's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_production_the_keyless_lane_steps_are_not_run_and_the_rest_is_judged() {
    let sim = grag_sim::embedded::start(grag_sim::embedded::sim_config(1000)).await;
    let url = sim.url();
    let run = |production: &'static str| {
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_grag-verify"))
                .args(["canary", "--write", "--json"])
                .env("GRAG_URL", url)
                .env("GRAG_API_KEY", grag_sim::embedded::KEY)
                .env("GRAG_TENANT", grag_sim::embedded::TENANT)
                .env("GRAG_PRODUCTION", production)
                .env_remove("GRAG_REDIS_URL")
                .output()
                .expect("grag-verify runs")
        })
    };
    let out = run("1").await.unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    let outcome = |name: &str| {
        let step = report["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["step"] == name)
            .unwrap_or_else(|| panic!("no {name} step: {report:#}"));
        (
            step["outcome"].as_str().unwrap().to_owned(),
            step["detail"].as_str().unwrap().to_owned(),
        )
    };
    for name in ["ingest", "chat"] {
        let (outcome, detail) = outcome(name);
        assert_eq!(outcome, "skipped", "{name}: {report:#}");
        assert!(
            detail.starts_with("not run: /next/api/") && detail.contains("refused in production"),
            "{name} says why: {detail}"
        );
    }
    for name in ["health", "kb", "upload", "search", "ledger"] {
        assert_eq!(outcome(name).0, "ok", "{name}: {report:#}");
    }
    assert!(
        !sim.log()
            .entries()
            .iter()
            .any(|e| e.path.starts_with("/next/api/")),
        "nothing was sent on the keyless lane"
    );

    // Outside production the same run follows the ingest and chats.
    let out = run("0").await.unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    assert!(
        report["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["outcome"] == "ok"),
        "{report:#}"
    );
}
