//! The request pipeline, in named phases: the prelude (the route and scope
//! check, the body check, remembered answers), admission (breaker, budgets,
//! throttle, the fleet), the attempt (the one place headers are assembled
//! and the wire is touched), the judge (pure: the attempt's row, detail,
//! wait and whether it may have been sent) and conclude (breaker, memory,
//! telemetry, `backoff::next`: done, retry at an instant, or fail). The loop
//! below joins them; a call and a stream's opening share it.

mod admit;
pub(crate) mod attempt;
mod conclude;
mod detail;
mod fleet;
mod judge;

use std::sync::Arc;

use tokio::time::Instant;

pub(crate) use detail::operator_view;

use crate::breaker;
use crate::call::Call;
use crate::client::{Caller, Client, Parts};
use crate::clock;
use crate::error::{Detail, Error};
use crate::fleet::FleetSlots;
use crate::gate::Gate;
use crate::plan::Plan;
use crate::recorder::Recorder;
use crate::reply::Reply;
use crate::telemetry::{self, LogScope};
use crate::throttle::{HeldSlots, Throttle};
use crate::wire::Wire;
use admit::{Prelude, admit, prelude};
use attempt::{Request, attempt};
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
pub(crate) enum Answered {
    /// The whole answer, read.
    Whole(Reply),
    /// A 2xx of a stream route: its open response, holding its slots.
    Stream(Opened),
}

impl Answered {
    fn reply(&self) -> &Reply {
        match self {
            Answered::Whole(reply) => reply,
            Answered::Stream(opened) => &opened.reply,
        }
    }
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
        if let Some(error) = refused_at_once(&self.parts, &call) {
            return Err(error);
        }
        self.plan().refuse_stream_sent(call.endpoint)?;
        match run(&self.parts, &self.caller, &call).await? {
            Answered::Whole(reply) => Ok(reply),
            Answered::Stream(opened) => Ok(opened.reply),
        }
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
        refused_at_once(&self.parts, call).map_or(Ok(()), Err)
    }
}

/// Opens a stream through the same pipeline, for a stream route (its
/// caller, `open_stream`, refuses any other): a 2xx hands back its open
/// response; any other success (a 409 a create route takes as its answer)
/// has no event stream and is a decode error.
pub(crate) async fn open(
    parts: &Arc<Parts>,
    caller: &Caller,
    call: &Call<'_>,
) -> Result<Opened, Error> {
    if let Some(error) = refused_at_once(parts, call) {
        return Err(error);
    }
    match run(parts, caller, call).await? {
        Answered::Stream(opened) => Ok(opened),
        Answered::Whole(reply) => {
            let detail = Some(Detail::Shown("the answer has no event stream".into()));
            let error = (parts.plan).error(sdk_policy::OutcomeKind::Decode, call.endpoint);
            Err(error.with_status(reply.status(), detail))
        }
    }
}

/// The open breaker's refusal without the attempt loop, counted, its span
/// made and closed here when anything records it. Asked before the loop's
/// future is even built: a refusal moves nothing but the error, which is
/// the route's shared one.
fn refused_at_once(parts: &Parts, call: &Call<'_>) -> Option<Error> {
    let error = parts.gate.refused_while_open(&parts.plan, call)?;
    let e = call.endpoint;
    (parts.recorder.metrics).refused(e.route, e.service, error.class_name());
    if crate::spans::recorded() {
        let base = parts.transport.origin.base();
        let span = crate::spans::call(parts.plan.policy, base, call);
        crate::spans::failed(&span, &error);
    }
    Some(error)
}

/// The attempt loop, in the call's span (`spans`).
async fn run(parts: &Arc<Parts>, caller: &Caller, call: &Call<'_>) -> Result<Answered, Error> {
    use tracing::Instrument;
    let base = parts.transport.origin.base();
    let span = crate::spans::call(parts.plan.policy, base, call);
    // `Span::none()` (nothing records spans): entering it does nothing, so
    // the loop's future is not moved into a wrapper that would.
    let result = if span.is_none() {
        attempts(parts, caller, call).await
    } else {
        attempts(parts, caller, call).instrument(span.clone()).await
    };
    crate::spans::finished(&span, result.as_ref().map(|a| a.reply().status()));
    result
}

