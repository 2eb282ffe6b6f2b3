//! The taxonomy rows whose cases are not one failing call: the success rows,
//! a remembered answer that expires, the class and column checks.

use std::time::Duration;

use grag_client::types::{ConvertRequest, CreateConversation, CreateKb};
use grag_client::{ConversationId, Created, DocumentId, ErrorClass, KbId, Progress, TenantId};
use grag_sim::{Fault, Rule};

use super::{MSG_DARK, assert_row, kb, score_request};
use crate::kit::resilience::{Env, policy, sim_config};

#[test]
fn every_class_of_the_taxonomy_is_a_variant_of_error_class() {
    let classes: Vec<&str> = policy()
        .taxonomy
        .iter()
        .map(|r| r.class)
        .filter(|c| *c != "success")
        .collect();
    for class in &classes {
        let variant = ErrorClass::ALL.iter().find(|c| c.as_str() == *class);
        let variant = *variant.unwrap_or_else(|| panic!("{class} has a variant"));
        assert_ne!(variant, ErrorClass::Unclassified, "{class} has a variant");
        assert_eq!(variant.as_str(), *class);
        assert_eq!(variant.to_string(), *class);
    }
    // One variant per class, in row order, and the fallback last.
    let mut distinct = classes.clone();
    distinct.dedup();
    let mut seen = Vec::new();
    distinct.retain(|c| {
        let new = !seen.contains(c);
        seen.push(*c);
        new
    });
    let all: Vec<&str> = ErrorClass::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(all[..all.len() - 1], distinct[..]);
    assert_eq!(ErrorClass::ALL.last(), Some(&ErrorClass::Unclassified));
}

#[tokio::test]
async fn t07_409_on_a_create_route_is_success_existing() {
    let env = Env::start().await;
    let body = CreateKb::new(kb("kb-methodik"), "Methodik");
    let first = env.grag.workspaces().create_kb(&body).await.unwrap();
    assert!(first.is_new(), "{first:?}");
    let second = env.grag.workspaces().create_kb(&body).await.unwrap();
    assert_eq!(second, Created::Existing);
    assert_eq!(env.statuses("create_kb"), [Some(201), Some(409)]);

    let conversation = CreateConversation::new(ConversationId::parse("conv-1").unwrap());
    let first = env
        .grag
        .workspaces()
        .create_conversation(&conversation)
        .await
        .unwrap();
    assert!(first.is_new(), "{first:?}");
    let second = env
        .grag
        .workspaces()
        .create_conversation(&conversation)
        .await
        .unwrap();
    assert_eq!(second, Created::Existing);
    assert_eq!(env.count("create_conversation"), 2, "a success: no retry");
    assert!(env.alert_names().is_empty(), "{:?}", env.alert_names());
}

#[tokio::test]
async fn t08_409_on_the_docfold_result_is_still_processing() {
    let mut config = sim_config();
    config.conversion_time = Duration::from_secs(30);
    let env = Env::with(config, policy()).await;
    let job = env
        .grag
        .docfold()
        .convert(&ConvertRequest::new(
            DocumentId::parse("doc-1").unwrap(),
            "gutachten.txt",
            "text/plain",
            "R3V0YWNodGVu",
        ))
        .await
        .unwrap();
    let progress = env.grag.docfold().result(&job.conversion_id).await.unwrap();
    assert_eq!(progress, Progress::Processing);
    assert_eq!(
        env.statuses("result"),
        [Some(409)],
        "poll again later: the call itself does not retry"
    );
    assert!(env.alert_names().is_empty(), "{:?}", env.alert_names());
}

#[tokio::test]
async fn t13_a_remembered_dark_answer_is_asked_again_after_the_scaled_5_min() {
    // The spec remembers a dark answer for 5 min (T13 `remember_for`); at
    // 1/100 that is 3 s, far more than the two calls in between take.
    let env = Env::start().await;
    let dark = env.sim.faults().dark("score");
    let e = env
        .grag
        .groundedness()
        .score(&score_request())
        .await
        .unwrap_err();
    assert_row(&e, "T13", "feature_dark", MSG_DARK);
    env.sim.faults().remove(dark);
    let e = env
        .grag
        .groundedness()
        .score(&score_request())
        .await
        .unwrap_err();
    assert_row(&e, "T13", "feature_dark", MSG_DARK);
    assert_eq!(env.count("score"), 1, "remembered meanwhile");

    let remembered = policy()
        .taxonomy
        .iter()
        .find(|r| r.row == "T13")
        .and_then(|r| r.remember_for)
        .expect("T13 remembers");
    assert_eq!(remembered, Duration::from_secs(3));
    tokio::time::sleep(remembered + Duration::from_millis(50)).await;
    env.grag
        .groundedness()
        .score(&score_request())
        .await
        .expect("after 5 min (scaled) the route is asked again");
    assert_eq!(env.count("score"), 2);
    assert_eq!(env.feature("groundedness"), ("available", None));
}

#[test]
fn the_unknown_outcome_column_is_the_documents_decision() {
    let unknown = |row: &str| {
        grag_client::policy::POLICY
            .taxonomy
            .iter()
            .find(|r| r.row == row)
            .unwrap_or_else(|| panic!("row {row}"))
            .outcome_unknown
    };
    for row in ["T1", "T12", "T20", "T23"] {
        assert!(unknown(row), "{row}: §5.3.3 in-flight ambiguity");
    }
    for row in ["T11", "T13", "T14", "T15", "T16", "T25", "T24", "T30"] {
        assert!(!unknown(row), "{row}: a refusal or an applied 2xx is known");
    }
}

#[tokio::test]
async fn t14_one_safety_refusal_then_the_retry_goes_through() {
    let env = Env::start().await;
    env.sim
        .faults()
        .push(Rule::new(Fault::Safety).on("score").once());
    env.grag
        .groundedness()
        .score(&score_request())
        .await
        .unwrap();
    assert_eq!(env.count("score"), 2, "R5: the one retry");
}

#[test]
fn t22_reserved_tenants_and_unsafe_ids_do_not_parse() {
    for reserved in ["default", "system", "canary"] {
        assert!(TenantId::parse(reserved).is_err(), "{reserved} is reserved");
    }
    assert!(KbId::parse("Kb 1").is_err());
    assert!(KbId::parse("../kbs").is_err());
}
