//! The token bucket, and the rolling second it decides with.

use std::time::Duration;

use super::tick::{Tick, ticks};
use super::window::RollingWindow;

/// The token bucket as a GCRA, the algorithm governor implements: one
/// token every `interval`, up to `burst` at once. It lives under the rolling
/// second's lock, so both decide at the same instant and neither is taken
/// unless both are free; a bucket of its own (an atomic, a clock of its own)
/// would only repeat what that lock already gives.
#[derive(Debug)]
pub(super) struct TokenBucket {
    interval: Tick,
    /// How far ahead of now the next token may be promised: `burst - 1`
    /// intervals.
    tolerance: Tick,
    /// The theoretical arrival time of the next token.
    tat: Tick,
}

impl TokenBucket {
    pub(super) fn new(period: Duration, burst: u32) -> Self {
        let interval = ticks(period).max(1);
        Self {
            interval,
            tolerance: interval.saturating_mul(u64::from(burst.max(1) - 1)),
            tat: 0,
        }
    }

    /// One token every `period` from now on, up to `burst` at once; the
    /// tokens promised so far stay promised.
    pub(super) fn set_rate(&mut self, period: Duration, burst: u32) {
        *self = Self {
            tat: self.tat,
            ..Self::new(period, burst)
        };
    }

    /// Whether a token is free at `now`, or how long until one is.
    fn check(&self, now: Tick) -> Result<(), Duration> {
        let earliest = self.tat.saturating_sub(self.tolerance);
        if now < earliest {
            return Err(Duration::from_nanos(earliest - now));
        }
        Ok(())
    }

    /// Takes the token a [`check`](Self::check) at `now` just found free.
    fn take(&mut self, now: Tick) {
        self.tat = self.tat.max(now).saturating_add(self.interval);
    }
}

/// The rolling second and the token bucket every request passes.
#[derive(Debug)]
pub(super) struct Second {
    pub(super) window: RollingWindow,
    pub(super) bucket: TokenBucket,
}

impl Second {
    /// A token and a slot of the rolling second, both at `now`: neither is
    /// taken unless both are free.
    #[inline]
    pub(super) fn try_token(&mut self, now: Tick) -> Result<(), Duration> {
        self.window.check(now)?;
        self.bucket.check(now)?;
        self.bucket.take(now);
        self.window.hold();
        Ok(())
    }
}
