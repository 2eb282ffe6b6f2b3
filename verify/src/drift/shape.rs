//! An OpenAPI document, 3.0 or 3.1, read into the shapes drift compares.
//!
//! A plain walk over `serde_json::Value`: the two versions differ in a few
//! spellings (`nullable: true` against a `null` type or `anyOf` member), and
//! one reader of both is shorter than two typed models, one of which
//! (`oas3`) refuses 3.0 documents.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

/// Schema nodes read from one document at most: a document whose `$ref`s
/// fan out further is refused rather than walked without end.
const MAX_NODES: usize = 200_000;
/// `$ref`s followed in one chain; a recursive type is `Any` below this.
const MAX_DEPTH: usize = 24;

/// Why a document could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DocError {
    /// No `openapi: 3.0.x / 3.1.x` at the top, or no `paths` object.
    NotOpenApi(String),
    /// A `$ref` that names nothing in the document.
    BadRef(String),
    /// More than [`MAX_NODES`] schema nodes.
    TooComplex,
}

impl std::fmt::Display for DocError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DocError::NotOpenApi(why) => write!(f, "not an OpenAPI 3.0/3.1 document: {why}"),
            DocError::BadRef(r) => write!(f, "`$ref` {r} names nothing in the document"),
            DocError::TooComplex => write!(f, "more than {MAX_NODES} schema nodes"),
        }
    }
}

impl std::error::Error for DocError {}

/// A string enum's values; `open` when the reader keeps unknown values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enum {
    pub values: BTreeSet<String>,
    pub open: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Ty {
    /// Anything (`json`, an untyped schema, a recursion cut short).
    Any,
    Bool,
    Int,
    Num,
    Str(Option<Enum>),
    List(Box<Shape>),
    Map(Box<Shape>),
    Obj(BTreeMap<String, Field>),
    /// Several non-null alternatives.
    Union(Vec<Shape>),
}

impl Ty {
    /// The kind's name in a report.
    pub fn name(&self) -> &'static str {
        match self {
            Ty::Any => "any",
            Ty::Bool => "boolean",
            Ty::Int => "integer",
            Ty::Num => "number",
            Ty::Str(None) => "string",
            Ty::Str(Some(_)) => "enum",
            Ty::List(_) => "array",
            Ty::Map(_) => "map",
            Ty::Obj(_) => "object",
            Ty::Union(_) => "union",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    pub ty: Ty,
    pub nullable: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub required: bool,
    pub shape: Shape,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Location {
    Path,
    Query,
    Header,
    Cookie,
}

impl Location {
    pub fn name(self) -> &'static str {
        match self {
            Location::Path => "path",
            Location::Query => "query",
            Location::Header => "header",
            Location::Cookie => "cookie",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub location: Location,
    /// Headers lower-cased (HTTP header names are case-insensitive).
    pub name: String,
    pub required: bool,
    pub shape: Shape,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Operation {
    /// The full path as the client sends it, placeholders named.
    pub path: String,
    pub params: Vec<Param>,
    /// The JSON request body: whether it is required, and its shape.
    pub body: Option<(bool, Shape)>,
    /// The JSON shape of the first 2xx answer that has one.
    pub answer: Option<Shape>,
}

/// A route: its method (upper case) and its path with every placeholder as `{}`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RouteKey {
    pub method: String,
    pub template: String,
}

impl std::fmt::Display for RouteKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.method, self.template)
    }
}

/// Every operation of a document, by route.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Api {
    pub ops: BTreeMap<RouteKey, Operation>,
}

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Reads `doc`. Paths are made absolute: a relative `servers[0].url` (FastAPI's
/// `root_path`) or else `mount` is put in front of a path not already under
/// it. With `tag`, only operations tagged so are read (the generated document
/// holds every service).
pub fn read(doc: &Value, mount: &str, tag: Option<&str>) -> Result<Api, DocError> {
    let version = doc.get("openapi").and_then(Value::as_str).unwrap_or("");
    if !(version.starts_with("3.0") || version.starts_with("3.1")) {
        return Err(DocError::NotOpenApi(format!(
            "`openapi` is {:?}",
            doc.get("openapi").unwrap_or(&Value::Null)
        )));
    }
    let paths = doc
        .get("paths")
        .and_then(Value::as_object)
        .ok_or_else(|| DocError::NotOpenApi("no `paths` object".into()))?;
    let root = server_root(doc).unwrap_or_else(|| mount.trim_end_matches('/').to_owned());
    let mut reader = Reader { doc, nodes: 0 };
    let mut api = Api::default();
    for (path, item) in paths {
        let Some(item) = item.as_object() else {
            continue;
        };
        let full = absolute(&root, path);
        let shared = item.get("parameters");
        for method in METHODS {
            let Some(op) = item.get(method) else {
                continue;
            };
            if tag.is_some_and(|t| !tagged(op, t)) {
                continue;
            }
            let key = RouteKey {
                method: method.to_ascii_uppercase(),
                template: template(&full),
            };
            let operation = reader.operation(&full, shared, op)?;
            api.ops.insert(key, operation);
        }
    }
    Ok(api)
}

/// The path of `servers[0].url`, when it is one (`/workspaces`) or an
/// absolute URL with a path.
fn server_root(doc: &Value) -> Option<String> {
    let url = doc.pointer("/servers/0/url")?.as_str()?;
    let path = match url.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("", |i| &rest[i..]),
        None if url.starts_with('/') => url,
        None => return None,
    };
    let path = path.trim_end_matches('/');
    (!path.is_empty()).then(|| path.to_owned())
}

