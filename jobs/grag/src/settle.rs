//! What a failed step means for its job: a pure decision on the error, read
//! from the `replay` column of the taxonomy row that classified it.

use std::time::Duration;

use grag_client::Error;
use sdk_runtime::policy::Replay;

/// The fate of a job whose step failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Keep it for replay: an outage or a wait, not a verdict on the job.
    /// `after`: not before this wait (the platform asked for it).
    Replay { after: Option<Duration> },
    /// Nothing the platform will accept later: keep the error for the UI's
    /// re-upload path.
    Fail,
}

/// Decides from the error's row alone (`taxonomy.yaml` `replay`): an
/// `outage` or `later` row is replayed, a `deploy` row only while a deploy
/// is suspected (its 401/404/422 are the deploy's, not the job's), a
/// `never` row fails the job. A replay waits what the platform asked for.
pub fn settle(error: &Error, deploy_suspected: bool) -> Settle {
    decide(error.replay(), error.retry_after(), deploy_suspected)
}

/// [`settle`] on the parts of the error it reads.
fn decide(replay: Replay, after: Option<Duration>, deploy_suspected: bool) -> Settle {
    if replay.replays(deploy_suspected) {
        Settle::Replay { after }
    } else {
        Settle::Fail
    }
}

/// The platform (or the way to it) is down, not the request wrong: its
/// row says `outage`.
pub fn is_outage(error: &Error) -> bool {
    error.replay() == Replay::Outage
}

#[cfg(test)]
mod tests {
    use super::*;
    use grag_client::policy::POLICY;

    const R: Settle = Settle::Replay { after: None };
    const F: Settle = Settle::Fail;

    /// Every GRAG row and the fate of a job whose step ended on it: outside
    /// the deploy-suspected window, then inside it.
    const ROWS: &[(&str, Settle, Settle)] = &[
        ("T22", F, F), // invalid scope: refused before sending
        ("T21", R, R), // breaker open (§5.3.2)
        ("T31", F, F), // a request that cannot be built
        ("T20", R, R), // the deadline
        ("T1", R, R),  // terminal connection failure (§5.3.2)
        ("T26", F, F), // a redirect
        ("T2", F, F),  // 400 naming the scope
        ("T27", F, F), // other 400
        ("T5", F, F),  // 402: hard stop
        ("T28", F, R), // keyless lane 401/403
        ("T4", F, F),  // admin gate
        ("T3", F, R),  // 401/403 (§5.1: the deploy's while containers come up)
        ("T6", F, R),  // 404 (§5.1)
        ("T7", F, F),  // 409 success: never an error
        ("T8", F, F),  // 409 still processing: the job polls
        ("T9", F, F),  // 413 a split could not cure
        ("T10", F, R), // 422 (§5.1)
        ("T11", R, R), // 429
        ("T12", R, R), // 502 (§5.2)
        ("T33", R, R), // the agent plane dark
        ("T15", R, R), // WAL backpressure: re-queue (App. A)
        ("T13", R, R), // a dark feature
        ("T14", R, R), // a transient safety 503 (§2, §5.2)
        ("T16", R, R), // an unknown 503 (§5.2)
        ("T23", R, R), // other 5xx
        ("T25", F, F), // other 4xx
        ("T29", F, F), // a status outside every contract
        ("T30", F, F), // a body over its cap
        ("T24", F, F), // a body that does not decode
        ("T17", F, F), // stream frames: the job falls back to polling
        ("T18", F, F),
        ("T19", F, F),
        ("T32", F, F), // a followed job ended failed
    ];

    #[test]
    fn every_row_settles_its_job_as_the_table_says() {
        for r in POLICY.taxonomy {
            let &(_, outside, inside) = ROWS
                .iter()
                .find(|(row, ..)| *row == r.row)
                .unwrap_or_else(|| panic!("{}: a new row needs its line here", r.row));
            assert_eq!(decide(r.replay, None, false), outside, "{} outside", r.row);
            assert_eq!(decide(r.replay, None, true), inside, "{} inside", r.row);
        }
        assert_eq!(ROWS.len(), POLICY.taxonomy.len(), "a row left the spec");
    }

    #[test]
    fn a_replay_waits_what_the_platform_asked_and_a_verdict_ignores_it() {
        let wait = Some(Duration::from_secs(30));
        for replay in [Replay::Outage, Replay::Later] {
            assert_eq!(decide(replay, wait, false), Settle::Replay { after: wait });
        }
        assert_eq!(
            decide(Replay::Deploy, wait, true),
            Settle::Replay { after: wait }
        );
        assert_eq!(decide(Replay::Deploy, wait, false), Settle::Fail);
        assert_eq!(decide(Replay::Never, wait, true), Settle::Fail);
    }
}
