//! Spec enums on the wire: a value the spec lists decodes to its variant, one
//! it does not (a state the platform added after this client was built)
//! decodes to `Unknown` with the string kept, and both serialize back to
//! exactly the string the platform sent.

use grag_client::types::{
    ChatEvent, ChatStage, ChatTrace, JobState, JobStatus, SpendGrouping, StageStatus,
};
use grag_sim::embedded;
use sdk_runtime::StreamEvent;
use sdk_runtime::sse::SseEvent;
use serde_json::{Value, json};

/// A status hash as `pipeline_status` answers it.
fn status(state: impl Into<Value>) -> Value {
    json!({ "status": state.into(), "progress": 0.5 })
}

#[test]
fn a_known_state_decodes_to_its_variant() {
    for (wire, state) in [
        ("running", JobState::Running),
        ("completed", JobState::Completed),
        ("failed", JobState::Failed),
        ("cancelled", JobState::Cancelled),
    ] {
        let decoded: JobStatus = serde_json::from_value(status(wire)).unwrap();
        assert_eq!(decoded.status, state, "{wire}");
        assert_eq!(decoded.status.as_str(), wire);
        assert_eq!(JobState::from(wire), state);
    }
}

#[test]
fn an_unknown_state_is_kept_verbatim_and_round_trips() {
    let sent = status("waiting_for_gpu");
    let decoded: JobStatus = serde_json::from_value(sent.clone()).expect("never an error");
    assert_eq!(decoded.status, JobState::Unknown("waiting_for_gpu".into()));
    assert_eq!(decoded.status.to_string(), "waiting_for_gpu");
    assert_eq!(serde_json::to_value(&decoded).unwrap(), sent);
    // Case matters on the wire: `Completed` is not `completed`.
    assert_eq!(
        JobState::from("Completed"),
        JobState::Unknown("Completed".into())
    );
}

#[test]
fn serialization_writes_the_wire_string() {
    let status = JobStatus::new(JobState::Cancelled, 1.0);
    assert_eq!(
        serde_json::to_string(&status).unwrap(),
        r#"{"status":"cancelled","progress":1.0}"#
    );
    // An escaped string decodes as well as a borrowed one.
    let escaped: JobState = serde_json::from_str(r#""fail\u0065d""#).unwrap();
    assert_eq!(escaped, JobState::Failed);
}

#[test]
fn a_state_that_is_not_a_string_is_still_a_decode_error() {
    let error = serde_json::from_value::<JobStatus>(status(3)).unwrap_err();
    assert!(error.to_string().contains("a string"), "{error}");
}

/// A chat trace through the typed stream enum: the stage and its status are
/// variants, and the success value the policy does not name stays readable.
#[test]
fn a_chat_trace_decodes_its_stage_and_status() {
    let event = |data: Value| SseEvent {
        event: "trace".into(),
        data: data.to_string(),
        id: None,
        retry: None,
    };
    let failed = ChatEvent::decode(event(
        json!({ "stage": "generate", "status": "failed", "detail": "model down" }),
    ))
    .unwrap();
    let ChatEvent::Trace(ChatTrace { stage, status, .. }) = failed else {
        panic!("{failed:?}")
    };
    assert_eq!((stage, status), (ChatStage::Generate, StageStatus::Failed));

    let ok = ChatEvent::decode(event(
        json!({ "stage": "rerank", "status": "ok", "kept": 3 }),
    ))
    .unwrap();
    let ChatEvent::Trace(trace) = ok else {
        panic!("{ok:?}")
    };
    assert_eq!(
        (trace.stage, trace.status),
        (ChatStage::Rerank, StageStatus::Ok)
    );

    // A value the spec does not list decodes and goes back out unchanged.
    let skipped = ChatEvent::decode(event(
        json!({ "stage": "rerank", "status": "skipped", "kept": 3 }),
    ))
    .unwrap();
    let ChatEvent::Trace(trace) = skipped else {
        panic!("{skipped:?}")
    };
    assert_eq!(trace.status, StageStatus::Unknown("skipped".into()));
    assert_eq!(
        serde_json::to_value(&trace).unwrap(),
        json!({ "stage": "rerank", "status": "skipped", "kept": 3 })
    );
}

/// An enum query parameter goes out as its wire string, an unknown one
/// verbatim: the simulated platform answers 422 for a grouping it does not offer.
#[tokio::test]
async fn an_enum_query_parameter_is_sent_as_its_wire_string() {
    let sim = embedded::start(embedded::sim_config(50)).await;
    let grag = embedded::client(&sim, embedded::TENANT, embedded::policy(50));
    let spend = grag.ledger().spend(&SpendGrouping::Provider).await.unwrap();
    assert_eq!(spend.group_by, Some(SpendGrouping::Provider));
    let error = grag
        .ledger()
        .spend(&SpendGrouping::Unknown("weekly".into()))
        .await
        .unwrap_err();
    assert_eq!(error.status(), Some(422), "{error}");
    let sent = sim.log().of("spend");
    let queries: Vec<_> = sent.iter().map(|e| e.query.clone()).collect();
    assert_eq!(
        queries,
        [
            Some("group_by=provider".into()),
            Some("group_by=weekly".into())
        ]
    );
}
