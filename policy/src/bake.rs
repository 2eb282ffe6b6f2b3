//! Values of the vocabulary turned back into the Rust that rebuilds them, in
//! the spirit of `databake`: the generator builds a policy's values and each
//! type writes its own tokens, next to its definition. Behind the `bake`
//! feature, so the runtime does not build `quote`.
//!
//! A baked value names what the generated crate defines elsewhere (a route's
//! static descriptor, a named index, a table of its own) through [`Names`].

use std::time::Duration;

pub use proc_macro2::TokenStream;
use proc_macro2::{Ident, Literal, Span};
use quote::{ToTokens, quote};

use crate::index::{BudgetIx, DetailIx, RetryIx, RouteIx, RowIx, StreamIx, TimeoutIx};

/// How the generated crate names what a baked value points to.
pub trait Names {
    /// A route's static descriptor, by its place in the policy's routes:
    /// `&crate::workspaces::HEALTH`.
    fn endpoint(&self, route: RouteIx) -> TokenStream;
    /// A timeout class by its named index: `timeout::DEFAULT`.
    fn timeout(&self, index: TimeoutIx) -> TokenStream;
    /// A retry class by its named index: `retry::R1`.
    fn retry(&self, index: RetryIx) -> TokenStream;
    /// A budget by its named index: `budget::GLOBAL`.
    fn budget(&self, index: BudgetIx) -> TokenStream;
    /// A stream contract by its named index: `stream::CHAT`.
    fn stream(&self, index: StreamIx) -> TokenStream;
    /// The static a part of the policy is kept in (`&TIMEOUTS`), or `None`
    /// to write the part out where it is used.
    fn part(&self, part: Part) -> Option<TokenStream>;
    /// The generated writer of the log lines: `&crate::log::LINES`.
    fn log_lines(&self) -> TokenStream;
}

/// The parts of a policy a generated crate may keep in statics of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Timeouts,
    Retries,
    Budgets,
    Routes,
    /// The breaker's probe route.
    Probe,
    /// The breaker's canary route.
    Canary,
}

/// A value that can be written as the Rust expression that rebuilds it.
pub trait Bake {
    fn bake(&self, names: &dyn Names) -> TokenStream;
}

/// `part` as its static, or `value` written out.
pub fn part_or(names: &dyn Names, part: Part, value: impl FnOnce() -> TokenStream) -> TokenStream {
    names.part(part).unwrap_or_else(value)
}

