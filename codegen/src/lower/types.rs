//! Checks and lowers the types of the service files: structs with typed
//! fields, and string enums whose every value is a variant of its own.

use std::collections::HashMap;

use marked_yaml::{Span, Spanned};

use crate::model::*;
use crate::naming;
use crate::spec::{self, Text};

use super::{Cx, Known, is_camel, is_snake};

impl Cx<'_> {
    pub(super) fn types(&mut self, services: &[spec::ServiceFile], api: &Api) -> Vec<TypeDef> {
        let mut seen: HashMap<String, String> = HashMap::new();
        let mut out = Vec::new();
        for service in services {
            for (name, t) in &service.types {
                out.push(self.type_def(&service.service, name, t, api, &mut seen));
            }
        }
        // Resolve field types now that every type name is known.
        let type_names: Vec<String> = out.iter().map(|t| t.name.clone()).collect();
        let names = Known {
            timeouts: vec![],
            retries: vec![],
            budgets: vec![],
            streams: vec![],
            ids: api.ids.iter().map(|i| i.name.as_str()).collect(),
            types: type_names.iter().map(|s| s.as_str()).collect(),
            details: vec![],
            alerts: vec![],
            states: vec![],
            pipeline_header: api.headers.pipeline.is_some(),
        };
        let written = services.iter().flat_map(|s| &s.types);
        for ((name, t), lowered) in written.zip(&mut out) {
            if let (Some(fields), Shape::Struct(lowered)) = (&t.fields, &mut lowered.shape) {
                self.fields(name, fields, lowered, &names);
            }
        }
        out
    }

    /// A type of `service`: a name of its own, and fields (typed later, by
    /// [`Self::fields`]) or values.
    fn type_def(
        &mut self,
        service: &Text,
        name: &Text,
        t: &spec::TypeEntry,
        api: &Api,
        seen: &mut HashMap<String, String>,
    ) -> TypeDef {
        let field = format!("types.{}", &**name);
        if !is_camel(name) {
            self.error(name, &field, "type names are CamelCase");
        } else if self.name(name, &field) {
            self.type_name(name, name, &field);
        }
        if api.ids.iter().any(|i| i.name == name.as_str())
            || ["TenantId", "WorkspaceId"].contains(&name.as_str())
        {
            self.error(name, &field, "this name is already an ID type");
        }
        if let Some(other) = seen.insert(name.to_string(), service.to_string()) {
            self.error(
                name,
                &field,
                format!("type `{}` is already defined by service `{other}`", &**name),
            );
        }
        let shape = match (&t.fields, &t.values) {
            (Some(fields), None) => Shape::Struct(
                (fields.keys())
                    .map(|f| Field {
                        name: f.to_string(),
                        ty: TypeExpr::String, // resolved by `fields`, once every name is known
                    })
                    .collect(),
            ),
            (None, Some(values)) if !values.is_empty() => Shape::Enum(self.variants(name, values)),
            _ => {
                self.error(
                    name,
                    &field,
                    "a type has either `fields` or a non-empty `values` list",
                );
                Shape::Enum(Vec::new())
            }
        };
        TypeDef {
            name: name.to_string(),
            doc: t.doc.to_string(),
            shape,
            service: service.to_string(),
            source: t.source.as_ref().map(|s| self.source(s, t.inferred)),
        }
    }

    /// The fields of the struct `name`: snake_case, none written as another
    /// (`self` is `self_`), each of a type the spec knows.
    fn fields(
        &mut self,
        name: &Text,
        fields: &indexmap::IndexMap<Text, Text>,
        lowered: &mut [Field],
        names: &Known,
    ) {
        for field in fields.keys() {
            let path = format!("types.{}.fields.{}", &**name, &**field);
            // `self` is written `self_` (serde keeps the wire name).
            if (fields.keys())
                .any(|other| other.as_str() == naming::argument(field) && other != field)
            {
                let message = format!(
                    "`{}` is written `{}_` in Rust, the name of another field",
                    &**field, &**field
                );
                self.error(field, &path, message);
            }
        }
        for ((field, ty), target) in fields.iter().zip(lowered) {
            let path = format!("types.{}.fields.{}", &**name, &**field);
            if !is_snake(field) {
                self.error(field, &path, "field names are snake_case");
            }
            target.ty = self.type_expr(ty, &path, names).unwrap_or(TypeExpr::Json);
        }
    }

    /// The values of a string enum, each a distinct wire string and a distinct
    /// Rust variant that leaves `Unknown` to the values the spec does not list.
    fn variants(&mut self, name: &Text, values: &[Spanned<spec::EnumValue>]) -> Vec<Variant> {
        let field = format!("types.{}.values", &**name);
        let mut wires = std::collections::HashSet::new();
        let mut variants: HashMap<String, &str> = HashMap::new();
        let mut out = Vec::new();
        for v in values {
            let at = v.span();
            for key in &v.unknown_keys {
                self.error(
                    key,
                    &field,
                    format!(
                        "unknown key `{}`: a value has `value`, `doc`, `source` and `inferred`",
                        &**key
                    ),
                );
            }
            let Some(wire) = v.value.as_deref() else {
                self.sources
                    .at(at, &field, "a value in the long form needs `value`");
                continue;
            };
            let variant = naming::camel(wire);
            if !wires.insert(wire) {
                self.sources
                    .at(at, &field, format!("the value `{wire}` is listed twice"));
                continue;
            }
            if !self.variant_name(at, &field, wire, &variant) {
                continue;
            }
            if let Some(other) = variants.insert(variant.clone(), wire) {
                self.sources.at(
                    at,
                    &field,
                    format!("the values `{other}` and `{wire}` both make the variant `{variant}`"),
                );
                continue;
            }
            let source = self.value_source(at, &field, v, wire);
            out.push(Variant {
                wire: wire.to_owned(),
                name: variant,
                doc: v.doc.clone(),
                source,
            });
        }
        out
    }

    /// Whether the value `wire` makes a variant of its own: a Rust name that
    /// is neither `Self` nor `Unknown` (the values the spec does not list).
    fn variant_name(&mut self, at: &Span, field: &str, wire: &str, variant: &str) -> bool {
        let message = if !is_camel(variant) {
            format!(
                "the value `{wire}` makes no Rust variant name: values are words of letters and digits, starting with a letter, joined by `_`, `-` or spaces"
            )
        } else if variant == "Self" {
            format!("the value `{wire}` would be the variant `Self`, a Rust keyword")
        } else if variant == "Unknown" {
            format!(
                "the value `{wire}` would be the variant `Unknown`, which holds the values this client does not know"
            )
        } else {
            return true;
        };
        self.sources.at(at, field, message);
        false
    }

    /// Where the policy says a value, if it says: a section, named when inferred.
    fn value_source(
        &mut self,
        at: &Span,
        field: &str,
        v: &spec::EnumValue,
        wire: &str,
    ) -> Option<Source> {
        if v.source.as_ref().is_some_and(|s| s.trim().is_empty()) {
            self.sources.at(
                at,
                field,
                "a value's `source` must name the policy section (e.g. \"§6.1\")",
            );
        }
        if v.inferred && v.source.is_none() {
            self.sources.at(
                at,
                field,
                format!("the value `{wire}` is `inferred` but names no `source`"),
            );
        }
        v.source.as_ref().map(|s| Source {
            section: s.clone(),
            inferred: v.inferred,
        })
    }

    pub(super) fn type_expr(
        &mut self,
        text: &Text,
        field: &str,
        names: &Known,
    ) -> Option<TypeExpr> {
        match parse_type(text, names) {
            Ok(t) => Some(t),
            Err(message) => {
                self.error(text, field, message);
                None
            }
        }
    }
}

