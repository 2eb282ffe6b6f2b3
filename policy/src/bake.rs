//! Values of the vocabulary turned back into the Rust that rebuilds them, in
//! the spirit of `databake`: the generator builds a policy's values and each
//! type writes its own tokens, next to its definition. Behind the `bake`
//! feature, so the runtime does not build `quote`.
//!
//! A baked value names what the generated crate defines elsewhere (a route's
//! static descriptor, a named index, a table of its own) through [`Names`].

use std::time::Duration;

use proc_macro2::{Literal, TokenStream};
use quote::quote;

use crate::endpoint::Endpoint;
use crate::index::{BudgetIx, RetryIx, StreamIx, TimeoutIx};

/// How the generated crate names what a baked value points to.
pub trait Names {
    /// A route's static descriptor: `&crate::workspaces::HEALTH`.
    fn endpoint(&self, endpoint: &Endpoint) -> TokenStream;
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
pub(crate) fn part_or(
    names: &dyn Names,
    part: Part,
    value: impl FnOnce() -> TokenStream,
) -> TokenStream {
    names.part(part).unwrap_or_else(value)
}

/// References to routes' static descriptors: `&[&crate::a::B, …]`.
pub(crate) fn endpoints(list: &[&Endpoint], names: &dyn Names) -> TokenStream {
    let items = list.iter().map(|e| names.endpoint(e));
    quote!(&[#(#items),*])
}

/// Byte ranges of an ID pattern's class: `&[(b'a', b'z'), …]`.
pub(crate) fn byte_ranges(class: &[(u8, u8)]) -> TokenStream {
    let items = class.iter().map(|&(lo, hi)| {
        let (lo, hi) = (Literal::byte_character(lo), Literal::byte_character(hi));
        quote!((#lo, #hi))
    });
    quote!(&[#(#items),*])
}

/// `Type { field: <baked>, … }` of fields the caller has bound, in this
/// order: each one baked, or the tokens given as `field = <tokens>`.
macro_rules! bake_fields {
    ($n:ident, $($path:ident)::+ { $($field:ident $(= $tokens:expr)?),* $(,)? }) => {{
        $(let $field = $crate::bake::bake_fields!(@one $n, $field $(, $tokens)?);)*
        ::quote::quote!($($path)::+ { $($field: #$field),* })
    }};
    (@one $n:ident, $field:ident) => {
        $crate::bake::Bake::bake($field, $n)
    };
    (@one $n:ident, $field:ident, $tokens:expr) => {
        $tokens
    };
}

/// [`bake_fields!`] of every field of `self`, taken apart without `..`: a
/// field added to the type does not compile until it is baked too.
macro_rules! bake_struct {
    ($self:ident, $n:ident, $ty:ident { $($field:ident $(= $tokens:expr)?),* $(,)? }) => {{
        #[allow(unused_variables)]
        let $ty { $($field),* } = $self;
        $crate::bake::bake_fields!($n, $ty { $($field $(= $tokens)?),* })
    }};
}

/// `Bake` for an enum without data: `Type::Variant`.
macro_rules! bake_unit_enum {
    ($ty:ident { $($variant:ident),* $(,)? }) => {
        impl $crate::bake::Bake for $ty {
            fn bake(&self, _: &dyn $crate::bake::Names) -> ::proc_macro2::TokenStream {
                match self {
                    $($ty::$variant => ::quote::quote!($ty::$variant),)*
                }
            }
        }
    };
}

pub(crate) use {bake_fields, bake_struct, bake_unit_enum};

/// An integer literal without a type suffix (`3`, not `3u32`).
pub(crate) fn int(n: impl Into<u64>) -> Literal {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{RetryClass, RetrySchedule, TimeoutClass};

    /// Names every index by position and keeps no part in a static.
    struct Positions;

    impl Names for Positions {
        fn endpoint(&self, endpoint: &Endpoint) -> TokenStream {
            let op = endpoint.operation;
            quote!(&#op)
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
