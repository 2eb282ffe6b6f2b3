//! Admission: the stages a request passes at once, and the wait for the rest.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::queue::when_paced;
use super::slots::{Permit, Slots, slot};
use super::{MAX_BUDGETS, Throttle};

/// The distinct budgets of one request, without an allocation: in index
/// order (semaphores) and tightest window first (windows).
#[derive(Debug, Clone, Copy)]
pub(super) struct BudgetSet {
    ids: [usize; MAX_BUDGETS],
    by_tightness: [usize; MAX_BUDGETS],
    len: usize,
}

impl BudgetSet {
    pub(super) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.ids[..self.len].iter().copied()
    }

    pub(super) fn by_tightness(&self) -> impl Iterator<Item = usize> + '_ {
        self.by_tightness[..self.len].iter().copied()
    }
}

/// The first admission stage a request could not pass at once.
#[derive(Debug, Clone, Copy)]
enum Stage {
    /// The window of the n-th budget, tightest first.
    Window(usize),
    /// The semaphore of the n-th budget, in index order.
    Budget(usize),
    Token,
    Global,
    Done,
}

/// The wait for the stages an admission could not pass at once.
type Waiting<'a> = Pin<Box<dyn Future<Output = Permit<'a>> + Send + 'a>>;

/// The future of [`Throttle::admit_all`]: it passes the free stages when
/// first polled, and waits for the others only if one is not.
#[must_use = "a future does nothing unless polled"]
pub struct Admit<'a> {
    throttle: &'a Throttle,
    state: AdmitState<'a>,
}

enum AdmitState<'a> {
    Start(BudgetSet),
    Waiting(Waiting<'a>),
    Done,
}

impl std::fmt::Debug for Admit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let waiting = matches!(self.state, AdmitState::Waiting(_));
        f.debug_struct("Admit").field("waiting", &waiting).finish()
    }
}

impl<'a> Future for Admit<'a> {
    type Output = Permit<'a>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Permit<'a>> {
        let this = self.get_mut();
        if let AdmitState::Start(set) = &this.state {
            match this.throttle.admit_now(set) {
                Ok(permit) => {
                    this.state = AdmitState::Done;
                    return Poll::Ready(permit);
                }
                Err(waiting) => this.state = AdmitState::Waiting(waiting),
            }
        }
        match &mut this.state {
            AdmitState::Waiting(waiting) => waiting.as_mut().poll(cx),
            AdmitState::Start(_) | AdmitState::Done => panic!("Admit polled after it was ready"),
        }
    }
}