/// Deepest nesting of a type expression (`list<map<T>?>` is 3): the real
/// specs nest 2, and the Rust type of a deeper one would reach syn, whose
/// parser recurses (10,000 levels overflow its stack).
pub const MAX_TYPE_DEPTH: usize = 8;

/// Parses a type expression such as `list<KbId>?`: the wrappers from the
/// outside in, then the named type, in one pass over the text.
fn parse_type(text: &str, names: &Known) -> Result<TypeExpr, String> {
    let whole = text;
    let mut text = text.trim();
    let mut wrappers: Vec<fn(Box<TypeExpr>) -> TypeExpr> = Vec::new();
    loop {
        if wrappers.len() > MAX_TYPE_DEPTH {
            return Err(format!(
                "the type nests deeper than {MAX_TYPE_DEPTH} levels of list<>, map<> and ?"
            ));
        }
        if let Some(inner) = text.strip_suffix('?') {
            wrappers.push(TypeExpr::Optional);
            text = inner.trim();
            continue;
        }
        let prefix = [
            ("list<", TypeExpr::List as fn(Box<TypeExpr>) -> TypeExpr),
            ("map<", TypeExpr::Map),
        ]
        .into_iter()
        .find_map(|(prefix, wrap)| text.strip_prefix(prefix).map(|inner| (inner, wrap)));
        match prefix {
            Some((inner, wrap)) => {
                let inner = inner
                    .strip_suffix('>')
                    .ok_or_else(|| format!("`{}` is missing its closing `>`", whole.trim()))?;
                wrappers.push(wrap);
                text = inner.trim();
            }
            None => break,
        }
    }
    let leaf = match text {
        "string" => TypeExpr::String,
        "integer" => TypeExpr::Integer,
        "number" => TypeExpr::Number,
        "boolean" => TypeExpr::Boolean,
        "json" => TypeExpr::Json,
        "TenantId" | "WorkspaceId" => TypeExpr::Id(text.to_string()),
        _ if names.ids.contains(&text) => TypeExpr::Id(text.to_string()),
        _ if names.types.contains(&text) => TypeExpr::Named(text.to_string()),
        _ => {
            let shown: String = text.chars().take(super::names::MAX_NAME).collect();
            return Err(format!(
                "unknown type `{shown}`: expected string, integer, number, boolean, json, an ID type, a type from `types`, list<T> or map<T>"
            ));
        }
    };
    Ok(wrappers
        .into_iter()
        .rev()
        .fold(leaf, |inner, wrap| wrap(Box::new(inner))))
}
