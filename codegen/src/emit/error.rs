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
    let row_classes = row_classes(model);
    let error = error_type(model);
    let conversions = error_conversions();
    quote! {
        #module_doc

        use std::fmt;

        #class
        #row_classes
        #error
        #conversions
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

/// The class of each taxonomy row by its index; a success row never ends
/// a call in an error, so it reads as unclassified.
fn row_classes(model: &Model) -> TokenStream {
    let by_row = model.rows.iter().map(|r| {
        let class = if r.success { UNCLASSIFIED } else { r.class };
        let variant = ident(model.variant(class));
        quote!(ErrorClass::#variant)
    });
    let n_rows = int(model.rows.len() as u64);
    quote! {
        /// The class of each taxonomy row, by the row's index.
        const ROW_CLASSES: [ErrorClass; #n_rows] = [#(#by_row),*];
    }
}

/// The API's `Error`: the runtime's, with its class read as this API's.
fn error_type(model: &Model) -> TokenStream {
    let unclassified = ident(model.variant(UNCLASSIFIED));
    let api = &model.api.name;
    let error_doc = doc(&format!(
        "A failed call of the {}: the runtime's [`sdk_runtime::Error`] (every accessor \
         through `Deref`), with its class as this API's [`ErrorClass`]. Another API's error \
         is another type: it is never read as one of these classes.",
        model.api.title
    ));
    quote! {
        #error_doc
        pub struct Error(sdk_runtime::Error);

        impl Error {
            /// The taxonomy class: the class of the row that classified the
            /// error (by its index), `Unclassified` when none did. An error
            /// another API's policy classified (a runtime error converted by
            /// hand) is `Unclassified` too, never one of this API's classes.
            pub fn class(&self) -> ErrorClass {
                match self.0.row_index() {
                    Some(row) if self.0.api() == #api => ROW_CLASSES
                        .get(row.get())
                        .copied()
                        .unwrap_or(ErrorClass::#unclassified),
                    _ => ErrorClass::#unclassified,
                }
            }

            /// The runtime's error.
            pub fn into_inner(self) -> sdk_runtime::Error {
                self.0
            }
        }
    }
}

/// What does not vary with the spec: `Error` reads as the runtime's and
/// converts both ways.
fn error_conversions() -> TokenStream {
    quote! {
        impl std::ops::Deref for Error {
            type Target = sdk_runtime::Error;

            fn deref(&self) -> &sdk_runtime::Error {
                &self.0
            }
        }

        /// A runtime error of a call of this API (a stream's, a raw call's).
        impl From<sdk_runtime::Error> for Error {
            fn from(error: sdk_runtime::Error) -> Self {
                Error(error)
            }
        }

        impl From<Error> for sdk_runtime::Error {
            fn from(error: Error) -> Self {
                error.0
            }
        }

        impl fmt::Display for Error {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl fmt::Debug for Error {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl std::error::Error for Error {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                std::error::Error::source(&self.0)
            }
        }
    }
}
