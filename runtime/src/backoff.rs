//! Retry delays and polling cadence (GRAG §4, §8).
//!
//! Pure functions: the clock (`now`) and the randomness (`rng`) are passed in,
//! so the retry loop stays deterministic under test. Every computation
//! saturates; a hostile `Retry-After` or a large retry count never panics.

use std::time::{Duration, SystemTime};

use rand::Rng;

use sdk_policy::policy::{PollingPolicy, RetrySchedule};

/// Parses a `Retry-After` value: delta-seconds (`"7"`) or an HTTP date.
///
/// A date in the past means "retry now" (`Duration::ZERO`); anything else that
/// does not parse is `None`, so the caller falls back to the schedule's floor.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    // RFC 9110: delay-seconds = 1*DIGIT (no sign, no fraction).
    if value.bytes().all(|b| b.is_ascii_digit()) {
        return value.parse::<u64>().ok().map(Duration::from_secs);
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The wait before retry number `retry` (1 for the first retry).
///
/// - `Exponential`: full jitter, uniform in `[0, min(cap, base * factor^(retry-1))]`,
///   so clients that failed together do not retry together.
/// - `RetryAfter`: the server's `Retry-After` as given, or `floor` when it is
///   absent, plus uniform jitter in `[0, jitter]`.
/// - `Linear`: `step * retry`, no jitter.
/// - `Never`, `Once`, `DeployWindow`: no wait (the retry is immediate).
pub fn retry_delay(
    schedule: &RetrySchedule,
    retry: u32,
    retry_after: Option<Duration>,
    rng: &mut impl Rng,
) -> Duration {
    match *schedule {
        RetrySchedule::Exponential {
            base, factor, cap, ..
        } => uniform(rng, exponential_bound(base, factor, cap, retry)),
        RetrySchedule::RetryAfter { floor, jitter, .. } => retry_after
            .unwrap_or(floor)
            .saturating_add(uniform(rng, jitter)),
        RetrySchedule::Linear { step, .. } => step.saturating_mul(retry),
        RetrySchedule::Never | RetrySchedule::Once { .. } | RetrySchedule::DeployWindow { .. } => {
            Duration::ZERO
        }
    }
}

/// `min(cap, base * factor^(retry-1))`, saturating at `cap` on overflow.
fn exponential_bound(base: Duration, factor: u32, cap: Duration, retry: u32) -> Duration {
    let exponent = retry.saturating_sub(1);
    factor
        .checked_pow(exponent)
        .and_then(|growth| base.checked_mul(growth))
        .map_or(cap, |bound| bound.min(cap))
}

/// Uniform in `[0, max]`, at nanosecond resolution (capped at ~584 years).
fn uniform(rng: &mut impl Rng, max: Duration) -> Duration {
    let max = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rng.random_range(0..=max))
}

/// Whether another attempt is allowed after `attempt` attempts (1-based, the
/// first one included). Conditions of a class (idempotency, deploy window)
/// are the caller's; this only counts.
#[cfg(test)]
fn may_retry(schedule: &RetrySchedule, attempt: u32) -> bool {
    attempt < schedule.attempts()
}

/// What decides whether a failed attempt may be sent again.
#[derive(Debug, Clone, Copy)]
pub struct RetryCase {
    /// The schedule of the row that classified the attempt.
    pub row: RetrySchedule,
    /// The route's own class: it bounds the row's (an R0 route is never re-sent).
    pub route: RetrySchedule,
    pub get: bool,
    pub deploy_suspected: bool,
    pub idempotent: bool,
    /// The request may have reached the server.
    pub maybe_sent: bool,
}

/// Whether the call may be sent again at all (the attempt count is
/// the schedule's): never on an R0 row or route, R2 only for a GET inside the
/// deploy-suspected window, and a call that is not idempotent only when the
/// request cannot have reached the server.
pub fn may_resend(case: &RetryCase) -> bool {
    let row_allows = match case.row {
        RetrySchedule::Never => false,
        RetrySchedule::DeployWindow { .. } => case.get && case.deploy_suspected,
        _ => true,
    };
    row_allows && case.route != RetrySchedule::Never && (case.idempotent || !case.maybe_sent)
}

/// What follows a failed attempt: everything [`next`] decides from.
#[derive(Debug, Clone, Copy)]
pub struct Attempted {
    pub case: RetryCase,
    /// Attempts made so far, this one included.
    pub attempt: u32,
    /// The wait the server asked for (`Retry-After`).
    pub retry_after: Option<Duration>,
    /// The caller (a job queue) waits out a server's wait itself.
    pub defer_server_waits: bool,
    pub now: tokio::time::Instant,
    /// The overall deadline of the call.
    pub deadline: tokio::time::Instant,
}

