//! The throttle as the fleet's [`LocalWindows`]: the few operations a fleet
//! backend runs on a replica's own windows while its store is away.

use sdk_policy::policy::BudgetIx;
use tokio::time::Instant;

use super::{Throttle, WindowsLeft};
use crate::fleet::{FleetFuture, HeldWindows, LocalWindows, Positions};

impl LocalWindows for Throttle {
    fn set_window_limits(&self, limit_of: &dyn Fn(Option<BudgetIx>, u32) -> u32) {
        Throttle::set_window_limits(self, &|b, limit| {
            limit_of(b.map(BudgetIx::of_position), limit)
        });
    }

    fn set_rate(&self, per_second: u32, burst: u32) {
        Throttle::set_rate(self, per_second, burst);
    }

    fn reset_rate(&self) {
        Throttle::reset_rate(self);
    }

    fn burst(&self) -> u32 {
        Throttle::burst(self)
    }

    fn seed_windows(&self, second: &[Instant], budgets: &[(BudgetIx, Vec<Instant>)]) {
        Throttle::seed_windows(self, second, budgets);
    }

    fn leave_windows<'a>(&'a self, budgets: &[BudgetIx]) -> Box<dyn HeldWindows + 'a> {
        let positions = Positions::of(budgets);
        Box::new(Throttle::leave_windows(self, positions.as_slice()))
    }
}

impl HeldWindows for WindowsLeft<'_> {
    fn retake<'a>(self: Box<Self>) -> FleetFuture<'a, ()>
    where
        Self: 'a,
    {
        Box::pin(WindowsLeft::retake(*self))
    }
}
