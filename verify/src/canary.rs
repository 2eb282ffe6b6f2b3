//! `canary`: the knoll flow end to end through the generated client (§10.5):
//! the canary KB, a fixture document and its ingest, a search, a chat turn,
//! the ledger. Every id is fixed, so a re-run adds nothing (the platform has
//! no delete route: idempotence is the purge).

use std::future::Future;
use std::time::{Duration, Instant};

use base64::Engine;
use grag_client::types::{
    ChatEvent, ChatRequest, CreateConversation, CreateKb, JobState, SearchRequest, UploadDocument,
};
use grag_client::{
    ConversationId, Created, DocumentId, Error, Grag, JobDone, JobId, JobUpdate, KbId, PipelineId,
    RequestRefs, TurnUpdate,
};
use sdk_runtime::Endpoint;
use serde::Serialize;

use crate::Exit;
use crate::progress::Progress;

pub const KB: &str = "kb-canary";
pub const DOCUMENT: &str = "doc-canary-fixture";
pub const PIPELINE: &str = "canary";
pub const CONVERSATION: &str = "conv-canary";
pub const QUESTION: &str = "Wie oft wird die Brücke am Mühlenweg geprüft?";
/// The fixture document: small, and answering [`QUESTION`].
pub const FIXTURE: &str = "Canary-Prüfbericht Brücke Mühlenweg\n\n\
    Die Brücke am Mühlenweg wird nach DIN 1076 alle sechs Jahre einer Hauptprüfung \
    unterzogen, dazwischen alle drei Jahre einer einfachen Prüfung.";
/// Bounds a stream that never ends; never an assertion about speed.
const STREAM_GUARD: Duration = Duration::from_secs(600);

/// The step names, in order.
pub const STEPS: [&str; 7] = [
    "health", "kb", "upload", "ingest", "search", "chat", "ledger",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    /// It worked, but not as it should (a buffered stream, a degraded stage).
    Degraded,
    Failed,
    /// Not run: read-only, or what it needs failed before.
    Skipped,
}

/// One step: what happened, with the evidence the operator joins with the platform's logs.
#[derive(Debug, Clone, Serialize)]
pub struct StepReport {
    pub step: &'static str,
    pub outcome: Outcome,
    pub detail: String,
    pub row: Option<&'static str>,
    pub class: Option<&'static str>,
    pub latency_ms: u64,
    pub request_id: Option<String>,
    /// The origin breaker when the step ended: `closed`, `half_open`, `open`.
    pub breaker: &'static str,
    pub deploy_suspected: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub exit: Exit,
    pub failing_step: Option<&'static str>,
    pub summary: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct CanaryReport {
    pub origin: String,
    pub tenant: String,
    pub writes: bool,
    pub steps: Vec<StepReport>,
    /// The public `/health` after the steps: `None` when it answered.
    pub health_after: Option<String>,
    pub verdict: Verdict,
}

/// Runs the canary; `writes` allows the writing steps (KB, upload, chat).
pub async fn run(grag: &Grag, writes: bool, progress: &Progress) -> CanaryReport {
    let refs = RequestRefs::new();
    let pipeline = PipelineId::parse(PIPELINE).expect("a valid pipeline id");
    let noting = grag.noting_requests(&refs);
    let mut flow = Flow {
        grag: &noting,
        pipeline: &pipeline,
        refs: &refs,
        progress,
        steps: Vec::new(),
    };
    flow.all(writes).await;
    let health_after = match grag.workspaces().health().await {
        Ok(_) => None,
        Err(e) => Some(format!("{} ({}): {e}", e.class_name(), e.row())),
    };
    let verdict = verdict(&flow.steps, health_after.is_some());
    CanaryReport {
        origin: grag.runtime().base_url().to_owned(),
        tenant: grag.runtime().tenant().to_string(),
        writes,
        steps: flow.steps,
        health_after,
        verdict,
    }
}

struct Flow<'a> {
    grag: &'a Grag,
    /// The canary's own run: its ai-gateway calls and the ledger read.
    pipeline: &'a PipelineId,
    refs: &'a RequestRefs,
    progress: &'a Progress,
    steps: Vec<StepReport>,
}