/// The decision after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Send again at this instant.
    RetryAt(tokio::time::Instant),
    /// Stop with the attempt's error; `exhausted` when the class would have
    /// retried but its attempts are used up.
    Fail { exhausted: bool },
    /// Stop, and tell the caller how long the server asked to wait: the wait
    /// outlasts the deadline, or the caller defers server waits.
    Wait(Duration),
    /// Stop: the backoff reaches past the deadline.
    Deadline,
}

/// Decides what follows a failed attempt. Pure: the clock reading and the
/// jitter's randomness come in, so every branch is tested without a network.
pub fn next(a: &Attempted, rng: &mut impl Rng) -> Next {
    let eligible = may_resend(&a.case);
    let attempts = a.case.row.attempts().min(a.case.route.attempts());
    if !eligible || a.attempt >= attempts {
        return Next::Fail {
            exhausted: eligible,
        };
    }
    if let (true, Some(wait)) = (a.defer_server_waits, a.retry_after) {
        return Next::Wait(wait);
    }
    let delay = retry_delay(&a.case.row, a.attempt, a.retry_after, rng);
    match a.now.checked_add(delay).filter(|at| *at < a.deadline) {
        Some(at) => Next::RetryAt(at),
        None => a.retry_after.map_or(Next::Deadline, Next::Wait),
    }
}

/// Polling cadence of status routes: the policy interval, slowed while a 429
/// is hot, never below the floor.
#[derive(Debug, Clone, Copy)]
pub struct PollCadence {
    policy: &'static PollingPolicy,
}

impl PollCadence {
    pub fn new(policy: &'static PollingPolicy) -> Self {
        Self { policy }
    }

    /// The next polling interval; `hot_429` multiplies it by `hot_factor`
    /// so polling does not feed the rate limit that just answered 429.
    pub fn interval(&self, hot_429: bool) -> Duration {
        let factor = if hot_429 {
            self.policy.hot_factor.max(1)
        } else {
            1
        };
        let interval = self
            .policy
            .interval
            .checked_mul(factor)
            .unwrap_or(Duration::MAX);
        self.clamp(interval)
    }