fn absolute(root: &str, path: &str) -> String {
    if root.is_empty() || path == root || path.starts_with(&format!("{root}/")) {
        path.to_owned()
    } else {
        format!("{root}{path}")
    }
}

/// `path` with every `{name}` as `{}`: two documents may name a placeholder differently.
pub fn template(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut inside = false;
    for c in path.chars() {
        match c {
            '{' => {
                inside = true;
                out.push_str("{}");
            }
            '}' => inside = false,
            _ if inside => {}
            _ => out.push(c),
        }
    }
    out
}

fn tagged(op: &Value, tag: &str) -> bool {
    op.get("tags")
        .and_then(Value::as_array)
        .is_some_and(|tags| tags.iter().any(|t| t.as_str() == Some(tag)))
}

struct Reader<'d> {
    doc: &'d Value,
    nodes: usize,
}

impl<'d> Reader<'d> {
    fn operation(
        &mut self,
        path: &str,
        shared: Option<&'d Value>,
        op: &'d Value,
    ) -> Result<Operation, DocError> {
        let mut params: Vec<Param> = Vec::new();
        let declared = shared
            .and_then(Value::as_array)
            .into_iter()
            .chain(op.get("parameters").and_then(Value::as_array))
            .flatten();
        for p in declared {
            let p = self.follow(p, 0)?;
            if let Some(param) = self.param(p)? {
                // An operation's own parameter overrides the path item's.
                params.retain(|q| !(q.location == param.location && q.name == param.name));
                params.push(param);
            }
        }
        let body = match op.get("requestBody") {
            Some(b) => {
                let b = self.follow(b, 0)?;
                let required = b.get("required").and_then(Value::as_bool).unwrap_or(false);
                json_schema(b)
                    .map(|s| self.shape(s, 0).map(|shape| (required, shape)))
                    .transpose()?
            }
            None => None,
        };
        Ok(Operation {
            path: path.to_owned(),
            params,
            body,
            answer: self.answer(op)?,
        })
    }

    fn param(&mut self, p: &'d Value) -> Result<Option<Param>, DocError> {
        let location = match p.get("in").and_then(Value::as_str) {
            Some("path") => Location::Path,
            Some("query") => Location::Query,
            Some("header") => Location::Header,
            Some("cookie") => Location::Cookie,
            _ => return Ok(None),
        };
        let Some(name) = p.get("name").and_then(Value::as_str) else {
            return Ok(None);
        };
        let name = if location == Location::Header {
            name.to_ascii_lowercase()
        } else {
            name.to_owned()
        };
        let required = location == Location::Path
            || p.get("required").and_then(Value::as_bool).unwrap_or(false);
        let shape = match p.get("schema") {
            Some(s) => self.shape(s, 0)?,
            None => any(),
        };
        Ok(Some(Param {
            location,
            name,
            required,
            shape,
        }))
    }

    fn answer(&mut self, op: &'d Value) -> Result<Option<Shape>, DocError> {
        let Some(responses) = op.get("responses").and_then(Value::as_object) else {
            return Ok(None);
        };
        for (status, response) in responses {
            if !status.starts_with('2') {
                continue;
            }
            let response = self.follow(response, 0)?;
            if let Some(schema) = json_schema(response) {
                return self.shape(schema, 0).map(Some);
            }
        }
        Ok(None)
    }

