//! Alerts end to end: one per window for an elevated rate of exhausted calls,
//! and each with the severity `degradation.yaml` gives it.

use std::time::Duration;

use grag_sim::{Fault, Rule};

use crate::kit::resilience::Env;

fn status(status: u16, detail: &str) -> Fault {
    Fault::Status {
        status,
        detail: detail.into(),
        retry_after: None,
    }
}

fn score_request() -> grag_client::types::ScoreRequest {
    let text = "Die Brücke ist standsicher.";
    grag_client::types::ScoreRequest::new(text, vec![grag_client::types::Chunk::new("c1", text)])
}

#[tokio::test]
async fn an_elevated_rate_of_exhausted_calls_raises_one_alert_per_window() {
    // GRAG §5.1 calls deploy churn routine: exhausted calls are alerted only
    // at the spec's rate (10 within 5 min, 3 s at 1/100), once per window.
    let rate = grag_client::policy::POLICY
        .alerts
        .retry_exhausted_rate
        .expect("GRAG alerts on a rate of exhausted calls");
    assert_eq!(rate.at_least, 10);
    assert_eq!(rate.within, Duration::from_secs(300));
    let env = Env::start().await;
    // A 504: a 500 also renews the connection pool (uvicorn), which costs
    // more per call than the scaled window leaves.
    env.sim
        .faults()
        .push(Rule::new(status(504, "Gateway Timeout")).on("list_kbs"));
    for call in 1..rate.at_least {
        let e = env.grag.workspaces().list_kbs().await.unwrap_err();
        assert_eq!(e.row(), "T23", "{e}");
        assert_eq!(e.attempts(), 3, "{e}");
        assert!(env.alert_names().is_empty(), "alerted after {call} calls");
    }
    for _ in 0..5 {
        env.grag.workspaces().list_kbs().await.unwrap_err();
    }
    let alerts = env.alerts.taken();
    assert_eq!(alerts.len(), 1, "one alert in the window: {alerts:?}");
    assert_eq!(alerts[0].name, "retry_exhausted");
    assert!(
        alerts[0]
            .detail
            .as_deref()
            .is_some_and(|d| d.starts_with("10 calls exhausted their retries")),
        "{alerts:?}"
    );
}

#[tokio::test]
async fn an_alert_carries_its_severity_from_degradation_yaml_for_the_sink_to_route() {
    // degradation.yaml: budget_exhausted pages, auth_outside_deploy goes to ops.
    let env = Env::start().await;
    env.sim.faults().push(Rule::new(Fault::Budget).on("score"));
    env.sim.faults().push(
        Rule::new(status(401, "Invalid API key"))
            .on("list_kbs")
            .once(),
    );
    env.grag
        .groundedness()
        .score(&score_request())
        .await
        .unwrap_err();
    env.grag.workspaces().list_kbs().await.unwrap_err();
    let raised: Vec<(&str, &str)> = env
        .alerts
        .taken()
        .iter()
        .map(|a| (a.name, a.severity))
        .collect();
    assert_eq!(
        raised,
        [("budget_exhausted", "page"), ("auth_outside_deploy", "ops")]
    );
    // Every alert of the spec has one, the runtime's own included.
    let policy = &grag_client::policy::POLICY;
    for (alert, severity) in [
        ("breaker_open_long", "page"),
        ("contract_drift", "page"),
        ("client_contract", "page"),
        ("admin_gate", "ops"),
        ("replay_failures", "ops"),
        ("sse_fallbacks_sustained", "ops"),
        ("retry_exhausted", "ops"),
        ("fleet_degraded", "ops"),
        ("replay_store_large", "ops"),
    ] {
        assert_eq!(policy.severity(alert), Some(severity), "{alert}");
    }
    assert_eq!(policy.alerts.severities.len(), 11);
}
