//! Under concurrency, half-open lets exactly one canary through
//! (the race of resilience4j issue 1432).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sdk_runtime::CircuitState;
use sdk_runtime::internals::{Admission, Breaker};
use sdk_runtime::policy::BreakerPolicy;
use tokio::time::Instant;

static POLICY: BreakerPolicy = BreakerPolicy::example();

fn half_open(now: Instant) -> Breaker {
    let mut breaker = Breaker::new(&POLICY);
    let generation = breaker.generation();
    for endpoint in ["/a", "/b", "/c"] {
        breaker.record_failure(generation, endpoint, now);
    }
    assert_eq!(breaker.state(), CircuitState::Open);
    breaker.record_probe(true, now + Duration::from_secs(5));
    breaker.record_probe(true, now + Duration::from_secs(10));
    assert_eq!(breaker.state(), CircuitState::HalfOpen);
    breaker
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_one_canary_among_many_concurrent_callers() {
    for round in 0..50 {
        let now = Instant::now();
        let breaker = Arc::new(Mutex::new(half_open(now)));
        let start = Arc::new(tokio::sync::Barrier::new(64));
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let breaker = breaker.clone();
                let start = start.clone();
                tokio::spawn(async move {
                    start.wait().await;
                    let at = now + Duration::from_secs(11);
                    breaker.lock().unwrap().admit(at, true)
                })
            })
            .collect();
        let mut canaries = 0;
        for task in tasks {
            match task.await.unwrap() {
                Admission::Canary(_) => canaries += 1,
                Admission::Rejected(CircuitState::HalfOpen) => {}
                other => panic!("round {round}: unexpected {other:?}"),
            }
        }
        assert_eq!(canaries, 1, "round {round}");
    }
}
