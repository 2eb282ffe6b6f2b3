//! `src/error.rs`: the taxonomy's error classes as an enum, so a caller
//! matches `error.class()` against a variant the compiler checks, not a string.

use proc_macro2::TokenStream;
use quote::quote;

use super::docs::{camel, doc, ident, inner_doc, int};
use crate::model::Model;

/// The class of an error no row classified: the runtime's fallback, present
/// in every API so the conversion from a class name is total.
const UNCLASSIFIED: &str = "unclassified";

/// Every error class of the taxonomy, in row order, each once, with its rows;
/// `success` is an outcome, not an error, and is left out.
/// Each class comes with its rows and the first row's action.
fn classes(model: &Model) -> Vec<(&str, Vec<&str>, &str)> {
    let mut out: Vec<(&str, Vec<&str>, &str)> = Vec::new();
    for row in model.rows.iter().filter(|r| r.class != "success") {
        match out.iter_mut().find(|(class, ..)| *class == row.class) {
            Some((_, rows, _)) => rows.push(&row.row),
            None => out.push((&row.class, vec![&row.row], &row.action)),
        }
    }
    if !out.iter().any(|(class, ..)| *class == UNCLASSIFIED) {
        out.push((
            UNCLASSIFIED,
            Vec::new(),
            "No taxonomy row matched the outcome.",
        ));
    }
    out
}

pub fn error_rs(model: &Model) -> TokenStream {
    let classes = classes(model);
    let variants = classes.iter().map(|(class, rows, action)| {
        let text = match rows.as_slice() {
            [] => format!("`{class}`: {action}"),
            [row] => format!("`{class}` (row {row}): {action}"),
            rows => format!("`{class}` (rows {}): {action}", rows.join(", ")),
        };
        let docs = doc(&text);
        let variant = ident(&camel(class));
        quote!(#docs #variant,)
    });
    let names = classes.iter().map(|(class, ..)| {
        let variant = ident(&camel(class));
        quote!(ErrorClass::#variant => #class,)
    });
    let parse = classes
        .iter()
        .filter(|(class, ..)| *class != UNCLASSIFIED)
        .map(|(class, ..)| {
            let variant = ident(&camel(class));
            quote!(#class => ErrorClass::#variant,)
        });
    let all = classes.iter().map(|(class, ..)| {
        let variant = ident(&camel(class));
        quote!(ErrorClass::#variant)
    });
    let count = int(classes.len() as u64);
    let module_doc = inner_doc(
        "The error classes of the taxonomy (`POLICY.md`, Taxonomy), as a type: \
         `error.class()` is matched against a variant, not a string.",
    );
    let enum_doc = doc(&format!(
        "The class of a failed call of the {}: the taxonomy row that classified it decides it.",
        model.api.title
    ));
    let unclassified = ident(&camel(UNCLASSIFIED));
    quote! {
        #module_doc

        use std::fmt;

        #enum_doc
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorClass {
            #(#variants)*
        }

        impl ErrorClass {
            /// Every class, in the taxonomy's order.
            pub const ALL: [ErrorClass; #count] = [#(#all),*];

            /// The class as the spec and the logs spell it (`snake_case`).
            pub const fn as_str(self) -> &'static str {
                match self {
                    #(#names)*
                }
            }

            /// The class named `name`; a name outside the taxonomy is `Unclassified`.
            pub fn from_name(name: &str) -> ErrorClass {
                match name {
                    #(#parse)*
                    _ => ErrorClass::#unclassified,
                }
            }
        }

        impl fmt::Display for ErrorClass {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        /// The class of an [`Error`](sdk_runtime::Error) as this API's [`ErrorClass`].
        pub trait ErrorExt {
            /// The taxonomy class of the error.
            fn class(&self) -> ErrorClass;
        }

        impl ErrorExt for sdk_runtime::Error {
            fn class(&self) -> ErrorClass {
                ErrorClass::from_name(self.class_name())
            }
        }
    }
}