    /// `value` with its `$ref` (to anywhere in the document) followed.
    fn follow(&mut self, value: &'d Value, depth: usize) -> Result<&'d Value, DocError> {
        let Some(reference) = value.get("$ref").and_then(Value::as_str) else {
            return Ok(value);
        };
        if depth > MAX_DEPTH {
            return Err(DocError::TooComplex);
        }
        let target = reference
            .strip_prefix('#')
            .and_then(|pointer| self.doc.pointer(pointer))
            .ok_or_else(|| DocError::BadRef(reference.to_owned()))?;
        self.follow(target, depth + 1)
    }

    fn shape(&mut self, schema: &'d Value, depth: usize) -> Result<Shape, DocError> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(DocError::TooComplex);
        }
        if depth > MAX_DEPTH {
            return Ok(any());
        }
        let Some(s) = schema.as_object() else {
            // `true`/`false` schemas (3.1): anything, or nothing we can read.
            return Ok(any());
        };
        if s.contains_key("$ref") {
            let target = self.follow(schema, 0)?;
            return self.shape(target, depth + 1);
        }
        let mut nullable = s.get("nullable").and_then(Value::as_bool) == Some(true);
        if let Some(all) = s.get("allOf").and_then(Value::as_array) {
            let mut merged = self.all_of(all, depth)?;
            merged.nullable |= nullable;
            return Ok(merged);
        }
        if let Some(alts) = s
            .get("anyOf")
            .or_else(|| s.get("oneOf"))
            .and_then(Value::as_array)
        {
            let mut shapes = Vec::new();
            for alt in alts {
                if is_null(alt) {
                    nullable = true;
                } else {
                    let shape = self.shape(alt, depth + 1)?;
                    nullable |= shape.nullable;
                    shapes.push(shape);
                }
            }
            let ty = match shapes.len() {
                0 => Ty::Any,
                1 => shapes.pop().map_or(Ty::Any, |s| s.ty),
                _ => Ty::Union(shapes),
            };
            return Ok(Shape { ty, nullable });
        }
        let types: Vec<&str> = match s.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        nullable |= types.contains(&"null");
        let types: Vec<&str> = types.into_iter().filter(|t| *t != "null").collect();
        let ty = match types.as_slice() {
            [] => self.untyped(s, depth)?,
            [one] => self.typed(one, s, depth)?,
            many => {
                let mut shapes = Vec::new();
                for t in many {
                    let ty = self.typed(t, s, depth)?;
                    shapes.push(Shape {
                        ty,
                        nullable: false,
                    });
                }
                Ty::Union(shapes)
            }
        };
        Ok(Shape { ty, nullable })
    }

    fn typed(&mut self, ty: &str, s: &'d Map<String, Value>, depth: usize) -> Result<Ty, DocError> {
        Ok(match ty {
            "boolean" => Ty::Bool,
            "integer" => Ty::Int,
            "number" => Ty::Num,
            "string" => Ty::Str(enum_of(s)),
            "array" => Ty::List(Box::new(match s.get("items") {
                Some(items) => self.shape(items, depth + 1)?,
                None => any(),
            })),
            "object" => self.object(s, depth)?,
            _ => Ty::Any,
        })
    }

    /// A schema without `type`: an enum, a `const`, an object by its
    /// properties, or anything.
    fn untyped(&mut self, s: &'d Map<String, Value>, depth: usize) -> Result<Ty, DocError> {
        if let Some(e) = enum_of(s) {
            return Ok(Ty::Str(Some(e)));
        }
        if s.contains_key("properties") || s.contains_key("additionalProperties") {
            return self.object(s, depth);
        }
        Ok(Ty::Any)
    }

    fn object(&mut self, s: &'d Map<String, Value>, depth: usize) -> Result<Ty, DocError> {
        let required: BTreeSet<&str> = s
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        match s.get("properties").and_then(Value::as_object) {
            Some(props) if !props.is_empty() => {
                let mut fields = BTreeMap::new();
                for (name, schema) in props {
                    let shape = self.shape(schema, depth + 1)?;
                    let required = required.contains(name.as_str());
                    fields.insert(name.clone(), Field { required, shape });
                }
                Ok(Ty::Obj(fields))
            }
            _ => match s.get("additionalProperties") {
                Some(v @ Value::Object(_)) => Ok(Ty::Map(Box::new(self.shape(v, depth + 1)?))),
                _ => Ok(Ty::Any),
            },
        }
    }

    /// `allOf`: one member is that member; several objects merge their fields.
    fn all_of(&mut self, all: &'d [Value], depth: usize) -> Result<Shape, DocError> {
        let mut shapes = Vec::new();
        for member in all {
            shapes.push(self.shape(member, depth + 1)?);
        }
        if shapes.len() == 1 {
            return Ok(shapes.remove(0));
        }
        let mut fields = BTreeMap::new();
        for shape in shapes {
            if let Ty::Obj(f) = shape.ty {
                fields.extend(f);
            }
        }
        Ok(Shape {
            ty: if fields.is_empty() {
                Ty::Any
            } else {
                Ty::Obj(fields)
            },
            nullable: false,
        })
    }
}

fn any() -> Shape {
    Shape {
        ty: Ty::Any,
        nullable: false,
    }
}

fn is_null(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("null")
}

