//! The judge: what one attempt came to, decided from the attempt and the
//! run alone. Pure: no clock, no I/O, no client state, so every rule is
//! tested without a network.

use std::time::Duration;

use super::detail::detail_of;
use crate::classify::{Outcome, classify};
use crate::error::{Detail, bounded};
use crate::wire::Attempt;
use sdk_policy::endpoint::Endpoint;
use sdk_policy::policy::{Policy, TaxonomyRow};

/// The previous attempt's row and detail: a retry that brings back the same
/// detail escalates (T16 -> T13).
#[derive(Debug)]
pub(crate) struct Previous {
    pub row: &'static TaxonomyRow,
    pub detail: Option<Detail>,
}

/// What the breaker hears of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BreakerNews {
    /// A failure of the origin.
    Failure,
    /// The origin answered well.
    Success,
    /// Nothing about the origin: a request that could not be built, or
    /// never left a connection that closed under it.
    Silent,
}

/// The judge's verdict on one attempt.
#[derive(Debug)]
pub(crate) struct Verdict {
    /// The taxonomy row; `None` on a 2xx, or when no row matched.
    pub row: Option<&'static TaxonomyRow>,
    /// An error answer's detail (bounded), or why there was no answer.
    pub detail: Option<Detail>,
    /// The wait an error answer asked for.
    pub retry_after: Option<Duration>,
    /// The request may have reached the server.
    pub maybe_sent: bool,
    /// A 2xx, or a row that is an answer rather than an error (409 on a
    /// create route, 409 still-processing on a poll route).
    pub answered: bool,
    /// What the breaker hears.
    pub breaker: BreakerNews,
    /// A write that may have arrived, ended on a row that does not know its
    /// outcome (no answer, a 500, a gateway's 502/504): the caller must look.
    pub unknown: bool,
}

/// Judges `attempt` of a call of `endpoint` under `policy`.
pub(crate) fn judge(
    policy: &'static Policy,
    endpoint: &Endpoint,
    previous: Option<&Previous>,
    attempt: &Attempt,
) -> Verdict {
    let success = matches!(attempt, Attempt::Answer { status, .. } if (200..300).contains(status));
    let (detail, retry_after) = evidence(attempt, success, policy.limits.detail);
    let row = if success {
        None
    } else {
        let outcome = match attempt {
            Attempt::Answer { status, .. } => Outcome::Status {
                status: *status,
                detail: detail.as_ref().map(Detail::text),
                retry_after: retry_after.is_some(),
            },
            other => Outcome::Other(other.kind()),
        };
        escalate(
            policy,
            classify(policy, endpoint, &outcome),
            &detail,
            previous,
        )
    };
    let maybe_sent = !matches!(
        attempt,
        Attempt::Failed {
            maybe_sent: false,
            ..
        } | Attempt::Unbuildable { .. }
            | Attempt::Stale { .. }
    );
    let origin = !matches!(attempt, Attempt::Unbuildable { .. } | Attempt::Stale { .. });
    Verdict {
        answered: success || row.is_some_and(|r| r.is_success() || r.matches.conflict.is_some()),
        breaker: match (origin, row.is_some_and(|r| r.feeds_breaker)) {
            (false, _) => BreakerNews::Silent,
            (true, true) => BreakerNews::Failure,
            (true, false) => BreakerNews::Success,
        },
        unknown: !endpoint.idempotent && maybe_sent && row.is_some_and(|r| r.outcome_unknown),
        row,
        detail,
        retry_after,
        maybe_sent,
    }
}

/// What an attempt says beyond its status: an error answer's detail and
/// wait (a 2xx body is the reply's, never read here), or the reason there
/// was no answer.
fn evidence(attempt: &Attempt, success: bool, max: usize) -> (Option<Detail>, Option<Duration>) {
    match attempt {
        Attempt::Answer {
            status,
            body,
            retry_after,
            content_type,
            ..
        } if !success => (
            detail_of(*status, content_type.as_deref(), body, max),
            *retry_after,
        ),
        Attempt::Answer { .. } => (None, None),
        Attempt::TooLarge { limit, .. } => (
            Some(Detail::Shown(format!(
                "the body passed the route's {limit}-byte cap"
            ))),
            None,
        ),
        Attempt::Failed { reason, .. }
        | Attempt::Unbuildable { reason }
        | Attempt::Stale { reason } => (Some(Detail::Shown(bounded(reason, max))), None),
    }
}

