//! `probe`: the open verification items of Appendix B, answered from what
//! the client sees: does a 429 carry `Retry-After`, and does the proxy pass
//! the SSE lanes through or buffer them.

use std::time::{Duration, Instant};

use grag_client::policy::{POLICY, stream};
use grag_client::types::{
    ChatEvent, ChatRequest, CreateConversation, CreateKb, JobState, UploadDocument,
};
use grag_client::{ConversationId, Created, DocumentId, Grag, JobId, JobUpdate, KbId, TurnUpdate};
use serde::Serialize;

use crate::Exit;
use crate::canary;
use crate::progress::Progress;

/// The most requests `--burst` sends.
pub const MAX_BURST: u32 = 1000;
/// Bounds a stream that never ends; never an assertion about speed.
const STREAM_GUARD: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    Yes,
    No,
    NotSeen,
}

impl Answer {
    fn word(self) -> &'static str {
        match self {
            Answer::Yes => "yes",
            Answer::No => "no",
            Answer::NotSeen => "not seen",
        }
    }
}

/// One item: the question, its answer and the evidence.
#[derive(Debug, Clone, Serialize)]
pub struct Item {
    pub question: String,
    pub answer: Answer,
    pub evidence: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProbeReport {
    pub origin: String,
    pub items: Vec<Item>,
}

impl ProbeReport {
    /// A buffered lane, or a 429 without `Retry-After`, is the platform's to fix.
    pub fn exit(&self) -> Exit {
        let buffered = self.items.iter().skip(1).any(|i| i.answer == Answer::Yes);
        let bare_429 = self.items.first().is_some_and(|i| i.answer == Answer::No);
        if buffered || bare_429 {
            Exit::Platform
        } else {
            Exit::Ok
        }
    }
}

/// What `probe` is told besides the client.
#[derive(Debug, Clone, Default)]
pub struct ProbeOptions {
    /// Send at most this many `/health` requests, stopping at the first 429.
    pub burst: Option<u32>,
    /// Metrics text (Prometheus exposition) of the backend's clients.
    pub metrics: Vec<String>,
    /// A running job to follow instead of the canary's.
    pub job: Option<JobId>,
    /// May write (the canary KB, its fixture, a chat turn).
    pub writes: bool,
}

pub async fn run(grag: &Grag, options: &ProbeOptions, progress: &Progress) -> ProbeReport {
    let burst = match options.burst {
        Some(n) => Some(burst(grag, n.min(MAX_BURST), progress).await),
        None => None,
    };
    let jobs = jobs_lane(grag, options, progress).await;
    let chat = chat_lane(grag, options.writes, progress).await;
    let retry_after = retry_after_item(grag, &options.metrics, burst);
    ProbeReport {
        origin: grag.runtime().base_url().to_owned(),
        items: vec![retry_after, jobs, chat],
    }
}

/// 429s counted by whether they carried `Retry-After`, in one metrics text.
pub fn count_429(metrics: &str) -> (u64, u64) {
    let name = POLICY.metrics.rate_limited;
    let value = |label: &str| {
        let series = format!("{name}_total{{retry_after=\"{label}\"}} ");
        metrics
            .lines()
            .filter_map(|l| l.strip_prefix(&series))
            .filter_map(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u64)
            .sum::<u64>()
    };
    (value("present"), value("absent"))
}

fn retry_after_item(grag: &Grag, metrics: &[String], burst: Option<Burst>) -> Item {
    let mut evidence = Vec::new();
    let (mut present, mut absent) = count_429(&grag.runtime().metrics_text());
    evidence.push(format!(
        "this run's client: {present} 429(s) with Retry-After, {absent} without"
    ));
    for (i, text) in metrics.iter().enumerate() {
        let (p, a) = count_429(text);
        evidence.push(format!("metrics text {}: {p} with, {a} without", i + 1));
        present += p;
        absent += a;
    }
    if let Some(b) = burst {
        evidence.push(b.evidence);
        match b.retry_after {
            Some(Some(_)) => present += 1,
            Some(None) => absent += 1,
            None => {}
        }
    } else {
        evidence.push("no active burst (--burst N sends one against /health)".into());
    }
    let answer = match (present, absent) {
        (0, 0) => Answer::NotSeen,
        (_, 0) => Answer::Yes,
        _ => Answer::No,
    };
    Item {
        question: "Does the rate limiter's 429 carry Retry-After?".into(),
        answer,
        evidence,
    }
}

struct Burst {
    /// `None`: no 429 came; `Some(header)` the first 429's `Retry-After`.
    retry_after: Option<Option<String>>,
    evidence: String,
}

/// Up to `n` plain GETs of the public probe route, 8 at a time, until the first 429.
async fn burst(grag: &Grag, n: u32, progress: &Progress) -> Burst {
    let step = progress.step(&format!("burst of up to {n} GET /health"));
    let url = format!(
        "{}{}",
        grag.runtime().base_url().trim_end_matches('/'),
        grag_client::policy::PROBE.path
    );
    let http = match reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
    {
        Ok(h) => h,
        Err(e) => {
            let evidence = format!("burst not sent: no HTTP client: {e}");
            step.done(&evidence);
            return Burst {
                retry_after: None,
                evidence,
            };
        }
    };
    let (mut sent, mut other) = (0u32, 0u32);
    let header = POLICY.headers.retry_after;
    while sent < n {
        let wave = (n - sent).min(8);
        let answers = futures_join(&http, &url, wave).await;
        sent += wave;
        for answer in answers {
            match answer {
                Some((429, retry_after)) => {
                    let evidence = format!(
                        "burst: a 429 within the first {sent} request(s), {header}: {}",
                        retry_after.as_deref().unwrap_or("absent")
                    );
                    step.done(&evidence);
                    return Burst {
                        retry_after: Some(retry_after),
                        evidence,
                    };
                }
                Some(_) => {}
                None => other += 1,
            }
        }
    }
    let evidence = format!("burst: {sent} request(s), no 429 ({other} without an answer)");
    step.done(&evidence);
    Burst {
        retry_after: None,
        evidence,
    }
}

async fn futures_join(
    http: &reqwest::Client,
    url: &str,
    n: u32,
) -> Vec<Option<(u16, Option<String>)>> {
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (http, url) = (http.clone(), url.to_owned());
        set.spawn(async move {
            let r = http.get(&url).send().await.ok()?;
            let ra = r
                .headers()
                .get(POLICY.headers.retry_after)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            Some((r.status().as_u16(), ra))
        });
    }
    set.join_all().await.into_iter().collect()
}