fn enum_of(s: &Map<String, Value>) -> Option<Enum> {
    let scalar = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    };
    let values: BTreeSet<String> = match (s.get("enum"), s.get("const")) {
        (Some(Value::Array(vs)), _) => vs.iter().filter_map(scalar).collect(),
        (_, Some(c)) => scalar(c).into_iter().collect(),
        _ => return None,
    };
    let open = s.get("x-open-enum").and_then(Value::as_bool) == Some(true);
    Some(Enum { values, open })
}

/// The `application/json` schema of a request body or response.
fn json_schema(holder: &Value) -> Option<&Value> {
    let content = holder.get("content")?.as_object()?;
    content
        .iter()
        .find(|(media, _)| media.starts_with("application/json") || media.ends_with("+json"))
        .and_then(|(_, m)| m.get("schema"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nullable_is_read_in_both_spellings() {
        let v30 = json!({"openapi": "3.0.3", "paths": {"/a": {"get": {"responses": {"200": {
            "content": {"application/json": {"schema": {"type": "string", "nullable": true}}}}}}}}});
        let v31 = json!({"openapi": "3.1.0", "paths": {"/a": {"get": {"responses": {"200": {
            "content": {"application/json": {"schema": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}}}}}}});
        let v31_array = json!({"openapi": "3.1.0", "paths": {"/a": {"get": {"responses": {"200": {
            "content": {"application/json": {"schema": {"type": ["string", "null"]}}}}}}}}});
        let expected = Shape {
            ty: Ty::Str(None),
            nullable: true,
        };
        for doc in [v30, v31, v31_array] {
            let api = read(&doc, "", None).unwrap();
            let op = api.ops.values().next().unwrap();
            assert_eq!(op.answer.as_ref(), Some(&expected), "{doc}");
        }
    }

    #[test]
    fn relative_server_urls_and_mounts_make_paths_absolute() {
        let doc = json!({"openapi": "3.1.0", "servers": [{"url": "/ledger"}],
            "paths": {"/api/v1/totals/{pid}": {"get": {}}, "/ledger/health": {"get": {}}}});
        let api = read(&doc, "/elsewhere", None).unwrap();
        let routes: Vec<String> = api.ops.keys().map(|k| k.to_string()).collect();
        assert_eq!(
            routes,
            ["GET /ledger/api/v1/totals/{}", "GET /ledger/health"]
        );
        let bare = json!({"openapi": "3.0.2", "paths": {"/health": {"get": {}}}});
        let api = read(&bare, "/voyager", None).unwrap();
        assert!(api.ops.keys().any(|k| k.template == "/voyager/health"));
    }

    #[test]
    fn hostile_documents_are_refused_with_a_reason() {
        assert!(matches!(
            read(&json!({"openapi": "2.0", "paths": {}}), "", None),
            Err(DocError::NotOpenApi(_))
        ));
        assert!(matches!(
            read(&json!({"swagger": "2.0"}), "", None),
            Err(DocError::NotOpenApi(_))
        ));
        let dangling = json!({"openapi": "3.1.0", "paths": {"/a": {"post": {"requestBody": {
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Gone"}}}}}}}});
        assert_eq!(
            read(&dangling, "", None),
            Err(DocError::BadRef("#/components/schemas/Gone".into()))
        );
        // A self-referencing `$ref` loops; it is cut, not followed forever.
        let looped = json!({"openapi": "3.1.0", "components": {"schemas": {"A": {"$ref": "#/components/schemas/A"}}},
            "paths": {"/a": {"get": {"responses": {"200": {"content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/A"}}}}}}}}});
        assert_eq!(read(&looped, "", None), Err(DocError::TooComplex));
        // A recursive type is read down to a depth, then `Any`.
        let tree = json!({"openapi": "3.1.0", "components": {"schemas": {"Node": {"type": "object",
            "properties": {"children": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}}}}}},
            "paths": {"/a": {"get": {"responses": {"200": {"content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/Node"}}}}}}}}});
        assert!(read(&tree, "", None).is_ok());
    }

    #[test]
    fn a_fan_out_of_refs_is_refused_before_it_is_walked_out() {
        // Each level refers to the next eight times: 8^12 nodes down to the depth cut.
        let mut schemas = serde_json::Map::new();
        for i in 0..30 {
            let next = json!({"$ref": format!("#/components/schemas/L{}", i + 1)});
            let props: serde_json::Map<String, Value> =
                (0..8).map(|p| (format!("p{p}"), next.clone())).collect();
            schemas.insert(
                format!("L{i}"),
                json!({"type": "object", "properties": props}),
            );
        }
        schemas.insert("L30".into(), json!({"type": "string"}));
        let doc = json!({"openapi": "3.1.0", "components": {"schemas": schemas},
            "paths": {"/a": {"get": {"responses": {"200": {"content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/L0"}}}}}}}}});
        assert_eq!(read(&doc, "", None), Err(DocError::TooComplex));
    }
}
