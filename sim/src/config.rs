//! Every timer of the simulator, with the real platform's values as defaults.

use std::time::Duration;

use grag_client::policy::{POLICY, stream};

/// When an ingest job's timeline (queue, then one node after the other) starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JobStart {
    /// At the upload, as on the platform: a subscriber that comes late misses
    /// what was published before it (pub/sub does not replay).
    #[default]
    AtUpload,
    /// The job stays `queued` until its first orchestrator subscriber arrives
    /// (the job starts at that subscription, so the subscriber sees every
    /// event) or [`crate::Sim::start_job`] starts it. For tests: what a
    /// subscriber sees does not depend on how fast the machine is.
    Held,
}

/// How the simulated platform behaves in time, and who it lets in.
///
/// [`SimConfig::default`] holds the real values (keepalive 20 s, stream ceiling
/// 30 min, deploy churn ~30 s, ...). Loopback tests use
/// [`SimConfig::scaled`] to run the same scenario compressed, instead of a
/// paused tokio clock, which does not mix with real sockets (tokio issue 4522).
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// TCP port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// The API key Key-lane routes accept; `None` accepts any bearer token (but
    /// a missing `Authorization` header is still a 401).
    pub api_key: Option<String>,
    /// `allow_default_tenant`: whether a scoped request without
    /// `X-Tenant-ID` is served as tenant `default` (the platform-wide default,
    /// policy §3: the hazard the client guards against) or refused with a 400
    /// like a missing workspace (the platform's strict setting).
    pub allow_default_tenant: bool,
    /// `: keepalive` comment interval of the orchestrator stream (KEEPALIVE_MS).
    pub keepalive: Duration,
    /// Hard ceiling of the orchestrator and agent streams (STREAM_TIMEOUT_MS);
    /// the stream then sends `event: timeout` and closes.
    pub stream_ceiling: Duration,
    /// Deploy churn, first phase: the listener is closed (connection refused)
    /// and every open connection is cut.
    pub churn_refused: Duration,
    /// Deploy churn, second phase: `/workspaces/health` answers 200 but every
    /// other route answers a transient 401/404/422 in turn.
    pub churn_flaky: Duration,
    /// Pipeline nodes an ingest job runs through, in order.
    pub job_nodes: Vec<String>,
    /// When a new ingest job's timeline starts: at the upload (the default),
    /// or held until its first orchestrator subscriber or [`crate::Sim::start_job`].
    pub job_start: JobStart,
    /// How long a new job waits in the queue before its first node starts
    /// (counted from the job's start).
    pub job_queue: Duration,
    /// How long each pipeline node runs.
    pub job_node_pace: Duration,
    /// How long a docfold conversion runs (its result answers 409 until then).
    pub conversion_time: Duration,
    /// Time each chat stage before `generate` takes (retrieval, rerank).
    pub chat_stage_pace: Duration,
    /// The silence before the answer: the upstream completion is not streamed.
    pub chat_silence: Duration,
    /// Pause between two pieces of the (fake-tokenized) answer.
    pub chat_piece_pace: Duration,
    /// Pause between two steps of an agent session.
    pub agent_step_pace: Duration,
    /// Delay of a model route's first answer after a (simulated) container start.
    pub cold_start: Duration,
    /// Whether the agent plane runs; when not, the agent stream answers 503.
    pub agent_plane: bool,
    /// Most points a voyager upsert takes (413 above).
    pub max_points: usize,
    /// How long a keep-alive connection may sit idle (waiting for its next
    /// request) before the simulator closes it, as uvicorn's
    /// `timeout_keep_alive` and Node's `keepAliveTimeout` do (both 5 s).
    /// [`SimConfig::scaled`] keeps it: a client's `pool_idle` follows its own
    /// policy's scale, so a test that wants idle connections closed under the
    /// client sets it against that policy ([`SimConfig::with_keep_alive_timeout`]).
    pub keep_alive_timeout: Duration,
    /// How long after the answer of an unhandled error (`unhandled`) the
    /// connection is closed. uvicorn logs the traceback first and reads
    /// nothing meanwhile: a request sent in between is written, never seen,
    /// and reset with the close. Not scaled.
    pub unhandled_close_after: Duration,
    /// How long [`crate::Sim::stop`] waits for open connections before cutting them.
    pub shutdown_grace: Duration,
    /// Operations this platform does not have (an `inferred` route the real
    /// one may lack, such as `conversion_of`): answered as Starlette answers
    /// an unknown route, `404 {"detail": "Not Found"}` (405 where another
    /// route has the path).
    pub without_routes: Vec<String>,
    /// The platform's own limits per address and tenant (Traefik's ceiling,
    /// the gateway's retrieval bucket); `None` (the default) enforces none.
    pub platform_limits: Option<crate::limits::PlatformLimits>,
    /// Whether each service's OpenAPI document (`GET /<service>/openapi.json`)
    /// has a few routes, fields and enum values moved (scenario `drifted`):
    /// what a platform that moved on from the spec serves.
    pub drifted_documents: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        let orchestrator = &POLICY.streams[stream::ORCHESTRATOR];
        SimConfig {
            port: 0,
            api_key: None,
            allow_default_tenant: true,
            keepalive: orchestrator.keepalive.unwrap_or(Duration::from_secs(20)),
            stream_ceiling: orchestrator.ceiling.unwrap_or(Duration::from_secs(30 * 60)),
            churn_refused: Duration::from_secs(20),
            churn_flaky: Duration::from_secs(10),
            job_nodes: ["convert", "chunk", "embed", "index"]
                .into_iter()
                .map(String::from)
                .collect(),
            job_start: JobStart::AtUpload,
            job_queue: Duration::from_secs(2),
            job_node_pace: Duration::from_secs(3),
            conversion_time: Duration::from_secs(3),
            chat_stage_pace: Duration::from_millis(400),
            chat_silence: Duration::from_secs(8),
            chat_piece_pace: Duration::from_millis(40),
            agent_step_pace: Duration::from_secs(1),
            cold_start: Duration::from_secs(40),
            agent_plane: true,
            max_points: 256,
            keep_alive_timeout: Duration::from_secs(5),
            unhandled_close_after: Duration::from_millis(50),
            shutdown_grace: Duration::from_secs(2),
            without_routes: Vec::new(),
            platform_limits: None,
            drifted_documents: false,
        }
    }
}

