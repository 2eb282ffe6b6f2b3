//! Doc comments and small token helpers shared by the emitters.

use std::fmt::Write;
use std::time::Duration;

use proc_macro2::{Ident, Span, TokenStream};
use quote::quote;

use crate::model::{Model, RetrySchedule, Returns, Route, Source, TypeExpr};
use crate::naming;

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

/// An identifier: a keyword is written raw (`r#type`). Every name the
/// model holds was checked to be one before anything is emitted
/// ([`crate::model::Model::identifiers`]); one that is not is the emitter's bug.
pub fn ident(name: &str) -> Ident {
    assert!(
        naming::is_identifier(name),
        "internal error: `{}` reached the emitter unchecked",
        name.escape_debug()
    );
    if naming::KEYWORDS.contains(&name) {
        Ident::new_raw(name, Span::call_site())
    } else {
        Ident::new(name, Span::call_site())
    }
}

/// A struct field or an argument named as on the wire (see [`naming::argument`]).
pub fn field_ident(name: &str) -> Ident {
    ident(&naming::argument(name))
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

/// ` (policy §…)` where the policy asks for the pipeline id, or nothing.
pub fn pipeline_section(model: &crate::model::Model) -> String {
    model
        .api
        .pipeline_source
        .as_ref()
        .map(|s| format!(" (policy {})", source(s)))
        .unwrap_or_default()
}

/// The Rust type of a spec type expression, in one pass: the wrappers'
/// openings from the outside in, the innermost type, then the closing `>`s.
pub fn rust_type(ty: &TypeExpr) -> TokenStream {
    let mut out = TokenStream::new();
    let mut depth = 0;
    let mut ty = ty;
    while let TypeExpr::List(inner) | TypeExpr::Map(inner) | TypeExpr::Optional(inner) = ty {
        out.extend(match ty {
            TypeExpr::List(_) => quote!(Vec<),
            TypeExpr::Map(_) => quote!(std::collections::BTreeMap < String,),
            _ => quote!(Option<),
        });
        depth += 1;
        ty = inner;
    }
    out.extend(match ty {
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
        TypeExpr::List(_) | TypeExpr::Map(_) | TypeExpr::Optional(_) => {
            unreachable!("the loop above unwraps every wrapper")
        }
    });
    for _ in 0..depth {
        out.extend(quote!(>));
    }
    out
}

/// How a type expression reads in docs and tables, in one pass.
pub fn type_text(ty: &TypeExpr) -> String {
    let mut out = String::new();
    let mut closers = Vec::new();
    let mut ty = ty;
    loop {
        match ty {
            TypeExpr::List(inner) | TypeExpr::Map(inner) => {
                out.push_str(if matches!(ty, TypeExpr::List(_)) {
                    "list<"
                } else {
                    "map<"
                });
                closers.push('>');
                ty = inner;
            }
            TypeExpr::Optional(inner) => {
                closers.push('?');
                ty = inner;
            }
            TypeExpr::String => break out.push_str("string"),
            TypeExpr::Integer => break out.push_str("integer"),
            TypeExpr::Number => break out.push_str("number"),
            TypeExpr::Boolean => break out.push_str("boolean"),
            TypeExpr::Json => break out.push_str("json"),
            TypeExpr::Id(n) | TypeExpr::Named(n) => break out.push_str(n),
        }
    }
    out.extend(closers.into_iter().rev());
    out
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

/// How a type reads in generated docs (method docs and POLICY.md).
pub fn returns_text(model: &Model, r: &Route) -> String {
    match &r.returns {
        Returns::Nothing => "none".into(),
        Returns::Body(t) => type_text(t),
        Returns::Stream(i) => format!("SSE `{}`", model.streams[*i].name),
    }
}

/// A retry schedule in a few words (`3 attempts, exponential from 500 ms ...`).
pub fn schedule_text(s: &RetrySchedule) -> String {
    match *s {
        RetrySchedule::Never => "never".into(),
        RetrySchedule::Exponential {
            attempts,
            base,
            factor,
            cap,
        } => format!(
            "{attempts} attempts, exponential from {} ×{factor} capped at {}, full jitter",
            duration_text(base),
            duration_text(cap)
        ),
        RetrySchedule::DeployWindow { attempts } => {
            format!("{attempts} attempts, GET inside the deploy-suspected window only")
        }
        RetrySchedule::RetryAfter {
            attempts,
            floor,
            jitter,
        } => format!(
            "{attempts} attempts, wait Retry-After ({} when absent) + up to {} jitter",
            duration_text(floor),
            duration_text(jitter)
        ),
        RetrySchedule::Once { attempts } => format!("{attempts} attempts, no wait"),
        RetrySchedule::Linear { attempts, step } => format!(
            "{attempts} attempts, waiting {} × the retry's number, no jitter",
            duration_text(step)
        ),
    }
}

/// A markdown table (POLICY.md, the metric list): its header, the rule under it, a line per row.
pub fn table(md: &mut String, header: &[&str], rows: impl IntoIterator<Item = Vec<String>>) {
    let _ = writeln!(md, "| {} |", header.join(" | "));
    let _ = writeln!(md, "|{}", "---|".repeat(header.len()));
    for row in rows {
        let _ = writeln!(md, "| {} |", row.join(" | "));
    }
}
