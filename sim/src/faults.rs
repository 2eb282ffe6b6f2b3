//! Fault injection: rules that shape the answers of matching routes, deploy
//! churn, the agent plane switch. Scriptable from Rust through [`crate::Faults`] and
//! over HTTP through the admin routes under `/_sim/` (see [`crate::admin`]).

use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// `Retry-After` as delta-seconds or as an HTTP date that far in the future.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryAfter {
    /// `Retry-After: 7`
    Seconds(u64),
    /// `Retry-After: <HTTP date>` this many seconds after the answer (0 gives
    /// the current second, which a client reads as "retry now").
    DateIn(u64),
}

impl RetryAfter {
    /// The header value at the moment of answering.
    pub fn header_value(self) -> String {
        match self {
            RetryAfter::Seconds(s) => s.to_string(),
            RetryAfter::DateIn(s) => {
                httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(s))
            }
        }
    }
}

/// What a rule does to a matching request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// 429 from the edge proxy, plain text, with or without `Retry-After`.
    RateLimited { retry_after: Option<RetryAfter> },
    /// 402: the tenant's AI budget is exhausted.
    Budget,
    /// 403 from an admin-gated route (detail names the admin role).
    AdminGate,
    /// 502 from the edge proxy, plain text (the upstream container is gone).
    BadGateway,
    /// 503 with a stable dark-flag detail, the same on every answer.
    Dark,
    /// 503 from a fail-closed safety/admission check (transient).
    Safety,
    /// 503 with `Retry-After` (WAL backpressure).
    Backpressure { retry_after: RetryAfter },
    /// Any status with a `{"detail": ...}` body.
    Status {
        status: u16,
        detail: String,
        retry_after: Option<RetryAfter>,
    },
    /// The answer comes this much later (a slow upstream).
    Delay { ms: u64 },
    /// The answer comes [`crate::SimConfig::cold_start`] later (model weights
    /// loading on the first call after a container start).
    ColdStart,
    /// The status line and half the body are sent, then the connection is cut.
    ResetMidBody,
    /// An SSE stream sends `after_events` events, then no byte at all (no
    /// keepalives either) while the connection stays open.
    SseStall { after_events: u32 },
    /// An SSE stream sends `after_events` events, then half of the next one,
    /// then the connection is cut.
    SseDrop { after_events: u32 },
    /// An SSE stream is held back by a buffering proxy: every byte arrives in
    /// one burst when the stream ends.
    SseBuffered,
    /// An SSE stream sends `after_events` events, then `event: error` and ends.
    SseError { after_events: u32, detail: String },
    /// A chat turn's stage fails (`retrieval`, `rerank`, `generate`,
    /// `groundedness`, `persist`): open except `generate`, which ends the turn.
    StageFails { stage: String },
    /// The ingest job an upload starts fails in this pipeline node.
    JobFails { node: String },
    /// A FastAPI/pydantic 422 that quotes the request, as pydantic does: one
    /// `string_too_long` entry with `loc`, `msg`, `input` (the value of the
    /// body's first string field, or the whole body when it has none) and
    /// `ctx: {"max_length": ...}`.
    ValidationEcho {
        #[serde(default = "default_max_length")]
        max_length: u32,
    },
    /// An unhandled exception behind uvicorn: a plain-text
    /// `500 Internal Server Error`, then the connection is closed without a
    /// `Connection: close` header (the client learns it only from the FIN).
    Unhandled,
    /// The route's handler runs, so its write takes effect, then the
    /// connection is dropped before a byte of the answer: the client cannot
    /// tell whether the write happened (a container killed mid-request).
    AppliedThenLost,
    /// An SSE stream sends `after_events` events, then ends cleanly (the body
    /// is complete, the connection stays usable) without its terminal event:
    /// a relay that closed early, a chat that stopped mid-answer.
    SseEndsEarly { after_events: u32 },
    /// An SSE stream sends `after_events` events, then one event of a name
    /// the client does not know (one the platform added later), then goes on.
    SseExtraEvent {
        after_events: u32,
        event: String,
        data: serde_json::Value,
    },
    /// An SSE stream as sse-starlette writes it: every line ends in CRLF, and
    /// a `: ping - <date>` comment goes out when the stream opens and every
    /// `ping_ms` after (from a task of its own, between events).
    SseStarlette {
        #[serde(default = "default_ping_ms")]
        ping_ms: u64,
    },
}

fn default_max_length() -> u32 {
    200
}

/// sse-starlette's default ping interval: 15 s.
fn default_ping_ms() -> u64 {
    15_000
}

