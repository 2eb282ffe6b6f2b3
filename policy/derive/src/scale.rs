//! The `Scale` expansion: each arm rebuilds itself from its fields' scaled
//! values, or their clones where a field says `#[scale(skip)]`.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{DeriveInput, Field};

use crate::shape::{arms, local};

/// Whether the field says `#[scale(skip)]`.
fn skipped(field: &Field) -> syn::Result<bool> {
    let mut skip = false;
    for attr in field.attrs.iter().filter(|a| a.path().is_ident("scale")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("skip") {
                skip = true;
                Ok(())
            } else {
                Err(meta.error("expected `skip`"))
            }
        })?;
    }
    Ok(skip)
}

pub(crate) fn expand(input: &DeriveInput) -> syn::Result<TokenStream> {
    let by = local("by");
    let mut arms_out = Vec::new();
    for arm in arms(input)? {
        let values = arm
            .slots
            .iter()
            .map(|(field, binding)| {
                Ok(match skipped(field)? {
                    true => quote!(::core::clone::Clone::clone(#binding)),
                    false => quote!(::sdk_policy::scale::Scale::scale(#binding, #by)),
                })
            })
            .collect::<syn::Result<Vec<_>>>()?;
        let (pattern, built) = (arm.pattern(), arm.build(values.into_iter()));
        arms_out.push(quote!(#pattern => #built,));
    }
    let ty = &input.ident;
    let (generics, ty_generics, where_clause) = input.generics.split_for_impl();
    Ok(quote! {
        #[automatically_derived]
        impl #generics ::sdk_policy::scale::Scale for #ty #ty_generics #where_clause {
            fn scale(&self, #by: ::sdk_policy::scale::Divisor) -> Self {
                match self {
                    #(#arms_out)*
                }
            }
        }
    })
}
