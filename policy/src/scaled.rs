//! The same policy with every duration divided: end-to-end tests run the real
//! rules (breaker windows, Retry-After floors, watchdogs) in milliseconds.
//!
//! Every struct that holds a duration is taken apart field by field, never
//! with `..`: a field added to one of them does not compile here until it
//! is scaled or said to stay as it is. Two exceptions: the breaker names
//! its durations itself (`BreakerPolicy::durations_mut`), and a test fails
//! for one that is not scaled; the fleet is copied whole, since none of its
//! timers is scaled.

use std::time::Duration;

use crate::policy::{
    AlertNames, AlertRate, BreakerPolicy, BufferingRule, Policy, PollingPolicy, ReplayPolicy,
    RetryBounds, RetryClass, RetrySchedule, StreamPolicy, TaxonomyRow, ThrottlePolicy,
    TimeoutClass,
};

impl Policy {
    /// This policy with every duration divided by `divisor` (at least 1 ms
    /// where it was non-zero). The copy lives for the rest of the process:
    /// make one per test binary, not per call.
    pub fn scaled(&self, divisor: u32) -> &'static Policy {
        let s = Scale(divisor.max(1));
        let Policy {
            api,
            headers,
            ids,
            reserved_floor,
            timeouts,
            deadline,
            retries,
            breaker,
            throttle,
            taxonomy,
            detail_sets,
            streams,
            buffering,
            fallbacks_sustained,
            states,
            messages,
            warm_up,
            features,
            alerts,
            limits,
            routes,
            pool_idle,
            pool_idle_floor,
            keep_alive_margin,
            metrics,
            log,
            log_lines,
            fresh_after,
            replay,
            fleet,
        } = self;
        Box::leak(Box::new(Policy {
            // Names, ID rules, copy, routes and caps: no durations.
            api,
            headers: headers.clone(),
            ids: ids.clone(),
            reserved_floor,
            detail_sets,
            states,
            messages,
            warm_up,
            features,
            limits: limits.clone(),
            routes,
            metrics: metrics.clone(),
            log: log.clone(),
            log_lines: *log_lines,
            fresh_after,
            // Timers of the calls.
            timeouts: leak(timeouts.iter().map(|t| s.timeout(t))),
            deadline: s.of(*deadline),
            retries: leak(retries.iter().map(|r| s.retry(r))),
            pool_idle: s.of(*pool_idle),
            pool_idle_floor: s.of(*pool_idle_floor),
            keep_alive_margin: keep_alive_margin.map(|m| s.of(m)),
            taxonomy: leak(taxonomy.iter().map(|r| s.row(r))),
            // Timers of the origin, the throttle and the streams.
            breaker: breaker.as_ref().map(|b| s.breaker(b)),
            throttle: s.throttle(throttle),
            streams: leak(streams.iter().map(|st| s.stream(st))),
            buffering: buffering.as_ref().map(|b| s.buffering(b)),
            fallbacks_sustained: fallbacks_sustained.map(|(r, alert)| (s.rate(r), alert)),
            alerts: s.alerts(alerts),
            replay: replay.as_ref().map(|r| s.replay(r)),
            // The fleet's timers stay as the spec has them: they bound round
            // trips to a real Redis server (a store call's deadline, the lease
            // a heartbeat renews), which dividing them cannot make faster.
            fleet: fleet.clone(),
        }))
    }
}

/// A policy's durations divided by one divisor (at least 1).
#[derive(Debug, Clone, Copy)]
struct Scale(u32);

fn leak<T>(items: impl Iterator<Item = T>) -> &'static [T] {
    Box::leak(items.collect::<Vec<T>>().into_boxed_slice())
}

impl Scale {
    /// `value` divided, at least 1 ms where it was non-zero.
    fn of(self, value: Duration) -> Duration {
        if value.is_zero() {
            value
        } else {
            (value / self.0).max(Duration::from_millis(1))
        }
    }

    fn timeout(self, t: &TimeoutClass) -> TimeoutClass {
        let TimeoutClass {
            name,
            per_attempt,
            deploy_suspected,
        } = t;
        TimeoutClass {
            name,
            per_attempt: self.of(*per_attempt),
            deploy_suspected: deploy_suspected.map(|d| self.of(d)),
        }
    }

    fn retry(self, r: &RetryClass) -> RetryClass {
        let RetryClass {
            name,
            schedule,
            configurable,
        } = r;
        RetryClass {
            name,
            schedule: self.schedule(*schedule),
            configurable: configurable.map(
                |RetryBounds {
                     min_attempts,
                     max_attempts,
                     min_step,
                 }| RetryBounds {
                    min_attempts,
                    max_attempts,
                    min_step: self.of(min_step),
                },
            ),
        }
    }

    fn schedule(self, schedule: RetrySchedule) -> RetrySchedule {
        match schedule {
            RetrySchedule::Never => RetrySchedule::Never,
            RetrySchedule::Exponential {
                attempts,
                base,
                factor,
                cap,
            } => RetrySchedule::Exponential {
                attempts,
                base: self.of(base),
                factor,
                cap: self.of(cap),
            },
            RetrySchedule::DeployWindow { attempts } => RetrySchedule::DeployWindow { attempts },
            RetrySchedule::RetryAfter {
                attempts,
                floor,
                jitter,
            } => RetrySchedule::RetryAfter {
                attempts,
                floor: self.of(floor),
                jitter: self.of(jitter),
            },
            RetrySchedule::Once { attempts } => RetrySchedule::Once { attempts },
            RetrySchedule::Linear { attempts, step } => RetrySchedule::Linear {
                attempts,
                step: self.of(step),
            },
        }
    }