/// A path written as a name: `RetrySchedule::Never`.
pub fn path(name: &str) -> TokenStream {
    let segments = name.split("::").map(|s| Ident::new(s, Span::call_site()));
    quote!(#(#segments)::*)
}

/// `Type { field: value, … }`, in the order given.
pub fn named<const N: usize>(name: &str, fields: [(&str, TokenStream); N]) -> TokenStream {
    let path = path(name);
    let (members, values): (Vec<_>, Vec<_>) = fields
        .into_iter()
        .map(|(field, value)| (Ident::new(field, Span::call_site()), value))
        .unzip();
    quote!(#path { #(#members: #values),* })
}

/// `Type(value, …)`.
pub fn tuple<const N: usize>(name: &str, values: [TokenStream; N]) -> TokenStream {
    let path = path(name);
    quote!(#path(#(#values),*))
}

/// Byte ranges of an ID pattern's class: `&[(b'a', b'z'), …]`.
pub fn byte_ranges(class: &[(u8, u8)], _: &dyn Names) -> TokenStream {
    let items = class.iter().map(|&(lo, hi)| {
        let (lo, hi) = (Literal::byte_character(lo), Literal::byte_character(hi));
        quote!((#lo, #hi))
    });
    quote!(&[#(#items),*])
}

/// A number with its type suffix (`3u32`), where generated crates have one.
pub fn suffixed(value: &impl ToTokens, _: &dyn Names) -> TokenStream {
    quote!(#value)
}

/// A list of numbers with their suffix: `&[500u16, …]`.
pub fn suffixed_all<T: ToTokens>(values: &[T], _: &dyn Names) -> TokenStream {
    quote!(&[#(#values),*])
}

/// An integer literal without a type suffix (`3`, not `3u32`).
pub fn int(n: impl Into<u64>) -> Literal {
    Literal::u64_unsuffixed(n.into())
}

impl Bake for bool {
    fn bake(&self, _: &dyn Names) -> TokenStream {
        quote!(#self)
    }
}

macro_rules! unsuffixed {
    ($($ty:ty),*) => {$(
        impl Bake for $ty {
            fn bake(&self, _: &dyn Names) -> TokenStream {
                let n = int(*self as u64);
                quote!(#n)
            }
        }
    )*};
}

unsuffixed!(u16, u32, u64, usize);

impl Bake for &str {
    fn bake(&self, _: &dyn Names) -> TokenStream {
        quote!(#self)
    }
}

/// In whole seconds where it is whole seconds, in milliseconds otherwise.
impl Bake for Duration {
    fn bake(&self, _: &dyn Names) -> TokenStream {
        let millis = self.as_millis() as u64;
        if millis.is_multiple_of(1000) {
            let secs = int(millis / 1000);
            quote!(::std::time::Duration::from_secs(#secs))
        } else {
            let millis = int(millis);
            quote!(::std::time::Duration::from_millis(#millis))
        }
    }
}

impl<T: Bake> Bake for Option<T> {
    fn bake(&self, names: &dyn Names) -> TokenStream {
        match self {
            Some(value) => {
                let value = value.bake(names);
                quote!(Some(#value))
            }
            None => quote!(None),
        }
    }
}

impl<T: Bake> Bake for &[T] {
    fn bake(&self, names: &dyn Names) -> TokenStream {
        let items = self.iter().map(|item| item.bake(names));
        quote!(&[#(#items),*])
    }
}

impl<A: Bake, B: Bake> Bake for (A, B) {
    fn bake(&self, names: &dyn Names) -> TokenStream {
        let (a, b) = (self.0.bake(names), self.1.bake(names));
        quote!((#a, #b))
    }
}

/// A named index is the generated crate's constant.
macro_rules! named_index {
    ($($ty:ident => $method:ident),*) => {$(
        impl Bake for $ty {
            fn bake(&self, names: &dyn Names) -> TokenStream {
                names.$method(*self)
            }
        }
    )*};
}

named_index!(TimeoutIx => timeout, RetryIx => retry, BudgetIx => budget, StreamIx => stream);

/// By position: a row, detail set or route has no named constant.
macro_rules! positional {
    ($($ty:ident),*) => {$(
        impl Bake for $ty {
            fn bake(&self, _: &dyn Names) -> TokenStream {
                let i = int(self.get() as u64);
                quote!($ty::new(#i))
            }
        }
    )*};
}

positional!(RowIx, DetailIx, RouteIx);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{RetryClass, RetrySchedule, TimeoutClass};

    /// Names every index by position and keeps no part in a static.
    struct Positions;

    impl Names for Positions {
        fn endpoint(&self, route: RouteIx) -> TokenStream {
            let i = int(route.get() as u64);
            quote!(&ROUTES[#i])
        }
        fn timeout(&self, index: TimeoutIx) -> TokenStream {
            let i = int(index.get() as u64);
            quote!(TimeoutIx::new(#i))
        }
        fn retry(&self, index: RetryIx) -> TokenStream {
            let i = int(index.get() as u64);
            quote!(RetryIx::new(#i))
        }
        fn budget(&self, index: BudgetIx) -> TokenStream {
            let i = int(index.get() as u64);
            quote!(BudgetIx::new(#i))
        }
        fn stream(&self, index: StreamIx) -> TokenStream {
            let i = int(index.get() as u64);
            quote!(StreamIx::new(#i))
        }
        fn part(&self, _: Part) -> Option<TokenStream> {
            None
        }
        fn log_lines(&self) -> TokenStream {
            quote!(&LINES)
        }
    }

    fn text(value: &impl Bake) -> String {
        value.bake(&Positions).to_string().replace(' ', "")
    }

    #[test]
    fn a_value_bakes_to_the_expression_that_rebuilds_it() {
        let search = TimeoutClass {
            name: "search",
            per_attempt: Duration::from_secs(30),
            deploy_suspected: Some(Duration::from_millis(1500)),
        };
        assert_eq!(
            text(&search),
            "TimeoutClass{name:\"search\",per_attempt:::std::time::Duration::from_secs(30),\
             deploy_suspected:Some(::std::time::Duration::from_millis(1500))}"
        );
        let linear = RetryClass {
            name: "C1",
            schedule: RetrySchedule::Linear {
                attempts: 2,
                step: Duration::from_millis(250),
            },
            configurable: None,
        };
        assert_eq!(
            text(&linear),
            "RetryClass{name:\"C1\",schedule:RetrySchedule::Linear{attempts:2,\
             step:::std::time::Duration::from_millis(250)},configurable:None}"
        );
    }
}
