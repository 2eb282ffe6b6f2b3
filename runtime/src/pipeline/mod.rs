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

pub(crate) use detail::operator_view;

use crate::call::Call;
use crate::client::{Client, Parts};
use crate::clock;
use crate::error::{Detail, Error};
use crate::fleet::FleetSlots;
use crate::plan::Plan;
use crate::reply::Reply;
use crate::telemetry::{self, LogScope};
use crate::throttle::{HeldSlots, Throttle};
use crate::wire::Wire;
use admit::{Prelude, admit, prelude};
use attempt::attempt;
use conclude::{Step, conclude, settle};
use judge::{Previous, judge};

/// The state of one call across its attempts.
pub(crate) struct Run<'c, 'a> {
    call: &'c Call<'a>,
    /// What every line of the call says of its scope, gathered once.
    scope: LogScope<'c>,
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
    /// A stream's response and its slots, on a 2xx of a stream route.
    stream: Option<(reqwest::Response, StreamSlots)>,
    started: Instant,
    sent: Instant,
}

/// What an open stream holds while it is open, as any request in flight:
/// its throttle slots and its fleet leases.
#[derive(Debug)]
pub(crate) struct StreamSlots {
    pub local: HeldSlots,
    pub fleet: Option<FleetSlots>,
}

impl StreamSlots {
    /// The stream ended: both are given back.
    pub fn give_back(self, throttle: &Throttle) {
        throttle.give_back(self.local);
        drop(self.fleet);
    }
}