    fn row(self, r: &TaxonomyRow) -> TaxonomyRow {
        let TaxonomyRow {
            row,
            index,
            success,
            matches,
            class,
            retry,
            feeds_breaker,
            outcome_unknown,
            alert,
            alert_outside_deploy,
            feature_state,
            remember_for,
            escalate_to,
            replay,
            action,
            message,
            unknown_message,
        } = r;
        TaxonomyRow {
            row,
            index: *index,
            success: *success,
            matches: matches.clone(),
            class,
            retry: *retry,
            feeds_breaker: *feeds_breaker,
            outcome_unknown: *outcome_unknown,
            alert: *alert,
            alert_outside_deploy: *alert_outside_deploy,
            feature_state: *feature_state,
            remember_for: remember_for.map(|d| self.of(d)),
            escalate_to: *escalate_to,
            replay: *replay,
            action,
            message: *message,
            unknown_message: *unknown_message,
        }
    }

    /// The breaker names its durations itself (`durations_mut`), so one
    /// added to it is scaled without a line here.
    fn breaker(self, b: &BreakerPolicy) -> BreakerPolicy {
        let mut b = b.clone();
        for d in b.durations_mut() {
            *d = self.of(*d);
        }
        b
    }

    fn throttle(self, t: &ThrottlePolicy) -> ThrottlePolicy {
        let ThrottlePolicy {
            max_in_flight,
            per_second,
            rate_period,
            budget_period,
            budgets,
            polling,
        } = t;
        let PollingPolicy {
            interval,
            floor,
            hot_factor,
        } = polling;
        ThrottlePolicy {
            max_in_flight: *max_in_flight,
            per_second: *per_second,
            rate_period: self.of(*rate_period),
            budget_period: self.of(*budget_period),
            budgets,
            polling: PollingPolicy {
                interval: self.of(*interval),
                floor: self.of(*floor),
                hot_factor: *hot_factor,
            },
        }
    }

    fn stream(self, st: &StreamPolicy) -> StreamPolicy {
        let StreamPolicy {
            name,
            watchdog,
            keepalive,
            ceiling,
            resync_after_reconnect,
            resend,
            first_event,
            terminal_events,
            ends_with_terminal,
            error_event,
            timeout_event,
            fallback,
            stages,
            lost_copy,
        } = st;
        StreamPolicy {
            name,
            watchdog: self.of(*watchdog),
            keepalive: keepalive.map(|d| self.of(d)),
            ceiling: ceiling.map(|d| self.of(d)),
            resync_after_reconnect: *resync_after_reconnect,
            resend: *resend,
            first_event: *first_event,
            terminal_events,
            ends_with_terminal: *ends_with_terminal,
            error_event,
            timeout_event,
            // Field names and a poll count: no durations.
            fallback: fallback.clone(),
            stages: stages.clone(),
            lost_copy: *lost_copy,
        }
    }

    fn buffering(self, b: &BufferingRule) -> BufferingRule {
        let BufferingRule {
            min_events,
            burst,
            silent_for,
            confirm_after,
            alert,
        } = b;
        BufferingRule {
            min_events: *min_events,
            burst: self.of(*burst),
            silent_for: self.of(*silent_for),
            confirm_after: *confirm_after,
            alert,
        }
    }

    fn rate(self, r: AlertRate) -> AlertRate {
        let AlertRate { at_least, within } = r;
        AlertRate {
            at_least,
            within: self.of(within),
        }
    }

    fn alerts(self, a: &AlertNames) -> AlertNames {
        let AlertNames {
            retry_exhausted,
            retry_exhausted_rate,
            severities,
        } = a;
        AlertNames {
            retry_exhausted,
            retry_exhausted_rate: retry_exhausted_rate.map(|r| self.rate(r)),
            severities,
        }
    }

    fn replay(self, r: &ReplayPolicy) -> ReplayPolicy {
        let ReplayPolicy {
            budget,
            lease,
            pause,
            split,
            kinds,
            lock_attempts,
            lock_step,
            depth_metric,
            failures_metric,
            store_rows_metric,
            store_bytes_metric,
            failure_alert,
            keep_done,
            keep_failed,
            prune_batch,
            prune_every,
            store_bound,
            store_alert,
        } = r;
        ReplayPolicy {
            budget: *budget,
            lease: self.of(*lease),
            pause: self.of(*pause),
            split: *split,
            kinds,
            lock_attempts: *lock_attempts,
            lock_step: self.of(*lock_step),
            depth_metric,
            failures_metric,
            store_rows_metric,
            store_bytes_metric,
            failure_alert,
            keep_done: self.of(*keep_done),
            keep_failed: self.of(*keep_failed),
            prune_batch: *prune_batch,
            prune_every: self.of(*prune_every),
            store_bound: *store_bound,
            store_alert,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every duration of the example breaker is whole seconds, so one still
    /// in seconds after dividing by 1000 is one `durations_mut` left out.
    /// Read from `Debug`, which lists every field.
    #[test]
    fn breaker_durations_are_all_scaled() {
        let scaled = Scale(1000).breaker(&BreakerPolicy::example());
        let text = format!("{scaled:?}");
        let unscaled: Vec<&str> = text
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
            .filter(|t| t.ends_with('s') && !t.ends_with("ms"))
            .filter(|t| t[..t.len() - 1].parse::<f64>().is_ok())
            .collect();
        assert!(unscaled.is_empty(), "not scaled: {unscaled:?} in {text}");
        assert!(text.contains("window: 30ms"), "{text}");
    }
}