/// What a step's body says beyond success: its detail, and whether it degraded.
struct Done<T> {
    value: T,
    detail: String,
    degraded: bool,
}

fn done<T>(value: T, detail: impl Into<String>) -> Done<T> {
    Done {
        value,
        detail: detail.into(),
        degraded: false,
    }
}

impl Flow<'_> {
    async fn all(&mut self, writes: bool) {
        let kb = KbId::parse(KB).expect("a valid KB id");
        let grag = self.grag;
        self.step("health", async {
            grag.workspaces()
                .health()
                .await
                .map(|h| done((), format!("status {}", h.status)))
        })
        .await;
        let have_kb = self.kb(&kb, writes).await;
        let job = match have_kb {
            Some(()) => self.upload(&kb, writes).await,
            None => self.skip("upload", "no canary KB"),
        };
        let follow_refused = not_run(grag, &grag_client::bff::ORCHESTRATOR_EVENTS);
        match (job, &follow_refused) {
            (Some(_), Some(why)) => {
                self.skip::<()>("ingest", why);
            }
            (Some((job, true)), None) => self.ingest(&job).await,
            (Some((job, false)), None) => self.ingested(&job).await,
            (None, _) => {
                self.skip::<()>("ingest", "no ingest job to follow");
            }
        }
        // An ingest nobody could follow may not have ended: no hit is no fault.
        let expect_hits = follow_refused.is_none();
        match have_kb {
            Some(()) => self.search(&kb, expect_hits).await,
            None => self.skip("search", "no canary KB"),
        };
        if let Some(why) = not_run(grag, &grag_client::bff::CHAT_STREAM) {
            self.skip::<()>("chat", &why);
        } else if writes {
            self.chat(&kb).await;
        } else {
            self.skip::<()>(
                "chat",
                "read-only: a chat turn writes to a conversation (--write)",
            );
        }
        let pipeline = self.pipeline;
        self.step("ledger", async {
            let t = grag.ledger().totals(pipeline).await?;
            let detail = format!(
                "pipeline {PIPELINE}: {} call(s), {:.4} {}",
                t.calls.unwrap_or(0),
                t.total_cost.unwrap_or(0.0),
                t.currency.unwrap_or_default()
            );
            Ok(done((), detail))
        })
        .await;
    }

    async fn kb(&mut self, kb: &KbId, writes: bool) -> Option<()> {
        let grag = self.grag;
        if writes {
            let body = CreateKb::new(kb.clone(), "Canary")
                .with_description("grag-verify canary: a fixed KB, re-used by every run");
            return self
                .step("kb", async {
                    Ok(match grag.workspaces().create_kb(&body).await? {
                        Created::New(_) => done((), format!("{KB} created")),
                        Created::Existing => done((), format!("{KB} already there (409)")),
                    })
                })
                .await;
        }
        let listed = self
            .step("kb", async {
                let kbs = grag.workspaces().list_kbs().await?;
                let found = kbs.iter().any(|k| &k.kb_id == kb);
                Ok(done(
                    found,
                    format!(
                        "{} KBs, {KB} {}",
                        kbs.len(),
                        if found { "among them" } else { "absent" }
                    ),
                ))
            })
            .await;
        match listed {
            Some(true) => Some(()),
            _ => None,
        }
    }

    /// The fixture's upload; its ingest job and `true` when this upload
    /// started it, else the job the listing still names and `false`.
    async fn upload(&mut self, kb: &KbId, writes: bool) -> Option<(JobId, bool)> {
        let grag = self.grag;
        let doc = DocumentId::parse(DOCUMENT).expect("a valid document id");
        let body = UploadDocument::new(
            doc.clone(),
            "canary-fixture.txt",
            "text/plain",
            base64::engine::general_purpose::STANDARD.encode(FIXTURE),
        );
        self.step("upload", async {
            if writes && let Created::New(d) = grag.workspaces().upload_document(kb, &body).await? {
                let detail = format!(
                    "{DOCUMENT} uploaded, status {}",
                    d.status.as_deref().unwrap_or("?")
                );
                return Ok(done(d.job_id.map(|j| (j, true)), detail));
            }
            let docs = grag.workspaces().list_documents(kb).await?;
            Ok(match docs.into_iter().find(|d| d.document_id == doc) {
                Some(d) => {
                    let detail = format!(
                        "{DOCUMENT} already there, status {}",
                        d.status.as_deref().unwrap_or("?")
                    );
                    done(d.job_id.map(|j| (j, false)), detail)
                }
                None => done(
                    None,
                    format!("{DOCUMENT} absent (read-only: run once with --write)"),
                ),
            })
        })
        .await
        .flatten()
    }

    async fn ingest(&mut self, job: &JobId) {
        let grag = self.grag;
        self.step("ingest", async {
            let mut progress = grag.bff().orchestrator_events(job);
            let mut seen = 0usize;
            let mut fell_back = None;
            let end = tokio::time::timeout(STREAM_GUARD, async {
                while let Some(update) = progress.next().await {
                    match update? {
                        JobUpdate::Event(_) => seen += 1,
                        JobUpdate::FellBack(e) => {
                            fell_back = Some(format!("{} ({})", e.class_name(), e.row()))
                        }
                        JobUpdate::Status(_) => {}
                        JobUpdate::Completed(JobDone::Status(_) | JobDone::Event(_)) => {
                            return Ok(true);
                        }
                    }
                }
                Ok::<bool, Error>(false)
            })
            .await;
            let completed = end.unwrap_or(Ok(false))?;
            let buffered = progress.was_buffered();
            let mut detail = format!(
                "job {job}: {seen} event(s), {}",
                if completed {
                    "completed"
                } else {
                    "did not complete"
                }
            );
            if let Some(f) = &fell_back {
                detail.push_str(&format!("; the stream fell back to polling after {f}"));
            }
            if buffered {
                detail.push_str("; the stream arrived in one burst: a proxy buffers it");
            }
            Ok(Done {
                value: (),
                detail,
                degraded: buffered || !completed,
            })
        })
        .await;
    }

    /// An earlier run's job: its status, and its stream only while it runs
    /// (an ended job's stream replays nothing).
    async fn ingested(&mut self, job: &JobId) {
        let grag = self.grag;
        let status = self
            .step("ingest", async {
                let s = grag.bff().pipeline_status(job).await?;
                let state = s.status.as_str().to_owned();
                let detail = format!(
                    "job {job} of an earlier run: {state}{}",
                    s.error.map(|e| format!(" ({e})")).unwrap_or_default()
                );
                let failed = matches!(s.status, JobState::Failed | JobState::Cancelled);
                Ok(Done {
                    value: s.status,
                    detail,
                    degraded: failed,
                })
            })
            .await;
        if matches!(status, Some(JobState::Running | JobState::Unknown(_))) {
            self.steps.pop();
            self.ingest(job).await;
        }
    }

    async fn search(&mut self, kb: &KbId, expect_hits: bool) -> Option<()> {
        let grag = self.grag;
        let query = SearchRequest::new(QUESTION, 3);
        self.step("search", async {
            let hits = grag
                .ai_gateway(self.pipeline)
                .search_rerank(kb, &query)
                .await?
                .results;
            let fixture = hits.iter().any(|h| {
                h.document_id
                    .as_ref()
                    .is_some_and(|d| d.as_str() == DOCUMENT)
            });
            let detail = format!(
                "{} hit(s){}",
                hits.len(),
                if fixture {
                    ", the fixture among them"
                } else if !expect_hits {
                    " (the fixture's ingest was not followed and may still run)"
                } else {
                    ""
                }
            );
            Ok(Done {
                value: (),
                detail,
                degraded: hits.is_empty() && expect_hits,
            })
        })
        .await
    }

    async fn chat(&mut self, kb: &KbId) {
        let grag = self.grag;
        self.step("chat", async {
            let conversation = grag
                .workspaces()
                .ensure_conversation(
                    &CreateConversation::new(
                        ConversationId::parse(CONVERSATION).expect("a valid id"),
                    )
                    .with_title("grag-verify canary")
                    .with_kb_ids(vec![kb.clone()]),
                )
                .await?;
            let request = ChatRequest::new(conversation.id().clone(), QUESTION);
            let mut turn = grag.bff().chat_stream(&conversation, &request).await?;
            let (mut answer, mut ended) = (0usize, false);
            let mut degraded = Vec::new();
            let end = tokio::time::timeout(STREAM_GUARD, async {
                while let Some(update) = turn.next().await {
                    match update? {
                        TurnUpdate::Event(ChatEvent::Delta(d)) => answer += d.text.chars().count(),
                        TurnUpdate::Event(ChatEvent::Done(_)) => ended = true,
                        TurnUpdate::Degraded(stage) => degraded.push(stage.stage),
                        TurnUpdate::Event(_) => {}
                    }
                }
                Ok::<(), Error>(())
            })
            .await;
            end.unwrap_or(Ok(()))?;
            let buffered = turn.was_buffered();
            let mut detail = format!(
                "{answer} characters of answer, {}",
                if ended { "done" } else { "no `done`" }
            );
            if !degraded.is_empty() {
                detail.push_str(&format!("; degraded stages: {}", degraded.join(", ")));
            }
            if buffered {
                detail.push_str("; the turn arrived in one burst: a proxy buffers it");
            }
            Ok(Done {
                value: (),
                detail,
                degraded: buffered || !ended || !degraded.is_empty(),
            })
        })
        .await;
    }

    fn skip<T>(&mut self, step: &'static str, why: &str) -> Option<T> {
        self.progress.note(&format!("{step} skipped: {why}"));
        self.steps.push(self.report(
            step,
            Outcome::Skipped,
            why.to_owned(),
            Duration::ZERO,
            None,
            None,
        ));
        None
    }

    /// Runs one step, timing it and reading its request id and the client's state.
    async fn step<T>(
        &mut self,
        step: &'static str,
        body: impl Future<Output = Result<Done<T>, Error>>,
    ) -> Option<T> {
        let shown = self.progress.step(step);
        self.refs.take();
        let began = Instant::now();
        let result = body.await;
        let took = began.elapsed();
        let last = self.refs.take().pop().map(|r| r.request_id);
        let (report, value) = match result {
            Ok(d) => {
                let outcome = if d.degraded {
                    Outcome::Degraded
                } else {
                    Outcome::Ok
                };
                (
                    self.report(step, outcome, d.detail, took, last, None),
                    Some(d.value),
                )
            }
            Err(e) => {
                let id = e.request_id().map(str::to_owned).or(last);
                (
                    self.report(step, Outcome::Failed, e.to_string(), took, id, Some(&e)),
                    None,
                )
            }
        };
        let outcome = format!("{:?}", report.outcome).to_lowercase();
        shown.done(&format!("{outcome}: {}", report.detail));
        self.steps.push(report);
        value
    }

    fn report(
        &self,
        step: &'static str,
        outcome: Outcome,
        detail: String,
        took: Duration,
        request_id: Option<String>,
        error: Option<&Error>,
    ) -> StepReport {
        let runtime = self.grag.runtime();
        StepReport {
            step,
            outcome,
            detail,
            row: error.map(|e| e.row()),
            class: error.map(|e| e.class_name()),
            latency_ms: took.as_millis().try_into().unwrap_or(u64::MAX),
            request_id,
            breaker: runtime.circuit_state().as_str(),
            deploy_suspected: runtime.deploy_suspected(),
        }
    }
}