    /// A requested interval (e.g. suggested by the server), never below the floor.
    pub fn clamp(&self, requested: Duration) -> Duration {
        requested.max(self.policy.floor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const R1: RetrySchedule = RetrySchedule::Exponential {
        attempts: 3,
        base: Duration::from_millis(500),
        factor: 2,
        cap: Duration::from_secs(8),
    };
    const R3: RetrySchedule = RetrySchedule::RetryAfter {
        attempts: 3,
        floor: Duration::from_secs(2),
        jitter: Duration::from_secs(1),
    };

    static POLLING: PollingPolicy = PollingPolicy {
        interval: Duration::from_secs(5),
        floor: Duration::from_secs(2),
        hot_factor: 2,
    };

    fn rng() -> StdRng {
        StdRng::seed_from_u64(0x5eed)
    }

    /// A fixed "now" on a whole second, as HTTP dates have second resolution.
    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }

    #[test]
    fn exponential_full_jitter_stays_in_bounds() {
        let mut rng = rng();
        const SAMPLES: u32 = 2_000;
        for retry in 1..=10u32 {
            let bound =
                Duration::from_millis(500 * 2u64.pow(retry - 1)).min(Duration::from_secs(8));
            let mut sum = Duration::ZERO;
            let mut max = Duration::ZERO;
            for _ in 0..SAMPLES {
                let d = retry_delay(&R1, retry, None, &mut rng);
                assert!(d <= bound, "retry {retry}: {d:?} > {bound:?}");
                sum += d;
                max = max.max(d);
            }
            let mean = (sum / SAMPLES).as_secs_f64() / bound.as_secs_f64();
            assert!((0.45..=0.55).contains(&mean), "retry {retry}: mean {mean}");
            // Full jitter really spreads up to the bound.
            assert!(
                max.as_secs_f64() > bound.as_secs_f64() * 0.95,
                "retry {retry}"
            );
        }
    }

    #[test]
    fn exponential_cap_is_8s() {
        let mut rng = rng();
        let max = (0..5_000)
            .map(|_| retry_delay(&R1, 6, None, &mut rng))
            .max()
            .unwrap();
        assert!(max <= Duration::from_secs(8));
        assert!(
            max > Duration::from_millis(7_900),
            "cap not reached: {max:?}"
        );
    }

    #[test]
    fn exponential_saturates_instead_of_overflowing() {
        let mut rng = rng();
        let huge = RetrySchedule::Exponential {
            attempts: u32::MAX,
            base: Duration::MAX,
            factor: u32::MAX,
            cap: Duration::from_secs(8),
        };
        for retry in [0, 1, 2, 64, u32::MAX] {
            assert!(retry_delay(&huge, retry, None, &mut rng) <= Duration::from_secs(8));
            assert!(retry_delay(&R1, retry, None, &mut rng) <= Duration::from_secs(8));
        }
    }

    #[test]
    fn linear_waits_step_times_the_retry_number_without_jitter() {
        let mut rng = rng();
        let core = RetrySchedule::Linear {
            attempts: 3,
            step: Duration::from_millis(250),
        };
        let waits: Vec<Duration> = (1..=2)
            .map(|retry| retry_delay(&core, retry, Some(Duration::from_secs(9)), &mut rng))
            .collect();
        assert_eq!(
            waits,
            [Duration::from_millis(250), Duration::from_millis(500)],
            "0.25 s × attempt; a Retry-After does not change it"
        );
        assert!(may_retry(&core, 2) && !may_retry(&core, 3));
        let zero = RetrySchedule::Linear {
            attempts: 2,
            step: Duration::ZERO,
        };
        assert_eq!(retry_delay(&zero, 1, None, &mut rng), Duration::ZERO);
        let huge = RetrySchedule::Linear {
            attempts: u32::MAX,
            step: Duration::MAX,
        };
        assert_eq!(retry_delay(&huge, u32::MAX, None, &mut rng), Duration::MAX);
    }

    #[test]
    fn retry_after_seconds() {
        assert_eq!(parse_retry_after("7", now()), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after(" 0 ", now()), Some(Duration::ZERO));
    }

    #[test]
    fn retry_after_http_date() {
        let date = httpdate::fmt_http_date(now() + Duration::from_secs(30));
        assert_eq!(
            parse_retry_after(&date, now()),
            Some(Duration::from_secs(30))
        );
    }

    #[test]
    fn retry_after_past_date_is_zero() {
        let date = httpdate::fmt_http_date(now() - Duration::from_secs(30));
        assert_eq!(parse_retry_after(&date, now()), Some(Duration::ZERO));
    }

    #[test]
    fn retry_after_garbage_is_none() {
        for value in ["", "soon", "-5", "1.5", "7s", "99999999999999999999999"] {
            assert_eq!(parse_retry_after(value, now()), None, "{value:?}");
        }
    }

    #[test]
    fn retry_after_floor_when_absent() {
        let mut rng = rng();
        let floor = Duration::from_secs(2);
        let top = floor + Duration::from_secs(1);
        let delays: Vec<_> = (0..1_000)
            .map(|_| retry_delay(&R3, 1, None, &mut rng))
            .collect();
        assert!(delays.iter().all(|d| (floor..=top).contains(d)));
        // The jitter is really applied.
        assert!(
            delays
                .iter()
                .any(|d| *d > floor + Duration::from_millis(900))
        );
    }

    #[test]
    fn retry_after_honored_as_given_plus_jitter() {
        let mut rng = rng();
        let given = Duration::from_millis(500);
        for _ in 0..1_000 {
            let d = retry_delay(&R3, 2, Some(given), &mut rng);
            assert!(
                (given..=given + Duration::from_secs(1)).contains(&d),
                "{d:?}"
            );
        }
        let d = retry_delay(&R3, 1, Some(Duration::MAX), &mut rng);
        assert_eq!(d, Duration::MAX);
    }

    #[test]
    fn immediate_schedules_do_not_wait() {
        let mut rng = rng();
        for schedule in [
            RetrySchedule::Never,
            RetrySchedule::Once { attempts: 2 },
            RetrySchedule::DeployWindow { attempts: 2 },
        ] {
            let d = retry_delay(&schedule, 1, Some(Duration::from_secs(9)), &mut rng);
            assert_eq!(d, Duration::ZERO, "{schedule:?}");
        }
    }

    #[test]
    fn may_retry_counts_attempts() {
        let cases = [
            (RetrySchedule::Never, 1),
            (R1, 3),
            (R3, 3),
            (RetrySchedule::DeployWindow { attempts: 2 }, 2),
            (RetrySchedule::Once { attempts: 2 }, 2),
        ];
        for (schedule, attempts) in cases {
            for attempt in 1..attempts {
                assert!(may_retry(&schedule, attempt), "{schedule:?} @ {attempt}");
            }
            assert!(!may_retry(&schedule, attempts), "{schedule:?} @ {attempts}");
            assert!(!may_retry(&schedule, attempts + 1), "{schedule:?}");
        }
    }

    #[test]
    fn the_route_class_bounds_the_row_and_unsent_calls_may_be_resent() {
        let case = RetryCase {
            row: R1,
            route: R1,
            get: true,
            deploy_suspected: false,
            idempotent: true,
            maybe_sent: true,
        };
        assert!(may_resend(&case));
        let never = RetrySchedule::Never;
        assert!(
            !may_resend(&RetryCase {
                route: never,
                ..case
            }),
            "R0 route"
        );
        assert!(!may_resend(&RetryCase { row: never, ..case }), "R0 row");
        let post = RetryCase {
            idempotent: false,
            get: false,
            ..case
        };
        assert!(!may_resend(&post), "a sent POST");
        assert!(
            may_resend(&RetryCase {
                maybe_sent: false,
                ..post
            }),
            "an unsent POST"
        );
        let r2 = RetryCase {
            row: RetrySchedule::DeployWindow { attempts: 2 },
            ..case
        };
        assert!(!may_resend(&r2), "R2 outside the window");
        assert!(may_resend(&RetryCase {
            deploy_suspected: true,
            ..r2
        }));
        assert!(
            !may_resend(&RetryCase {
                deploy_suspected: true,
                get: false,
                ..r2
            }),
            "R2 is GET only"
        );
    }

    fn attempted(row: RetrySchedule, attempt: u32) -> Attempted {
        let now = tokio::time::Instant::now();
        Attempted {
            case: RetryCase {
                row,
                route: R1,
                get: true,
                deploy_suspected: false,
                idempotent: true,
                maybe_sent: true,
            },
            attempt,
            retry_after: None,
            defer_server_waits: false,
            now,
            deadline: now + Duration::from_secs(180),
        }
    }

    #[test]
    fn next_retries_inside_the_deadline_and_stops_at_the_attempts() {
        let a = attempted(R1, 1);
        match next(&a, &mut rng()) {
            Next::RetryAt(at) => assert!(at >= a.now && at <= a.now + Duration::from_millis(500)),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            next(&attempted(R1, 3), &mut rng()),
            Next::Fail { exhausted: true },
            "R1 has 3 attempts"
        );
        assert_eq!(
            next(&attempted(RetrySchedule::Never, 1), &mut rng()),
            Next::Fail { exhausted: false },
            "R0 never retries: not an exhaustion"
        );
        let sent_post = Attempted {
            case: RetryCase {
                idempotent: false,
                get: false,
                ..attempted(R1, 1).case
            },
            ..attempted(R1, 1)
        };
        assert_eq!(
            next(&sent_post, &mut rng()),
            Next::Fail { exhausted: false }
        );
    }

    #[test]
    fn next_hands_a_wait_past_the_deadline_or_a_deferred_one_to_the_caller() {
        let wait = Duration::from_secs(30);
        let near = Attempted {
            retry_after: Some(wait),
            deadline: attempted(R3, 1).now + Duration::from_secs(10),
            ..attempted(R3, 1)
        };
        assert_eq!(
            next(&near, &mut rng()),
            Next::Wait(wait),
            "past the deadline"
        );
        let far = Attempted {
            deadline: near.now + Duration::from_secs(600),
            ..near
        };
        assert!(
            matches!(next(&far, &mut rng()), Next::RetryAt(_)),
            "inside it"
        );
        let deferred = Attempted {
            defer_server_waits: true,
            ..far
        };
        assert_eq!(
            next(&deferred, &mut rng()),
            Next::Wait(wait),
            "a job queue waits itself"
        );
        let no_header = Attempted {
            retry_after: None,
            deadline: near.now + Duration::from_secs(1),
            ..near
        };
        assert_eq!(
            next(&no_header, &mut rng()),
            Next::Deadline,
            "the 2 s floor passes the deadline"
        );
    }

    #[test]
    fn poll_cadence() {
        let cadence = PollCadence::new(&POLLING);
        assert_eq!(cadence.interval(false), Duration::from_secs(5));
        assert_eq!(cadence.interval(true), Duration::from_secs(10));
        assert_eq!(
            cadence.clamp(Duration::from_millis(500)),
            Duration::from_secs(2)
        );
        assert_eq!(
            cadence.clamp(Duration::from_secs(3)),
            Duration::from_secs(3)
        );
    }
}
