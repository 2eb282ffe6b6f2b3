//! A job's steps as they run: the checkpoint they save, and what ends one early.

use grag_client::Grag;
use sdk_queue::StoreError;
use serde::Serialize;

use crate::shared::Inner;

/// What ended a step early.
pub(crate) enum StepError {
    /// The platform call failed: [`settle`](crate::settle) decides what follows.
    Platform(grag_client::Error),
    /// A single point is refused as too large (413): no split can cure it,
    /// the job fails.
    PointTooLarge {
        error: grag_client::Error,
        point: String,
    },
    /// The checkpoint could not be written (or the lease was lost).
    Store(StoreError),
    /// A write whose outcome is unknown, and the read that would settle it
    /// cannot: the job fails for a person to decide, never sent again.
    Unknown {
        step: &'static str,
        request_id: Option<String>,
        read: String,
    },
    /// The stored payload or checkpoint does not decode.
    Corrupt { what: &'static str, reason: String },
    /// The process is stopping: the job, at a checkpoint, is handed back.
    Stopped,
}

/// The running job, as its steps see it.
pub(crate) struct Step<'a> {
    inner: &'a Inner,
    key: &'a str,
}

impl<'a> Step<'a> {
    pub(crate) fn new(inner: &'a Inner, key: &'a str) -> Self {
        Step { inner, key }
    }

    pub fn grag(&self) -> &Grag {
        &self.inner.grag
    }

    /// Most items of a batch after a 413.
    pub fn split(&self) -> usize {
        self.inner.policy.split
    }

    /// Saves the checkpoint and renews the lease.
    pub async fn save(&self, progress: &impl Serialize) -> Result<(), StepError> {
        let inner = self.inner;
        let value = serde_json::to_value(progress).map_err(|e| {
            StepError::Store(StoreError::Corrupt {
                key: self.key.to_owned(),
                field: "progress",
                reason: e.to_string(),
            })
        })?;
        inner
            .store
            .checkpoint(
                self.key,
                &inner.owner,
                &value,
                inner.policy.lease,
                inner.now(),
            )
            .await
            .map_err(|e| StepError::Store(inner.watch(self.key, e)))
    }

    /// At a checkpoint with nothing in doubt: a stopping process hands the
    /// job back here, for another replica to go on from it at once.
    pub(crate) fn unless_stopping(&self) -> Result<(), StepError> {
        let stopping = self
            .inner
            .stopping
            .load(std::sync::atomic::Ordering::Acquire);
        if stopping {
            Err(StepError::Stopped)
        } else {
            Ok(())
        }
    }
}
