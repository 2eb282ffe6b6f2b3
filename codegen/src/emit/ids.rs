//! `src/ids.rs`: one validated newtype per ID, and the scope traits.

use proc_macro2::TokenStream;
use quote::quote;

use super::docs::{doc, ident, inner_doc};
use crate::model::Model;

pub fn ids_rs(model: &Model) -> TokenStream {
    let pattern = &model.api.id_pattern;
    let reserved = model.api.reserved_tenants.join("`, `");
    let tenant = id_type(
        "TenantId",
        quote!(sdk_runtime::IdKind::Tenant),
        &format!(
            "The tenant every request is sent for (`{}`).\n\nRequired to build a client; never defaulted. \
             The platform's own tenants (`{reserved}`) are refused (policy §3).",
            model.api.headers.tenant
        ),
    );
    let workspace = model
        .api
        .headers
        .workspace
        .as_deref()
        .map(|header| workspace(model, header));
    let (workspace, as_workspace) = workspace.unzip();
    let others = model.api.ids.iter().map(|id| {
        let name = &id.name;
        let rule = if id.opaque {
            format!(
                "Minted by the platform, so only what keeps a path safe is checked: non-empty, \
                 at most {} bytes, no `/`, no control characters, not `.` or `..`.",
                model.api.opaque_max_len
            )
        } else {
            format!("Matches `{pattern}`.")
        };
        id_type(
            name,
            quote!(sdk_runtime::IdKind::Other(#name)),
            &format!(
                "{} (policy {}).\n\n{rule}",
                id.doc.trim_end_matches('.'),
                super::docs::source(&id.source)
            ),
        )
    });
    let module_doc = inner_doc(&format!(
        "Validated identifiers. The IDs the client chooses match `{pattern}` (policy §3.3); \
         those the platform mints are only checked to be path-safe. The only way to get one is `parse`."
    ));
    let existing = model
        .routes()
        .any(|(_, r)| r.exists.is_some())
        .then(existing);
    quote! {
        #module_doc

        use std::fmt;

        use sdk_runtime::{Id, InvalidId};

        use crate::policy::POLICY;

        #tenant
        #workspace
        #(#others)*
        #as_workspace
        #existing
    }
}

/// `Existing<I>`: an ID proven to name something the platform holds, for
/// routes that silently drop calls for unknown IDs (spec `exists:`).
fn existing() -> TokenStream {
    let docs = doc(
        "An ID the platform is known to hold. Only the create route that made it          (or found it there: a 409) hands one out (its `ensure_…` method); the routes          that need it take nothing else, because the platform silently drops their          calls for an unknown ID.",
    );
    quote! {
        #docs
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct Existing<I>(I);

        impl<I> Existing<I> {
            pub fn id(&self) -> &I {
                &self.0
            }

            pub(crate) fn vouched(id: I) -> Self {
                Existing(id)
            }
        }
    }
}

/// `WorkspaceId` and the sealed `AsWorkspace` that workspace handles take,
/// for an API with a workspace scope. The compile error of a call without
/// one names the services and the header.
fn workspace(model: &Model, header: &str) -> (TokenStream, TokenStream) {
    let services = model.api.workspace_services.join(" and ");
    let quoted = model
        .api
        .workspace_services
        .iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(" and ");
    let section = super::docs::workspace_section(model);
    let id = id_type(
        "WorkspaceId",
        quote!(sdk_runtime::IdKind::Workspace),
        &format!("A workspace (`{header}`): the services {quoted} exist only behind one{section}."),
    );
    let message = format!("`{{Self}}` is not a workspace: {services} calls need a `&WorkspaceId`");
    let note = format!(
        "parse one with `WorkspaceId::parse(\"ws-7\")?`: every call of these services carries {header}{section}"
    );
    let trait_ = quote! {
        /// Implemented by [`WorkspaceId`] alone: what a workspace-scoped handle needs.
        #[diagnostic::on_unimplemented(
            message = #message,
            label = "expected `&WorkspaceId` here",
            note = #note
        )]
        pub trait AsWorkspace: sealed::Sealed {
            /// The validated workspace.
            fn workspace_id(&self) -> &Id;
        }

        impl AsWorkspace for WorkspaceId {
            fn workspace_id(&self) -> &Id {
                &self.0
            }
        }

        mod sealed {
            pub trait Sealed {}
            impl Sealed for super::WorkspaceId {}
        }
    };
    (id, trait_)
}

fn id_type(name: &str, kind: TokenStream, text: &str) -> TokenStream {
    let ty = ident(name);
    let docs = doc(text);
    quote! {
        #docs
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct #ty(Id);

        impl #ty {
            /// Validates `value`; nothing unvalidated ever reaches a header or a path.
            pub fn parse(value: &str) -> Result<Self, InvalidId> {
                Id::parse(&POLICY.ids, #kind, value).map(Self)
            }

            pub fn as_str(&self) -> &str {
                self.0.as_str()
            }

            /// The runtime's view of this ID.
            pub fn id(&self) -> &Id {
                &self.0
            }
        }

        impl fmt::Display for #ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl fmt::Debug for #ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl std::str::FromStr for #ty {
            type Err = InvalidId;

            fn from_str(value: &str) -> Result<Self, InvalidId> {
                Self::parse(value)
            }
        }

        impl serde::Serialize for #ty {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for #ty {
            /// An ID in a response is validated like any other: a bad one is a decode error.
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let value = String::deserialize(deserializer)?;
                Self::parse(&value).map_err(serde::de::Error::custom)
            }
        }
    }
}