/// Why a step on `route` is not run: the client refuses every call of it
/// unsent (a keyless lane in production), so running it would judge nothing
/// of the platform's.
pub fn not_run(grag: &Grag, route: &Endpoint) -> Option<String> {
    grag.runtime()
        .lane_refusal(route)
        .map(|why| format!("not run: {why}"))
}

/// The alerts of rows that are our side's fault: a contract broken, in
/// either direction, or a client bug.
const OUR_ALERTS: [&str; 2] = ["contract_drift", "client_contract"];

/// Whether a failure on `class` (row `row`) is our side's: a contract
/// violation (its row alerts as one) or a request refused before sending.
pub fn ours(row: &str) -> bool {
    grag_client::policy::POLICY
        .taxonomy
        .iter()
        .find(|r| r.row == row)
        .is_some_and(|r| {
            r.alert.is_some_and(|a| OUR_ALERTS.contains(&a)) || r.class == "invalid_scope"
        })
}

/// The verdict over the steps: the first step that did not succeed names
/// it; a platform row with the platform down, the breaker not closed or a
/// deploy suspected is a platform regression.
pub fn verdict(steps: &[StepReport], health_down: bool) -> Verdict {
    let Some(first) = steps
        .iter()
        .find(|s| matches!(s.outcome, Outcome::Failed | Outcome::Degraded))
    else {
        return Verdict {
            exit: Exit::Ok,
            failing_step: None,
            summary: "the knoll flow works end to end".into(),
        };
    };
    let on = match (first.row, first.class) {
        (Some(row), Some(class)) => format!(" on {row} {class}"),
        _ => format!(": {}", first.detail),
    };
    if first.row.is_some_and(ours) {
        return Verdict {
            exit: Exit::Ours,
            failing_step: Some(first.step),
            summary: format!(
                "our side: `{}` failed{on}, a contract violation",
                first.step
            ),
        };
    }
    let mut evidence = Vec::new();
    if health_down {
        evidence.push("/health fails");
    }
    if first.breaker != "closed" {
        evidence.push("the breaker is not closed");
    }
    if first.deploy_suspected {
        evidence.push("a deploy is suspected");
    }
    let summary = if evidence.is_empty() {
        format!(
            "platform fault: `{}` {}{on}",
            first.step,
            outcome_word(first.outcome)
        )
    } else {
        format!(
            "platform regression: `{}` {}{on}, while {}",
            first.step,
            outcome_word(first.outcome),
            evidence.join(" and ")
        )
    };
    Verdict {
        exit: Exit::Platform,
        failing_step: Some(first.step),
        summary,
    }
}