/// When each event of a stream arrived, counted from the send.
#[derive(Debug, Default)]
struct Arrivals {
    head: Option<Duration>,
    events: Vec<Duration>,
}

impl Arrivals {
    fn evidence(&self, cadence: Option<Duration>) -> Vec<String> {
        let ms = |d: Duration| d.as_millis();
        let mut out = Vec::new();
        if let Some(h) = self.head {
            out.push(format!("head {} ms after the send", ms(h)));
        }
        if let (Some(first), Some(last)) = (self.events.first(), self.events.last()) {
            let gap = self
                .events
                .windows(2)
                .map(|w| w[1] - w[0])
                .max()
                .unwrap_or_default();
            out.push(format!(
                "{} event(s): the first {} ms after the send, all within {} ms, largest gap {} ms",
                self.events.len(),
                ms(*first),
                ms(*last - *first),
                ms(gap)
            ));
        } else {
            out.push("no event arrived".into());
        }
        if let Some(c) = cadence {
            out.push(format!(
                "the server sends at least a keepalive every {} s",
                c.as_secs()
            ));
        }
        out
    }
}

fn lane_item(lane: &str, arrivals: &Arrivals, buffered: bool, cadence: Option<Duration>) -> Item {
    let mut evidence = arrivals.evidence(cadence);
    evidence.push(format!("the client's was_buffered(): {buffered}"));
    let answer = if arrivals.events.is_empty() {
        Answer::NotSeen
    } else if buffered {
        Answer::Yes
    } else {
        Answer::No
    };
    Item {
        question: format!("Is {lane} buffered by a proxy?"),
        answer,
        evidence,
    }
}

fn not_seen(lane: &str, why: String) -> Item {
    Item {
        question: format!("Is {lane} buffered by a proxy?"),
        answer: Answer::NotSeen,
        evidence: vec![why],
    }
}

const JOBS_LANE: &str = "/next/api/orchestrator/events/{id}";
const CHAT_LANE: &str = "/next/api/chat/stream";

async fn jobs_lane(grag: &Grag, options: &ProbeOptions, progress: &Progress) -> Item {
    if let Some(why) = canary::not_run(grag, &grag_client::bff::ORCHESTRATOR_EVENTS) {
        return not_seen(JOBS_LANE, why);
    }
    let job = match &options.job {
        Some(job) => Ok(job.clone()),
        None => canary_job(grag, options.writes).await,
    };
    let job = match job {
        Ok(job) => job,
        Err(why) => return not_seen(JOBS_LANE, why),
    };
    let step = progress.step(&format!("following job {job}"));
    let sent = Instant::now();
    let mut arrivals = Arrivals::default();
    let mut follow = grag.bff().orchestrator_events(&job);
    let mut failure = None;
    let _ = tokio::time::timeout(STREAM_GUARD, async {
        while let Some(update) = follow.next().await {
            match update {
                Ok(JobUpdate::Event(_)) => arrivals.events.push(sent.elapsed()),
                Ok(JobUpdate::Completed(_)) => break,
                Ok(_) => {}
                Err(e) => {
                    failure = Some(format!("{} ({}): {e}", e.class_name(), e.row()));
                    break;
                }
            }
        }
    })
    .await;
    let cadence = POLICY.streams[stream::ORCHESTRATOR].keepalive;
    let mut item = lane_item(JOBS_LANE, &arrivals, follow.was_buffered(), cadence);
    item.evidence.insert(0, format!("job {job}"));
    if let Some(f) = failure {
        item.evidence.push(format!("the stream ended in {f}"));
    }
    step.done(item.answer.word());
    item
}

