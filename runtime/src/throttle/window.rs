//! The rolling windows: at most `limit` requests in any rolling `window`.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::tick::{Clock, Tick, ticks};

/// At most `limit` requests in any rolling `window`, as the platform counts
/// them: a slot is taken at admission and held until one `window` after the
/// request *ended* ([`release`](Self::release)). A request reaches the
/// platform somewhere between the two, so any window the platform measures
/// holds at most `limit` arrivals, however the network delays them; counting
/// from admission alone lets a delayed burst and a prompt refill meet in one
/// platform window.
///
/// A sliding log, not a GCRA: a GCRA quota of 100/min still lets a full burst
/// through on top of the steady rate, so "≤ 100 per rolling minute" would not
/// hold against a gateway that counts per rolling minute.
///
/// Expiries are rounded up to the millisecond, the resolution of tokio's
/// timers (a slot counts a little longer, never shorter), so requests that
/// end in the same millisecond share one log entry: the log holds at most
/// `limit` entries and at most one per millisecond of `window`, however
/// large an override makes the limit.
#[derive(Debug)]
pub(super) struct RollingWindow {
    limit: usize,
    window: Tick,
    /// Until when released requests count (their end + `window`) and how
    /// many, oldest first: expiry is a comparison, not a subtraction per
    /// check.
    log: VecDeque<Expiry>,
    /// Released requests in `log`.
    logged: usize,
    /// Admitted requests that have not ended yet.
    open: usize,
    /// The last instant a release joins the last entry of `log` at (its
    /// `until` less `window`), when there is one: such a release
    /// ([`release_at`](Self::release_at)) compares instants and needs no tick.
    joins_until: Option<Instant>,
}

/// Requests that stop counting against a window at `until`.
#[derive(Debug, Clone, Copy)]
struct Expiry {
    until: Tick,
    count: usize,
}

/// The grid expiries are rounded up to: a millisecond.
const EXPIRY_GRID: Tick = 1_000_000;

impl RollingWindow {
    /// A zero `limit` would block forever; it is treated as 1.
    pub(super) fn new(limit: u32, window: Duration) -> Self {
        let limit = limit.max(1) as usize;
        Self {
            limit,
            window: ticks(window),
            // A huge limit (an override that means "unpaced") must not reserve it all.
            log: VecDeque::with_capacity(limit.min(1024)),
            logged: 0,
            open: 0,
            joins_until: None,
        }
    }

    /// An instantaneous request at `now` (admitted and ended at once), or how
    /// long until the next slot frees.
    #[cfg(test)]
    fn try_acquire(&mut self, now: Tick) -> Result<(), Duration> {
        self.acquire(now)?;
        self.release(now);
        Ok(())
    }

    /// Admits a request at `now`; [`release`](Self::release) it when it ends.
    pub(super) fn acquire(&mut self, now: Tick) -> Result<(), Duration> {
        self.check(now)?;
        self.hold();
        Ok(())
    }

    /// Takes a slot a [`check`](Self::check) just found free.
    pub(super) fn hold(&mut self) {
        self.open += 1;
    }

    /// Gives back the slot of an admitted request without counting it: it
    /// waits elsewhere before it is sent, and [`hold`](Self::hold)s again.
    pub(super) fn unhold(&mut self) {
        self.open = self.open.saturating_sub(1);
    }

    /// The request admitted earlier ended at `now`.
    fn release(&mut self, now: Tick) {
        self.open = self.open.saturating_sub(1);
        // A window too long to add counts for as good as ever.
        let until = now.saturating_add(self.window);
        self.logged += 1;
        match self.log.back_mut() {
            // Within the millisecond the last entry was rounded up to.
            Some(last) if last.until >= until => last.count += 1,
            _ => self.log.push_back(Expiry {
                until: until.div_ceil(EXPIRY_GRID).saturating_mul(EXPIRY_GRID),
                count: 1,
            }),
        }
    }

    /// [`release`](Self::release) at `now`, an instant of `clock`: a release
    /// that joins the last entry (most do: they share its millisecond) only
    /// compares `now`, and `tick`, `now` in ticks, is computed at most once
    /// for all the windows a request ends in.
    #[inline]
    pub(super) fn release_at(&mut self, now: Instant, tick: &mut Option<Tick>, clock: Clock) {
        if self.joins_until.is_some_and(|last| now <= last)
            && let Some(last) = self.log.back_mut()
        {
            last.count += 1;
            self.open = self.open.saturating_sub(1);
            self.logged += 1;
            return;
        }
        self.release_in_new_entry(now, tick, clock);
    }

