//! A request that waits outside its rolling windows after admission (the
//! fleet's degraded in-flight share) and takes its slots again before it goes.

use super::admit::BudgetSet;
use super::queue::when_paced;
use super::{MAX_BUDGETS, Throttle};

/// Rolling-window slots given back by [`Throttle::leave_windows`]. Dropped
/// before [`retake`](Self::retake) took them all again (the wait was
/// cancelled), those still left are held again, so the request's permit
/// gives back what it holds.
#[derive(Debug)]
pub struct WindowsLeft<'a> {
    throttle: &'a Throttle,
    set: BudgetSet,
    /// The budgets' windows left (positions in [`Windows::budgets`]), by
    /// the set's tightness order.
    windows: [Option<u8>; MAX_BUDGETS],
    second: bool,
}

impl WindowsLeft<'_> {
    /// Waits for a slot of each window again, in its queue, then for a
    /// token and a slot of the rolling second.
    pub async fn retake(mut self) {
        let throttle = self.throttle;
        for (i, budget) in self.set.by_tightness().enumerate() {
            let (Some(at), Some(window)) = (self.windows[i], &throttle.lanes[budget].window) else {
                continue;
            };
            let attempt = |now| throttle.lock_windows().budgets[usize::from(at)].acquire(now);
            if !(window.queue.is_empty() && attempt(throttle.clock.now()).is_ok()) {
                let _turn = window.queue.turn().await;
                when_paced(throttle.clock, attempt).await;
            }
            self.windows[i] = None;
        }
        throttle.take_token().await;
        self.second = false;
    }
}

impl Drop for WindowsLeft<'_> {
    fn drop(&mut self) {
        let mut windows = self.throttle.lock_windows();
        for &at in self.windows.iter().flatten() {
            windows.budgets[usize::from(at)].hold();
        }
        if self.second {
            windows.second.window.hold();
        }
    }
}

impl Throttle {
    /// Lets a request admitted with `budgets` wait outside its rolling
    /// windows: its slots of the budgets' windows and of the rolling second
    /// are given back uncounted until [`WindowsLeft::retake`] takes them
    /// again, each in its queue. A request that waits for something else
    /// after this throttle (the fleet's degraded in-flight share) so holds
    /// no slot another could send in, and one admitted against other limits
    /// (before the switch to a degraded share) goes within the new ones.
    pub fn leave_windows(&self, budgets: &[usize]) -> WindowsLeft<'_> {
        let set = self.budget_set(budgets);
        let mut left = [None; MAX_BUDGETS];
        let mut windows = self.lock_windows();
        for (i, budget) in set.by_tightness().enumerate() {
            if let Some(window) = &self.lanes[budget].window {
                windows.budgets[usize::from(window.at)].unhold();
                left[i] = Some(window.at);
            }
        }
        windows.second.window.unhold();
        WindowsLeft {
            throttle: self,
            set,
            windows: left,
            second: true,
        }
    }
}
