//! The platform's in-memory state, one [`Tenant`] per `X-Tenant-ID`.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use grag_client::types::{Conversation, Document, Edge, Entity, JobState, JobStatus, Kb, Point};
use serde_json::{Value, json};
use tokio::time::Instant;

/// Everything the platform holds.
#[derive(Default)]
pub(crate) struct Platform {
    pub tenants: HashMap<String, Tenant>,
    /// Counter for ids the platform makes (conversions, messages).
    pub next_id: u64,
}

impl Platform {
    pub fn tenant(&mut self, id: &str) -> &mut Tenant {
        self.tenants.entry(id.to_owned()).or_default()
    }

    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

#[derive(Default)]
pub(crate) struct Tenant {
    pub kbs: BTreeMap<String, KbState>,
    pub conversations: BTreeMap<String, ConversationState>,
    /// Keyed by (workspace, entity id): the KG is per workspace.
    pub entities: BTreeMap<(String, String), Entity>,
    pub edges: BTreeMap<(String, String), Edge>,
    pub settings: Option<Value>,
    pub jobs: HashMap<String, Job>,
    pub conversions: HashMap<String, Conversion>,
    /// Conversion ids started per document id, in order: a second one is a
    /// convert sent twice (billed twice).
    pub conversions_by_document: BTreeMap<String, Vec<String>>,
    pub ledger: Vec<Charge>,
}

pub(crate) struct KbState {
    pub kb: Kb,
    pub documents: BTreeMap<String, DocState>,
    pub points: BTreeMap<String, Point>,
}

pub(crate) struct DocState {
    pub document: Document,
    pub text: String,
}

pub(crate) struct ConversationState {
    pub conversation: Conversation,
    /// (role, text) in order.
    pub messages: Vec<(String, String)>,
}

/// A docfold conversion: 409 until `ready_at`.
pub(crate) struct Conversion {
    pub id: String,
    pub ready_at: Instant,
    pub text: String,
}

/// One billed call.
#[derive(Debug, Clone)]
pub(crate) struct Charge {
    pub service: &'static str,
    pub provider: &'static str,
    pub pipeline_id: Option<String>,
    pub cost: f64,
}

/// An ingest job. Its whole life is a timeline fixed at creation, so the
/// status route and every stream subscriber see the same job.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub id: String,
    pub document_id: String,
    pub kb_id: String,
    /// Where the timeline starts: the upload, or for a held job
    /// ([`crate::JobStart::Held`]) the moment it was started; `None` while a
    /// held job waits (it is `queued` until then).
    pub start: Option<Instant>,
    pub queue: Duration,
    pub pace: Duration,
    pub nodes: Vec<String>,
    /// Index of the node that fails, if any.
    pub fail_at: Option<usize>,
    pub chunks: usize,
}

/// One orchestrator event at its time.
#[derive(Debug, Clone)]
pub(crate) struct TimedEvent {
    pub at: Instant,
    pub name: &'static str,
    pub data: Value,
}

impl Job {
    fn node_start(&self, start: Instant, i: usize) -> Instant {
        start + self.queue + self.pace * i as u32
    }

    /// Every event the orchestrator publishes for this job, in order (none
    /// while a held job waits to be started).
    pub fn timeline(&self) -> Vec<TimedEvent> {
        let Some(start) = self.start else {
            return Vec::new();
        };
        let node_start = |i: usize| self.node_start(start, i);
        let total = self.nodes.len();
        let mut out = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let base = json!({ "job_id": self.id, "node": node, "index": i, "total": total });
            out.push(TimedEvent {
                at: node_start(i),
                name: "node_start",
                data: base.clone(),
            });
            let end = node_start(i + 1);
            if self.fail_at == Some(i) {
                let mut fail = base;
                fail["error"] = json!(self.failure());
                out.push(TimedEvent {
                    at: end,
                    name: "node_fail",
                    data: fail,
                });
                out.push(TimedEvent {
                    at: end,
                    name: "failed",
                    data: json!({ "job_id": self.id, "error": self.failure() }),
                });
                return out;
            }
            out.push(TimedEvent {
                at: end,
                name: "node_complete",
                data: base,
            });
        }
        out.push(TimedEvent {
            at: node_start(total),
            name: "completed",
            data: json!({ "job_id": self.id, "results": self.results() }),
        });
        out
    }

    fn failure(&self) -> String {
        let node = self
            .fail_at
            .and_then(|i| self.nodes.get(i))
            .map(String::as_str)
            .unwrap_or("?");
        format!("node {node} failed: simulated failure")
    }

    fn results(&self) -> Value {
        json!({ "document_id": self.document_id, "kb_id": self.kb_id, "chunks": self.chunks })
    }

    /// The status hash at `now`.
    pub fn status(&self, now: Instant) -> JobStatus {
        let total = self.nodes.len().max(1);
        let Some(first) = self
            .start
            .map(|s| self.node_start(s, 0))
            .filter(|f| now >= *f)
        else {
            // Not a state the policy names: the client reads it as `Unknown`.
            return JobStatus::new("queued", 0.0);
        };
        let elapsed = now.saturating_duration_since(first);
        let done = if self.pace.is_zero() {
            total
        } else {
            ((elapsed.as_nanos() / self.pace.as_nanos().max(1)) as usize).min(total)
        };
        if let Some(fail) = self.fail_at
            && done > fail
        {
            return JobStatus::new(JobState::Failed, fail as f64 / total as f64)
                .with_error(self.failure());
        }
        if done >= self.nodes.len() {
            return JobStatus::new(JobState::Completed, 1.0).with_results(self.results());
        }
        JobStatus::new(JobState::Running, done as f64 / total as f64)
            .with_results(json!({ "node": self.nodes[done] }))
    }

    /// The document status the workspaces service shows for this job.
    pub fn document_status(&self, now: Instant) -> &'static str {
        match self.status(now).status {
            JobState::Running => "processing",
            JobState::Failed => "failed",
            JobState::Completed | JobState::Cancelled => "indexed",
            // Unknown, or a state a later spec adds.
            _ => "queued",
        }
    }
}

