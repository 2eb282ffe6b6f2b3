//! The steps of an upload job: upload, convert, wait for the conversion,
//! upsert the points. Each step is checkpointed; a write whose outcome is
//! unknown (no answer, a crash, a 500/502/504: `Error::outcome_unknown`)
//! stays marked `sent`, and before it is sent again the platform is asked
//! whether it took effect (§5.3.3). A write the platform refused is unsent.
//! When the read that would tell is not on the platform (`conversion_of` is
//! an inferred route), the convert is never sent again: the job fails to
//! the UI with the request id of the send in doubt.

use grag_client::types::{ConvertRequest, UpsertPoints};
use grag_client::{ConversionId, Error, Progress};
use serde::{Deserialize, Serialize};

use crate::job::Upload;
use crate::step::{Step, StepError};

/// Where an upload job stands.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct UploadProgress {
    pub step: UploadStep,
    /// The step's request may have reached the platform unanswered.
    #[serde(default)]
    pub sent: bool,
    /// The request id of the send whose outcome is unknown, for the UI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown_request: Option<String>,
    /// A run again of a done job ([`crate::Jobs::rerun`]): every write step
    /// reads first, so nothing that still exists is made twice.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reconcile: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "at", rename_all = "snake_case")]
pub(crate) enum UploadStep {
    #[default]
    Upload,
    Convert,
    Converting {
        conversion_id: ConversionId,
    },
    /// Points from `next` on are not upserted yet; `batch`: the size a 413
    /// split them into (`None`: one upsert for all).
    Ingest {
        next: usize,
        batch: Option<usize>,
    },
    Done,
}

/// Runs the job's steps from its checkpoint to the end.
pub(crate) async fn run(
    step: &Step<'_>,
    upload: &Upload,
    progress: &mut UploadProgress,
) -> Result<(), StepError> {
    loop {
        match progress.step.clone() {
            UploadStep::Upload => upload_document(step, upload, progress).await?,
            UploadStep::Convert => convert(step, upload, progress).await?,
            UploadStep::Converting { conversion_id } => {
                follow_conversion(step, progress, &conversion_id).await?
            }
            UploadStep::Ingest { next, batch } => {
                ingest(step, upload, progress, next, batch).await?
            }
            UploadStep::Done => return Ok(()),
        }
    }
}

/// Uploads the document. A 409 is success too (deterministic id), but a
/// read first keeps the retry from looking like a second upload.
async fn upload_document(
    step: &Step<'_>,
    upload: &Upload,
    progress: &mut UploadProgress,
) -> Result<(), StepError> {
    if (progress.sent || progress.reconcile) && document_exists(step, upload).await? {
        return step.advance(progress, UploadStep::Convert).await;
    }
    step.sending(progress).await?;
    let sent = step
        .grag()
        .workspaces()
        .upload_document(&upload.kb, &upload.document)
        .await;
    step.settled(progress, true, sent).await?;
    step.advance(progress, UploadStep::Convert).await
}

/// Starts the conversion, unless a convert sent before already did: no 409
/// guarantee, a second convert is a second, billed conversion.
async fn convert(
    step: &Step<'_>,
    upload: &Upload,
    progress: &mut UploadProgress,
) -> Result<(), StepError> {
    if let Some(conversion_id) = started_before(step, upload, progress).await? {
        return step
            .advance(progress, UploadStep::Converting { conversion_id })
            .await;
    }
    step.sending(progress).await?;
    let doc = &upload.document;
    let sent = step
        .grag()
        .docfold()
        .convert(
            &ConvertRequest::new(
                doc.document_id.clone(),
                doc.filename.clone(),
                doc.content_type.clone(),
                doc.content_base64.clone(),
            )
            .with_kb_id(upload.kb.clone()),
        )
        .await;
    let job = step.settled(progress, false, sent).await?;
    let conversion_id = job.conversion_id;
    step.advance(progress, UploadStep::Converting { conversion_id })
        .await
}

/// The conversion a convert sent before (or the done job a rerun repeats)
/// started, if any; when nobody can tell, the job fails rather than send a
/// convert that could start (and bill) a second one.
async fn started_before(
    step: &Step<'_>,
    upload: &Upload,
    progress: &UploadProgress,
) -> Result<Option<ConversionId>, StepError> {
    if !(progress.sent || progress.reconcile) {
        return Ok(None);
    }
    match conversion_of(step, upload).await? {
        Started::Yes(conversion_id) => Ok(Some(conversion_id)),
        Started::No => Ok(None),
        // A rerun whose convert is long done and answered has no send in
        // doubt, but the same holds: the conversion may still exist.
        Started::Unknowable(read) => Err(StepError::Unknown {
            step: "docfold.convert",
            request_id: if progress.sent {
                progress.unknown_request.clone()
            } else {
                None
            },
            read,
        }),
    }
}

/// Polls the conversion until its result is ready.
async fn follow_conversion(
    step: &Step<'_>,
    progress: &mut UploadProgress,
    conversion_id: &ConversionId,
) -> Result<(), StepError> {
    let result = step.grag().docfold().result(conversion_id).await;
    match result.map_err(StepError::Platform)? {
        Progress::Ready(_) => {
            let next = UploadStep::Ingest {
                next: 0,
                batch: None,
            };
            step.advance(progress, next).await
        }
        Progress::Processing => step.poll_later(progress).await,
    }
}

