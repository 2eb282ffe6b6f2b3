//! A small policy for the runtime's own unit tests.
//!
//! The runtime executes any API's policy and must not depend on a generated
//! client, so its tests of job following ([`crate::follow`]) and chat turns
//! ([`crate::turn`]) run against this fixture instead: a job-progress stream
//! with its status route and a chat stream, with the numbers of a real
//! contract (GRAG's) and the taxonomy rows those tests reach. Nothing else:
//! no breaker, no replay queue, no warm-up calls. The policy is generated
//! from `runtime/fixture/` into [`policy`] by `cargo xtask codegen`; what is
//! no policy (the log lines it writes to, a tenant) is written here.

#[allow(dead_code)] // the generated module names every class and table, used or not
mod policy;

pub use policy::{CHAT_STREAM, JOB_EVENTS, JOB_STATUS, POLICY};

use sdk_policy::log::{
    AlertLine, AttemptLine, ExhaustedLine, LogLines, SentLine, StreamFailedLine,
};

/// A tenant name these rules accept.
pub const TENANT: &str = "tenant-a";

/// The policy's log lines: none are written.
static LINES: Quiet = Quiet;

/// Writes no log line: the tests read alerts through
/// [`crate::alerts::CollectAlerts`] and counts through the metrics.
#[derive(Debug)]
struct Quiet;

impl LogLines for Quiet {
    fn enabled(&self) -> bool {
        false
    }
    fn sent(&self, _: &SentLine<'_>) {}
    fn attempt(&self, _: &AttemptLine<'_>) {}
    fn alert(&self, _: &AlertLine<'_>) {}
    fn retry_exhausted(&self, _: &ExhaustedLine<'_>) {}
    fn stream_failed(&self, _: &StreamFailedLine<'_>) {}
    fn breaker(&self, _: &str, _: &str) {}
    fn warm_up(&self, _: &str, _: bool) {}
}

#[cfg(test)]
mod tests {
    use sdk_policy::policy::{AlertRate, BufferingRule, StreamPolicy};

    use super::POLICY;

    /// The fixture's stream, buffering and polling numbers are GRAG's (§6, §8):
    /// read from `spec/grag` here, so `runtime/fixture` cannot drift from it
    /// unnoticed.
    #[test]
    fn the_fixture_streams_and_polling_are_the_grag_specs() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec/grag");
        let files = sdk_codegen::load::read_dir(&root).expect("spec/grag reads");
        let model = sdk_codegen::model(&files).expect("spec/grag is valid");
        for (fixture, spec) in [("jobs", "orchestrator"), ("chat", "chat")] {
            let ours = POLICY.streams.iter().find(|s| s.name == fixture).unwrap();
            let theirs = model.streams.iter().find(|s| s.name == spec).unwrap();
            assert_eq!(ours.watchdog, theirs.watchdog, "{fixture}: watchdog");
            assert_eq!(ours.keepalive, theirs.keepalive, "{fixture}: keepalive");
            assert_eq!(ours.ceiling, theirs.ceiling, "{fixture}: ceiling");
            assert_eq!(
                ours.first_event, theirs.first_event,
                "{fixture}: first event"
            );
            assert_eq!(ours.resend, theirs.resend, "{fixture}: resend");
            assert_eq!(
                ours.resync_after_reconnect, theirs.resync_after_reconnect,
                "{fixture}: resync"
            );
            assert_eq!(
                ours.terminal_events, theirs.terminal_events,
                "{fixture}: terminal events"
            );
            let reopen = |s: &StreamPolicy| s.fallback.as_ref().map(|f| f.reopen_after);
            assert_eq!(reopen(ours), reopen(theirs), "{fixture}: reopen after");
        }
        let (ours, theirs) = (POLICY.buffering.as_ref(), model.buffering.as_ref());
        let numbers = |b: &BufferingRule| (b.min_events, b.burst, b.silent_for, b.confirm_after);
        assert_eq!(ours.map(numbers), theirs.map(numbers), "buffering");
        let rate = |f: Option<(AlertRate, &'static str)>| f.map(|(rate, _)| rate);
        assert_eq!(
            rate(POLICY.fallbacks_sustained),
            rate(model.fallbacks_sustained),
            "sustained fallbacks"
        );
        let polling = &POLICY.throttle.polling;
        let theirs = &model.throttle.value.polling;
        assert_eq!(polling.interval, theirs.interval);
        assert_eq!(polling.floor, theirs.floor);
        assert_eq!(polling.hot_factor, theirs.hot_factor);
    }
}
