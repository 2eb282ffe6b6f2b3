//! The plan: what the policy says of a call before anything is admitted or
//! sent. It holds the policy with the configured retry classes and deadline,
//! the tenant, and builds every error the pipeline returns.

use std::borrow::Cow;
use std::time::Duration;

use sdk_policy::endpoint::{Endpoint, Lane, ScopeNeed};
use sdk_policy::policy::{OutcomeKind, Policy, RetryClass, TaxonomyRow};
use sdk_policy::scope::{Id, IdKind};

use crate::call::Call;
use crate::error::{Class, Error};
use crate::memory::Remembered;

pub(crate) struct Plan {
    pub policy: &'static Policy,
    /// The policy's retry classes, with the configured attempts and step.
    pub retries: Box<[RetryClass]>,
    /// The overall deadline: the policy's, or longer where the configured
    /// retries need more.
    pub deadline: Duration,
    pub tenant: Id,
    /// A production deployment: keyless lanes are refused.
    pub production: bool,
}

impl Plan {
    /// The one error builder: a failure of `endpoint` classified by `class`.
    pub fn error(&self, class: impl Into<Class>, endpoint: &Endpoint) -> Error {
        Error::classified(self.policy, class.into(), endpoint)
    }

    /// The first row of `kind`: how an outcome with no status or detail to
    /// match is classified (what [`crate::classify::classify`] finds for it).
    pub fn row_of(&self, kind: OutcomeKind) -> Option<&'static TaxonomyRow> {
        self.policy.row_of(kind)
    }

    /// A call refused before a byte is sent (T22), for `reason`.
    pub fn refused(&self, endpoint: &Endpoint, reason: impl Into<Cow<'static, str>>) -> Error {
        self.error(OutcomeKind::InvalidScope, endpoint)
            .with_detail(reason)
    }

    /// A call that fails fast with what the route answered before.
    pub fn remembered(&self, r: Remembered, endpoint: &Endpoint) -> Error {
        self.error(Class::Judged(OutcomeKind::Status, Some(r.row)), endpoint)
            .with_status_opt(r.status, r.detail)
            .with_detail_prefix("remembered")
    }

    /// Refuses a stream route sent as a call: its events and its throttle
    /// slots would be dropped with the body. (A plain route opened as a
    /// stream is refused where streams open, which reads the stream's policy.)
    pub(crate) fn refuse_stream_sent(&self, endpoint: &Endpoint) -> Result<(), Error> {
        match endpoint.stream {
            Some(_) => Err(self.refused(
                endpoint,
                format!(
                    "{} is a stream route: it is opened, not sent",
                    endpoint.path
                ),
            )),
            None => Ok(()),
        }
    }

    /// Refuses a call whose scope does not fit its route, before a byte is
    /// sent (T22): a descriptor that is not one of the policy's own routes
    /// (§3.4: a hand-made one could drop the tenant and the key; the
    /// client checked the indices of its own when it was built, so the
    /// entry at the descriptor's own position is the one to compare), a missing
    /// workspace, an ID of another kind as the workspace, a workspace on a
    /// route that takes none, a route that carries the pipeline header
    /// without a pipeline id (its cost would be booked to no run), a keyless
    /// lane in production. Path values are checked when the path is rendered.
    pub fn check_scope(&self, call: &Call<'_>) -> Result<(), Error> {
        let endpoint = call.endpoint;
        let policy = self.policy;
        let own = policy.routes.get(endpoint.route.get());
        let reason = if !own.is_some_and(|r| std::ptr::eq(*r, endpoint)) {
            format!(
                "{} is not a route of the {} policy: only its generated route table is sent",
                endpoint.path, policy.api
            )
        } else {
            match (endpoint.scope, call.workspace) {
                (ScopeNeed::Workspace, None) => {
                    format!("{} needs a workspace (X-Workspace-ID)", endpoint.path)
                }
                (ScopeNeed::Workspace, Some(id)) if id.kind() != IdKind::Workspace => {
                    format!("{id:?} is not a workspace")
                }
                (ScopeNeed::Public | ScopeNeed::Tenant, Some(_)) => {
                    format!("{} takes no workspace", endpoint.path)
                }
                _ if endpoint.pipeline_id && call.pipeline.is_none() => {
                    format!("{} needs a pipeline id", endpoint.path)
                }
                _ => match self.lane_refusal(endpoint) {
                    Some(reason) => reason,
                    None => return Ok(()),
                },
            }
        };
        Err(self.refused(endpoint, reason))
    }

    /// Why every call of `endpoint` is refused unsent, whatever it carries: a
    /// keyless lane in production (its auth has not landed).
    pub fn lane_refusal(&self, endpoint: &Endpoint) -> Option<String> {
        (endpoint.lane == Lane::Keyless && self.production).then(|| {
            format!(
                "{} is on a lane whose auth has not landed (a proxy injects the key): \
                 refused in production",
                endpoint.path
            )
        })
    }

    /// The deadline ended a call of `endpoint` after `attempts`; `in_flight`:
    /// a request of a call that is not idempotent may have reached the
    /// server unanswered.
    pub fn deadline_error(
        &self,
        endpoint: &Endpoint,
        attempts: u32,
        request_id: Option<String>,
        in_flight: bool,
    ) -> Error {
        let row = self.row_of(OutcomeKind::Deadline);
        let unknown = in_flight && row.is_some_and(|r| r.outcome_unknown);
        let error = self
            .error(OutcomeKind::Deadline, endpoint)
            .with_outcome_unknown(unknown)
            .with_attempts(attempts)
            .with_detail(format!(
                "the {} s overall deadline ended the call, not the platform",
                self.deadline.as_secs()
            ));
        match request_id {
            Some(id) => error.with_request_id(id),
            None => error,
        }
    }

    /// Whether `endpoint` is a stream with a polling fallback (a job stream).
    pub fn falls_back(&self, endpoint: &Endpoint) -> bool {
        endpoint
            .stream
            .is_some_and(|i| self.policy.streams[i].fallback.is_some())
    }
}
