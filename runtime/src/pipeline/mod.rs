//! The request pipeline, in named phases: the prelude (the route and scope
//! check, the body check, remembered answers), admission (breaker, budgets,
//! throttle, the fleet), the attempt (the one place headers are assembled
//! and the wire is touched), the judge (pure: the attempt's row, detail,
//! wait and whether it may have been sent) and conclude (breaker, memory,
//! telemetry, `backoff::next`: done, retry at an instant, or fail). The loop
//! below joins them; a call and a stream's opening share it.

mod admit;
mod attempt;
mod conclude;
mod detail;
mod fleet;
mod judge;

use tokio::time::Instant;

pub(crate) use admit::CircuitOpen;
pub(crate) use attempt::{Attempt, Limits, Wire, perform};
pub(crate) use detail::operator_view;

use crate::call::Call;
use crate::client::Client;
use crate::clock;
use crate::error::{Detail, Error};
use crate::policy::OutcomeKind;
use crate::reply::Reply;
use crate::telemetry;
use crate::throttle::HeldSlots;
use conclude::Step;
use judge::{Previous, judge};

/// The running state of one call across its attempts.
pub(crate) struct Run<'c, 'a> {
    client: &'c Client,
    call: &'c Call<'a>,
    started: Instant,
    deadline: Instant,
    attempt: u32,
    /// The previous attempt's row and detail, for escalation (T16 -> T13).
    previous: Option<Previous>,
    /// The path, rendered once the breaker first admits the call: failing
    /// fast allocates nothing.
    path: Option<std::borrow::Cow<'static, str>>,
    /// The request body's digest, computed once per call and only when logged.
    body_digest: Option<String>,
}

/// What the loop hands on from the answering attempt.
pub(crate) struct Answered {
    reply: Reply,
    /// A stream's response and its throttle slots, on a 2xx of a stream route.
    stream: Option<(reqwest::Response, HeldSlots)>,
    started: Instant,
    sent: Instant,
}

/// A stream's opening: the reply, its open response and the throttle slots
/// held for as long as the stream is open.
pub(crate) struct Opened {
    pub reply: Reply,
    pub response: reqwest::Response,
    pub slots: HeldSlots,
    /// When the call started: a stream that carries an answer is held to
    /// the overall deadline from here.
    pub started: Instant,
    /// When the answering attempt's request was sent: a stream's silence is
    /// measured from here, since a buffering proxy holds the head too (§6.4).
    pub sent: Instant,
}

impl Client {
    /// Runs a call through the pipeline and returns the successful answer.
    pub async fn send(&self, call: Call<'_>) -> Result<Reply, Error> {
        if let Some(error) = self.refused_at_once(&call) {
            return Err(error);
        }
        Ok(self.run(&call, Wire::Read).await?.reply)
    }

    /// Opens a stream through the same pipeline: an answer without an event
    /// stream (a 409 on a create route) is a decode error.
    pub(crate) async fn open(&self, call: &Call<'_>) -> Result<Opened, Error> {
        if let Some(error) = self.refused_at_once(call) {
            return Err(error);
        }
        let answered = self.run(call, Wire::Stream).await?;
        let Some((response, slots)) = answered.stream else {
            let reply = answered.reply;
            let detail = Some(Detail::Shown("the answer has no event stream".into()));
            let error = self.error(OutcomeKind::Decode, call.endpoint);
            return Err(error.with_status(reply.status(), detail));
        };
        Ok(Opened {
            reply: answered.reply,
            response,
            slots,
            started: answered.started,
            sent: answered.sent,
        })
    }

    /// The attempt loop, in the call's span (`spans`).
    async fn run(&self, call: &Call<'_>, wire: Wire) -> Result<Answered, Error> {
        use tracing::Instrument;
        let span = crate::spans::call(self, call);
        // `Span::none()` (nothing records spans): entering it does nothing,
        // so the loop's future is not moved into a wrapper that would.
        let result = if span.is_none() {
            self.attempts(call, wire).await
        } else {
            self.attempts(call, wire).instrument(span.clone()).await
        };
        crate::spans::finished(&span, result.as_ref().map(|a| a.reply.status()));
        result
    }

    async fn attempts(&self, call: &Call<'_>, wire: Wire) -> Result<Answered, Error> {
        self.check_scope(call)?;
        let mut run = Run::new(self, call);
        if let Some(error) = self.prelude(call, &run) {
            return Err(run.fail(error, false));
        }
        loop {
            run.attempt += 1;
            crate::spans::resent(run.attempt);
            let admitted = match self.admit(&mut run).await {
                Ok(admitted) => admitted,
                Err(error) => return Err(run.fail(error, false)),
            };
            let path = run.path.as_deref().unwrap_or_default();
            let sent = self.attempt(&run, path, wire).await;
            if sent.overdue {
                // Ended in flight: the request may have arrived.
                self.record_breaker(admitted.generation, call.endpoint.path, true);
                let unknown = !call.endpoint.idempotent;
                let error = run.deadline_error(Some(sent.request_id), unknown);
                return Err(run.fail(error, false));
            }
            let policy = self.shared.policy;
            let verdict = judge(policy, call.endpoint, run.previous.as_ref(), &sent.attempt);
            match self.conclude(&mut run, sent, verdict, admitted) {
                Step::Done(answered) => return Ok(answered),
                Step::Fail { error, exhausted } => return Err(run.fail(error, exhausted)),
                Step::RetryAt(at) => tokio::time::sleep_until(at).await,
            }
        }
    }
}

impl<'c, 'a> Run<'c, 'a> {
    fn new(client: &'c Client, call: &'c Call<'a>) -> Self {
        let started = Instant::now();
        Run {
            client,
            call,
            started,
            deadline: clock::after(started, client.shared.deadline),
            attempt: 0,
            previous: None,
            path: None,
            body_digest: None,
        }
    }

    /// The request body's sha256, computed at most once per call, and only
    /// when attempt lines are logged at all.
    fn digest(&mut self) -> Option<&str> {
        if self.body_digest.is_none() && telemetry::enabled(self.client) {
            self.body_digest = self.call.body.as_deref().and_then(telemetry::body_digest);
        }
        self.body_digest.as_deref()
    }

    /// The deadline ended the call; `in_flight`: a request of a call that is
    /// not idempotent may have reached the server unanswered.
    fn deadline_error(&self, request_id: Option<String>, in_flight: bool) -> Error {
        let client = self.client;
        let row = client.row_of(OutcomeKind::Deadline);
        let unknown = in_flight && row.is_some_and(|r| r.outcome_unknown);
        let error = client
            .error(OutcomeKind::Deadline, self.call.endpoint)
            .with_outcome_unknown(unknown)
            .with_attempts(self.attempt)
            .with_detail(format!(
                "the {} s overall deadline ended the call, not the platform",
                client.shared.deadline.as_secs()
            ));
        match request_id {
            Some(id) => error.with_request_id(id),
            None => error,
        }
    }

    /// Ends the call with `error`: metrics, and when the row's retries were
    /// used up (the row itself raised no alert) a log line with the call's
    /// context and the retry-exhaustion alert, for every such call or only
    /// when their rate is elevated, as the policy says.
    fn fail(&mut self, error: Error, exhausted: bool) -> Error {
        let client = self.client;
        if let Some(id) = error.request_id() {
            client.note(self.call.endpoint, id, error.status(), false);
        }
        if exhausted && self.attempt > 1 {
            client.exhausted(&error, self.call);
        }
        client.count_call(
            self.call.endpoint,
            error.class_name(),
            self.attempt > 1,
            self.started,
        );
        error
    }
}