    /// [`release_at`](Self::release_at) that needs the tick: out of line,
    /// so the common case stays small enough to inline.
    #[cold]
    #[inline(never)]
    fn release_in_new_entry(&mut self, now: Instant, tick: &mut Option<Tick>, clock: Clock) {
        self.release(*tick.get_or_insert_with(|| clock.tick_of(now)));
        self.joins_until = (self.log.back())
            .and_then(|last| clock.instant_of(last.until.checked_sub(self.window)?));
    }

    /// Whether a slot is free at `now`, without taking it. When every slot is
    /// held by an open request, none can free before a full `window`.
    pub(super) fn check(&mut self, now: Tick) -> Result<(), Duration> {
        while let Some(&Expiry { until, count }) = self.log.front() {
            if until > now {
                break;
            }
            self.log.pop_front();
            self.logged -= count;
            if self.log.is_empty() {
                self.joins_until = None;
            }
        }
        if self.used() < self.limit {
            return Ok(());
        }
        Err(Duration::from_nanos(
            self.log
                .front()
                .map_or(self.window, |first| first.until - now),
        ))
    }

    /// Slots held at the last check: open requests and recent ones.
    pub(super) fn used(&self) -> usize {
        self.open + self.logged
    }

    /// Counts at least `share`'s sends after every instant, its own slots
    /// included: where its own slots fall short, slots sent at `share`'s
    /// instants are added (each counted until a window after it). Rare (a
    /// replica going local counts its share of what the fleet sent), so the
    /// log is made again in order.
    pub(super) fn seed(&mut self, share: &[Tick]) {
        let mut share = share.to_vec();
        share.sort_unstable_by(|a, b| b.cmp(a));
        // Its own slots, newest first, by the instant they count from (an
        // open request's from now on: newer than any of `share`).
        let mut own = (self.log.iter().rev())
            .map(|e| (e.until.saturating_sub(self.window), e.count))
            .peekable();
        let mut own_count = self.open;
        let mut added: Vec<Tick> = Vec::new();
        let mut i = 0;
        while let Some(&at) = share.get(i) {
            while share.get(i) == Some(&at) {
                i += 1;
            }
            while let Some((_, n)) = own.next_if(|&(from, _)| from >= at) {
                own_count += n;
            }
            let short = i.saturating_sub(own_count);
            added.resize(short.max(added.len()), at);
        }
        if added.is_empty() {
            return;
        }
        let mut log: Vec<Expiry> = self.log.drain(..).collect();
        log.extend(added.iter().map(|&at| {
            Expiry {
                until: (at.saturating_add(self.window))
                    .div_ceil(EXPIRY_GRID)
                    .saturating_mul(EXPIRY_GRID),
                count: 1,
            }
        }));
        log.sort_by_key(|e| e.until);
        for entry in log {
            match self.log.back_mut() {
                Some(last) if last.until == entry.until => last.count += entry.count,
                _ => self.log.push_back(entry),
            }
        }
        self.logged += added.len();
        self.joins_until = None;
    }

    /// Slots of ended requests still counted after `tick`.
    #[cfg(test)]
    pub(super) fn logged_after(&self, tick: Tick) -> usize {
        (self.log.iter())
            .filter(|e| e.until > tick)
            .map(|e| e.count)
            .sum()
    }

    /// A new limit (a replica's share while the fleet is degraded); slots
    /// already held count against it.
    pub(super) fn set_limit(&mut self, limit: u32) {
        self.limit = limit.max(1) as usize;
    }
}

/// What the throttle's tests read of a window.
#[cfg(test)]
impl RollingWindow {
    /// Admitted requests that have not ended yet.
    pub(super) fn open(&self) -> usize {
        self.open
    }

    pub(super) fn limit(&self) -> usize {
        self.limit
    }

