//! The YAML schema, exactly as written in `spec/<api>/`.
//!
//! Every struct refuses unknown keys, and every value a validation rule
//! may point at is [`Spanned`], so an error names file, line and column.
//! Maps are [`IndexMap`]s: the order in the file is the order in the code.
//! Every item carries `source:` (the policy section it comes from) and
//! `inferred: true` where the policy implies it without spelling it out.

use indexmap::IndexMap;
use marked_yaml::Spanned;
use serde::Deserialize;

/// A spanned string: a name, a reference or a free text.
pub type Text = Spanned<String>;

/// `api.yaml`: identity of the API, its origin, auth and scope headers.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiFile {
    /// Short name, also the folder name (`grag`).
    pub api: Text,
    pub title: Text,
    /// Name of the generated crate (`grag-client`).
    #[serde(rename = "crate")]
    pub crate_name: Text,
    /// Name of the generated client struct (`Grag`).
    pub client: Text,
    pub doc: Text,
    pub origin: Origin,
    pub auth: Auth,
    pub headers: Headers,
    pub ids: Ids,
    /// What the log lines are called.
    pub log: Log,
    /// Services whose every route must carry the workspace header.
    #[serde(default)]
    pub workspace_services: Option<WorkspaceServices>,
    /// Services whose every route must carry the pipeline header.
    #[serde(default)]
    pub pipeline_services: Option<WorkspaceServices>,
    /// What the OpenAPI document says of itself.
    #[serde(default)]
    pub document: Option<DocumentInfo>,
}

/// `info.license` and `info.contact` of the OpenAPI document.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DocumentInfo {
    /// An SPDX license expression (`MIT OR Apache-2.0`).
    pub license: Text,
    pub contact: DocumentContact,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DocumentContact {
    pub name: Text,
    #[serde(default)]
    pub url: Option<Text>,
    #[serde(default)]
    pub email: Option<Text>,
}