/// Upserts the points from `next` on, `batch` at a time (all at once
/// until a 413 split them). Point ids are chunk-derived: a repeated upsert
/// changes nothing.
async fn ingest(
    step: &Step<'_>,
    upload: &Upload,
    progress: &mut UploadProgress,
    next: usize,
    batch: Option<usize>,
) -> Result<(), StepError> {
    let points = &upload.points;
    if next >= points.len() {
        return step.advance(progress, UploadStep::Done).await;
    }
    let size = batch.unwrap_or(points.len()).max(1);
    let end = next.saturating_add(size).min(points.len());
    let body = UpsertPoints::new(points[next..end].to_vec());
    match step.grag().voyager().upsert_points(&upload.kb, &body).await {
        Ok(_) => {
            let next = UploadStep::Ingest { next: end, batch };
            step.advance(progress, next).await
        }
        Err(e) if e.status() == Some(413) => {
            let Some(batch) = smaller_batch(end - next, step.split()) else {
                let point = points[next].id.clone();
                return Err(StepError::PointTooLarge { error: e, point });
            };
            let next = UploadStep::Ingest {
                next,
                batch: Some(batch),
            };
            step.advance(progress, next).await
        }
        Err(e) => Err(StepError::Platform(e)),
    }
}

/// The batch size after a 413 (T9) for a batch of `sent` points: the
/// policy's split size first, then halves, since a proxy in front
/// (nginx's `client_max_body_size`, 1 MB by default) refuses by bytes, not
/// by points; `None` once a single point was refused: nothing left to split.
fn smaller_batch(sent: usize, split: usize) -> Option<usize> {
    match sent {
        0 | 1 => None,
        n if n > split => Some(split.max(1)),
        n => Some(n.div_ceil(2).min(n - 1)),
    }
}

async fn document_exists(step: &Step<'_>, upload: &Upload) -> Result<bool, StepError> {
    let documents = step
        .grag()
        .workspaces()
        .list_documents(&upload.kb)
        .await
        .map_err(StepError::Platform)?;
    Ok(documents
        .iter()
        .any(|d| d.document_id == upload.document.document_id))
}

/// What the platform says about a conversion of the document.
enum Started {
    Yes(ConversionId),
    /// The route's own 404: none was started.
    No,
    /// The platform has no such route, or its 404 says nothing more than
    /// one would (FastAPI's default detail): nobody can tell. The answer, for the UI.
    Unknowable(String),
}

/// Starlette's answer for a path it has no route for (and FastAPI's default).
const NO_SUCH_ROUTE: &str = "Not Found";

/// The conversion already started for the document, if any. A 404 of the
/// route is "none"; Starlette's bare `{"detail": "Not Found"}` or a 405 is
/// "no such route" (`conversion_of` is inferred, §5.3.3 names only the KB
/// document list and the pipeline status as re-poll reads).
async fn conversion_of(step: &Step<'_>, upload: &Upload) -> Result<Started, StepError> {
    match step
        .grag()
        .docfold()
        .conversion_of(&upload.document.document_id)
        .await
    {
        Ok(job) => Ok(Started::Yes(job.conversion_id)),
        Err(e) if no_such_route(&e) => Ok(Started::Unknowable(e.to_string())),
        Err(e) if e.status() == Some(404) => Ok(Started::No),
        Err(e) => Err(StepError::Platform(e)),
    }
}

fn no_such_route(e: &Error) -> bool {
    match e.status() {
        Some(405) => true,
        Some(404) => e.detail() == Some(NO_SUCH_ROUTE),
        _ => false,
    }
}

/// The upload's own checkpoints: sent, settled, advanced, polled.
impl Step<'_> {
    /// The step's request is about to go out: from here its outcome is
    /// unknown until its answer is read, even across a crash.
    pub async fn sending(&self, progress: &mut UploadProgress) -> Result<(), StepError> {
        progress.sent = true;
        self.save(progress).await
    }

    /// The step is done: the next one starts unsent.
    pub async fn advance(
        &self,
        progress: &mut UploadProgress,
        next: UploadStep,
    ) -> Result<(), StepError> {
        progress.step = next;
        progress.sent = false;
        progress.unknown_request = None;
        self.save(progress).await?;
        self.unless_stopping()
    }

    /// The answer of a step's write that is not idempotent: a refusal (a
    /// known outcome) makes the step unsent again, so it is sent again
    /// without a read; an unknown outcome keeps it `sent` with the request
    /// id in doubt (§5.3.3, the pipeline's `outcome_unknown`). An idempotent
    /// write stays `sent` whatever came back: its read is cheap and keeps a
    /// repeat from looking like a second upload.
    pub async fn settled<T>(
        &self,
        progress: &mut UploadProgress,
        idempotent: bool,
        sent: Result<T, grag_client::Error>,
    ) -> Result<T, StepError> {
        let e = match sent {
            Ok(value) => return Ok(value),
            Err(e) => e,
        };
        if e.outcome_unknown() {
            progress.unknown_request = e.request_id().map(str::to_owned);
        } else if !idempotent {
            progress.sent = false;
        }
        self.save(progress).await?;
        Err(StepError::Platform(e))
    }

    /// Waits the polling interval (×2 while a 429 is hot), keeping the lease.
    pub async fn poll_later(&self, progress: &UploadProgress) -> Result<(), StepError> {
        tokio::time::sleep(self.grag().runtime().poll_interval()).await;
        self.save(progress).await?;
        self.unless_stopping()
    }
}

#[cfg(test)]
mod tests {
    use super::smaller_batch;

    #[test]
    fn a_refused_batch_shrinks_to_the_split_size_then_by_halves_down_to_one_point() {
        let mut sizes = vec![600];
        while let Some(next) = smaller_batch(*sizes.last().unwrap(), 256) {
            sizes.push(next);
        }
        assert_eq!(sizes, [600, 256, 128, 64, 32, 16, 8, 4, 2, 1]);
        assert_eq!(smaller_batch(3, 256), Some(2));
        assert_eq!(
            smaller_batch(1, 256),
            None,
            "one point: a verdict, not a loop"
        );
        assert_eq!(smaller_batch(0, 256), None);
    }
}
