//! How the spec's names become Rust names. Lowering decides with these every
//! name the generated crate declares (a handle's type, a module, an error
//! class's variant, a stream's event type), checks it and keeps it in the
//! model; the emitter writes what the model holds.

/// Rust's strict and reserved keywords (edition 2024): as identifiers they
/// are written raw (`r#type`), except the [`UNRAWABLE`] ones.
pub const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern",
    "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub",
    "ref", "return", "self", "Self", "static", "struct", "super", "trait", "true", "type",
    "unsafe", "use", "where", "while", "abstract", "become", "box", "do", "final", "gen", "macro",
    "override", "priv", "try", "typeof", "unsized", "virtual", "yield",
];

/// Keywords a raw identifier cannot be.
pub const UNRAWABLE: &[&str] = &["self", "Self", "super", "crate"];

/// Whether `name` can be written as an identifier, raw if it is a keyword.
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name != "_"
        && !UNRAWABLE.contains(&name)
}

/// `snake_case`, `kebab-case` or words -> `CamelCase`.
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

/// `snake_case` or `kebab-case` -> `SCREAMING_SNAKE`: a route's static, an
/// index constant.
pub fn screaming(name: &str) -> String {
    name.replace('-', "_").to_ascii_uppercase()
}

/// A service's module (`kg-service` -> `kg_service`).
pub fn module(service: &str) -> String {
    service.replace('-', "_")
}

/// A stream's typed event enum (`orchestrator` -> `OrchestratorEvent`).
pub fn event_type(stream: &str) -> String {
    format!("{}Event", camel(stream))
}

/// The argument that takes the proof that an ID exists: the ID's field
/// without its `_id` (`project_id` -> `project`).
pub fn proof_argument(field: &str) -> &str {
    field.strip_suffix("_id").unwrap_or(field)
}

/// The method that creates an object or proves it is there already
/// (`create_project` -> `ensure_project`).
pub fn ensure(create: &str) -> String {
    create.replacen("create_", "ensure_", 1)
}

/// A field or an argument named as on the wire: one a raw identifier cannot
/// be gets a `_` (`self_`; a field keeps its wire name through `serde(rename)`).
pub fn argument(name: &str) -> String {
    if UNRAWABLE.contains(&name) {
        format!("{name}_")
    } else {
        name.to_owned()
    }
}
