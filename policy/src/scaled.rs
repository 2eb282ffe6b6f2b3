//! The same policy with every duration divided: end-to-end tests run the real
//! rules (breaker windows, Retry-After floors, watchdogs) in milliseconds.

use std::time::Duration;

use crate::policy::{
    AlertNames, AlertRate, BreakerPolicy, BufferingRule, Policy, PollingPolicy, ReplayPolicy,
    RetryClass, RetrySchedule, StreamPolicy, TaxonomyRow, ThrottlePolicy, TimeoutClass,
};

impl Policy {
    /// This policy with every duration divided by `divisor` (at least 1 ms
    /// where it was non-zero). The copy lives for the rest of the process:
    /// make one per test binary, not per call.
    pub fn scaled(&self, divisor: u32) -> &'static Policy {
        let d = |value: Duration| {
            if value.is_zero() {
                value
            } else {
                (value / divisor.max(1)).max(Duration::from_millis(1))
            }
        };
        let timeouts: Vec<TimeoutClass> = self
            .timeouts
            .iter()
            .map(|t| TimeoutClass {
                per_attempt: d(t.per_attempt),
                deploy_suspected: t.deploy_suspected.map(d),
                ..t.clone()
            })
            .collect();
        let retries: Vec<RetryClass> = self
            .retries
            .iter()
            .map(|r| RetryClass {
                schedule: match r.schedule {
                    RetrySchedule::Exponential {
                        attempts,
                        base,
                        factor,
                        cap,
                    } => RetrySchedule::Exponential {
                        attempts,
                        base: d(base),
                        factor,
                        cap: d(cap),
                    },
                    RetrySchedule::RetryAfter {
                        attempts,
                        floor,
                        jitter,
                    } => RetrySchedule::RetryAfter {
                        attempts,
                        floor: d(floor),
                        jitter: d(jitter),
                    },
                    RetrySchedule::Linear { attempts, step } => RetrySchedule::Linear {
                        attempts,
                        step: d(step),
                    },
                    other => other,
                },
                ..r.clone()
            })
            .collect();
        let streams: Vec<StreamPolicy> = self
            .streams
            .iter()
            .map(|s| StreamPolicy {
                watchdog: d(s.watchdog),
                keepalive: s.keepalive.map(d),
                ceiling: s.ceiling.map(d),
                ..s.clone()
            })
            .collect();
        let taxonomy: Vec<TaxonomyRow> = self
            .taxonomy
            .iter()
            .map(|r| TaxonomyRow {
                remember_for: r.remember_for.map(d),
                ..r.clone()
            })
            .collect();
        let t = &self.throttle;
        Box::leak(Box::new(Policy {
            timeouts: Box::leak(timeouts.into_boxed_slice()),
            deadline: d(self.deadline),
            pool_idle: d(self.pool_idle),
            pool_idle_floor: d(self.pool_idle_floor),
            keep_alive_margin: self.keep_alive_margin.map(d),
            retries: Box::leak(retries.into_boxed_slice()),
            fallbacks_sustained: self.fallbacks_sustained.map(|(r, alert)| {
                (
                    AlertRate {
                        within: d(r.within),
                        ..r
                    },
                    alert,
                )
            }),
            buffering: self.buffering.as_ref().map(|b| BufferingRule {
                burst: d(b.burst),
                silent_for: d(b.silent_for),
                ..b.clone()
            }),
            breaker: self.breaker.as_ref().map(|b| BreakerPolicy {
                window: d(b.window),
                probe_interval: d(b.probe_interval),
                probe_timeout: d(b.probe_timeout),
                canary_timeout: d(b.canary_timeout),
                deploy_suspected: d(b.deploy_suspected),
                alert_after: d(b.alert_after),
                ..b.clone()
            }),
            throttle: ThrottlePolicy {
                rate_period: d(t.rate_period),
                budget_period: d(t.budget_period),
                polling: PollingPolicy {
                    interval: d(t.polling.interval),
                    floor: d(t.polling.floor),
                    ..t.polling.clone()
                },
                ..t.clone()
            },
            alerts: AlertNames {
                retry_exhausted_rate: self.alerts.retry_exhausted_rate.map(|r| AlertRate {
                    within: d(r.within),
                    ..r
                }),
                ..self.alerts.clone()
            },
            streams: Box::leak(streams.into_boxed_slice()),
            taxonomy: Box::leak(taxonomy.into_boxed_slice()),
            replay: self.replay.as_ref().map(|r| ReplayPolicy {
                lease: d(r.lease),
                pause: d(r.pause),
                lock_step: d(r.lock_step),
                ..r.clone()
            }),
            ..self.clone()
        }))
    }
}
