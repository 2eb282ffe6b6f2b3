//! Several replicas, one tenant (issue 17): the fleet section of the spec,
//! tied to the issue's numbers.

use std::time::Duration;

use grag_client::policy::{POLICY, budget};
use sdk_runtime::policy::Degraded;

#[test]
fn the_fleet_numbers_are_the_issue_s() {
    let fleet = POLICY.fleet.as_ref().expect("GRAG has a fleet section");
    // "local (the default, today's behaviour, nothing to run)".
    assert!(!fleet.shared);
    assert_eq!(fleet.url_env, "GRAG_REDIS_URL");
    // "Every Redis call has a short deadline (spec data; a few ms)".
    assert_eq!(fleet.deadline, Duration::from_millis(5));
    // "Detected within 1 s": the breaker opens after its failures, each
    // bounded by the deadline.
    assert!(fleet.deadline * fleet.breaker_failures <= Duration::from_secs(1));
    assert_eq!(fleet.breaker_failures, 3);
    // "back to shared within 2 s after Redis returns".
    assert_eq!(fleet.breaker_retry, Duration::from_secs(1));
    assert!(fleet.breaker_retry + fleet.heartbeat < Duration::from_secs(2));
    // "taken back from a crashed replica within one lease length".
    assert_eq!(fleet.lease, Duration::from_secs(5));
    assert_eq!(fleet.heartbeat, Duration::from_millis(500));
    // "the total stays within the limits (5 % margin) while degraded".
    assert_eq!(fleet.margin_percent, 5);
    assert_eq!(fleet.degraded, Degraded::Open);
    // "8 global and 2 ingest are the fleet's": only the caller's fan-out
    // loop and the share of streams stay per replica.
    assert_eq!(fleet.per_replica, [budget::FANOUT, budget::STREAMS]);
    assert!(!fleet.per_replica.contains(&budget::INGEST));
    assert!(!fleet.per_replica.contains(&budget::RETRIEVAL));
    assert!(!fleet.per_replica.contains(&budget::BACKFILL));
    assert_eq!(fleet.alert, "fleet_degraded");
}
