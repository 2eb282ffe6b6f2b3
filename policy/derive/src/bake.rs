//! The `Bake` expansion: each arm writes its path and its fields' bakes.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{DeriveInput, Expr, Field, Fields, Ident};

use crate::shape::{Arm, arms, local};

/// What a field's `#[bake(..)]` says.
#[derive(Default)]
struct FieldRule {
    /// `part = Probe`: the generated crate's static, when it keeps one.
    part: Option<Ident>,
    /// `with = path`: baked by this function instead of the field's `Bake`.
    with: Option<Expr>,
}

fn rule(field: &Field) -> syn::Result<FieldRule> {
    let mut rule = FieldRule::default();
    for attr in field.attrs.iter().filter(|a| a.path().is_ident("bake")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("part") {
                rule.part = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("with") {
                rule.with = Some(meta.value()?.parse()?);
            } else {
                return Err(meta.error("expected `part = <Part>` or `with = <function>`"));
            }
            Ok(())
        })?;
    }
    Ok(rule)
}

pub(crate) fn expand(input: &DeriveInput) -> syn::Result<TokenStream> {
    let names = local("names");
    let arms = arms(input)?
        .iter()
        .map(|arm| expand_arm(arm, &names))
        .collect::<syn::Result<Vec<_>>>()?;
    let ty = &input.ident;
    let (generics, ty_generics, where_clause) = input.generics.split_for_impl();
    Ok(quote! {
        #[automatically_derived]
        impl #generics ::sdk_policy::bake::Bake for #ty #ty_generics #where_clause {
            fn bake(
                &self,
                #names: &dyn ::sdk_policy::bake::Names,
            ) -> ::sdk_policy::bake::TokenStream {
                match self {
                    #(#arms)*
                }
            }
        }
    })
}

/// `pattern => bake::named("Type::Variant", [("field", <baked>), …]),`
fn expand_arm(arm: &Arm, names: &Ident) -> syn::Result<TokenStream> {
    let values = arm
        .slots
        .iter()
        .map(|(field, binding)| {
            let rule = rule(field)?;
            let value = match &rule.with {
                Some(with) => quote!(#with(#binding, #names)),
                None => quote!(::sdk_policy::bake::Bake::bake(#binding, #names)),
            };
            Ok(match &rule.part {
                Some(part) => quote! {
                    ::sdk_policy::bake::part_or(#names, ::sdk_policy::bake::Part::#part, || #value)
                },
                None => value,
            })
        })
        .collect::<syn::Result<Vec<_>>>()?;
    let (pattern, name) = (arm.pattern(), &arm.name);
    let body = match arm.fields {
        Fields::Named(_) => {
            let members = arm
                .slots
                .iter()
                .map(|(f, _)| f.ident.as_ref().map(Ident::to_string));
            quote!(::sdk_policy::bake::named(#name, [#((#members, #values)),*]))
        }
        Fields::Unnamed(_) => quote!(::sdk_policy::bake::tuple(#name, [#(#values),*])),
        Fields::Unit => quote!(::sdk_policy::bake::path(#name)),
    };
    Ok(quote!(#pattern => #body,))
}
