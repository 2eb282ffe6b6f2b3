//! `src/ids.rs`: one validated newtype per ID, and the scope traits. Each
//! newtype is one `sdk_runtime::id_newtype!` invocation, written as text:
//! neither prettyplease nor rustfmt lays out a macro's body, or turns its
//! `#[doc]` attributes into `///` lines, as a person writes them.

use proc_macro2::TokenStream;
use quote::quote;

use super::docs::{doc, inner_doc};
use crate::model::Model;

pub fn ids_rs(model: &Model) -> Result<String, String> {
    let pattern = model.api.id_rules.pattern.text;
    let reserved = model.api.id_rules.reserved_tenants.join("`, `");
    let tenant = id_type(
        "TenantId",
        "IdKind::Tenant",
        &format!(
            "The tenant every request is sent for (`{}`).\n\nRequired to build a client; never defaulted. \
             The platform's own tenants (`{reserved}`) are refused (policy {}).",
            model.api.headers.tenant,
            super::docs::source(&model.api.tenant_source)
        ),
    );
    let workspace = model
        .api
        .headers
        .workspace
        .map(|header| workspace(model, header));
    let (workspace, as_workspace) = workspace.unzip();
    let others = model.api.ids.iter().map(|id| {
        let name = &id.name;
        let rule = if id.opaque {
            format!(
                "Minted by the platform, so only what keeps a path safe is checked: non-empty, \
                 at most {} bytes, no `/`, no control characters, not `.` or `..`.",
                model.api.id_rules.opaque_max_len
            )
        } else {
            format!("Matches `{pattern}`.")
        };
        id_type(
            name,
            &format!("IdKind::Other(\"{name}\")"),
            &format!(
                "{} (policy {}).\n\n{rule}",
                id.doc.trim_end_matches('.'),
                super::docs::source(&id.source)
            ),
        )
    });
    let module_doc = inner_doc(&format!(
        "Validated identifiers. The IDs the client chooses match `{pattern}` (policy {}); \
         those the platform mints are only checked to be path-safe. The only way to get one is `parse`.",
        super::docs::source(&model.api.ids_source)
    ));
    let existing = model
        .routes()
        .any(|(_, r)| r.exists.is_some())
        .then(existing);
    let head = quote! {
        #module_doc

        use sdk_runtime::{Id, IdKind, id_newtype};

        use crate::policy::POLICY;
    };
    let mut out = super::pretty("src/ids.rs", head)?;
    for newtype in [tenant].into_iter().chain(workspace).chain(others) {
        out.push('\n');
        out.push_str(&newtype);
    }
    let tail = quote!(#as_workspace #existing);
    if !tail.is_empty() {
        out.push('\n');
        out.push_str(&super::pretty("src/ids.rs", tail)?);
    }
    Ok(out)
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
fn workspace(model: &Model, header: &str) -> (String, TokenStream) {
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
        "IdKind::Workspace",
        &format!("A workspace (`{header}`): the services {quoted} exist only behind one{section}."),
    );
    let message = format!("`{{Self}}` is not a workspace: {services} calls need a `&WorkspaceId`");
    // The note is a format string of rustc's: braces of the spec's text are literal.
    let note = format!(
        "parse one with `WorkspaceId::parse(\"ws-7\")?`: every call of these services carries {header}{}",
        section.replace('{', "{{").replace('}', "}}")
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

/// One `id_newtype!` invocation: the newtype, its `parse` and its traits.
fn id_type(name: &str, kind: &str, text: &str) -> String {
    let docs: String = text
        .trim()
        .lines()
        .map(|line| format!("    /// {line}").trim_end().to_owned() + "\n")
        .collect();
    format!(
        "id_newtype! {{\n{docs}    pub struct {name}(Id) {{\n        kind: {kind},\n        \
         rules: POLICY.ids,\n    }}\n}}\n"
    )
}
