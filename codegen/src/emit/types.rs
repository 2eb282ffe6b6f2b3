//! `src/types.rs`: request and response types.

use proc_macro2::TokenStream;
use quote::quote;

use super::docs::{camel, doc, ident, inner_doc, rust_type, source};
use crate::model::{Model, Shape, Stream, TypeDef, TypeExpr};

pub fn types_rs(model: &Model) -> TokenStream {
    let types = model.types.iter().map(type_def);
    let events = model
        .streams
        .iter()
        .filter(|s| !s.events.is_empty())
        .map(|s| event_enum(model, s));
    let module_doc =
        inner_doc("Request and response types of every service, as the spec shapes them.");
    quote! {
        #module_doc

        use serde::{Deserialize, Serialize};

        #(#types)*

        #(#events)*
    }
}

/// The name of a stream's typed event enum (`orchestrator` → `OrchestratorEvent`).
pub fn event_enum_name(stream: &Stream) -> String {
    format!("{}Event", camel(&stream.name))
}

/// A stream's events as one enum: a variant per typed event, `Other` for the
/// rest, decoded by the runtime through `sdk_runtime::StreamEvent`.
fn event_enum(model: &Model, stream: &Stream) -> TokenStream {
    let name = ident(&event_enum_name(stream));
    let docs = doc(&format!(
        "An event of the `{}` stream, typed by its name (streams.yaml `events`).",
        stream.name
    ));
    let variants = stream.events.iter().map(|(event, ty)| {
        let variant = ident(&camel(event));
        let ty = ident(&model.types[*ty].name);
        let text = doc(&format!("`event: {event}`"));
        quote!(#text #variant(#ty))
    });
    let arms = stream.events.iter().map(|(event, _)| {
        let variant = ident(&camel(event));
        quote!(#event => #name::#variant(serde_json::from_str(&event.data)?))
    });
    let names = stream.events.iter().map(|(event, _)| {
        let variant = ident(&camel(event));
        quote!(#name::#variant(_) => #event)
    });
    quote! {
        #docs
        #[derive(Debug, Clone, PartialEq)]
        pub enum #name {
            #(#variants,)*
            /// An event the spec does not type, as it was sent.
            Other(sdk_runtime::sse::SseEvent),
        }

        impl #name {
            /// The event's name on the wire (`event:`).
            pub fn name(&self) -> &str {
                match self {
                    #(#names,)*
                    #name::Other(e) => &e.event,
                }
            }
        }

        impl sdk_runtime::StreamEvent for #name {
            fn decode(event: sdk_runtime::sse::SseEvent) -> Result<Self, serde_json::Error> {
                Ok(match event.event.as_str() {
                    #(#arms,)*
                    _ => #name::Other(event),
                })
            }
        }
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