impl Fault {
    /// A short name for the request log (`rate_limited`).
    pub fn name(&self) -> &'static str {
        match self {
            Fault::RateLimited { .. } => "rate_limited",
            Fault::Budget => "budget",
            Fault::AdminGate => "admin_gate",
            Fault::BadGateway => "bad_gateway",
            Fault::Dark => "dark",
            Fault::Safety => "safety",
            Fault::Backpressure { .. } => "backpressure",
            Fault::Status { .. } => "status",
            Fault::Delay { .. } => "delay",
            Fault::ColdStart => "cold_start",
            Fault::ResetMidBody => "reset_mid_body",
            Fault::SseStall { .. } => "sse_stall",
            Fault::SseDrop { .. } => "sse_drop",
            Fault::SseBuffered => "sse_buffered",
            Fault::SseError { .. } => "sse_error",
            Fault::StageFails { .. } => "stage_fails",
            Fault::JobFails { .. } => "job_fails",
            Fault::ValidationEcho { .. } => "validation_echo",
            Fault::Unhandled => "unhandled",
            Fault::AppliedThenLost => "applied_then_lost",
            Fault::SseEndsEarly { .. } => "sse_ends_early",
            Fault::SseStarlette { .. } => "sse_starlette",
            Fault::SseExtraEvent { .. } => "sse_extra_event",
        }
    }

    /// [`Fault::Delay`] of `d`.
    pub fn delay(d: Duration) -> Fault {
        Fault::Delay {
            ms: d.as_millis() as u64,
        }
    }

    /// 429 with `Retry-After: <seconds>`.
    pub fn rate_limited_secs(seconds: u64) -> Fault {
        Fault::RateLimited {
            retry_after: Some(RetryAfter::Seconds(seconds)),
        }
    }
}

/// Which requests a rule applies to: `*` (every platform route), a route's
/// operation name (`list_kbs`), or `service:<name>` (`service:kg-service`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Route(pub String);

impl Route {
    pub fn any() -> Route {
        Route("*".into())
    }

    pub fn op(operation: &str) -> Route {
        Route(operation.into())
    }

    pub fn service(service: &str) -> Route {
        Route(format!("service:{service}"))
    }

    pub(crate) fn matches(&self, endpoint: &sdk_runtime::Endpoint) -> bool {
        let r = self.0.as_str();
        r == "*" || r == endpoint.operation || r.strip_prefix("service:") == Some(endpoint.service)
    }
}

/// One scripted fault: which route, what, how often.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    pub route: Route,
    pub fault: Fault,
    /// Answers it shapes before it is used up; `None` = until cleared.
    #[serde(default)]
    pub times: Option<u32>,
    /// Matching requests it lets through before it starts.
    #[serde(default)]
    pub skip: u32,
}

impl Rule {
    /// A rule for every platform route, firing until cleared.
    pub fn new(fault: Fault) -> Rule {
        Rule {
            route: Route::any(),
            fault,
            times: None,
            skip: 0,
        }
    }

    /// Only requests to `operation` (`list_kbs`); `service:<name>` and `*` work too.
    pub fn on(mut self, operation: &str) -> Rule {
        self.route = Route(operation.into());
        self
    }

    /// Fires `n` times, then is used up.
    pub fn times(mut self, n: u32) -> Rule {
        self.times = Some(n);
        self
    }

    /// Fires once.
    pub fn once(self) -> Rule {
        self.times(1)
    }

    /// Lets `n` matching requests through first.
    pub fn skip(mut self, n: u32) -> Rule {
        self.skip = n;
        self
    }
}

/// A rule and how often it fired.
#[derive(Debug, Clone, Serialize)]
pub struct ActiveRule {
    pub id: u64,
    pub rule: Rule,
    pub seen: u32,
    pub fired: u32,
}

/// Phase of a deploy churn: first [`ChurnPhase::Refused`] (listener closed,
/// open connections cut), then [`ChurnPhase::Flaky`] (`/workspaces/health`
/// 200, every other route a transient 401/404/422 in turn); after it the
/// platform is healthy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChurnPhase {
    Refused,
    Flaky,
}

/// What ends the current phase of a churn.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PhaseEnd {
    /// The clock (the timed churn of [`Faults::deploy_churn`]).
    At(Instant),
    /// [`Faults::churn_step`] only.
    Step,
    /// This many more transient answers (flaky phase only), or a step.
    Answers(u32),
}

/// How the flaky phase of a churn will end, decided when the churn starts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FlakyPlan {
    For(Duration),
    Step,
    Answers(u32),
}

/// The deploy churn in progress.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Churn {
    pub phase: ChurnPhase,
    pub end: PhaseEnd,
    pub flaky: FlakyPlan,
}

