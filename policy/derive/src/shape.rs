//! A type taken apart for a derive: one arm per variant (or one for a
//! struct), each with its fields bound by name.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use syn::{Data, DeriveInput, Field, Fields, Ident};

/// One way a value of the type is built: the struct itself or a variant.
pub(crate) struct Arm<'a> {
    /// `Self` or `Self::Variant`, for patterns and constructors.
    pub path: TokenStream,
    /// The name the value is written with: `Type` or `Type::Variant`.
    pub name: String,
    pub fields: &'a Fields,
    /// Each field with the local it is bound to in [`Arm::pattern`].
    pub slots: Vec<(&'a Field, Ident)>,
}

impl Arm<'_> {
    /// The pattern that binds every field, with no `..` (a named field is
    /// bound to its own name).
    pub fn pattern(&self) -> TokenStream {
        let (path, bindings) = (&self.path, self.slots.iter().map(|(_, b)| b));
        match self.fields {
            Fields::Named(_) => quote!(#path { #(#bindings),* }),
            Fields::Unnamed(_) => quote!(#path(#(#bindings),*)),
            Fields::Unit => quote!(#path),
        }
    }

    /// `path { field: value, … }`, `path(value, …)` or `path`, of one value
    /// per field, in order.
    pub fn build(&self, values: impl Iterator<Item = TokenStream>) -> TokenStream {
        let path = &self.path;
        match self.fields {
            Fields::Named(_) => {
                let members = self.slots.iter().map(|(f, _)| &f.ident);
                quote!(#path { #(#members: #values),* })
            }
            Fields::Unnamed(_) => quote!(#path(#(#values),*)),
            Fields::Unit => quote!(#path),
        }
    }
}

/// The arms of `input`: one for a struct, one per variant of an enum.
pub(crate) fn arms(input: &DeriveInput) -> syn::Result<Vec<Arm<'_>>> {
    let ty = &input.ident;
    match &input.data {
        Data::Struct(data) => Ok(vec![arm(quote!(Self), ty.to_string(), &data.fields)]),
        Data::Enum(data) => Ok(data
            .variants
            .iter()
            .map(|v| {
                let variant = &v.ident;
                arm(
                    quote!(Self::#variant),
                    format!("{ty}::{variant}"),
                    &v.fields,
                )
            })
            .collect()),
        Data::Union(_) => Err(syn::Error::new_spanned(ty, "a union cannot be derived")),
    }
}

fn arm(path: TokenStream, name: String, fields: &Fields) -> Arm<'_> {
    let slots = fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let binding = match &f.ident {
                Some(ident) => ident.clone(),
                None => format_ident!("field_{i}"),
            };
            (f, binding)
        })
        .collect();
    Arm {
        path,
        name,
        fields,
        slots,
    }
}

/// A local of the expansion that no field's binding can shadow.
pub(crate) fn local(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}
