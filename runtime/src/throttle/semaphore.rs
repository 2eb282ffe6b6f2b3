//! A fair (FIFO) semaphore whose uncontended acquire and release are one
//! atomic operation each: the waiters' lock is taken only while someone
//! waits. tokio's semaphore is fair too, but every release takes its
//! waiters' lock, waiters or not; admission releases up to three per request.
//!
//! Fairness comes from one invariant: while anyone is queued no permit is
//! free, because a released permit goes straight to the head of the queue.
//! A newcomer's fast path (take a free permit) can therefore never overtake
//! a waiter.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;

/// The state word's low bit: the queue holds at least one waiter (and then
/// no permit is free). Changed only under the queue's lock.
const QUEUED: usize = 1;
/// One permit in the state word (the permits count above the flag).
const ONE: usize = 2;

/// Permits counted in one atomic word, handed out first come, first served.
///
/// Permits carry no guard: the caller counts what it holds and gives each
/// back with [`release`](Self::release) (the throttle keeps them as flags in
/// its slots).
///
/// Each on cache lines of its own: admission on several threads writes
/// every semaphore it passes, and a neighbour's line (another semaphore, a
/// queue that is only read) would move between the cores with it.
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct Semaphore {
    /// Free permits × [`ONE`], plus [`QUEUED`].
    state: AtomicUsize,
    /// Who waits, oldest first.
    queue: Mutex<VecDeque<Arc<Waiter>>>,
}

/// One queued acquire: set `granted` and woken when a permit is handed to it.
#[derive(Debug, Default)]
struct Waiter {
    /// Set only under the queue's lock.
    granted: AtomicBool,
    waker: AtomicWaker,
}

impl Semaphore {
    pub(crate) fn new(permits: usize) -> Self {
        assert!(permits <= usize::MAX / ONE, "too many permits");
        Self {
            state: AtomicUsize::new(permits * ONE),
            queue: Mutex::new(VecDeque::new()),
        }
    }

    /// Free permits (none while anyone waits).
    pub(crate) fn available(&self) -> usize {
        self.state.load(Ordering::Acquire) / ONE
    }

    /// Takes a free permit, if any; a free permit means nobody waits.
    pub(crate) fn try_acquire(&self) -> bool {
        let mut state = self.state.load(Ordering::Relaxed);
        while state >= ONE {
            match self.state.compare_exchange_weak(
                state,
                state - ONE,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => state = now,
            }
        }
        false
    }

    /// Waits for a permit, behind everyone who asked before. Dropped before it
    /// is ready, it leaves the queue, and a permit already handed to it goes
    /// on to the next in line.
    pub(crate) fn acquire(&self) -> Acquire<'_> {
        Acquire {
            semaphore: self,
            waiter: None,
            done: false,
        }
    }

    /// Gives a permit back: to the head of the queue if anyone waits.
    pub(crate) fn release(&self) {
        let mut state = self.state.load(Ordering::Relaxed);
        while state & QUEUED == 0 {
            match self.state.compare_exchange_weak(
                state,
                state + ONE,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => state = now,
            }
        }
        let woken = self.hand_over(&mut self.lock());
        if let Some(waiter) = woken {
            waiter.waker.wake();
        }
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Arc<Waiter>>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A permit being released goes to the head of `queue` (returned, to be
    /// woken once the lock is let go), or back to the free ones.
    fn hand_over(&self, queue: &mut VecDeque<Arc<Waiter>>) -> Option<Arc<Waiter>> {
        match queue.pop_front() {
            Some(head) => {
                self.unflag_if_empty(queue);
                head.granted.store(true, Ordering::Release);
                Some(head)
            }
            None => {
                self.state.fetch_add(ONE, Ordering::Release);
                None
            }
        }
    }

    /// Under the lock: once the last waiter has left `queue`, releases take
    /// the fast path again.
    fn unflag_if_empty(&self, queue: &VecDeque<Arc<Waiter>>) {
        if queue.is_empty() {
            self.state.fetch_and(!QUEUED, Ordering::Release);
        }
    }

    /// Under the lock: a permit freed since the fast path failed, or a place
    /// at the end of `queue`. The flag is set in the same exchange that saw no
    /// free permit, so a release racing with it either came first (and is
    /// taken here) or sees the flag and hands its permit over.
    fn take_or_queue(&self, queue: &mut VecDeque<Arc<Waiter>>, waiter: &Arc<Waiter>) -> bool {
        let mut state = self.state.load(Ordering::Relaxed);
        loop {
            let (next, taken) = if state >= ONE {
                (state - ONE, true)
            } else {
                (state | QUEUED, false)
            };
            match self
                .state
                .compare_exchange_weak(state, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) if taken => return true,
                Ok(_) => break,
                Err(now) => state = now,
            }
        }
        queue.push_back(Arc::clone(waiter));
        false
    }
}