/// A stream's opening: the reply, its open response and the throttle slots
/// held for as long as the stream is open.
pub(crate) struct Opened {
    pub reply: Reply,
    pub response: reqwest::Response,
    pub slots: StreamSlots,
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
        self.plan().refuse_stream_sent(call.endpoint)?;
        Ok(self.run(&call).await?.reply)
    }

    /// Opens a stream through the same pipeline, for a stream route (its
    /// caller, `open_stream`, refuses any other): a 2xx hands back its open
    /// response; any other success (a 409 a create route takes as its
    /// answer) has no event stream and is a decode error.
    pub(crate) async fn open(&self, call: &Call<'_>) -> Result<Opened, Error> {
        if let Some(error) = self.refused_at_once(call) {
            return Err(error);
        }
        let answered = self.run(call).await?;
        let Some((response, slots)) = answered.stream else {
            let reply = answered.reply;
            let detail = Some(Detail::Shown("the answer has no event stream".into()));
            let error = (self.plan()).error(sdk_policy::OutcomeKind::Decode, call.endpoint);
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

    /// A call refused before a byte is sent (T22), for `reason`: a scope
    /// that does not fit the route, or (from a generated method) an argument
    /// that contradicts its proof.
    pub fn refused(
        &self,
        endpoint: &sdk_policy::Endpoint,
        reason: impl Into<std::borrow::Cow<'static, str>>,
    ) -> Error {
        self.plan().refused(endpoint, reason)
    }

    /// `Err` with the open breaker's refusal when [`Client::send`] would
    /// refuse `call` at once (the same decision). A generated method asks
    /// before it builds the send future, so a refusal moves nothing but the
    /// error; `send` asks again for a call that did not.
    pub fn fail_fast(&self, call: &Call<'_>) -> Result<(), Error> {
        match self.refused_at_once(call) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// The open breaker's refusal without the attempt loop, counted, its
    /// span made and closed here when anything records it. Asked before
    /// the loop's future is even built: a refusal moves nothing but the
    /// error, which is the route's shared one.
    fn refused_at_once(&self, call: &Call<'_>) -> Option<Error> {
        let error = self.gate().refused_while_open(self.plan(), call)?;
        let e = call.endpoint;
        (self.recorder().metrics).refused(e.route, e.service, error.class_name());
        if crate::spans::recorded() {
            let base = self.transport().origin.base();
            let span = crate::spans::call(self.policy(), base, call);
            crate::spans::failed(&span, &error);
        }
        Some(error)
    }

    /// The attempt loop, in the call's span (`spans`).
    async fn run(&self, call: &Call<'_>) -> Result<Answered, Error> {
        use tracing::Instrument;
        let base = self.transport().origin.base();
        let span = crate::spans::call(self.policy(), base, call);
        // `Span::none()` (nothing records spans): entering it does nothing,
        // so the loop's future is not moved into a wrapper that would.
        let result = if span.is_none() {
            self.attempts(call).await
        } else {
            self.attempts(call).instrument(span.clone()).await
        };
        crate::spans::finished(&span, result.as_ref().map(|a| a.reply.status()));
        result
    }

    async fn attempts(&self, call: &Call<'_>) -> Result<Answered, Error> {
        let Parts {
            plan,
            gate,
            transport,
            recorder,
            ..
        } = &*self.parts;
        plan.check_scope(call)?;
        // The route says how its 2xx body is taken: a stream route's is its
        // event stream.
        let wire = Wire::of(call.endpoint);
        let mut run = Run::new(plan, call);
        match prelude(plan, gate, call, run.started) {
            Prelude::Go => {}
            Prelude::Refused(error) => return Err(self.fail(&mut run, error, false)),
            Prelude::Settled { error, row, detail } => {
                settle(
                    gate,
                    recorder,
                    row,
                    &error,
                    call.endpoint,
                    None,
                    detail,
                    false,
                );
                return Err(self.fail(&mut run, error, false));
            }
        }
        loop {
            run.attempt += 1;
            crate::spans::resent(run.attempt);
            let admitted = match self.admit_breaker(call.endpoint, run.attempt).await {
                Ok(generation) => admit(plan, gate, &self.caller, &mut run, generation).await,
                Err(error) => Err(error),
            };
            let admitted = match admitted {
                Ok(admitted) => admitted,
                Err(error) => return Err(self.fail(&mut run, error, false)),
            };
            let deploy = gate.breaker().deploy_suspected(Instant::now());
            let sent = attempt(transport, plan, deploy, &run, wire).await;
            if sent.overdue {
                // Ended in flight: the request may have arrived.
                let transition = gate.record(admitted.generation, call.endpoint.path, true);
                self.on_transition(transition);
                let unknown = !call.endpoint.idempotent;
                let error = run.deadline_error(plan, Some(sent.request_id), unknown);
                return Err(self.fail(&mut run, error, false));
            }
            let verdict = judge(
                plan.policy,
                call.endpoint,
                run.previous.as_ref(),
                &sent.attempt,
            );
            let (step, transition) =
                conclude(&self.parts, &self.caller, &mut run, sent, verdict, admitted);
            self.on_transition(transition);
            match step {
                Step::Done(answered) => return Ok(answered),
                Step::Fail { error, exhausted } => {
                    return Err(self.fail(&mut run, error, exhausted));
                }
                Step::RetryAt(at) => tokio::time::sleep_until(at).await,
            }
        }
    }

    /// Ends the call with `error`: noted, counted, and when the row's
    /// retries were used up (the row itself raised no alert) a log line with
    /// the call's context and the retry-exhaustion alert, for every such
    /// call or only when their rate is elevated, as the policy says.
    fn fail(&self, run: &mut Run<'_, '_>, error: Error, exhausted: bool) -> Error {
        let recorder = self.recorder();
        let endpoint = run.call.endpoint;
        if let Some(id) = error.request_id() {
            self.caller.note(endpoint, id, error.status(), false);
        }
        if exhausted && run.attempt > 1 {
            recorder.exhausted(&error, run.call);
        }
        let retried = run.attempt > 1;
        recorder.count_call(endpoint, error.class_name(), retried, run.started);
        error
    }
}

impl<'c, 'a> Run<'c, 'a> {
    fn new(plan: &'c Plan, call: &'c Call<'a>) -> Self {
        let started = Instant::now();
        Run {
            call,
            scope: LogScope::of(plan.policy, &plan.tenant, call),
            started,
            deadline: clock::after(started, plan.deadline),
            attempt: 0,
            previous: None,
            path: None,
            body_digest: None,
        }
    }

    /// Computes the request body's sha256 into `body_digest`, at most once
    /// per call, and only when attempt lines are logged at all.
    fn digest(&mut self, plan: &Plan) {
        if self.body_digest.is_none() && telemetry::enabled(plan.policy) {
            let body = self.call.body.as_deref();
            self.body_digest = body.and_then(crate::digest::body_digest);
        }
    }

    /// The deadline ended the call; `in_flight`: a request of a call that is
    /// not idempotent may have reached the server unanswered.
    fn deadline_error(&self, plan: &Plan, request_id: Option<String>, in_flight: bool) -> Error {
        plan.deadline_error(self.call.endpoint, self.attempt, request_id, in_flight)
    }
}