impl Churn {
    /// The churn after its current phase, which ended at `at`.
    pub(crate) fn next(self, at: Instant) -> Option<Churn> {
        match self.phase {
            ChurnPhase::Flaky => None,
            ChurnPhase::Refused => {
                let end = match self.flaky {
                    FlakyPlan::For(d) if d.is_zero() => return None,
                    FlakyPlan::Answers(0) => return None,
                    FlakyPlan::For(d) => PhaseEnd::At(at + d),
                    FlakyPlan::Step => PhaseEnd::Step,
                    FlakyPlan::Answers(n) => PhaseEnd::Answers(n),
                };
                Some(Churn {
                    phase: ChurnPhase::Flaky,
                    end,
                    flaky: self.flaky,
                })
            }
        }
    }
}

/// The churn in force at `now`, with every phase the clock has ended applied.
pub(crate) fn settle(churn: &mut Option<Churn>, now: Instant) {
    while let Some(c) = *churn {
        match c.end {
            PhaseEnd::At(t) if t <= now => *churn = c.next(t),
            _ => return,
        }
    }
}

/// What the platform does with a request during a churn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChurnAnswer {
    /// A request on a connection that raced the cut.
    Refused,
    /// The `n`-th transient answer of this simulator (401, 404, 422 in turn).
    Flaky(u64),
}

#[derive(Default)]
pub(crate) struct FaultState {
    pub rules: Mutex<Vec<ActiveRule>>,
    pub next_id: Mutex<u64>,
    pub churn: Mutex<Option<Churn>>,
    /// Wakes the accept loop to close the listener.
    pub churn_started: tokio::sync::Notify,
    /// Wakes the accept loop when a step (or a clear) may have ended the refusal.
    pub churn_stepped: tokio::sync::Notify,
    /// Rotates the transient deploy answers (401, 404, 422, ...).
    pub churn_counter: std::sync::atomic::AtomicU64,
}

impl FaultState {
    /// The first live rule matching `endpoint`, counted as fired.
    pub(crate) fn take(&self, endpoint: &sdk_runtime::Endpoint) -> Option<Fault> {
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        let mut hit = None;
        for (i, active) in rules.iter_mut().enumerate() {
            if !active.rule.route.matches(endpoint) {
                continue;
            }
            active.seen += 1;
            if active.seen <= active.rule.skip {
                continue;
            }
            active.fired += 1;
            hit = Some((i, active.rule.fault.clone()));
            break;
        }
        let (i, fault) = hit?;
        if rules[i].rule.times.is_some_and(|t| rules[i].fired >= t) {
            rules.remove(i);
        }
        Some(fault)
    }

    pub(crate) fn churn(&self) -> std::sync::MutexGuard<'_, Option<Churn>> {
        self.churn.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn churn_phase(&self, now: Instant) -> Option<ChurnPhase> {
        let mut churn = self.churn();
        settle(&mut churn, now);
        churn.map(|c| c.phase)
    }

    /// When the refusal of a timed churn ends by the clock (`None` for a
    /// stepped one, or when no refusal is in force).
    pub(crate) fn refused_until(&self, now: Instant) -> Option<Option<Instant>> {
        let mut churn = self.churn();
        settle(&mut churn, now);
        match *churn {
            Some(Churn {
                phase: ChurnPhase::Refused,
                end,
                ..
            }) => Some(match end {
                PhaseEnd::At(t) => Some(t),
                _ => None,
            }),
            _ => None,
        }
    }

    /// How the churn answers a request at `now` (`public`: a route such as
    /// `/workspaces/health`, which is already fine in the flaky phase). A
    /// flaky answer counts against a counted flaky phase.
    pub(crate) fn churn_answer(&self, now: Instant, public: bool) -> Option<ChurnAnswer> {
        let mut churn = self.churn();
        settle(&mut churn, now);
        let c = (*churn)?;
        match c.phase {
            ChurnPhase::Refused => Some(ChurnAnswer::Refused),
            ChurnPhase::Flaky if public => None,
            ChurnPhase::Flaky => {
                if let PhaseEnd::Answers(left) = c.end {
                    *churn = if left <= 1 {
                        None
                    } else {
                        Some(Churn {
                            end: PhaseEnd::Answers(left - 1),
                            ..c
                        })
                    };
                }
                Some(ChurnAnswer::Flaky(
                    self.churn_counter.fetch_add(1, Ordering::SeqCst),
                ))
            }
        }
    }
}

/// Routes served by models that load their weights on the first call.
pub const MODEL_ROUTES: [&str; 4] = ["search_rerank", "complete", "score", "chat_stream"];
