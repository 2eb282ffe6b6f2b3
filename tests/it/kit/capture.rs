//! A test's own tracing subscriber in a binary whose other tests run without
//! one. `tracing` caches each callsite's interest process-wide: a callsite
//! first hit on a thread without a subscriber is cached as "never", and a
//! capture set up later on another thread would miss its events. A
//! process-wide subscriber that records nothing but answers "sometimes" for
//! every callsite keeps each callsite asking the current thread's subscriber.

use std::sync::Once;

use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::{DefaultGuard, Interest};
use tracing::{Dispatch, Event, Metadata, Subscriber};

/// Records nothing; asks again at every event and span.
struct AskEveryTime;

impl Subscriber for AskEveryTime {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        false
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// `subscriber` as this thread's default until the guard drops, with every
/// callsite's interest asked again.
pub fn set_default(subscriber: impl Into<Dispatch>) -> DefaultGuard {
    static GLOBAL: Once = Once::new();
    GLOBAL.call_once(|| {
        tracing::dispatcher::set_global_default(Dispatch::new(AskEveryTime))
            .expect("no other global subscriber in the it binary");
    });
    let guard = tracing::dispatcher::set_default(&subscriber.into());
    tracing::callsite::rebuild_interest_cache();
    guard
}
