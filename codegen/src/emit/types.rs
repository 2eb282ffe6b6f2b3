//! `src/types.rs`: request and response types.

use proc_macro2::TokenStream;
use quote::quote;

use super::docs::{camel, doc, ident, inner_doc, rust_type, source};
use crate::model::{Model, Shape, TypeDef, TypeExpr};

pub fn types_rs(model: &Model) -> TokenStream {
    let types = model.types.iter().map(type_def);
    let module_doc =
        inner_doc("Request and response types of every service, as the spec shapes them.");
    quote! {
        #module_doc

        use serde::{Deserialize, Serialize};

        #(#types)*
    }
}

fn type_def(t: &TypeDef) -> TokenStream {
    let name = ident(&t.name);
    let mut text = format!("{}\n\nService `{}`", t.doc, t.service);
    if let Some(s) = &t.source {
        text.push_str(&format!(", policy {}", source(s)));
    }
    text.push('.');
    let docs = doc(&text);
    match &t.shape {
        Shape::Struct(fields) => {
            let fields = fields.iter().map(|f| {
                let field = ident(&f.name);
                let ty = rust_type(&f.ty);
                let skip = matches!(f.ty, TypeExpr::Optional(_))
                    .then(|| quote!(#[serde(default, skip_serializing_if = "Option::is_none")]));
                quote! {
                    #skip
                    pub #field: #ty
                }
            });
            quote! {
                #docs
                #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
                pub struct #name {
                    #(#fields,)*
                }
            }
        }
        Shape::Enum(values) => {
            let variants = values.iter().map(|v| {
                let variant = ident(&camel(v));
                quote! {
                    #[serde(rename = #v)]
                    #variant
                }
            });
            let arms = values.iter().map(|v| {
                let variant = ident(&camel(v));
                quote!(#name::#variant => #v)
            });
            quote! {
                #docs
                #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
                pub enum #name {
                    #(#variants,)*
                }

                impl #name {
                    /// The value as the platform spells it.
                    pub fn as_str(self) -> &'static str {
                        match self {
                            #(#arms,)*
                        }
                    }
                }
            }
        }
    }
}
