//! The production switch (§2, §6: the BFF lane stays out of production until
//! its auth lands). The test runs alone in a child process of its own
//! ([`in_own_process`]): it sets the process environment, which no other
//! thread may read meanwhile.

use axum::response::IntoResponse;
use grag_client::{Config, Grag, JobId};
use sdk_runtime::{ConfigError, Lane};
use serde_json::json;

use crate::kit::alone::in_own_process;
use crate::kit::recorder::Recorder;

/// Sets `name` for [`Config::from_env`].
fn set(name: &str, value: &str) {
    // SAFETY: the only test of its process (`in_own_process`), on a
    // current-thread runtime that has started no other thread: nothing reads
    // the environment meanwhile.
    unsafe { std::env::set_var(name, value) };
}

#[test]
fn a_production_client_refuses_the_unauthenticated_lane_and_only_it() {
    if !in_own_process(
        "production::a_production_client_refuses_the_unauthenticated_lane_and_only_it",
    ) {
        return;
    }
    let keyless = |e: &&sdk_runtime::Endpoint| e.service == "bff" && e.lane == Lane::Keyless;
    assert!(
        grag_client::policy::ENDPOINTS.iter().any(keyless),
        "the spec's lanes_authenticated.bff is false"
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let status = json!({"status": "running", "progress": 0.5});
        let server = Recorder::start(move |_| axum::Json(status.clone()).into_response()).await;
        set("GRAG_URL", &server.url());
        set("GRAG_API_KEY", "key");
        set("GRAG_TENANT", "knoll");
        set("GRAG_PRODUCTION", "maybe");
        let refused = Config::from_env().expect_err("a flag that is no flag");
        assert!(
            matches!(&refused, ConfigError::Flag { name: "GRAG_PRODUCTION", value } if value == "maybe"),
            "{refused}"
        );
        let mut configs = Vec::new();
        for value in ["1", "true", "0", "false", ""] {
            set("GRAG_PRODUCTION", value);
            configs.push((value, Config::from_env().expect("a valid environment")));
        }
        configs.push(("(set in code)", Config::from_env().unwrap().production(true)));

        let job = JobId::parse("job-1").unwrap();
        for (value, config) in configs {
            let production = matches!(value, "1" | "true" | "(set in code)");
            let grag = Grag::new(config).unwrap();
            let status = grag.bff().pipeline_status(&job).await;
            if production {
                let e = status.expect_err("refused in production");
                assert_eq!((e.row(), e.attempts()), ("T22", 0), "{value}: {e}");
                assert!(
                    e.detail().is_some_and(|d| d.contains("refused in production")),
                    "{value}: {e}"
                );
            } else {
                status.unwrap_or_else(|e| panic!("GRAG_PRODUCTION={value:?}: {e}"));
            }
            // The keyed lanes go out either way.
            let _ = grag.workspaces().get_settings().await;
        }
        let seen = server.stop().await;
        let bff = seen.iter().filter(|r| r.path.starts_with("/next/api")).count();
        assert_eq!(bff, 3, "only the clients outside production reached the BFF lane");
        assert_eq!(seen.len() - bff, 6, "every client reached the keyed lane");
    });
}
