//! The generated alert rules on a real Prometheus server: the distribution's
//! `prometheus` binary, started on a free loopback port, scrapes a client's
//! own metrics text served on loopback every second and evaluates the rules
//! every second. Each paging alert of the policy is raised once, the way a
//! platform answer raises it, and must be reported firing; before that, the
//! same client, quiet, must fire none.
//!
//! Time here is Prometheus's, which cannot be paused: the rules are the
//! generated expressions with every window and hold divided by [`BY`]
//! (`rules_yml_compressed`), and the undivided output is the checked-in
//! `alerts.rules.yml`. Skipped, saying so, without the binary;
//! `SDK_REQUIRE_PROMETHEUS=1` (set by `.ci/run`) makes its absence a failure.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::kit::resilience::Env;
use grag_client::Grag;
use grag_client::types::{Chunk, ScoreRequest};
use grag_sim::{Fault, Rule};
use serde_json::Value;
use tokio::time::{Instant, sleep};

/// The rules' windows and holds at 1/20: the 300 s look-back and the 5 min
/// breaker hold become 15 s, several 1 s scrapes and evaluations long.
const BY: u32 = 20;
/// How long an alert may take to fire on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(120);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace")
        .to_path_buf()
}

/// The GRAG rules at 1/[`BY`], checked to be the checked-in file undivided.
fn rules() -> String {
    let files = sdk_codegen::load::read_dir(&root().join("spec/grag")).expect("spec/grag reads");
    let model = sdk_codegen::model(&files).unwrap_or_else(|e| panic!("{e}"));
    let checked_in = std::fs::read_to_string(root().join("generated/grag-client/alerts.rules.yml"))
        .expect("the generated rules");
    assert_eq!(
        sdk_codegen::emit::alerts::rules_yml_compressed(&model, 1),
        checked_in,
        "the rules tested are the generated ones: run `cargo xtask codegen`"
    );
    sdk_codegen::emit::alerts::rules_yml_compressed(&model, BY)
}

/// The `prometheus` binary, or `None` (with the message) when the test is skipped.
fn binary() -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("prometheus"))
        .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("SDK_REQUIRE_PROMETHEUS").is_none(),
            "SDK_REQUIRE_PROMETHEUS is set but no `prometheus` binary is installed"
        );
        eprintln!(
            "skipped: no `prometheus` binary; `apt-get install prometheus` (Debian) to run the real-server alert test, as .ci/run does"
        );
    }
    found
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// A Prometheus server of its own, stopped when dropped.
struct Prometheus {
    child: Child,
    url: String,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Scraping `target` (host:port) every second, with `rules`.
    async fn start(binary: &Path, target: &str, rules: &str) -> Prometheus {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(dir.path().join("rules.yml"), rules).expect("rules written");
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - rules.yml\n\
             scrape_configs:\n  - job_name: app\n    static_configs:\n      - targets: [\"{target}\"]\n"
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).expect("config written");
        let port = free_port();
        let child = Command::new(binary)
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts");
        let server = Prometheus {
            child,
            url: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
            _dir: dir,
        };
        server
            .until("ready", || async {
                let ready = server.http.get(format!("{}/-/ready", server.url)).send();
                ready.await.is_ok_and(|r| r.status().is_success())
            })
            .await;
        server
    }

    async fn api(&self, path: &str) -> Value {
        let answer = self
            .http
            .get(format!("{}/api/v1/{path}", self.url))
            .send()
            .await
            .expect("the API answers");
        let body: Value = answer.json().await.expect("JSON");
        assert_eq!(body["status"], "success", "{path}: {body}");
        body["data"].clone()
    }