impl SimConfig {
    /// The real timings, every one multiplied by `factor` (0.001 turns the
    /// 20 s keepalive into 20 ms and the 30 min ceiling into 1.8 s).
    /// `shutdown_grace`, `keep_alive_timeout` and `unhandled_close_after`
    /// are not scaled.
    pub fn scaled(factor: f64) -> Self {
        assert!(
            factor.is_finite() && factor > 0.0,
            "scale factor must be positive"
        );
        let base = SimConfig::default();
        let s = |d: Duration| d.mul_f64(factor);
        SimConfig {
            keepalive: s(base.keepalive),
            stream_ceiling: s(base.stream_ceiling),
            churn_refused: s(base.churn_refused),
            churn_flaky: s(base.churn_flaky),
            job_queue: s(base.job_queue),
            job_node_pace: s(base.job_node_pace),
            conversion_time: s(base.conversion_time),
            chat_stage_pace: s(base.chat_stage_pace),
            chat_silence: s(base.chat_silence),
            chat_piece_pace: s(base.chat_piece_pace),
            agent_step_pace: s(base.agent_step_pace),
            cold_start: s(base.cold_start),
            ..base
        }
    }

    /// The same platform without the route of `operation` (see
    /// [`SimConfig::without_routes`]).
    pub fn without_route(mut self, operation: &str) -> Self {
        self.without_routes.push(operation.to_owned());
        self
    }

    /// The same configuration on a fixed port.
    pub fn with_port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// The same configuration accepting only `key`.
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// The same configuration refusing a scoped request without `X-Tenant-ID`
    /// (`allow_default_tenant=false`).
    pub fn with_strict_tenant(mut self) -> Self {
        self.allow_default_tenant = false;
        self
    }

    /// The same configuration with ingest jobs held until started
    /// ([`JobStart::Held`]).
    pub fn with_held_jobs(mut self) -> Self {
        self.job_start = JobStart::Held;
        self
    }

    /// The same configuration closing idle keep-alive connections after `idle`.
    pub fn with_keep_alive_timeout(mut self, idle: std::time::Duration) -> Self {
        self.keep_alive_timeout = idle;
        self
    }

    /// The same configuration answering 429 past the platform's limits,
    /// as `limits` counts them.
    pub fn with_platform_limits(mut self, limits: crate::limits::PlatformLimits) -> Self {
        self.platform_limits = Some(limits);
        self
    }

    /// How long an ingest job runs from its start to `completed`.
    pub fn job_duration(&self) -> Duration {
        self.job_queue + self.job_node_pace * self.job_nodes.len() as u32
    }
}
