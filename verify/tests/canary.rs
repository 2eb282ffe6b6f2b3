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
