//! A policy with every duration divided, so end-to-end tests run the real
//! rules (breaker windows, Retry-After floors, watchdogs) in milliseconds.
//! Each type derives [`Scale`], which visits every field: a duration added
//! to a type is scaled without a line here, unless it says `#[scale(skip)]`.

use std::time::Duration;

use crate::index::{BudgetIx, DetailIx, RetryIx, RouteIx, RowIx, StreamIx, TimeoutIx};

/// What every duration of a scaled copy is divided by (at least 1).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Divisor(u32);

impl Divisor {
    pub(crate) fn new(divisor: u32) -> Self {
        Divisor(divisor.max(1))
    }
}

/// A value with every duration in it divided by one [`Divisor`].
pub(crate) trait Scale {
    fn scale(&self, by: Divisor) -> Self;
}

/// Divided, at least 1 ms where it was non-zero (a zero stays "never").
impl Scale for Duration {
    fn scale(&self, by: Divisor) -> Self {
        if self.is_zero() {
            *self
        } else {
            (*self / by.0).max(Duration::from_millis(1))
        }
    }
}

/// Values with no duration in them: copied as they are.
macro_rules! unscaled {
    ($($ty:ty),*) => {$(
        impl Scale for $ty {
            fn scale(&self, _: Divisor) -> Self {
                *self
            }
        }
    )*};
}

unscaled!(bool, u8, u16, u32, u64, usize);
unscaled!(
    TimeoutIx, RetryIx, BudgetIx, StreamIx, RouteIx, RowIx, DetailIx
);

impl Scale for &str {
    fn scale(&self, _: Divisor) -> Self {
        self
    }
}

impl<T: Scale> Scale for Option<T> {
    fn scale(&self, by: Divisor) -> Self {
        self.as_ref().map(|value| value.scale(by))
    }
}

impl<A: Scale, B: Scale> Scale for (A, B) {
    fn scale(&self, by: Divisor) -> Self {
        (self.0.scale(by), self.1.scale(by))
    }
}

/// A table's copy lives for the rest of the process, as a policy's tables do.
impl<T: Scale + 'static> Scale for &[T] {
    fn scale(&self, by: Divisor) -> Self {
        let items: Vec<T> = self.iter().map(|item| item.scale(by)).collect();
        Box::leak(items.into_boxed_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{BreakerPolicy, FleetPolicy, RetrySchedule};

    /// The durations `Debug` shows in `text`: `30ms`, `1.5s`, `0ns`.
    fn durations(text: &str) -> Vec<&str> {
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == 'µ'))
            .filter(|t| t.starts_with(|c: char| c.is_ascii_digit()))
            .filter(|t| ["ns", "µs", "ms", "s"].iter().any(|u| t.ends_with(u)))
            .collect()
    }

    /// Every duration of the example breaker is whole seconds, so one still
    /// in seconds after dividing by 1000 is one the derive did not reach.
    #[test]
    fn breaker_durations_are_all_scaled() {
        let example = BreakerPolicy::example();
        let scaled = example.scale(Divisor::new(1000));
        let text = format!("{scaled:?}");
        let found = durations(&text);
        assert_eq!(found.len(), durations(&format!("{example:?}")).len());
        assert!(found.len() >= 6, "{text}");
        let unscaled: Vec<_> = found.iter().filter(|d| !d.ends_with("ms")).collect();
        assert!(unscaled.is_empty(), "not scaled: {unscaled:?} in {text}");
        assert!(text.contains("window: 30ms"), "{text}");
    }

    #[test]
    fn a_duration_keeps_a_floor_of_one_millisecond_and_zero_stays_zero() {
        let by = Divisor::new(1000);
        assert_eq!(
            Duration::from_millis(250).scale(by),
            Duration::from_millis(1)
        );
        assert_eq!(Duration::ZERO.scale(by), Duration::ZERO);
        assert_eq!(
            Duration::from_secs(5).scale(Divisor::new(0)),
            Duration::from_secs(5)
        );
        let schedule = RetrySchedule::RetryAfter {
            attempts: 3,
            floor: Duration::from_secs(2),
            jitter: Duration::from_secs(1),
        };
        assert_eq!(
            schedule.scale(by),
            RetrySchedule::RetryAfter {
                attempts: 3,
                floor: Duration::from_millis(2),
                jitter: Duration::from_millis(1),
            }
        );
    }

    /// The fleet's timers bound round trips to a real server: a scaled copy
    /// keeps every one of them.
    #[test]
    fn the_fleet_timers_are_not_scaled() {
        let fleet = FleetPolicy::example();
        let scaled = fleet.scale(Divisor::new(1000));
        assert_eq!(scaled, fleet);
        assert!(!durations(&format!("{scaled:?}")).is_empty());
    }
}
