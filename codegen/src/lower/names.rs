//! Names that become Rust identifiers, file names or a crate name: each is
//! checked here, so the emitter only ever sees names it can write.

use crate::naming::{KEYWORDS, UNRAWABLE};
use crate::spec::Text;

use super::Cx;

/// Longest name of anything the spec names (a service, route, field, class).
pub const MAX_NAME: usize = 64;

/// Names the generated crate root and its `types` module already use.
const TAKEN_TYPES: &[&str] = &[
    "Self",
    "String",
    "Option",
    "Vec",
    "Box",
    "Result",
    "Some",
    "None",
    "Ok",
    "Err",
    "Serialize",
    "Deserialize",
    "Config",
    "ErrorClass",
    "TenantId",
    "WorkspaceId",
    "AsWorkspace",
    "Existing",
    "Created",
    "Error",
    "InvalidId",
    "OutcomeKind",
    "Progress",
    "Events",
    "JobDone",
    "JobProgress",
    "JobUpdate",
    "Turn",
    "TurnUpdate",
    "Client",
    "ClientConfig",
    "ConfigError",
    "Policy",
    "Call",
];

/// Modules of the generated crate, and the crates its code names: a
/// service module of one of these names would shadow it.
const TAKEN_MODULES: &[&str] = &[
    "lib",
    "client",
    "error",
    "ids",
    "log",
    "policy",
    "types",
    "core",
    "std",
    "alloc",
    "sdk_runtime",
    "serde",
    "serde_json",
    "tracing",
];

/// Crate names a generated crate may not take: Rust's own, and its dependencies.
const TAKEN_CRATES: &[&str] = &[
    "std",
    "core",
    "alloc",
    "proc_macro",
    "test",
    "sdk-runtime",
    "serde",
    "serde_json",
    "tracing",
];

fn is_lower_word(s: &str, extra: &[char]) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || extra.contains(&c))
}

impl Cx<'_> {
    /// A name no longer than [`MAX_NAME`] that is not a keyword raw
    /// identifiers cannot write: `true` when it is fine.
    pub(super) fn name(&mut self, text: &Text, field: &str) -> bool {
        if text.len() > MAX_NAME {
            self.error(
                text,
                field,
                format!(
                    "a name is at most {MAX_NAME} bytes (this one is {})",
                    text.len()
                ),
            );
            return false;
        }
        if UNRAWABLE.contains(&text.as_str()) {
            self.error(
                text,
                field,
                format!("`{}` is a Rust keyword that no identifier may be", &**text),
            );
            return false;
        }
        true
    }

    /// A type the crate root or `types` declares (a client, a handle, a spec type).
    pub(super) fn type_name(&mut self, text: &Text, shown: &str, field: &str) -> bool {
        if TAKEN_TYPES.contains(&shown) {
            self.error(
                text,
                field,
                format!("`{shown}` is a name the generated crate already uses"),
            );
            return false;
        }
        true
    }

    /// `service:`: lower-case words joined by `-` or `_`, its module (`-` as
    /// `_`) no keyword and no module or crate the generated code uses.
    pub(super) fn service_name(&mut self, text: &Text) -> bool {
        if !self.name(text, "service") {
            return false;
        }
        let module = crate::naming::module(text);
        if !is_lower_word(text, &['-', '_']) || text.ends_with(['-', '_']) {
            self.error(
                text,
                "service",
                "a service name is lower-case letters, digits, `-` and `_`, starting with a letter",
            );
            false
        } else if KEYWORDS.contains(&module.as_str()) || TAKEN_MODULES.contains(&module.as_str()) {
            self.error(
                text,
                "service",
                format!(
                    "`{}` would name a module that is a keyword or shadows a crate or a module of the generated crate",
                    &**text
                ),
            );
            false
        } else {
            true
        }
    }

    /// The name of a policy item that becomes a constant (`R3` -> `R3`,
    /// `search` -> `SEARCH`): ASCII letters, digits and `_`, a letter first.
    pub(super) fn constant_name(&mut self, text: &Text, field: &str) -> bool {
        let mut chars = text.chars();
        let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            self.error(
                text,
                field,
                "a name is ASCII letters, digits and `_`, starting with a letter",
            );
        }
        ok && self.name(text, field)
    }

    /// `api:`: the folder's name, lower-case.
    pub(super) fn api_name(&mut self, text: &Text, folder: Option<&str>) {
        if !self.name(text, "api") {
            return;
        }
        if !is_lower_word(text, &['-', '_']) {
            self.error(
                text,
                "api",
                "an API name is lower-case letters, digits, `-` and `_`, starting with a letter",
            );
        } else if let Some(folder) = folder.filter(|f| *f != text.as_str()) {
            self.error(
                text,
                "api",
                format!(
                    "the API `{}` lives in `{folder}/`: name the folder after the API, or the API after its folder",
                    &**text
                ),
            );
        }
    }

    /// `crate:`: a cargo package name (letters, digits, `-`, `_`, a letter
    /// first), so it is a folder under `generated/` and nothing else.
    pub(super) fn crate_name(&mut self, text: &Text) {
        if !self.name(text, "crate") {
            return;
        }
        let mut chars = text.chars();
        let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !ok {
            self.error(
                text,
                "crate",
                "a crate name is ASCII letters, digits, `-` and `_`, starting with a letter (it is a folder under generated/)",
            );
        } else if KEYWORDS.contains(&text.replace('-', "_").as_str())
            || TAKEN_CRATES.contains(&text.as_str())
        {
            self.error(
                text,
                "crate",
                format!(
                    "`{}` is a Rust keyword or a crate the generated crate needs",
                    &**text
                ),
            );
        }
    }

    /// `title:`: one line of at most 200 bytes (it is written into Cargo.toml).
    pub(super) fn title(&mut self, text: &Text) {
        if text.trim().is_empty() || text.contains('\n') || text.len() > 200 {
            self.error(text, "title", "a title is one line of 1 to 200 bytes");
        }
    }
}
