//! Doc comments and small token helpers shared by the emitters.

use std::time::Duration;

use proc_macro2::{Ident, Span, TokenStream};
use quote::quote;

use crate::model::{Source, TypeExpr};

/// `#[doc = "..."]` attributes, one per line, rendered as `///` by prettyplease.
pub fn doc(text: &str) -> TokenStream {
    let lines = text.trim().lines().map(|line| {
        let line = format!(" {}", line.trim_end());
        quote!(#[doc = #line])
    });
    quote!(#(#lines)*)
}

/// `#![doc = "..."]` attributes: a module's own `//!` docs.
pub fn inner_doc(text: &str) -> TokenStream {
    let lines = text.trim().lines().map(|line| {
        let line = format!(" {}", line.trim_end());
        quote!(#![doc = #line])
    });
    quote!(#(#lines)*)
}

/// How a source reads in a doc line: `§5.2` or `§5.3 (inferred)`.
pub fn source(source: &Source) -> String {
    if source.inferred {
        format!("{} (inferred)", source.section)
    } else {
        source.section.clone()
    }
}

/// An integer literal without a type suffix (`3`, not `3u32`).
pub fn int(n: impl Into<u64>) -> proc_macro2::Literal {
    proc_macro2::Literal::u64_unsuffixed(n.into())
}

/// A `Duration` constructor, in whole seconds where possible.
pub fn duration(d: Duration) -> TokenStream {
    let millis = d.as_millis() as u64;
    if millis.is_multiple_of(1000) {
        let secs = int(millis / 1000);
        quote!(::std::time::Duration::from_secs(#secs))
    } else {
        let millis = int(millis);
        quote!(::std::time::Duration::from_millis(#millis))
    }
}

/// `Some(x)` or `None`.
pub fn option<T>(value: Option<T>, f: impl FnOnce(T) -> TokenStream) -> TokenStream {
    match value {
        Some(v) => {
            let inner = f(v);
            quote!(Some(#inner))
        }
        None => quote!(None),
    }
}

pub fn ident(name: &str) -> Ident {
    let keyword = matches!(
        name,
        "type"
            | "match"
            | "ref"
            | "self"
            | "crate"
            | "move"
            | "fn"
            | "mod"
            | "use"
            | "impl"
            | "trait"
            | "struct"
            | "enum"
            | "where"
            | "async"
            | "await"
            | "dyn"
            | "loop"
            | "static"
            | "const"
    );
    if keyword {
        Ident::new_raw(name, Span::call_site())
    } else {
        Ident::new(name, Span::call_site())
    }
}

/// ` (policy §3.2)` after a sentence about the workspace scope, or nothing
/// when the spec names no section for it.
pub fn workspace_section(model: &crate::model::Model) -> String {
    model
        .api
        .workspace_source
        .as_ref()
        .map(|s| format!(" (policy {})", source(s)))
        .unwrap_or_default()
}

/// `snake_case` -> `CamelCase`.
pub fn camel(name: &str) -> String {
    name.split(['_', '-', ' '])
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// `snake_case` or `kebab-case` -> `SCREAMING_SNAKE`.
pub fn screaming(name: &str) -> String {
    name.replace('-', "_").to_ascii_uppercase()
}

/// The Rust type of a spec type expression.
pub fn rust_type(ty: &TypeExpr) -> TokenStream {
    match ty {
        TypeExpr::String => quote!(String),
        TypeExpr::Integer => quote!(i64),
        TypeExpr::Number => quote!(f64),
        TypeExpr::Boolean => quote!(bool),
        TypeExpr::Json => quote!(serde_json::Value),
        TypeExpr::Id(name) => {
            let name = ident(name);
            quote!(crate::ids::#name)
        }
        TypeExpr::Named(name) => {
            let name = ident(name);
            quote!(crate::types::#name)
        }
        TypeExpr::List(inner) => {
            let inner = rust_type(inner);
            quote!(Vec<#inner>)
        }
        TypeExpr::Map(inner) => {
            let inner = rust_type(inner);
            quote!(std::collections::BTreeMap<String, #inner>)
        }
        TypeExpr::Optional(inner) => {
            let inner = rust_type(inner);
            quote!(Option<#inner>)
        }
    }
}

/// How a type expression reads in docs and tables.
pub fn type_text(ty: &TypeExpr) -> String {
    match ty {
        TypeExpr::String => "string".into(),
        TypeExpr::Integer => "integer".into(),
        TypeExpr::Number => "number".into(),
        TypeExpr::Boolean => "boolean".into(),
        TypeExpr::Json => "json".into(),
        TypeExpr::Id(n) | TypeExpr::Named(n) => n.clone(),
        TypeExpr::List(i) => format!("list<{}>", type_text(i)),
        TypeExpr::Map(i) => format!("map<{}>", type_text(i)),
        TypeExpr::Optional(i) => format!("{}?", type_text(i)),
    }
}

/// A duration as a person writes it: `500 ms`, `30 s`, `2 min`.
pub fn duration_text(d: Duration) -> String {
    let millis = d.as_millis();
    if millis.is_multiple_of(60_000) && millis >= 60_000 {
        format!("{} min", millis / 60_000)
    } else if millis.is_multiple_of(1000) {
        format!("{} s", millis / 1000)
    } else {
        format!("{millis} ms")
    }
}
