//! Own binary in sim's package: it runs the simulator's binary `grag-sim`,
//! whose path (`CARGO_BIN_EXE_grag-sim`) cargo gives only to its own package.

use std::time::Duration;

#[tokio::test]
async fn the_binary_serves_a_scenario_until_stopped() {
    use tokio::io::AsyncBufReadExt;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_grag-sim"))
        .args([
            "--port",
            "0",
            "--scenario",
            "dark-agents",
            "--scale",
            "0.001",
        ])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let first = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .to_owned();
    let health = http
        .get(format!("{url}/workspaces/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let agent = http
        .get(format!("{url}/next/api/agents/sessions/s-1/stream"))
        .header("X-Tenant-ID", "knoll")
        .send()
        .await
        .unwrap();
    assert_eq!(agent.status(), 503, "scenario dark-agents");
    child.kill().await.unwrap();

    let usage = tokio::process::Command::new(env!("CARGO_BIN_EXE_grag-sim"))
        .args(["--scenario", "nope"])
        .output()
        .await
        .unwrap();
    assert_eq!(usage.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&usage.stderr).contains("deploy-churn"));
}