    /// Alert name and state (`pending`, `firing`) of every active alert.
    async fn alerts(&self) -> Vec<(String, String)> {
        let data = self.api("alerts").await;
        data["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| {
                let name = a["labels"]["alertname"].as_str().unwrap_or("");
                let state = a["state"].as_str().unwrap_or("");
                (name.to_owned(), state.to_owned())
            })
            .collect()
    }

    /// Series of an instant query.
    async fn query(&self, promql: &str) -> Vec<Value> {
        let data = self
            .api(&format!("query?query={}", urlencode(promql)))
            .await;
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// Polls `cond` every 200 ms until it holds, for [`PATIENCE`].
    async fn until<F: std::future::Future<Output = bool>>(
        &self,
        what: &str,
        mut cond: impl FnMut() -> F,
    ) {
        let deadline = Instant::now() + PATIENCE;
        while !cond().await {
            assert!(
                Instant::now() < deadline,
                "prometheus: {what} within {PATIENCE:?}"
            );
            sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Serves `grag`'s metrics text at `/metrics` on a loopback port; its address.
async fn serve_metrics(grag: Grag) -> String {
    use axum::http::header::CONTENT_TYPE;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let text = grag.runtime().metrics_text();
            async move {
                (
                    [(
                        CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    text,
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr.to_string()
}

fn score() -> ScoreRequest {
    ScoreRequest::new(
        "Die Brücke ist standsicher.",
        vec![Chunk::new("c1", "Die Brücke ist standsicher.")],
    )
}

fn status(status: u16, detail: &str) -> Fault {
    Fault::Status {
        status,
        detail: detail.into(),
        retry_after: None,
    }
}

/// Raises `alert` once, through the platform answer whose taxonomy row
/// raises it (the breaker's: three 502s, the health route kept down).
async fn raise(env: &Env, alert: &str) {
    let faults = env.sim.faults();
    let e = match alert {
        "budget_exhausted" => {
            faults.push(Rule::new(Fault::Budget).on("score").once());
            env.grag.groundedness().score(&score()).await.unwrap_err()
        }
        "contract_drift" => {
            faults.push(Rule::new(status(422, "field required")).on("score").once());
            env.grag.groundedness().score(&score()).await.unwrap_err()
        }
        "client_contract" => {
            let rule = Rule::new(status(400, "invalid X-Tenant-ID header")).on("list_kbs");
            faults.push(rule.once());
            env.grag.workspaces().list_kbs().await.unwrap_err()
        }
        "breaker_open_long" => {
            env.health_down();
            env.open_breaker().await;
            return;
        }
        other => panic!("no way to raise the paging alert `{other}`: add one here"),
    };
    assert_eq!(env.alert_names().last().copied(), Some(alert), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_paging_alert_fires_on_a_real_prometheus_after_its_first_raise_and_a_quiet_client_fires_none()
 {
    let Some(binary) = binary() else { return };
    let env = Env::start().await;
    let target = serve_metrics(env.grag.clone()).await;
    let prometheus = Prometheus::start(&binary, &target, &rules()).await;
    let paging: Vec<&str> = grag_client::policy::POLICY
        .alerts
        .severities
        .iter()
        .filter(|a| a.severity == "page")
        .map(|a| a.alert)
        .collect();
    assert!(!paging.is_empty(), "the policy pages on something");

    // Quiet: every raised-alerts series is scraped at 0, and stays so while
    // the rules are evaluated.
    let raised = "grag_client_alerts_total";
    prometheus
        .until("the quiet client's alert series scraped at 0", || async {
            let series = prometheus.query(&format!("{raised} == 0")).await;
            series.len() == grag_client::policy::POLICY.alerts.severities.len()
        })
        .await;
    sleep(Duration::from_secs(4)).await;
    assert_eq!(
        prometheus.alerts().await,
        vec![],
        "a quiet client fires nothing"
    );

    // Each paging alert raised once, the breaker's last (it refuses calls).
    let mut order = paging.clone();
    order.sort_by_key(|a| *a == "breaker_open_long");
    for alert in &order {
        raise(&env, alert).await;
    }
    // Counter alerts fire for one look-back, the breaker's after its hold:
    // every state seen is kept.
    let mut firing = std::collections::BTreeSet::new();
    let deadline = Instant::now() + PATIENCE;
    while !paging.iter().all(|a| firing.contains(*a)) {
        assert!(
            Instant::now() < deadline,
            "within {PATIENCE:?} only {firing:?} of {paging:?} fired"
        );
        for (name, state) in prometheus.alerts().await {
            if state == "firing" {
                firing.insert(name);
            }
        }
        sleep(Duration::from_millis(200)).await;
    }
}