/// The canary fixture's ingest job: a fresh one when this run uploads it,
/// else the one its listing names (which may have ended).
async fn canary_job(grag: &Grag, writes: bool) -> Result<JobId, String> {
    let kb = KbId::parse(canary::KB).expect("a valid KB id");
    let doc = DocumentId::parse(canary::DOCUMENT).expect("a valid document id");
    if writes {
        let create = CreateKb::new(kb.clone(), "Canary");
        grag.workspaces()
            .create_kb(&create)
            .await
            .map_err(|e| format!("create_kb: {e}"))?;
        let upload = UploadDocument::new(
            doc.clone(),
            "canary-fixture.txt",
            "text/plain",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, canary::FIXTURE),
        );
        if let Created::New(d) = grag
            .workspaces()
            .upload_document(&kb, &upload)
            .await
            .map_err(|e| format!("upload: {e}"))?
            && let Some(job) = d.job_id
        {
            return Ok(job);
        }
    }
    let docs = grag
        .workspaces()
        .list_documents(&kb)
        .await
        .map_err(|e| format!("list_documents: {e}"))?;
    let job = docs
        .into_iter()
        .find(|d| d.document_id == doc)
        .and_then(|d| d.job_id)
        .ok_or_else(|| {
            format!(
                "no job: {} has no ingest job on record; pass --job ID of a running one",
                canary::DOCUMENT
            )
        })?;
    // An ended job's stream replays nothing: only a running one shows buffering.
    let status = grag
        .bff()
        .pipeline_status(&job)
        .await
        .map_err(|e| format!("pipeline_status: {e}"))?;
    match status.status {
        JobState::Running => Ok(job),
        other => Err(format!(
            "the canary's job {job} is {}; pass --job ID of a running one",
            other.as_str()
        )),
    }
}

async fn chat_lane(grag: &Grag, writes: bool, progress: &Progress) -> Item {
    if let Some(why) = canary::not_run(grag, &grag_client::bff::CHAT_STREAM) {
        return not_seen(CHAT_LANE, why);
    }
    if !writes {
        return not_seen(
            CHAT_LANE,
            "read-only: a chat turn writes to a conversation (--write)".into(),
        );
    }
    let step = progress.step("one chat turn");
    let conversation = grag
        .workspaces()
        .ensure_conversation(
            &CreateConversation::new(
                ConversationId::parse(canary::CONVERSATION).expect("a valid id"),
            )
            .with_title("grag-verify canary"),
        )
        .await;
    let conversation = match conversation {
        Ok(c) => c,
        Err(e) => return not_seen(CHAT_LANE, format!("ensure_conversation: {e}")),
    };
    let request = ChatRequest::new(conversation.id().clone(), canary::QUESTION);
    let sent = Instant::now();
    let mut turn = match grag.bff().chat_stream(&conversation, &request).await {
        Ok(t) => t,
        Err(e) => return not_seen(CHAT_LANE, format!("chat_stream: {e}")),
    };
    let mut arrivals = Arrivals {
        head: Some(sent.elapsed()),
        events: Vec::new(),
    };
    let _ = tokio::time::timeout(STREAM_GUARD, async {
        while let Some(Ok(update)) = turn.next().await {
            if let TurnUpdate::Event(e) = update {
                arrivals.events.push(sent.elapsed());
                if matches!(e, ChatEvent::Done(_)) {
                    break;
                }
            }
        }
    })
    .await;
    let cadence = POLICY.streams[stream::CHAT].keepalive;
    let item = lane_item(CHAT_LANE, &arrivals, turn.was_buffered(), cadence);
    step.done(item.answer.word());
    item
}

impl std::fmt::Display for ProbeReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "probe against {}", self.origin)?;
        for item in &self.items {
            writeln!(f)?;
            writeln!(f, "  {}  {}", item.question, item.answer.word())?;
            for e in &item.evidence {
                writeln!(f, "    - {e}")?;
            }
        }
        Ok(())
    }
}