    /// Entries the log holds before it grows.
    pub(super) fn log_capacity(&self) -> usize {
        self.log.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn an_open_request_holds_its_slot_until_a_window_after_it_ends() {
        let s = Duration::from_secs;
        let t0: Tick = 0;
        let mut window = RollingWindow::new(2, MINUTE);
        window.acquire(t0).unwrap();
        window.acquire(t0).unwrap();
        // Both still open: no slot can free before a full window.
        assert_eq!(window.check(ticks(s(90))), Err(MINUTE));
        window.release(ticks(s(100)));
        assert_eq!(window.check(ticks(s(130))), Err(s(30)));
        assert_eq!(window.acquire(ticks(s(160))), Ok(()));
        assert_eq!(window.used(), 2);
    }

    #[test]
    fn rolling_window_admits_exactly_limit() {
        let t0: Tick = 0;
        let mut window = RollingWindow::new(3, MINUTE);
        for _ in 0..3 {
            assert_eq!(window.try_acquire(t0), Ok(()));
        }
        assert_eq!(window.try_acquire(t0), Err(MINUTE));
        assert_eq!(window.used(), 3);
    }

    #[test]
    fn rolling_window_reports_exact_wait() {
        let t0: Tick = 0;
        let s = Duration::from_secs;
        let mut window = RollingWindow::new(3, MINUTE);
        for at in [0, 10, 20] {
            assert_eq!(window.try_acquire(t0 + ticks(s(at))), Ok(()));
        }
        assert_eq!(window.try_acquire(ticks(s(30))), Err(s(30)));
        let almost = ticks(MINUTE - Duration::from_millis(1));
        assert_eq!(window.try_acquire(almost), Err(Duration::from_millis(1)));
        assert_eq!(window.check(ticks(s(59))), Err(s(1)));
    }

    #[test]
    fn rolling_window_frees_slots_as_time_slides() {
        let t0: Tick = 0;
        let s = Duration::from_secs;
        let mut window = RollingWindow::new(3, MINUTE);
        for at in [0, 10, 20] {
            window.try_acquire(t0 + ticks(s(at))).unwrap();
        }
        // The first slot frees at exactly t0 + 60 s (half-open window).
        assert_eq!(window.try_acquire(ticks(s(60))), Ok(()));
        assert_eq!(window.try_acquire(ticks(s(60))), Err(s(10)));
        assert_eq!(window.try_acquire(ticks(s(70))), Ok(()));
        assert_eq!(window.try_acquire(ticks(s(80))), Ok(()));
        assert_eq!(window.try_acquire(ticks(s(80))), Err(s(40)));
        // A long pause frees everything.
        for _ in 0..3 {
            assert_eq!(window.try_acquire(ticks(s(500))), Ok(()));
        }
        assert_eq!(window.try_acquire(ticks(s(500))), Err(MINUTE));
    }

    #[test]
    fn requests_ending_in_one_millisecond_share_a_log_entry() {
        let mut window = RollingWindow::new(u32::MAX, MINUTE);
        let us = |n: u64| ticks(Duration::from_micros(n));
        // 10 000 requests over 5 ms: five entries, every request still counted.
        for i in 0..10_000 {
            window.try_acquire(us(1 + i / 2)).unwrap();
        }
        assert_eq!(window.used(), 10_000);
        assert_eq!(window.log.len(), 5);
        // The first millisecond's 2 000 expire together, a minute after it ends.
        assert_eq!(window.check(ticks(MINUTE) + us(999)), Ok(()));
        assert_eq!(window.used(), 10_000);
        assert_eq!(window.check(ticks(MINUTE) + us(1000)), Ok(()));
        assert_eq!(window.used(), 8_000);
    }

    #[test]
    fn a_release_by_instant_logs_what_one_by_tick_does() {
        let clock = Clock {
            origin: Instant::now(),
        };
        let mut by_tick = RollingWindow::new(u32::MAX, Duration::from_millis(1500));
        let mut by_instant = RollingWindow::new(u32::MAX, Duration::from_millis(1500));
        let ns = |n: u64| Duration::from_nanos(n);
        // Around millisecond edges: before, on and after them, and long gaps
        // that expire the whole log between two releases.
        let (mut at, mut longest) = (0, 0);
        for step in [
            1,
            999_998,
            1,
            1,
            1,
            500_000,
            499_999,
            1,
            3_000_000_001,
            7,
            1_000_000,
        ] {
            at += step;
            for window in [&mut by_tick, &mut by_instant] {
                window.acquire(at).unwrap();
            }
            by_tick.release(at);
            by_instant.release_at(clock.origin + ns(at), &mut None, clock);
            let log =
                |w: &RollingWindow| w.log.iter().map(|e| (e.until, e.count)).collect::<Vec<_>>();
            assert_eq!(log(&by_instant), log(&by_tick), "at {at} ns");
            assert_eq!(by_instant.used(), by_tick.used());
            longest = longest.max(by_tick.log.len());
        }
        assert!(longest >= 3, "the steps never left a millisecond");
    }

    #[test]
    fn an_expiry_is_rounded_up_to_the_millisecond_never_down() {
        let mut window = RollingWindow::new(1, MINUTE);
        let half = ticks(Duration::from_micros(500));
        window.try_acquire(half).unwrap();
        // Released at 0.5 ms, it counts until 60.001 s: half a millisecond longer.
        let at = ticks(MINUTE) + half;
        assert_eq!(window.check(at), Err(Duration::from_micros(500)));
        assert_eq!(window.check(at + half), Ok(()));
    }

    #[test]
    fn zero_limit_is_treated_as_one() {
        let t0: Tick = 0;
        let mut window = RollingWindow::new(0, MINUTE);
        assert_eq!(window.try_acquire(t0), Ok(()));
        assert_eq!(window.try_acquire(t0), Err(MINUTE));
        assert_eq!(window.limit, 1);
    }
}