impl Throttle {
    /// Waits until a request of `budget` (an index into `policy.budgets`) may
    /// be sent. See [`admit_all`](Self::admit_all).
    pub fn admit(&self, budget: usize) -> Admit<'_> {
        self.admit_all(&[budget])
    }

    /// Waits until a request drawing from every one of `budgets` may be sent
    /// (a route's own budget, and a caller's mode such as a bulk backfill).
    /// `None` entries are skipped, so `&[Some(route), mode]` needs no
    /// collecting; duplicates count once.
    ///
    /// The stages, each a FIFO queue: the budgets' rolling windows, then
    /// their semaphores (one queue per budget: a retrieval backlog waits
    /// without holding anything another route needs), then the token bucket
    /// and its rolling second (one queue for all, as every request needs a
    /// token), then the global semaphore. Budget slots come before the
    /// global one, so a saturated budget (ingest) queues without occupying
    /// global slots, and a request waiting for a window or a token holds no
    /// global slot; one waiting for a window holds no budget semaphore
    /// either. Window slots are taken when their stage passes: a request
    /// still waiting for a later stage already counts against its windows,
    /// which only makes the bound stricter.
    ///
    /// # Panics
    /// If a budget is out of range, or more than [`MAX_BUDGETS`] distinct
    /// budgets are given: the pipeline checks descriptors against the policy
    /// before it gets here.
    pub fn admit_all<B>(&self, budgets: &[B]) -> Admit<'_>
    where
        B: Into<Option<usize>> + Copy,
    {
        Admit {
            throttle: self,
            state: AdmitState::Start(self.budget_set(budgets)),
        }
    }

    /// [`admit_all`](Self::admit_all) at once: the permit when every stage
    /// is free and nobody queues for it, else the wait for the rest, holding
    /// what was free (as the future would, polled once).
    pub fn try_admit_all<B>(&self, budgets: &[B]) -> Result<Permit<'_>, Admit<'_>>
    where
        B: Into<Option<usize>> + Copy,
    {
        self.admit_now(&self.budget_set(budgets))
            .map_err(|waiting| Admit {
                throttle: self,
                state: AdmitState::Waiting(waiting),
            })
    }

    /// The free stages now, and the wait for the others. `set` is borrowed
    /// so the future's copy is read in place, not copied for the call.
    fn admit_now(&self, set: &BudgetSet) -> Result<Permit<'_>, Waiting<'_>> {
        let mut permit = Permit {
            throttle: self,
            slots: Slots::default(),
        };
        match self.pass_free_stages(*set, &mut permit.slots) {
            Stage::Done => Ok(permit),
            stage => Err(self.waiting(*set, permit, stage)),
        }
    }

    /// Waiting is the rare case: its larger state goes on the heap, so the
    /// uncontended future stays small, and out of line.
    #[cold]
    #[inline(never)]
    fn waiting<'a>(&'a self, set: BudgetSet, permit: Permit<'a>, from: Stage) -> Waiting<'a> {
        Box::pin(self.wait_stages(set, permit, from))
    }

    pub(super) fn budget_set<B: Into<Option<usize>> + Copy>(&self, budgets: &[B]) -> BudgetSet {
        let in_range = |budget: usize| {
            assert!(
                budget < self.lanes.len(),
                "budget index {budget} out of range ({} budgets)",
                self.lanes.len()
            );
        };
        // One budget, the common case (a route with no caller's mode).
        if let [one] = budgets
            && let Some(budget) = (*one).into()
        {
            in_range(budget);
            return BudgetSet {
                ids: [budget; MAX_BUDGETS],
                by_tightness: [budget; MAX_BUDGETS],
                len: 1,
            };
        }
        let mut set = BudgetSet {
            ids: [0; MAX_BUDGETS],
            by_tightness: [0; MAX_BUDGETS],
            len: 0,
        };
        for budget in budgets.iter().filter_map(|&b| b.into()) {
            in_range(budget);
            if set.iter().any(|b| b == budget) {
                continue;
            }
            assert!(
                set.len < MAX_BUDGETS,
                "more than {MAX_BUDGETS} budgets for one request"
            );
            set.ids[set.len] = budget;
            set.len += 1;
        }
        // Index order: every caller takes the semaphores in one order.
        if set.len == 2 && set.ids[1] < set.ids[0] {
            set.ids.swap(0, 1);
        }
        set.by_tightness = set.ids;
        let tightness = |b: usize| (self.policy.budgets[b].per_minute, b);
        if set.len == 2 && tightness(set.ids[1]) < tightness(set.ids[0]) {
            set.by_tightness.swap(0, 1);
        }
        set
    }

    /// Takes every stage that is free now and nobody queues for, in order;
    /// returns the first one that is not.
    /// The stages decide at one instant, read once, and the windows under
    /// one lock, taken once.
    fn pass_free_stages(&self, set: BudgetSet, slots: &mut Slots) -> Stage {
        let now = self.clock.now();
        let mut windows = self.lock_windows();
        for (i, budget) in set.by_tightness().enumerate() {
            if let Some(window) = &self.lanes[budget].window {
                let at = usize::from(window.at);
                if !(window.queue.is_empty() && windows.budgets[at].acquire(now).is_ok()) {
                    return Stage::Window(i);
                }
                slots.windows[i] = Some(window.at);
            }
        }
        for (i, budget) in set.iter().enumerate() {
            if let Some(semaphore) = &self.lanes[budget].semaphore {
                // A free permit means nobody waits: waiters are handed theirs.
                if !semaphore.try_acquire() {
                    return Stage::Budget(i);
                }
                slots.semaphores[i] = Some(slot(budget));
            }
        }
        if !(self.per_period.is_empty() && windows.second.try_token(now).is_ok()) {
            return Stage::Token;
        }
        drop(windows);
        slots.per_period = true;
        if !self.global.try_acquire() {
            return Stage::Global;
        }
        slots.global = true;
        Stage::Done
    }

    /// Queues for the stages from `from` on.
    async fn wait_stages<'a>(
        &'a self,
        set: BudgetSet,
        mut permit: Permit<'a>,
        from: Stage,
    ) -> Permit<'a> {
        let (windows_from, budgets_from, token) = match from {
            Stage::Window(i) => (i, 0, true),
            Stage::Budget(i) => (MAX_BUDGETS, i, true),
            Stage::Token => (MAX_BUDGETS, MAX_BUDGETS, true),
            Stage::Global | Stage::Done => (MAX_BUDGETS, MAX_BUDGETS, false),
        };
        self.take_windows(set, windows_from, &mut permit.slots.windows)
            .await;
        // Each permit is counted in the slots as it is taken, with no await
        // between: a cancelled wait frees exactly what it held.
        for (i, budget) in set.iter().enumerate().skip(budgets_from) {
            if let Some(semaphore) = &self.lanes[budget].semaphore {
                semaphore.acquire().await;
                permit.slots.semaphores[i] = Some(slot(budget));
            }
        }
        if token {
            self.take_token().await;
            permit.slots.per_period = true;
        }
        if !permit.slots.global {
            self.global.acquire().await;
            permit.slots.global = true;
        }
        permit
    }

    /// The budgets' rolling-window slots from the `from`-th on, each in its
    /// budget's FIFO queue. With two windows the tighter one comes first,
    /// and each slot is taken and its queue left before the next is joined:
    /// a backfill-mode search waits for the backfill window holding nothing
    /// retrieval needs, and no request ever waits in one queue while
    /// heading another.
    async fn take_windows(
        &self,
        set: BudgetSet,
        from: usize,
        taken: &mut [Option<u8>; MAX_BUDGETS],
    ) {
        for (i, budget) in set.by_tightness().enumerate().skip(from) {
            let Some(window) = &self.lanes[budget].window else {
                continue;
            };
            let at = usize::from(window.at);
            let attempt = |now| self.lock_windows().budgets[at].acquire(now);
            if !(window.queue.is_empty() && attempt(self.clock.now()).is_ok()) {
                let _turn = window.queue.turn().await;
                when_paced(self.clock, attempt).await;
            }
            taken[i] = Some(window.at);
        }
    }

    /// A bucket token and a slot of the rolling second, in the one FIFO
    /// queue every request passes.
    pub(super) async fn take_token(&self) {
        let attempt = |now| self.lock_windows().second.try_token(now);
        if self.per_period.is_empty() && attempt(self.clock.now()).is_ok() {
            return;
        }
        let _turn = self.per_period.turn().await;
        when_paced(self.clock, attempt).await;
    }
}
