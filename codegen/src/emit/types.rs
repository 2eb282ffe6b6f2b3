//! `src/types.rs`: request and response types.

use proc_macro2::TokenStream;
use quote::quote;

use super::docs::{doc, field_ident, ident, inner_doc, rust_type, source};
use crate::model::{Field, Model, Shape, Stream, TypeDef, TypeExpr, Variant};

pub fn types_rs(model: &Model) -> TokenStream {
    let types = model.types.iter().map(type_def);
    let events = model
        .streams
        .iter()
        .filter(|s| !s.events.is_empty())
        .map(|s| event_enum(model, s));
    let module_doc =
        inner_doc("Request and response types of every service, as the spec shapes them.");
    let wire = model
        .types
        .iter()
        .any(|t| matches!(t.shape, Shape::Enum(_)))
        .then(wire_visitor);
    quote! {
        #module_doc

        use serde::{Deserialize, Serialize};

        #(#types)*

        #wire

        #(#events)*
    }
}

/// A stream's events as one enum: a variant per typed event, `Other` for the
/// rest, decoded by the runtime through `sdk_runtime::StreamEvent`.
fn event_enum(model: &Model, stream: &Stream) -> TokenStream {
    let name = ident(&stream.event_type);
    let docs = doc(&format!(
        "An event of the `{}` stream, typed by its name (streams.yaml `events`).",
        stream.name
    ));
    let variants = stream.events.iter().map(|e| {
        let variant = ident(&e.variant);
        let ty = ident(&model.types[e.ty].name);
        let text = doc(&format!("`event: {}`", e.name));
        quote!(#text #variant(#ty))
    });
    let arms = stream.events.iter().map(|e| {
        let (variant, wire) = (ident(&e.variant), &e.name);
        quote!(#wire => #name::#variant(serde_json::from_str(&event.data)?))
    });
    let names = stream.events.iter().map(|e| {
        let (variant, wire) = (ident(&e.variant), &e.name);
        quote!(#name::#variant(_) => #wire)
    });
    quote! {
        #docs
        #[derive(Debug, Clone, PartialEq)]
        #[non_exhaustive]
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

/// A spec type as Rust. Every struct is `#[non_exhaustive]`, so a field the
/// spec adds breaks no consumer: a caller builds one (a request, a mock of an
/// answer) through `new` and the setters, never by a struct literal.
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
                let field = field_ident(&f.name);
                let ty = rust_type(&f.ty);
                let skip = matches!(f.ty, TypeExpr::Optional(_))
                    .then(|| quote!(#[serde(default, skip_serializing_if = "Option::is_none")]));
                let wire = &f.name;
                let rename = (field.to_string().trim_start_matches("r#") != wire.as_str())
                    .then(|| quote!(#[serde(rename = #wire)]));
                quote! {
                    #skip
                    #rename
                    pub #field: #ty
                }
            });
            let default = fields_all_optional(t).then(|| quote!(Default,));
            let building = constructors(&name, t);
            quote! {
                #docs
                #[derive(Debug, Clone, PartialEq, #default Serialize, Deserialize)]
                #[non_exhaustive]
                pub struct #name {
                    #(#fields,)*
                }

                #building
            }
        }
        Shape::Enum(variants) => string_enum(&name, docs, variants),
    }
}

/// Whether every field of a struct is optional: then `new()` takes nothing
/// and the type is `Default` too.
fn fields_all_optional(t: &TypeDef) -> bool {
    match &t.shape {
        Shape::Struct(fields) => fields.iter().all(|f| matches!(f.ty, TypeExpr::Optional(_))),
        Shape::Enum(_) => false,
    }
}

/// `new` over the required fields and a `with_` setter per optional one, so
/// a caller builds a value the way that keeps compiling when the spec adds
/// an optional field.
fn constructors(name: &proc_macro2::Ident, t: &TypeDef) -> TokenStream {
    let Shape::Struct(fields) = &t.shape else {
        return TokenStream::new();
    };
    let (optional, required): (Vec<&Field>, Vec<&Field>) = fields
        .iter()
        .partition(|f| matches!(f.ty, TypeExpr::Optional(_)));
    let params = required.iter().map(|f| {
        let (field, ty) = (field_ident(&f.name), rust_type(&f.ty));
        quote!(#field: impl Into<#ty>)
    });
    let inits = fields.iter().map(|f| {
        let field = field_ident(&f.name);
        match f.ty {
            TypeExpr::Optional(_) => quote!(#field: None),
            _ => quote!(#field: #field.into()),
        }
    });
    let setters = optional.iter().map(|f| {
        let TypeExpr::Optional(inner) = &f.ty else {
            unreachable!("partitioned as optional")
        };
        let (field, ty) = (field_ident(&f.name), rust_type(inner));
        let bare = field.to_string().trim_start_matches("r#").to_owned();
        let setter = ident(&format!("with_{bare}"));
        let text = doc(&format!("Sets `{}`.", f.name));
        quote! {
            #text
            pub fn #setter(mut self, #field: impl Into<#ty>) -> Self {
                self.#field = Some(#field.into());
                self
            }
        }
    });
    let many = (required.len() > 7).then(|| quote!(#[allow(clippy::too_many_arguments)]));
    quote! {
        impl #name {
            /// A value of the required fields; every optional field starts empty.
            #many
            pub fn new(#(#params),*) -> Self {
                Self { #(#inits,)* }
            }

            #(#setters)*
        }
    }
}

/// A string enum: a variant per value the spec lists, and `Unknown` for any
/// other, so a value the platform adds later decodes instead of failing.
fn string_enum(name: &proc_macro2::Ident, docs: TokenStream, variants: &[Variant]) -> TokenStream {
    let decls = variants.iter().map(|v| {
        let variant = ident(&v.name);
        let mut text = match &v.doc {
            Some(d) => d.clone(),
            None => format!("`{}`.", v.wire),
        };
        if let Some(s) = &v.source {
            text.push_str(&format!(" Policy {}.", source(s)));
        }
        let text = doc(&text);
        quote!(#text #variant)
    });
    let to_wire = variants.iter().map(|v| {
        let (variant, wire) = (ident(&v.name), &v.wire);
        quote!(#name::#variant => #wire)
    });
    let from_wire = variants.iter().map(|v| {
        let (variant, wire) = (ident(&v.name), &v.wire);
        quote!(#wire => #name::#variant)
    });
    let conversions = string_enum_conversions(name);
    quote! {
        #docs
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum #name {
            #(#decls,)*
            /// A value this client version does not know yet, kept verbatim so nothing is lost.
            Unknown(String),
        }

        impl #name {
            /// The value as the platform spells it.
            pub fn as_str(&self) -> &str {
                match self {
                    #(#to_wire,)*
                    #name::Unknown(value) => value,
                }
            }

            fn known(value: &str) -> Option<Self> {
                Some(match value {
                    #(#from_wire,)*
                    _ => return None,
                })
            }
        }

        #conversions
    }
}

/// What every string enum has whatever its values: from and to text, and
/// serde through the text.
fn string_enum_conversions(name: &proc_macro2::Ident) -> TokenStream {
    quote! {
        impl From<&str> for #name {
            fn from(value: &str) -> Self {
                Self::known(value).unwrap_or_else(|| #name::Unknown(value.to_owned()))
            }
        }

        impl From<String> for #name {
            fn from(value: String) -> Self {
                Self::known(&value).unwrap_or(#name::Unknown(value))
            }
        }

        impl AsRef<str> for #name {
            fn as_ref(&self) -> &str {
                self.as_str()
            }
        }

        impl std::fmt::Display for #name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for #name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for #name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                deserializer.deserialize_str(wire::Visitor(std::marker::PhantomData))
            }
        }
    }
}

/// The one visitor every string enum decodes through: any string is a value
/// (a known one without a copy), anything else the error it always was.
fn wire_visitor() -> TokenStream {
    quote! {
        /// Decoding of string enums, in a module of its own so no spec type can
        /// clash with it (spec types are CamelCase, never `wire`).
        mod wire {
            /// Decodes a string enum from its wire string; a value the spec does
            /// not list becomes `Unknown`, never an error.
            pub(super) struct Visitor<T>(pub(super) std::marker::PhantomData<T>);

            impl<T: for<'a> From<&'a str> + From<String>> serde::de::Visitor<'_> for Visitor<T> {
                type Value = T;

                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a string")
                }

                fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<T, E> {
                    Ok(T::from(value))
                }

                fn visit_string<E: serde::de::Error>(self, value: String) -> Result<T, E> {
                    Ok(T::from(value))
                }
            }
        }
    }
}