/// Chunks of a document's text: paragraphs, long ones cut at sentences.
pub(crate) fn chunks(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for para in text.split("\n\n") {
        let mut current = String::new();
        for sentence in para.split_inclusive(['.', '!', '?']) {
            let sentence = sentence.trim();
            if sentence.is_empty() {
                continue;
            }
            if !current.is_empty() && current.len() + sentence.len() > 300 {
                out.push(std::mem::take(&mut current));
            }
            if !current.is_empty() {
                current.push(' ');
            }
            current.push_str(sentence);
        }
        if !current.is_empty() {
            out.push(current);
        }
    }
    out
}

/// Lowercase word tokens (letters and digits, Unicode-aware).
pub(crate) fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() > 2)
        .map(str::to_lowercase)
        .collect()
}

/// Share of the query's words found in `text`.
pub(crate) fn overlap(query: &[String], text: &str) -> f64 {
    if query.is_empty() {
        return 0.0;
    }
    let have = words(text);
    let hits = query.iter().filter(|w| have.contains(w)).count();
    hits as f64 / query.len() as f64
}

/// RFC 3339 UTC timestamp (`2026-07-06T12:00:00Z`).
pub(crate) fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(fail_at: Option<usize>) -> Job {
        Job {
            id: "j".into(),
            document_id: "d".into(),
            kb_id: "k".into(),
            start: Some(Instant::now()),
            queue: Duration::from_secs(1),
            pace: Duration::from_secs(2),
            nodes: vec!["a".into(), "b".into()],
            fail_at,
            chunks: 3,
        }
    }

    #[test]
    fn status_follows_the_timeline() {
        let j = job(None);
        let t = j.start.unwrap();
        assert_eq!(j.status(t).status, JobState::Unknown("queued".into()));
        assert_eq!(
            j.status(t + Duration::from_secs(1)).status,
            JobState::Running
        );
        assert_eq!(j.status(t + Duration::from_secs(3)).progress, 0.5);
        assert_eq!(
            j.status(t + Duration::from_secs(5)).status,
            JobState::Completed
        );
        let names: Vec<_> = j.timeline().iter().map(|e| e.name).collect();
        assert_eq!(
            names,
            [
                "node_start",
                "node_complete",
                "node_start",
                "node_complete",
                "completed"
            ]
        );
    }

    #[test]
    fn a_failing_node_fails_the_job() {
        let j = job(Some(1));
        let t = j.start.unwrap();
        assert_eq!(
            j.status(t + Duration::from_secs(4)).status,
            JobState::Running
        );
        let failed = j.status(t + Duration::from_secs(5));
        assert_eq!(failed.status, JobState::Failed);
        assert!(failed.error.unwrap().contains("node b"));
        let names: Vec<_> = j.timeline().iter().map(|e| e.name).collect();
        assert_eq!(
            names,
            [
                "node_start",
                "node_complete",
                "node_start",
                "node_fail",
                "failed"
            ]
        );
    }

    #[test]
    fn timestamps_are_rfc3339() {
        let ts = now_rfc3339();
        assert_eq!(ts.len(), 20, "{ts}");
        assert!(ts.starts_with("20") && ts.ends_with('Z'), "{ts}");
    }

    #[test]
    fn chunks_split_paragraphs() {
        assert_eq!(chunks("A b c.\n\nD e f. G h."), ["A b c.", "D e f. G h."]);
    }
}
