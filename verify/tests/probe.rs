//! The probe's answers: Retry-After on 429 from the client's counter, a
//! metrics text and a burst; buffering per lane through a real nginx with
//! buffering on and off.

mod common;

use std::time::Duration;

use common::harness::Setup;
use common::{Stage, sim_config};
use grag_sim::{Fault, RetryAfter, Rule};
use grag_verify::Exit;
use grag_verify::probe::{self, Answer, ProbeOptions, ProbeReport, count_429};
use grag_verify::progress::Progress;

const JOB: Duration = Duration::from_secs(2);

async fn probe(stage: &Stage, options: ProbeOptions) -> ProbeReport {
    probe::run(&stage.grag, &options, &Progress::quiet()).await
}

fn writing() -> ProbeOptions {
    ProbeOptions {
        writes: true,
        ..ProbeOptions::default()
    }
}

fn answers(report: &ProbeReport) -> Vec<Answer> {
    report.items.iter().map(|i| i.answer).collect()
}

#[tokio::test]
async fn behind_nginx_defaults_both_lanes_are_buffered() {
    let Some(stage) = Stage::behind(sim_config(JOB), Setup::plesk_defaults()).await else {
        return;
    };
    let report = probe(&stage, writing()).await;
    assert_eq!(
        answers(&report),
        [Answer::NotSeen, Answer::Yes, Answer::Yes],
        "{report}"
    );
    assert!(
        report.items[1]
            .evidence
            .iter()
            .any(|e| e == "the client's was_buffered(): true"),
        "{report}"
    );
    assert_eq!(report.exit(), Exit::Platform);
}

#[tokio::test]
async fn behind_nginx_without_buffering_both_lanes_are_live() {
    let Some(stage) = Stage::behind(sim_config(JOB), Setup::unbuffered()).await else {
        return;
    };
    let report = probe(&stage, writing()).await;
    assert_eq!(
        answers(&report),
        [Answer::NotSeen, Answer::No, Answer::No],
        "{report}"
    );
    assert_eq!(report.exit(), Exit::Ok);
}

#[tokio::test]
async fn read_only_the_chat_lane_is_not_seen_and_nothing_is_written() {
    let stage = Stage::direct(sim_config(Duration::from_millis(50))).await;
    let report = probe(&stage, ProbeOptions::default()).await;
    assert_eq!(answers(&report), [Answer::NotSeen; 3], "{report}");
    assert!(stage.sim.log().entries().iter().all(|e| e.method == "GET"));
}

#[tokio::test]
async fn an_ended_canary_job_is_not_followed_but_named() {
    let stage = Stage::direct(sim_config(Duration::from_millis(50))).await;
    let first = probe(&stage, writing()).await;
    assert_eq!(first.items[1].answer, Answer::No, "{first}");
    // The fixture is there now and its job has ended: nothing to watch.
    let again = probe(&stage, writing()).await;
    assert_eq!(again.items[1].answer, Answer::NotSeen, "{again}");
    assert!(
        again.items[1].evidence[0].contains("is completed; pass --job"),
        "{again}"
    );
}

#[tokio::test]
async fn a_burst_stops_at_the_first_429_and_reads_its_retry_after() {
    let stage = Stage::direct(sim_config(Duration::from_millis(50))).await;
    stage.sim.faults().push(
        Rule::new(Fault::RateLimited {
            retry_after: Some(RetryAfter::Seconds(3)),
        })
        .on("health")
        .skip(12),
    );
    let options = ProbeOptions {
        burst: Some(probe::MAX_BURST),
        ..ProbeOptions::default()
    };
    let report = probe(&stage, options).await;
    let item = &report.items[0];
    assert_eq!(item.answer, Answer::Yes, "{report}");
    assert!(
        item.evidence.iter().any(|e| e.ends_with("Retry-After: 3")),
        "{report}"
    );
    // Waves of 8: the 13th request is in the second wave, and no third is sent.
    assert_eq!(stage.sim.log().count("health"), 16, "{report}");
}

#[tokio::test]
async fn a_burst_meeting_a_bare_429_answers_no() {
    let stage = Stage::direct(sim_config(Duration::from_millis(50))).await;
    stage
        .sim
        .faults()
        .push(Rule::new(Fault::RateLimited { retry_after: None }).on("health"));
    let options = ProbeOptions {
        burst: Some(5),
        ..ProbeOptions::default()
    };
    let report = probe(&stage, options).await;
    assert_eq!(report.items[0].answer, Answer::No, "{report}");
    assert_eq!(report.exit(), Exit::Platform);
}

#[test]
fn metrics_texts_are_read_by_the_counters_name_and_label() {
    let name = grag_client::policy::POLICY.metrics.rate_limited;
    let text = format!(
        "# TYPE {name} counter\n{name}_total{{retry_after=\"present\"}} 4\n{name}_total{{retry_after=\"absent\"}} 1\nother_total 9\n"
    );
    assert_eq!(count_429(&text), (4, 1));
    assert_eq!(count_429("nothing here"), (0, 0));
}

/// In production the client refuses the keyless BFF lane unsent: both
/// buffering questions are not seen, each saying why, and nothing is sent
/// on the lane.
#[tokio::test]
async fn in_production_the_lanes_are_not_seen_and_say_why() {
    let stage = Stage::direct(sim_config(JOB)).await;
    let config = grag_client::Config::new(
        stage.sim.url(),
        grag_sim::embedded::KEY,
        grag_client::TenantId::parse(grag_sim::embedded::TENANT).unwrap(),
    )
    .production(true);
    let grag = grag_client::Grag::with_policy(config, common::policy()).unwrap();
    let report = probe::run(&grag, &writing(), &Progress::quiet()).await;
    assert_eq!(
        answers(&report)[1..],
        [Answer::NotSeen, Answer::NotSeen],
        "{report}"
    );
    for item in &report.items[1..] {
        assert!(
            item.evidence.iter().any(
                |e| e.starts_with("not run: /next/api/") && e.contains("refused in production")
            ),
            "{report}"
        );
    }
    assert_eq!(report.exit(), Exit::Ok, "{report}");
    assert!(
        !stage
            .sim
            .log()
            .entries()
            .iter()
            .any(|e| e.path.starts_with("/next/api/")),
        "nothing was sent on the keyless lane"
    );
}
