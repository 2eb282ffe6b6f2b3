//! The steps of a KG batch: its entities, then its edges, one MERGE upsert
//! each. An upsert repeated after an unknown outcome changes nothing, so a
//! replay simply goes on from the first item not known to be written.

use serde::{Deserialize, Serialize};

use crate::job::KgBatch;
use crate::step::{Step, StepError};

/// Items `0..next` of the batch (entities first, then edges) are written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct KgProgress {
    pub next: usize,
}

pub(crate) async fn run(
    step: &Step<'_>,
    batch: &KgBatch,
    progress: &mut KgProgress,
) -> Result<(), StepError> {
    let kg = step.grag().kg(&batch.workspace);
    let entities = batch.entities.len();
    while progress.next < entities + batch.edges.len() {
        let i = progress.next;
        let written = match batch.entities.get(i) {
            Some(entity) => kg.upsert_entity(&entity.entity_id, entity).await.map(drop),
            None => {
                let edge = &batch.edges[i - entities];
                kg.upsert_edge(&edge.edge_id, edge).await.map(drop)
            }
        };
        written.map_err(StepError::Platform)?;
        progress.next = i + 1;
        step.save(progress).await?;
    }
    Ok(())
}