/// The log lines' `tracing` target and the API's own field names.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Log {
    pub target: Text,
    pub service_field: Text,
    pub workspace_field: Text,
    /// Fields whose value is a path placeholder: field -> placeholder names.
    #[serde(default)]
    pub path_fields: IndexMap<Text, Vec<Text>>,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Origin {
    /// Environment variable holding the base URL.
    pub env: Text,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Auth {
    /// Lanes whose routes present the API key once their auth has landed
    /// (`bff: false` while the BFF injects the key server-side).
    #[serde(default)]
    pub lanes_authenticated: IndexMap<Text, bool>,
    /// Only `bearer` today.
    pub scheme: Text,
    /// Environment variable holding the API key.
    pub env: Text,
    /// Environment variable holding the tenant.
    pub tenant_env: Text,
    /// Environment variable that marks a production deployment, where a
    /// lane whose auth has not landed is refused.
    #[serde(default)]
    pub production_env: Option<Text>,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Headers {
    pub authorization: Text,
    pub tenant: Text,
    /// Absent: the API has no workspace scope.
    #[serde(default)]
    pub workspace: Option<Text>,
    pub request_id: Text,
    /// The answer header with the server's wait (`Retry-After`).
    pub retry_after: Text,
    /// Absent: no route carries a pipeline id.
    #[serde(default)]
    pub pipeline: Option<Text>,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ids {
    /// The pattern every `rule: pattern` ID matches: `^[first][rest]{min,max}$`.
    pub pattern: Text,
    /// Tenants refused before sending.
    pub reserved_tenants: Vec<Text>,
    /// Longest value of an `opaque` ID, in bytes.
    pub opaque_max_len: Spanned<u32>,
    /// ID newtypes beyond `TenantId` and `WorkspaceId`: name -> what it names.
    pub types: IndexMap<Text, IdTypeEntry>,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdTypeEntry {
    pub doc: Text,
    /// `pattern` (matches `ids.pattern`; IDs the client chooses) or `opaque`
    /// (IDs the platform mints: only what keeps a path safe is checked).
    pub rule: Text,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceServices {
    pub services: Vec<Text>,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

/// `policy.yaml`: timeouts, deadline, retry classes, breaker, throttle.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    pub timeouts: IndexMap<Text, Timeout>,
    pub deadline: Deadline,
    pub retries: IndexMap<Text, Retry>,
    /// Absent: the API has no circuit breaker (and no probe, canary or warm-up).
    #[serde(default)]
    pub breaker: Option<Breaker>,
    pub throttle: ThrottleSection,
    pub connections: Connections,
    pub limits: SizeLimits,
    pub metrics: Metrics,
    /// Alerts the runtime raises on its own (not tied to one taxonomy row).
    pub alerts: PolicyAlerts,
    /// Absent: the API's writes are not queued for replay.
    #[serde(default)]
    pub replay: Option<ReplayQueue>,
    /// Absent: every replica keeps the budgets on its own, with no way to share them.
    #[serde(default)]
    pub fleet: Option<Fleet>,
}

/// How several replicas keep the throttle as one tenant (through Redis).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fleet {
    /// `local` or `redis`.
    pub backend: Text,
    /// The environment variable with the Redis URL.
    pub url_env: Text,
    /// Every Redis call's deadline.
    pub deadline: Duration,
    pub breaker: FleetBreaker,
    /// How long an in-flight lease lives without renewal.
    pub lease: Duration,
    pub heartbeat: Duration,
    /// `<n>%` kept below each replica's share while degraded.
    pub margin: Text,
    /// `open` or `closed`.
    pub fail: Text,
    /// Budgets each replica keeps on its own.
    #[serde(default)]
    pub per_replica: Vec<Text>,
    pub metrics: FleetMetrics,
    pub alert: Text,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetBreaker {
    pub failures: Spanned<u32>,
    pub over: Duration,
    pub retry: Duration,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetMetrics {
    pub admission: Text,
    pub decisions: Text,
    pub degraded: Text,
    pub share: Text,
}

/// The durable replay queue of the writes marked `replay:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayQueue {
    /// The throttle budget replays run in (its `max_in_flight` bounds them).
    pub budget: Text,
    /// How long a claimed job is its worker's without a checkpoint; after it,
    /// another worker (a replica) takes the job over.
    pub lease: Duration,
    /// How long a job interrupted by an outage waits before its replay
    /// (unless the platform named a wait): no hammering when the breaker stays closed.
    pub pause: Duration,
    /// Most items of one batch after a 413 split it.
    pub split: Spanned<u32>,
    /// The job kinds, the `kind` label of the depth metric.
    pub kinds: Vec<Text>,
    /// Retries of a store that answers "database is locked".
    pub lock_retry: LockRetry,
    /// Gauge of jobs not done, by kind.
    pub depth_metric: Text,
    /// Counter of jobs that ended failed (without `_total`).
    pub failures_metric: Text,
    /// Gauge of the store's rows, by state.
    pub store_rows_metric: Text,
    /// Gauge of the bytes of the store's payloads, by state.
    pub store_bytes_metric: Text,
    /// Raised when a job ends failed.
    pub failure_alert: Text,
    /// How long the store keeps a job that ended.
    pub retention: Retention,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

/// How long a store keeps ended jobs, and how it deletes them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retention {
    /// A done job's row is deleted this long after it ended.
    pub done: Duration,
    /// A failed job (its content kept for the UI's re-upload) is deleted this long after.
    pub failed: Duration,
    /// Most rows one delete statement removes.
    pub batch: Spanned<u32>,
    /// How often a replica runs a retention pass.
    pub every: Duration,
    /// Payload bytes in the store past which Prometheus raises `alert`.
    pub alert_above: Text,
    /// The alert of a store grown past `alert_above`.
    pub alert: Text,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

/// `attempts` tries in all; the delay before try n+1 is `step` × n.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockRetry {
    pub attempts: Spanned<u32>,
    pub step: Duration,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyAlerts {
    /// Raised when the breaker stays open past `breaker.alert_after`
    /// (required with a breaker, refused without one).
    #[serde(default)]
    pub breaker_open: Option<Text>,
    /// Raised when a call fails after its retry class was used up.
    pub retry_exhausted: Text,
    /// Raise `retry_exhausted` only at this rate, not for every exhausted call.
    #[serde(default)]
    pub retry_exhausted_rate: Option<Rate>,
    /// How long a Prometheus rule over the raised-alerts counter keeps firing
    /// after the client raised the alert (`generated/<crate>/alerts.rules.yml`).
    pub look_back: Duration,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

/// A duration written `500ms`, `30s`, `5m` or `2h`.
pub type Duration = Text;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timeout {
    pub doc: Text,
    pub per_attempt: Duration,
    /// Longer budget while the origin is deploy-suspected (cold starts).
    #[serde(default)]
    pub deploy_suspected: Option<Duration>,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deadline {
    /// Overall deadline of an interactive operation, retries included.
    pub interactive: Duration,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

/// One retry class. `kind` decides which of the numbers apply:
/// - `never`: no field;
/// - `exponential`: `attempts`, `base`, `factor`, `cap` (full jitter);
/// - `deploy_window`: `attempts` (1 first + 1 extra), GET only;
/// - `retry_after`: `attempts`, `floor` (used when the header is absent), `jitter`;
/// - `once`: `attempts` (2).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retry {
    pub doc: Text,
    pub kind: Text,
    #[serde(default)]
    pub attempts: Option<Spanned<u32>>,
    #[serde(default)]
    pub base: Option<Duration>,
    #[serde(default)]
    pub factor: Option<Spanned<u32>>,
    #[serde(default)]
    pub cap: Option<Duration>,
    #[serde(default)]
    pub floor: Option<Duration>,
    /// Upper bound of the random extra wait added to a server-given delay.
    #[serde(default)]
    pub jitter: Option<Duration>,
    /// The wait of a linear schedule grows by this much per retry.
    #[serde(default)]
    pub step: Option<Duration>,
    /// The client's configuration may set `attempts` and `step` of this
    /// linear class, down to these minimums.
    #[serde(default)]
    pub configurable: Option<Configurable>,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

/// Names of the exported metrics; counters without their `_total`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metrics {
    pub requests: Text,
    pub duration: Text,
    /// Only with a breaker.
    #[serde(default)]
    pub circuit_state: Option<Text>,
    #[serde(default)]
    pub circuit_open_seconds: Option<Text>,
    /// Only with streams.
    #[serde(default)]
    pub sse_fallback: Option<Text>,
    #[serde(default)]
    pub sse_buffered: Option<Text>,
    /// Alerts the client raised, by name (`{alert}`).
    pub alerts: Text,
    /// Every 429, by whether it carried `Retry-After` (`{retry_after}`).
    pub rate_limited: Text,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rate {
    pub at_least: Spanned<u32>,
    pub within: Duration,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Configurable {
    pub min_attempts: Spanned<u32>,
    /// The most attempts a configuration may ask for (retry bounds kept low).
    pub max_attempts: Spanned<u32>,
    pub min_step: Duration,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Breaker {
    /// Failures (connection-level or 502/503) that open the breaker...
    pub threshold: Spanned<u32>,
    /// ...within this rolling window...
    pub window: Duration,
    /// ...counted across distinct endpoints when true.
    pub distinct_endpoints: bool,
    /// The public liveness route, as `service.route`.
    pub probe_route: Text,
    pub probe_interval: Duration,
    pub probe_timeout: Text,
    /// Consecutive healthy probes before half-open.
    pub healthy_probes: Spanned<u32>,
    /// The authenticated read sent alone while half-open, as `service.route`.
    pub canary_route: Text,
    pub canary_timeout: Text,
    /// How long the origin stays deploy-suspected after a close.
    pub deploy_suspected: Duration,
    /// Alert when the breaker stays open longer than this.
    pub alert_after: Duration,
    /// Optional warm-up calls fired once after a close (cold starts, §7).
    #[serde(default)]
    pub warm_up: Vec<WarmUp>,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

/// One warm-up call: a route, its path values and a JSON body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarmUp {
    /// As `handle.route`.
    pub route: Text,
    /// Values of the path placeholders, in template order.
    #[serde(default)]
    pub path: Vec<Text>,
    /// The request body, as JSON text.
    #[serde(default)]
    pub body: Option<Text>,
    /// A timeout class for the warm-up call instead of the route's own.
    #[serde(default)]
    pub timeout: Option<Text>,
    /// The pipeline id of a warm-up call whose route carries the pipeline
    /// header: its own, so its cost is booked apart from every run's.
    #[serde(default)]
    pub pipeline_id: Option<Text>,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThrottleSection {
    /// Requests in flight, all routes together.
    pub max_in_flight: Spanned<u32>,
    /// Sustained rate of the token bucket.
    pub per_second: Spanned<u32>,
    /// Named budgets a route draws from in addition to the global ones.
    pub budgets: IndexMap<Text, Budget>,
    pub polling: Polling,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    pub doc: Text,
    #[serde(default)]
    pub max_in_flight: Option<Spanned<u32>>,
    /// Requests in any rolling 60 s window.
    #[serde(default)]
    pub per_minute: Option<Spanned<u32>>,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Polling {
    pub interval: Duration,
    pub floor: Duration,
    /// Interval multiplier while a 429 is hot.
    pub hot_factor: Spanned<u32>,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

/// Pooled connections.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Connections {
    /// How long an idle pooled connection is kept: below the server's keep-alive.
    pub pool_idle: Duration,
    /// The least pool idle a deployment may configure (behind a proxy with a
    /// shorter keep-alive); absent: not configurable below `pool_idle`.
    #[serde(default)]
    pub pool_idle_floor: Option<Duration>,
    /// How long before a server's announced `Keep-Alive: timeout=` an idle
    /// connection is let go; absent: announcements are not read.
    #[serde(default)]
    pub keep_alive_margin: Option<Duration>,
    /// Statuses after which, unless the answer said `Connection: close`, the
    /// server closes the connection unannounced: no pooled one is reused.
    #[serde(default)]
    pub fresh_after: Vec<Spanned<u16>>,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

/// Bounds on what a server may send. Sizes are `<n> B|KiB|MiB|GiB`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SizeLimits {
    /// Largest 2xx body a route reads unless it says otherwise (`max_response`).
    pub response: Text,
    /// Bytes of a non-2xx body read for its `detail`; the rest is not read.
    pub error_body: Text,
    /// Longest `detail` an error keeps (cut on a char boundary and marked).
    pub detail: Text,
    /// Longest SSE line, and the most data one SSE event may gather.
    pub sse_line: Text,
    pub sse_event: Text,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

/// `taxonomy.yaml`: detail vocabularies, classes and rows, first match wins.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaxonomyFile {
    /// Named lists of substrings of the `detail` text, matched case-insensitively.
    #[serde(default)]
    pub details: IndexMap<Text, Details>,
    pub rows: Vec<Row>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Details {
    pub doc: Text,
    pub contains: Vec<Text>,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

/// One taxonomy row: what it matches, the class it gives, what follows.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Row {
    pub row: Text,
    #[serde(rename = "match")]
    pub matches: Match,
    /// The error class (snake_case); `success` means the outcome is a success.
    pub class: Text,
    /// A retry class from `policy.yaml`, or absent.
    #[serde(default)]
    pub retry: Option<Text>,
    /// Counts toward opening the breaker.
    #[serde(default)]
    pub feeds_breaker: bool,
    /// A non-idempotent call that ends here after its request may have
    /// reached the server has an unknown outcome (`Error::outcome_unknown`).
    #[serde(default)]
    pub outcome_unknown: bool,
    /// Alert raised when this row ends a call.
    #[serde(default)]
    pub alert: Option<Text>,
    /// Raise `alert` only outside the deploy-suspected window (deploys cause these).
    #[serde(default)]
    pub alert_outside_deploy: bool,
    /// The feature state (from `degradation.yaml`) a route's features enter
    /// when this row ends a call; left on the next success of that route.
    #[serde(default)]
    pub feature_state: Option<Text>,
    /// The answer is stable: remember it per route this long and fail fast meanwhile.
    #[serde(default)]
    pub remember_for: Option<Duration>,
    /// When the retry brings back the identical detail, the call is classified
    /// by this row instead (an unknown 503 twice means dark).
    #[serde(default)]
    pub escalate_to: Option<Text>,
    /// What the row means for a queued write: `outage`, `later`, `deploy` or
    /// `never` (`Replay`). Every row says it when the API has a replay queue.
    #[serde(default)]
    pub replay: Option<Text>,
    pub action: Text,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

/// What a row matches. `outcome` is one of the runtime's outcome kinds
/// (`OutcomeKind::ALL`); the other keys narrow a `status` outcome.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Match {
    pub outcome: Text,
    #[serde(default)]
    pub status: Option<Spanned<u16>>,
    /// Inclusive range of statuses, e.g. `[500, 599]`.
    #[serde(default)]
    pub status_range: Option<Vec<Spanned<u16>>>,
    /// A detail set from `details`, matched against the `detail` text.
    #[serde(default)]
    pub detail: Option<Text>,
    /// Matches only when the response carries (or lacks) `Retry-After`.
    #[serde(default)]
    pub retry_after: Option<bool>,
    /// Matches only routes whose `conflict` is this (`success`, `poll`).
    #[serde(default)]
    pub conflict: Option<Text>,
    /// Matches only routes that present no key (`true`) or only those that do.
    #[serde(default)]
    pub keyless: Option<bool>,
    /// Matches only these routes (`handle.route`): where the policy lets the
    /// route decide (GRAG §2 "route + detail text", §6.3 the agent relay).
    #[serde(default)]
    pub routes: Option<Vec<Text>>,
}

/// `streams.yaml`: the SSE contracts.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(Default)]
pub struct StreamsFile {
    pub streams: IndexMap<Text, StreamEntry>,
    /// The event names a server fails any stream with, by the taxonomy
    /// outcome they are classified as.
    /// Required when `streams` names any stream.
    #[serde(default)]
    pub error_events: Option<ErrorEvents>,
    /// How a buffering proxy is recognised (§6.4).
    #[serde(default)]
    pub buffering: Option<Buffering>,
    /// Fallbacks to polling this often are no longer incidents.
    #[serde(default)]
    pub fallbacks_sustained: Option<FallbacksSustained>,
}

/// `error_events:` of streams.yaml: `event: <name>` frames that end a stream
/// with the outcome `stream_error` or `stream_timeout`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorEvents {
    pub stream_error: Text,
    pub stream_timeout: Text,
}

/// `fallbacks_sustained:` of streams.yaml: at least `at_least` fallbacks
/// within a rolling `within` raise `alert`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FallbacksSustained {
    pub at_least: Spanned<u32>,
    pub within: Duration,
    pub alert: Text,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

/// `buffering:` of streams.yaml: see `sdk_policy::policy::BufferingRule`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Buffering {
    pub min_events: Spanned<u32>,
    pub burst: Duration,
    pub silent_for: Duration,
    pub confirm_after: Spanned<u32>,
    /// The alert (degradation.yaml `alerts`) raised once it is confirmed.
    pub alert: Text,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamEntry {
    pub doc: Text,
    /// Silence (no byte at all) after which the stream counts as stalled.
    pub watchdog: Duration,
    /// Interval of `: keepalive` comments, absent when the stream has none.
    #[serde(default)]
    pub keepalive: Option<Duration>,
    /// Server-side ceiling that ends the stream with `event: timeout`.
    #[serde(default)]
    pub ceiling: Option<Duration>,
    /// The status route polled instead, as `service.route`.
    #[serde(default)]
    pub fallback: Option<Text>,
    /// Poll the fallback once after every reconnect (missed events are lost).
    #[serde(default)]
    pub resync_after_reconnect: bool,
    /// Whether a dropped stream may be opened again by the client.
    pub resend: bool,
    /// Event that must open the stream, if any.
    #[serde(default)]
    pub first_event: Option<Text>,
    /// Events that end the stream.
    #[serde(default)]
    pub terminal_events: Vec<Text>,
    /// The stream must end with one of `terminal_events`: a clean close
    /// before one is a drop (the job still runs; the chat answer was lost).
    #[serde(default)]
    pub ends_with_terminal: bool,
    /// How the `fallback` route's answer reads; required with `fallback`.
    #[serde(default)]
    pub status: Option<StatusRead>,
    /// The typed events: event name → type (of any service file). Other
    /// names pass as untyped events.
    #[serde(default)]
    pub events: IndexMap<Text, Text>,
    /// The stage trace the runtime reads itself (a chat turn's).
    #[serde(default)]
    pub stages: Option<Stages>,
    /// German copy when the stream ends without its answer (a resend is
    /// offered, never made).
    #[serde(default)]
    pub lost_copy: Option<Text>,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

/// A stream's stage trace: which event reports a stage, where its name and
/// status are, which stages fail closed (all others fail open).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stages {
    pub event: Text,
    pub stage_field: Text,
    pub status_field: Text,
    pub failed: Vec<Text>,
    #[serde(default)]
    pub fail_closed: Vec<Text>,
    #[serde(default)]
    pub detail_field: Option<Text>,
    /// The feature (degradation.yaml `features`) shown degraded.
    pub feature: Text,
}

/// How a stream's status route reads: which field holds the job's state, and
/// which states are terminal. The same names end the stream as events.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusRead {
    pub field: Text,
    pub completed: Vec<Text>,
    pub failed: Vec<Text>,
    #[serde(default)]
    pub error_field: Option<Text>,
    /// Polls of a running job before the stream is opened again (0: never).
    pub reopen_after: Spanned<u32>,
}

/// `degradation.yaml`: feature states with their German copy, and alerts.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DegradationFile {
    #[serde(default)]
    pub states: IndexMap<Text, FeatureState>,
    /// German messages for final errors, keyed by error class.
    pub messages: IndexMap<Text, Message>,
    /// The German message of a final error whose outcome is unknown (a row's
    /// `outcome_unknown`): check the current state before trying again.
    #[serde(default)]
    pub unknown_outcome: Option<Message>,
    /// The severities an alert may have, each with who it reaches.
    pub severities: IndexMap<Text, Text>,
    pub alerts: IndexMap<Text, AlertEntry>,
    /// UI features and the routes each depends on.
    #[serde(default)]
    pub features: IndexMap<Text, Feature>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Feature {
    pub doc: Text,
    /// Routes as `handle.route`: the feature is dark when one of them is.
    pub routes: Vec<Text>,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureState {
    pub doc: Text,
    /// What puts a feature in this state: `otherwise` (the default state),
    /// `row` (a taxonomy row names it in `feature_state`), `breaker_open`,
    /// `deploy_suspected` or `stage_failed` (a fail-open stage failed).
    pub when: Text,
    /// The German UI copy, absent where the UI shows nothing (available, dark).
    #[serde(default)]
    pub copy: Option<Text>,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    pub copy: Text,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertEntry {
    pub doc: Text,
    pub severity: Text,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

/// `services/<name>.yaml`: one service, its types and its routes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceFile {
    /// The platform's name for the service (`kg-service`).
    pub service: Text,
    /// Name of the handle method on the client (`kg`).
    pub handle: Text,
    pub doc: Text,
    /// Path prefix every route of the service starts with.
    pub prefix: Text,
    /// Where the platform serves the service's own OpenAPI document (a
    /// FastAPI app's `/openapi.json` under its mount), when it serves one.
    #[serde(default)]
    pub openapi: Option<Text>,
    /// `public`, `tenant` or `workspace`: what every route needs unless it says otherwise.
    pub scope: Text,
    /// `key` (Authorization + tenant) or a lane of `auth.lanes_authenticated`.
    pub lane: Text,
    #[serde(default)]
    pub types: IndexMap<Text, TypeEntry>,
    pub routes: IndexMap<Text, RouteEntry>,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

/// A named type: a struct (`fields`) or a string enum (`values`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TypeEntry {
    pub doc: Text,
    /// Field name -> type expression: `string`, `integer`, `number`, `boolean`,
    /// `json`, an ID type, a named type, `list<T>`, `map<T>`; a trailing `?`
    /// makes the field optional.
    #[serde(default)]
    pub fields: Option<IndexMap<Text, Text>>,
    /// The closed set of wire strings the platform sends, each a bare string
    /// or `{value, doc, source, inferred}`.
    #[serde(default)]
    pub values: Option<Vec<Spanned<EnumValue>>>,
    #[serde(default)]
    pub source: Option<Text>,
    #[serde(default)]
    pub inferred: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteEntry {
    pub doc: Text,
    pub method: Text,
    /// Path under the service prefix, with `{param}` placeholders.
    pub path: Text,
    /// Placeholder -> ID type or `string`.
    #[serde(default)]
    pub path_params: IndexMap<Text, Text>,
    /// Query parameter -> type expression (`?` for optional).
    #[serde(default)]
    pub query: IndexMap<Text, Text>,
    #[serde(default)]
    pub body: Option<Text>,
    /// Response type expression, `none` for an empty body, absent for a stream.
    #[serde(default)]
    pub returns: Option<Text>,
    /// A stream from `streams.yaml`, for SSE routes.
    #[serde(default)]
    pub stream: Option<Text>,
    pub idempotent: bool,
    pub timeout: Text,
    pub retry: Text,
    pub budget: Text,
    /// A write the caller may queue for replay while the breaker is open (`Error::replayable`).
    #[serde(default)]
    pub replay: bool,
    /// Overrides the service's scope.
    #[serde(default)]
    pub scope: Option<Text>,
    /// What a 409 means here: `success` (create) or `poll` (still processing).
    #[serde(default)]
    pub conflict: Option<Text>,
    /// Stamp `X-Pipeline-Id` when the client has one.
    #[serde(default)]
    pub pipeline_id: bool,
    /// Largest 2xx body of this route, instead of `limits.response`.
    #[serde(default)]
    pub max_response: Option<Text>,
    /// The read (a GET route of the same service) that tells whether a call
    /// of this non-idempotent route took effect when its outcome is unknown.
    #[serde(default)]
    pub reconcile: Option<Text>,
    /// An ID of the body that must name something that exists: the method
    /// takes the proof the `proven_by` create route hands out.
    #[serde(default)]
    pub exists: Option<Exists>,
    pub source: Text,
    #[serde(default)]
    pub inferred: bool,
}

/// `exists:` of a route: the body's `field` (an ID) must name something that
/// exists; `proven_by` is the create route (`handle.route`, 409 = already
/// there) whose body carries the same ID.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exists {
    pub field: Text,
    pub proven_by: Text,
}

/// One value of a string enum: `completed`, or
/// `{value: running, doc: ..., source: "§6.1", inferred: true}`.
#[derive(Debug)]
pub struct EnumValue {
    /// The string on the wire; `None` when the long form left it out.
    pub value: Option<String>,
    pub doc: Option<String>,
    pub source: Option<String>,
    pub inferred: bool,
    /// Keys of the long form that are none of the above, for lowering to
    /// refuse at their own line (an error raised here would only know the list's).
    pub unknown_keys: Vec<Text>,
}

impl<'de> Deserialize<'de> for EnumValue {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(EnumValueVisitor)
    }
}

struct EnumValueVisitor;

impl<'de> serde::de::Visitor<'de> for EnumValueVisitor {
    type Value = EnumValue;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a value, or a map with `value` and optional `doc`, `source`, `inferred`")
    }

    fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<EnumValue, E> {
        Ok(EnumValue {
            value: Some(value.to_owned()),
            doc: None,
            source: None,
            inferred: false,
            unknown_keys: Vec::new(),
        })
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<EnumValue, A::Error> {
        let mut out = EnumValue {
            value: None,
            doc: None,
            source: None,
            inferred: false,
            unknown_keys: Vec::new(),
        };
        while let Some(key) = map.next_key::<Text>()? {
            match key.as_str() {
                "value" => out.value = Some(map.next_value()?),
                "doc" => out.doc = Some(map.next_value()?),
                "source" => out.source = Some(map.next_value()?),
                "inferred" => out.inferred = map.next_value()?,
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    out.unknown_keys.push(key);
                }
            }
        }
        Ok(out)
    }
}