/// The row's escalation when the retry brought back the same detail.
fn escalate(
    policy: &'static Policy,
    row: Option<&'static TaxonomyRow>,
    detail: &Option<Detail>,
    previous: Option<&Previous>,
) -> Option<&'static TaxonomyRow> {
    let row = row?;
    match (row.escalate_to, previous) {
        (Some(target), Some(previous))
            if std::ptr::eq(previous.row, row) && &previous.detail == detail =>
        {
            Some(&policy.taxonomy[target])
        }
        _ => Some(row),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::testing;
    use sdk_policy::policy::{Conflict, DetailIx, DetailSet, OutcomeKind, Replay, RowIx, RowMatch};

    /// Taxonomy row `index` matching `outcome` (and `status`, when given).
    const fn row(
        index: u16,
        name: &'static str,
        outcome: OutcomeKind,
        status: Option<(u16, u16)>,
    ) -> TaxonomyRow {
        TaxonomyRow {
            index: RowIx::new(index),
            row: name,
            matches: RowMatch {
                outcome,
                status,
                detail: None,
                retry_after: None,
                conflict: None,
                keyless: None,
                routes: None,
            },
            class: name,
            success: false,
            retry: None,
            feeds_breaker: false,
            outcome_unknown: false,
            alert: None,
            alert_outside_deploy: false,
            feature_state: None,
            remember_for: None,
            escalate_to: None,
            replay: Replay::Never,
            action: "",
            message: None,
            unknown_message: None,
        }
    }

    static ROWS: [TaxonomyRow; 8] = [
        TaxonomyRow {
            feeds_breaker: true,
            outcome_unknown: true,
            ..row(0, "connection", OutcomeKind::Connection, None)
        },
        row(1, "invalid_request", OutcomeKind::InvalidRequest, None),
        row(2, "too_large", OutcomeKind::TooLarge, None),
        TaxonomyRow {
            success: true,
            matches: RowMatch {
                conflict: Some(Conflict::Success),
                ..row(3, "", OutcomeKind::Status, Some((409, 409))).matches
            },
            ..row(3, "exists", OutcomeKind::Status, Some((409, 409)))
        },
        TaxonomyRow {
            matches: RowMatch {
                detail: Some(DetailIx::new(0)),
                ..row(4, "", OutcomeKind::Status, Some((503, 503))).matches
            },
            ..row(4, "dark", OutcomeKind::Status, Some((503, 503)))
        },
        TaxonomyRow {
            escalate_to: Some(RowIx::new(4)),
            ..row(5, "ambiguous", OutcomeKind::Status, Some((503, 503)))
        },
        TaxonomyRow {
            feeds_breaker: true,
            outcome_unknown: true,
            ..row(6, "server_error", OutcomeKind::Status, Some((500, 599)))
        },
        row(7, "client_error", OutcomeKind::Status, Some((400, 499))),
    ];

    static SETS: [DetailSet; 1] = [DetailSet {
        name: "dark",
        contains: &["profile not running"],
    }];

    fn policy() -> &'static Policy {
        use std::sync::OnceLock;
        static POLICY: OnceLock<&'static Policy> = OnceLock::new();
        POLICY.get_or_init(|| {
            Box::leak(Box::new(Policy {
                taxonomy: &ROWS,
                detail_sets: &SETS,
                ..testing::POLICY.clone()
            }))
        })
    }

    /// A write (not idempotent) and a read of the same route.
    fn endpoints() -> (Endpoint, Endpoint) {
        let write = Endpoint {
            idempotent: false,
            conflict: Conflict::Success,
            ..testing::JOB_STATUS
        };
        let read = Endpoint {
            idempotent: true,
            ..testing::JOB_STATUS
        };
        (write, read)
    }

    fn answer(status: u16, body: &'static str, retry_after: Option<u64>) -> Attempt {
        Attempt::Answer {
            status,
            retry_after: retry_after.map(Duration::from_secs),
            echoed_id: None,
            content_type: Some("application/json".into()),
            body: Bytes::from_static(body.as_bytes()),
        }
    }

    fn failed(maybe_sent: bool) -> Attempt {
        Attempt::Failed {
            maybe_sent,
            reason: "connection refused".into(),
        }
    }

    fn name(verdict: &Verdict) -> &'static str {
        verdict.row.map_or("-", |r| r.row)
    }

    #[test]
    fn each_attempt_gets_its_row_and_what_the_breaker_hears() {
        let (write, read) = endpoints();
        let stale = Attempt::Stale {
            reason: "closed".into(),
        };
        let unbuildable = Attempt::Unbuildable {
            reason: "bad header".into(),
        };
        let too_large = Attempt::TooLarge {
            status: 200,
            limit: 10,
        };
        // The row, then what holds: answered, what the breaker hears, sent, unknown.
        let table = [
            (answer(200, "{}", None), &read, "- answered breaker:ok sent"),
            (
                answer(409, "", None),
                &write,
                "exists answered breaker:ok sent",
            ),
            (answer(409, "", None), &read, "client_error breaker:ok sent"),
            (
                answer(500, "", None),
                &write,
                "server_error breaker:fail sent unknown",
            ),
            (
                answer(500, "", None),
                &read,
                "server_error breaker:fail sent",
            ),
            (
                answer(404, "", None),
                &write,
                "client_error breaker:ok sent",
            ),
            (failed(true), &write, "connection breaker:fail sent unknown"),
            (failed(false), &write, "connection breaker:fail"),
            (stale, &write, "connection"),
            (unbuildable, &write, "invalid_request"),
            (too_large, &read, "too_large breaker:ok sent"),
        ];
        for (attempt, endpoint, expected) in table {
            let v = judge(policy(), endpoint, None, &attempt);
            assert_eq!(summary(&v), expected, "{v:?}");
        }
    }

    /// The verdict in the words of the table above.
    fn summary(v: &Verdict) -> String {
        let mut words = vec![name(v)];
        words.extend(v.answered.then_some("answered"));
        words.extend(match v.breaker {
            BreakerNews::Failure => Some("breaker:fail"),
            BreakerNews::Success => Some("breaker:ok"),
            BreakerNews::Silent => None,
        });
        words.extend(v.maybe_sent.then_some("sent"));
        words.extend(v.unknown.then_some("unknown"));
        words.join(" ")
    }

    #[test]
    fn an_error_answer_gives_its_detail_and_wait_a_success_gives_neither() {
        let (_, read) = endpoints();
        let v = judge(
            policy(),
            &read,
            None,
            &answer(503, r#"{"detail":"busy"}"#, Some(7)),
        );
        assert_eq!(v.detail.as_ref().map(Detail::text), Some("busy"));
        assert_eq!(v.retry_after, Some(Duration::from_secs(7)));
        let v = judge(
            policy(),
            &read,
            None,
            &answer(200, r#"{"detail":"x"}"#, Some(7)),
        );
        assert_eq!((v.detail, v.retry_after), (None, None));
        let too_large = Attempt::TooLarge {
            status: 200,
            limit: 10,
        };
        let v = judge(policy(), &read, None, &too_large);
        assert_eq!(
            v.detail.as_ref().map(Detail::text),
            Some("the body passed the route's 10-byte cap")
        );
        let v = judge(policy(), &read, None, &failed(false));
        assert_eq!(
            v.detail.as_ref().map(Detail::text),
            Some("connection refused")
        );
    }

    #[test]
    fn a_detail_set_decides_the_row_and_the_same_detail_again_escalates() {
        let (_, read) = endpoints();
        let dark = answer(503, r#"{"detail":"Profile not running"}"#, None);
        assert_eq!(name(&judge(policy(), &read, None, &dark)), "dark");
        let unknown = answer(503, r#"{"detail":"odd"}"#, None);
        let first = judge(policy(), &read, None, &unknown);
        assert_eq!(name(&first), "ambiguous");
        let previous = Previous {
            row: first.row.unwrap(),
            detail: first.detail.clone(),
        };
        let again = judge(policy(), &read, Some(&previous), &unknown);
        assert_eq!(name(&again), "dark", "the same detail twice escalates");
        let other = answer(503, r#"{"detail":"other"}"#, None);
        let changed = judge(policy(), &read, Some(&previous), &other);
        assert_eq!(name(&changed), "ambiguous", "another detail does not");
    }
}
