//! Typed positions in a policy's tables. A route names its timeout class,
//! retry class, budget and stream (and its own place among the routes), a
//! taxonomy row its retry class, escalation and detail set, each by the index of a table of one kind: a retry index
//! can never be read as a budget. The generator emits them as named
//! constants (`policy::timeout::LLM`); a client checks once, when it is
//! built, that every index of its policy's routes and rows is in range
//! ([`crate::Policy::check_indices`]), so no call checks them again.
//!
//! This module names no other: each table's file says which index reads it
//! ([`indexes`]), so the vocabulary's files import each other one way only.

macro_rules! index {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(u16);

        impl $name {
            /// The entry at `index` of its table.
            pub const fn new(index: u16) -> Self {
                $name(index)
            }

            /// The position in its table.
            pub const fn get(self) -> usize {
                self.0 as usize
            }

            /// The entry at a table position counted as `usize`; one past
            /// `u16::MAX` (no checked policy has one) names no entry at all.
            pub fn of_position(position: usize) -> Self {
                $name(u16::try_from(position).unwrap_or(u16::MAX))
            }
        }
    };
}

/// `table[index]` for the table an index reads, written beside the table's type.
macro_rules! indexes {
    ($($name:ident => $table:ty),* $(,)?) => {$(
        impl ::std::ops::Index<$crate::index::$name> for [$table] {
            type Output = $table;

            fn index(&self, index: $crate::index::$name) -> &$table {
                &self[index.get()]
            }
        }
    )*};
}

pub(crate) use indexes;

index!(
    /// A timeout class: an index into [`crate::Policy::timeouts`].
    TimeoutIx
);
index!(
    /// A retry class: an index into [`crate::Policy::retries`].
    RetryIx
);
index!(
    /// A throttle budget: an index into the policy's `throttle.budgets`.
    BudgetIx
);
index!(
    /// A stream contract: an index into [`crate::Policy::streams`].
    StreamIx
);
index!(
    /// A route: its position in [`crate::Policy::routes`], carried by its
    /// own descriptor ([`crate::Endpoint::route`]) so that telling a route
    /// of the policy from a hand-made descriptor compares one entry.
    RouteIx
);
index!(
    /// A taxonomy row: an index into [`crate::Policy::taxonomy`].
    RowIx
);
index!(
    /// A named set of detail substrings: an index into [`crate::Policy::detail_sets`].
    DetailIx
);
