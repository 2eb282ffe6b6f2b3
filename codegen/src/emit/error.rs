//! `src/error.rs`: the API's own error type and the taxonomy's error classes
//! as an enum, so a caller matches `error.class()` against a variant the
//! compiler checks, read from the row's index, not from a string.

use proc_macro2::TokenStream;
use quote::quote;

use super::docs::{doc, ident, inner_doc, int};
use crate::model::{Model, UNCLASSIFIED};

/// `src/error.rs`: the error classes as an enum and the API's `Error` over the runtime's.
pub fn error_rs(model: &Model) -> TokenStream {
    let title = &model.api.title;
    let module_doc = inner_doc(&format!(
        "The error of a call of the {title}, and the taxonomy's error classes (`POLICY.md`, \
         Taxonomy) as a type: `error.class()` is matched against a variant, read from the \
         row that classified the error, never from a string."
    ));
    let class = error_class(model);
    let classes = classes_impl(model);
    let error = error_type(model);
    quote! {
        #module_doc

        use std::fmt;

        #class
        #classes
        #error
    }
}

/// `ErrorClass`: one variant per class, each documented with its rows and action.
fn error_class(model: &Model) -> TokenStream {
    let classes = &model.classes;
    let variants = classes.iter().map(|c| {
        let (class, action) = (c.name, c.action);
        let text = match c.rows.as_slice() {
            [] => format!("`{class}`: {action}"),
            [row] => format!("`{class}` (row {row}): {action}"),
            rows => format!("`{class}` (rows {}): {action}", rows.join(", ")),
        };
        let docs = doc(&text);
        let variant = ident(&c.variant);
        quote!(#docs #variant,)
    });
    let names = classes.iter().map(|c| {
        let (variant, class) = (ident(&c.variant), c.name);
        quote!(ErrorClass::#variant => #class,)
    });
    let all = classes.iter().map(|c| {
        let variant = ident(&c.variant);
        quote!(ErrorClass::#variant)
    });
    let count = int(classes.len() as u64);
    let enum_doc = doc(&format!(
        "The class of a failed call of the {}: the taxonomy row that classified it \
         decides it. A new taxonomy row may bring a new class: a `match` needs a `_` arm.",
        model.api.title
    ));
    quote! {
        #enum_doc
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
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
        }

        impl fmt::Display for ErrorClass {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    }
}

/// What `ApiError` needs of this API's classes: the API's route table, the
/// class of each taxonomy row by its index (a success row never ends a call
/// in an error, so it reads as unclassified), and the unclassified class.
fn classes_impl(model: &Model) -> TokenStream {
    let by_row = model.rows.iter().map(|r| {
        let class = if r.success { UNCLASSIFIED } else { r.class };
        let variant = ident(model.variant(class));
        quote!(ErrorClass::#variant)
    });
    let unclassified = ident(model.variant(UNCLASSIFIED));
    quote! {
        impl sdk_runtime::ErrorClasses for ErrorClass {
            const ROUTES: &'static [&'static sdk_runtime::Endpoint] = &crate::policy::ENDPOINTS;
            const BY_ROW: &'static [Self] = &[#(#by_row),*];
            const UNCLASSIFIED: Self = ErrorClass::#unclassified;
        }
    }
}

/// The API's `Error`: the runtime's `ApiError` over this API's classes.
fn error_type(model: &Model) -> TokenStream {
    let error_doc = doc(&format!(
        "A failed call of the {}: the runtime's [`sdk_runtime::Error`] (every accessor \
         through `Deref`), with its class as this API's [`ErrorClass`]. Another API's error \
         is another type: it is never read as one of these classes.",
        model.api.title
    ));
    quote! {
        #error_doc
        pub type Error = sdk_runtime::ApiError<ErrorClass>;
    }
}