async fn attempts(parts: &Arc<Parts>, caller: &Caller, call: &Call<'_>) -> Result<Answered, Error> {
    let Parts {
        plan,
        gate,
        transport,
        recorder,
        ..
    } = &**parts;
    plan.check_scope(call)?;
    // The route says how its 2xx body is taken: a stream route's is its
    // event stream.
    let wire = Wire::of(call.endpoint);
    let mut run = Run::new(plan, call);
    if let Some(error) = settled_before(plan, gate, recorder, call, run.started) {
        return Err(fail(recorder, caller, &mut run, error, false));
    }
    loop {
        run.attempt += 1;
        crate::spans::resent(run.attempt);
        let admitted = match breaker::admit(parts, call.endpoint, run.attempt).await {
            Ok(generation) => admit(plan, gate, caller, &mut run, generation).await,
            Err(error) => Err(error),
        };
        let admitted = match admitted {
            Ok(admitted) => admitted,
            Err(error) => return Err(fail(recorder, caller, &mut run, error, false)),
        };
        let deploy = gate.breaker().deploy_suspected(Instant::now());
        let sent = attempt(transport, plan, deploy, run.request(), run.deadline, wire).await;
        if sent.overdue {
            // Ended in flight: the request may have arrived.
            let transition = gate.record(admitted.generation, call.endpoint.path, true);
            breaker::react(parts, transition);
            let unknown = !call.endpoint.idempotent;
            let error = run.deadline_error(plan, Some(sent.request_id), unknown);
            return Err(fail(recorder, caller, &mut run, error, false));
        }
        let previous = run.previous.as_ref();
        let verdict = judge(plan.policy, call.endpoint, previous, &sent.attempt);
        let (step, transition) = conclude(parts, caller, &mut run, sent, verdict, admitted);
        breaker::react(parts, transition);
        match step {
            Step::Done(answered) => return Ok(answered),
            Step::Fail { error, exhausted } => {
                return Err(fail(recorder, caller, &mut run, error, exhausted));
            }
            Step::RetryAt(at) => tokio::time::sleep_until(at).await,
        }
    }
}

/// The prelude's verdict: `None` to go on to the loop, or the error the
/// call ends with before any attempt (a settled one recorded as an
/// attempt's would be).
fn settled_before(
    plan: &Plan,
    gate: &Gate,
    recorder: &Recorder,
    call: &Call<'_>,
    started: Instant,
) -> Option<Error> {
    match prelude(plan, gate, call, started) {
        Prelude::Go => None,
        Prelude::Refused(error) => Some(error),
        Prelude::Settled { error, row, detail } => {
            let endpoint = call.endpoint;
            settle(gate, recorder, row, &error, endpoint, None, detail, false);
            Some(error)
        }
    }
}

/// Ends the call with `error`: noted, counted, and when the row's retries
/// were used up (the row itself raised no alert) a log line with the call's
/// context and the retry-exhaustion alert, for every such call or only when
/// their rate is elevated, as the policy says.
fn fail(
    recorder: &Recorder,
    caller: &Caller,
    run: &mut Run<'_, '_>,
    error: Error,
    exhausted: bool,
) -> Error {
    let endpoint = run.call.endpoint;
    if let Some(id) = error.request_id() {
        caller.note(endpoint, id, error.status(), false);
    }
    if exhausted && run.attempt > 1 {
        recorder.exhausted(&error, run.call);
    }
    let retried = run.attempt > 1;
    recorder.count_call(endpoint, error.class_name(), retried, run.started);
    error
}

impl<'c, 'a> Run<'c, 'a> {
    /// The request the next attempt sends.
    fn request(&self) -> Request<'_> {
        Request {
            call: self.call,
            path: self.path.as_deref().unwrap_or_default(),
            scope: &self.scope,
            number: self.attempt,
        }
    }

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
