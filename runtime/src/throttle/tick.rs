//! The throttle's time: nanoseconds since it was built, on tokio time.

use std::time::Duration;

use tokio::time::Instant;

/// Nanoseconds since a throttle was built, on tokio time (so paused-time
/// tests drive every stage). Each stage keeps its instants as these plain
/// integers: a check is a comparison and a release an addition, where an
/// `Instant` costs a carry-checked seconds-and-nanoseconds pair per step.
pub(super) type Tick = u64;

pub(super) fn ticks(d: Duration) -> Tick {
    d.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(d.subsec_nanos()))
}

/// The throttle's time: [`Tick`]s from the instant it was built.
#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    pub(super) origin: Instant,
}

impl Clock {
    pub(super) fn now(self) -> Tick {
        self.tick_of(Instant::now())
    }

    pub(super) fn tick_of(self, at: Instant) -> Tick {
        ticks(at.saturating_duration_since(self.origin))
    }

    /// The instant of `tick`, if it is one.
    pub(super) fn instant_of(self, tick: Tick) -> Option<Instant> {
        self.origin.checked_add(Duration::from_nanos(tick))
    }
}