fn outcome_word(o: Outcome) -> &'static str {
    match o {
        Outcome::Degraded => "degraded",
        _ => "failed",
    }
}

impl std::fmt::Display for CanaryReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "canary against {} as tenant `{}` ({})",
            self.origin,
            self.tenant,
            if self.writes { "writes" } else { "read-only" }
        )?;
        writeln!(f)?;
        writeln!(
            f,
            "  {:<7} {:<9} {:>8}  {:<22} {:<9} {:<36} detail",
            "step", "outcome", "latency", "row", "breaker", "request id"
        )?;
        for s in &self.steps {
            let row = match (s.row, s.class) {
                (Some(r), Some(c)) => format!("{r} {c}"),
                _ => "—".into(),
            };
            let breaker = if s.deploy_suspected {
                format!("{} (deploy)", s.breaker)
            } else {
                s.breaker.to_owned()
            };
            writeln!(
                f,
                "  {:<7} {:<9} {:>6} ms  {:<22} {:<9} {:<36} {}",
                s.step,
                format!("{:?}", s.outcome).to_lowercase(),
                s.latency_ms,
                row,
                breaker,
                s.request_id.as_deref().unwrap_or("—"),
                s.detail
            )?;
        }
        writeln!(f)?;
        if let Some(h) = &self.health_after {
            writeln!(f, "  /health after the steps: {h}")?;
        }
        writeln!(f, "verdict: {}", self.verdict.summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_alerts_are_the_specs_and_name_the_contract_rows() {
        let severities = grag_client::policy::POLICY.alerts.severities;
        for alert in OUR_ALERTS {
            assert!(severities.iter().any(|s| s.alert == alert), "{alert}");
        }
        // A decode failure and a 422 are ours; a 502 and a 402 the platform's.
        assert!(ours("T24") && ours("T10") && ours("T22"));
        assert!(!ours("T12") && !ours("T5") && !ours("T13"));
    }
}
