//! `Retry-After` is the server's word: waited for as given (seconds or an
//! HTTP date), never scaled, with no second wait on top.

use std::time::Duration;

use grag_sim::{Fault, RetryAfter, Rule};

use crate::kit::resilience::{Env, WallClock, early_in_a_second, whole_second};

/// The 429 counter's value for `retry_after` (the metric's name from the spec).
fn rate_limited(env: &Env, retry_after: &str) -> Option<u64> {
    let name = grag_client::policy::POLICY.metrics.rate_limited;
    let series = format!("{name}_total{{retry_after=\"{retry_after}\"}} ");
    let text = env.grag.runtime().metrics_text();
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn t11_429_retry_after_in_seconds_is_honored() {
    let env = Env::start().await;
    env.sim
        .faults()
        .push(Rule::new(Fault::rate_limited_secs(1)).on("list_kbs").once());
    env.grag.workspaces().list_kbs().await.unwrap();
    assert_eq!(env.statuses("list_kbs"), [Some(429), Some(200)]);
    assert_eq!(rate_limited(&env, "present"), Some(1));
    assert_eq!(rate_limited(&env, "absent"), Some(0));
    let gap = env.gaps("list_kbs")[0];
    // Retry-After is the server's word, never scaled: 1 s + up to 10 ms jitter.
    assert!(
        gap >= Duration::from_secs(1),
        "Retry-After: 1 waits a second: {gap:?}"
    );
    // Not a second wait on top (the floor or a backoff after the server's word).
    assert!(gap < Duration::from_secs(2), "{gap:?}");
}

#[tokio::test]
async fn t11_429_retry_after_as_http_date_is_honored() {
    let env = Env::start().await;
    // The date names the next whole second; start early in a second so it is
    // at least 500 ms away (far above the 20 ms floor).
    early_in_a_second().await;
    let clock = WallClock::now();
    env.sim.faults().push(
        Rule::new(Fault::RateLimited {
            retry_after: Some(RetryAfter::DateIn(1)),
        })
        .on("list_kbs")
        .once(),
    );
    env.grag.workspaces().list_kbs().await.unwrap();
    let log = env.sim.log().of("list_kbs");
    assert_eq!(log.len(), 2, "one retry");
    let first = clock.at(log[0].arrived);
    let retry = clock.at(log[1].arrived);
    let date = whole_second(first) + Duration::from_secs(1);
    assert!(
        retry + Duration::from_millis(2) >= date,
        "the retry waited for the HTTP date: {:?} before it",
        date.duration_since(retry).unwrap_or_default()
    );
    assert!(
        retry < date + Duration::from_secs(1),
        "{:?} after the date",
        retry.duration_since(date).unwrap_or_default()
    );
}

#[tokio::test]
async fn t15_a_503_with_retry_after_1_waits_a_second_not_the_floor() {
    let env = Env::start().await;
    env.sim.faults().push(
        Rule::new(Fault::Backpressure {
            retry_after: RetryAfter::Seconds(1),
        })
        .on("list_kbs")
        .once(),
    );
    env.grag.workspaces().list_kbs().await.unwrap();
    let gap = env.gaps("list_kbs")[0];
    assert!(gap >= Duration::from_secs(1), "{gap:?}");
    assert!(gap < Duration::from_secs(2), "{gap:?}");
}
