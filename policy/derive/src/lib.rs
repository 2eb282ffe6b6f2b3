//! `#[derive(Bake, Scale)]` for the types of `sdk-policy`: every field of a
//! struct or variant is visited, so a field added to a type is baked and
//! scaled without a line elsewhere. The expansions name `::sdk_policy`, so
//! they are meant for that crate (which calls itself so).
//!
//! Field attributes cover what the type of a field cannot say:
//! - `#[bake(part = Probe)]`: the generated crate may keep the value in a
//!   static of its own (`Names::part`);
//! - `#[bake(with = path)]`: baked by `path(&field, names)`;
//! - `#[scale(skip)]`: a duration that keeps its value in a scaled copy.

use proc_macro::TokenStream;
use syn::{DeriveInput, parse_macro_input};

mod bake;
mod scale;
mod shape;

/// `impl sdk_policy::bake::Bake`: the value as the Rust expression that rebuilds it.
#[proc_macro_derive(Bake, attributes(bake))]
pub fn derive_bake(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    bake::expand(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// `impl sdk_policy::scale::Scale`: the value with every duration divided.
/// It declares `bake` too, so a type's `#[bake(..)]` attributes stay inert
/// where the `bake` feature (and with it the `Bake` derive) is off.
#[proc_macro_derive(Scale, attributes(scale, bake))]
pub fn derive_scale(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    scale::expand(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
