//! Typed positions in a policy's tables. A route names its timeout class,
//! retry class, budget and stream (and its own place among the routes), a
//! taxonomy row its retry class, escalation and detail set, each by the index of a table of one kind: a retry index
//! can never be read as a budget. The generator emits them as named
//! constants (`policy::timeout::LLM`); a client checks once, when it is
//! built, that every index of its policy's routes and rows is in range
//! ([`crate::Policy::check_indices`]), so no call checks them again.

use std::ops::Index;

use crate::endpoint::Endpoint;
use crate::policy::{BudgetPolicy, DetailSet, RetryClass, StreamPolicy, TaxonomyRow, TimeoutClass};

macro_rules! index {
    ($(#[$doc:meta])* $name:ident => $table:ty) => {
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
        }

        impl Index<$name> for [$table] {
            type Output = $table;

            fn index(&self, index: $name) -> &$table {
                &self[index.get()]
            }
        }
    };
}

index!(
    /// A timeout class: an index into [`crate::Policy::timeouts`].
    TimeoutIx => TimeoutClass
);
index!(
    /// A retry class: an index into [`crate::Policy::retries`].
    RetryIx => RetryClass
);
index!(
    /// A throttle budget: an index into the policy's `throttle.budgets`.
    BudgetIx => BudgetPolicy
);
index!(
    /// A stream contract: an index into [`crate::Policy::streams`].
    StreamIx => StreamPolicy
);
index!(
    /// A route: its position in [`crate::Policy::routes`], carried by its
    /// own descriptor ([`crate::Endpoint::route`]) so that telling a route
    /// of the policy from a hand-made descriptor compares one entry.
    RouteIx => &'static Endpoint
);
index!(
    /// A taxonomy row: an index into [`crate::Policy::taxonomy`].
    RowIx => TaxonomyRow
);
index!(
    /// A named set of detail substrings: an index into [`crate::Policy::detail_sets`].
    DetailIx => DetailSet
);

#[cfg(feature = "bake")]
mod bake {
    use proc_macro2::TokenStream;
    use quote::quote;

    use super::*;
    use crate::bake::{Bake, Names, int};

    impl Bake for TimeoutIx {
        fn bake(&self, names: &dyn Names) -> TokenStream {
            names.timeout(*self)
        }
    }

    impl Bake for RetryIx {
        fn bake(&self, names: &dyn Names) -> TokenStream {
            names.retry(*self)
        }
    }

    impl Bake for BudgetIx {
        fn bake(&self, names: &dyn Names) -> TokenStream {
            names.budget(*self)
        }
    }

    impl Bake for StreamIx {
        fn bake(&self, names: &dyn Names) -> TokenStream {
            names.stream(*self)
        }
    }

    macro_rules! positional {
        ($($ty:ident),*) => {$(
            /// By position: a row, detail set or route has no named constant.
            impl Bake for $ty {
                fn bake(&self, _: &dyn Names) -> TokenStream {
                    let i = int(self.get() as u64);
                    quote!($ty::new(#i))
                }
            }
        )*};
    }

    positional!(RowIx, DetailIx, RouteIx);
}