/// The future of [`Semaphore::acquire`]; ready with the permit taken.
#[derive(Debug)]
#[must_use = "a future does nothing unless polled"]
pub(crate) struct Acquire<'a> {
    semaphore: &'a Semaphore,
    /// Present once queued.
    waiter: Option<Arc<Waiter>>,
    /// The permit is the caller's now.
    done: bool,
}

impl Future for Acquire<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        assert!(!this.done, "Acquire polled after it was ready");
        let ready = match &this.waiter {
            Some(waiter) => {
                waiter.waker.register(cx.waker());
                waiter.granted.load(Ordering::Acquire)
            }
            None if this.semaphore.try_acquire() => true,
            None => {
                let waiter = Arc::new(Waiter::default());
                waiter.waker.register(cx.waker());
                let mut queue = this.semaphore.lock();
                let taken = this.semaphore.take_or_queue(&mut queue, &waiter);
                drop(queue);
                if !taken {
                    this.waiter = Some(waiter);
                }
                taken
            }
        };
        this.done = ready;
        if ready {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Drop for Acquire<'_> {
    fn drop(&mut self) {
        let Some(waiter) = self.waiter.take() else {
            return;
        };
        if self.done {
            return;
        }
        let semaphore = self.semaphore;
        let mut queue = semaphore.lock();
        // `granted` changes only under this lock: it cannot change now.
        let woken = if waiter.granted.load(Ordering::Acquire) {
            semaphore.hand_over(&mut queue)
        } else {
            if let Some(at) = queue.iter().position(|w| Arc::ptr_eq(w, &waiter)) {
                queue.remove(at);
            }
            semaphore.unflag_if_empty(&queue);
            None
        };
        drop(queue);
        if let Some(next) = woken {
            next.waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;
    use futures_util::task::noop_waker_ref;
    use std::sync::Mutex as StdMutex;

    fn poll(acquire: &mut Acquire<'_>) -> Poll<()> {
        Pin::new(acquire).poll(&mut Context::from_waker(noop_waker_ref()))
    }

    /// Takes the only permit of `semaphore` and queues two waiters behind it.
    fn two_queued(semaphore: &Semaphore) -> (Acquire<'_>, Acquire<'_>) {
        assert!(semaphore.try_acquire());
        let mut first = semaphore.acquire();
        let mut second = semaphore.acquire();
        assert!(poll(&mut first).is_pending());
        assert!(poll(&mut second).is_pending());
        (first, second)
    }

    #[test]
    fn permits_are_taken_and_given_back_without_waiting() {
        let semaphore = Semaphore::new(2);
        assert!(semaphore.try_acquire());
        assert!(semaphore.acquire().now_or_never().is_some());
        assert_eq!(semaphore.available(), 0);
        assert!(!semaphore.try_acquire());
        semaphore.release();
        assert_eq!(semaphore.available(), 1);
        semaphore.release();
        assert_eq!(semaphore.available(), 2);
    }

    #[test]
    fn a_released_permit_goes_to_the_oldest_waiter_not_a_newcomer() {
        let semaphore = Semaphore::new(1);
        let (mut first, mut second) = two_queued(&semaphore);
        semaphore.release();
        // Handed over, not freed: a newcomer finds nothing.
        assert_eq!(semaphore.available(), 0);
        assert!(!semaphore.try_acquire());
        assert!(poll(&mut second).is_pending());
        assert!(poll(&mut first).is_ready());
        semaphore.release();
        assert!(poll(&mut second).is_ready());
        semaphore.release();
        assert_eq!(semaphore.available(), 1);
        drop((first, second));
        assert_eq!(semaphore.available(), 1);
    }

    #[test]
    fn a_cancelled_waiter_leaves_the_queue_and_loses_no_permit() {
        let semaphore = Semaphore::new(1);
        let (first, mut second) = two_queued(&semaphore);
        drop(first);
        semaphore.release();
        assert!(poll(&mut second).is_ready());
        drop(second);
        semaphore.release();
        assert_eq!(semaphore.available(), 1);
        assert!(semaphore.lock().is_empty());
    }

    #[test]
    fn the_last_waiter_cancelled_frees_the_fast_path() {
        let semaphore = Semaphore::new(1);
        assert!(semaphore.try_acquire());
        let mut only = semaphore.acquire();
        assert!(poll(&mut only).is_pending());
        drop(only);
        // Nobody queues any more: the release frees the permit.
        semaphore.release();
        assert!(semaphore.try_acquire());
    }

    #[test]
    fn a_permit_handed_to_a_cancelled_waiter_goes_on_to_the_next() {
        let semaphore = Semaphore::new(1);
        let (first, mut second) = two_queued(&semaphore);
        semaphore.release();
        // `first` was granted the permit but gives up before it sees it.
        drop(first);
        assert!(poll(&mut second).is_ready());
        semaphore.release();
        assert_eq!(semaphore.available(), 1);
        // And with nobody left to take it, it is free again.
        assert!(semaphore.try_acquire());
        let mut third = semaphore.acquire();
        assert!(poll(&mut third).is_pending());
        semaphore.release();
        drop(third);
        assert_eq!(semaphore.available(), 1);
        drop(second);
    }

    /// Many tasks on two workers, each holding the permit for a few yields:
    /// never more holders than permits, none lost, and the order they queued
    /// in is the order they got their permits.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn permits_are_never_exceeded_or_lost_under_contention() {
        let semaphore = Arc::new(Semaphore::new(3));
        let holders = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let (semaphore, holders) = (Arc::clone(&semaphore), Arc::clone(&holders));
                tokio::spawn(async move {
                    for _ in 0..200 {
                        semaphore.acquire().await;
                        assert!(holders.fetch_add(1, Ordering::SeqCst) < 3);
                        tokio::task::yield_now().await;
                        holders.fetch_sub(1, Ordering::SeqCst);
                        semaphore.release();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(semaphore.available(), 3);
        assert!(semaphore.lock().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_are_served_in_the_order_they_queued() {
        let semaphore = Arc::new(Semaphore::new(1));
        assert!(semaphore.try_acquire());
        let order = Arc::new(StdMutex::new(Vec::new()));
        let tasks: Vec<_> = (0..20)
            .map(|me| {
                let (semaphore, order) = (Arc::clone(&semaphore), Arc::clone(&order));
                tokio::spawn(async move {
                    semaphore.acquire().await;
                    order.lock().unwrap().push(me);
                    semaphore.release();
                })
            })
            .collect();
        // Every task queues, in spawn order, before the first permit is freed.
        while semaphore.lock().len() < 20 {
            tokio::task::yield_now().await;
        }
        semaphore.release();
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), (0..20).collect::<Vec<_>>());
    }
}
