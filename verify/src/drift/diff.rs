//! The spec's shapes against the platform's: every difference, judged by what
//! the client would do with it. Pure: two [`Api`]s in, findings out.
//!
//! "Added" is what the platform has and the spec lacks, "removed" the other
//! way round. What we send must be something the platform accepts; what it
//! answers must be something the client decodes.

use std::collections::BTreeMap;

use serde::Serialize;

use super::shape::{Api, Enum, Field, Location, Operation, Param, Shape, Ty};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    RouteRemoved,
    RouteAdded,
    ParameterRemoved,
    ParameterAdded,
    RequiredChanged,
    BodyChanged,
    FieldRemoved,
    FieldAdded,
    FieldRetyped,
    NullableChanged,
    EnumValueRemoved,
    EnumValueAdded,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::RouteRemoved => "route removed",
            Kind::RouteAdded => "route added",
            Kind::ParameterRemoved => "parameter removed",
            Kind::ParameterAdded => "parameter added",
            Kind::RequiredChanged => "required changed",
            Kind::BodyChanged => "body changed",
            Kind::FieldRemoved => "field removed",
            Kind::FieldAdded => "field added",
            Kind::FieldRetyped => "field retyped",
            Kind::NullableChanged => "nullable changed",
            Kind::EnumValueRemoved => "enum value removed",
            Kind::EnumValueAdded => "enum value added",
        }
    }
}

/// One difference between the spec and the platform.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// `POST /workspaces/api/v1/kbs`.
    pub route: String,
    /// Where in the route: `query.group_by`, `request.owner`, `answer[].status`; empty for the route itself.
    pub at: String,
    pub kind: Kind,
    /// The client would fail (a request refused, an answer it cannot decode).
    pub breaking: bool,
    pub detail: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    /// We send, the platform reads.
    Request,
    /// The platform sends, we decode.
    Answer,
}

/// Every difference between `ours` (the spec) and `theirs` (the platform).
pub fn compare(ours: &Api, theirs: &Api) -> Vec<Finding> {
    let mut out = Out::default();
    for (key, op) in &ours.ops {
        let route = format!("{} {}", key.method, op.path);
        match theirs.ops.get(key) {
            Some(their) => operation(&mut out, &route, op, their),
            None => {
                let there: Vec<&str> = theirs
                    .ops
                    .keys()
                    .filter(|k| k.template == key.template)
                    .map(|k| k.method.as_str())
                    .collect();
                let detail = if there.is_empty() {
                    "the platform does not have this route".to_owned()
                } else {
                    format!("the platform answers only {} here", there.join(", "))
                };
                out.push(&route, "", Kind::RouteRemoved, true, detail);
            }
        }
    }
    for (key, op) in &theirs.ops {
        if !ours.ops.contains_key(key) {
            let route = format!("{} {}", key.method, op.path);
            let detail = "the spec does not have this route; the client never calls it".into();
            out.push(&route, "", Kind::RouteAdded, false, detail);
        }
    }
    out.0
}

#[derive(Default)]
struct Out(Vec<Finding>);

impl Out {
    fn push(&mut self, route: &str, at: &str, kind: Kind, breaking: bool, detail: String) {
        self.0.push(Finding {
            route: route.to_owned(),
            at: at.to_owned(),
            kind,
            breaking,
            detail,
        });
    }
}

fn operation(out: &mut Out, route: &str, ours: &Operation, theirs: &Operation) {
    params(out, route, ours, theirs);
    match (&ours.body, &theirs.body) {
        (Some((_, o)), Some((_, t))) => shapes(out, route, Dir::Request, "request", o, t),
        (None, Some((true, _))) => out.push(
            route,
            "request",
            Kind::BodyChanged,
            true,
            "the platform requires a JSON body; the client sends none".into(),
        ),
        (Some(_), None) => out.push(
            route,
            "request",
            Kind::BodyChanged,
            true,
            "the platform reads no JSON body; what the client sends is ignored".into(),
        ),
        _ => {}
    }
    if let (Some(o), Some(t)) = (&ours.answer, &theirs.answer) {
        shapes(out, route, Dir::Answer, "answer", o, t);
    }
}

/// Path parameters are matched by position (their names may differ),
/// query and header parameters by name.
fn params(out: &mut Out, route: &str, ours: &Operation, theirs: &Operation) {
    let on_path = |op: &Operation| -> Vec<Param> {
        let mut ps: Vec<Param> = op
            .params
            .iter()
            .filter(|p| p.location == Location::Path)
            .cloned()
            .collect();
        ps.sort_by_key(|p| op.path.find(&format!("{{{}}}", p.name)));
        ps
    };
    for (o, t) in on_path(ours).iter().zip(on_path(theirs).iter()) {
        shapes(
            out,
            route,
            Dir::Request,
            &format!("path.{}", o.name),
            &o.shape,
            &t.shape,
        );
    }
    let named = |op: &Operation| -> BTreeMap<(Location, String), Param> {
        op.params
            .iter()
            .filter(|p| p.location != Location::Path)
            .map(|p| ((p.location, p.name.clone()), p.clone()))
            .collect()
    };
    let (mine, their) = (named(ours), named(theirs));
    for ((location, name), t) in &their {
        let at = format!("{}.{name}", location.name());
        match mine.get(&(*location, name.clone())) {
            None if t.required => out.push(
                route,
                &at,
                Kind::ParameterAdded,
                true,
                "the platform requires it; the client never sends it".into(),
            ),
            None => out.push(
                route,
                &at,
                Kind::ParameterAdded,
                false,
                "optional on the platform; the client does not send it".into(),
            ),
            Some(o) => {
                if t.required && !o.required {
                    let detail = "required by the platform, optional in the spec".into();
                    out.push(route, &at, Kind::RequiredChanged, true, detail);
                }
                shapes(out, route, Dir::Request, &at, &o.shape, &t.shape);
            }
        }
    }
    // A header the platform does not declare may still be read by its
    // middleware (the scope headers are); a query parameter it does not
    // declare is dropped.
    for (location, name) in mine.keys() {
        if *location == Location::Query && !their.contains_key(&(*location, name.clone())) {
            let at = format!("query.{name}");
            let detail = "the client sends it; the platform no longer reads it".into();
            out.push(route, &at, Kind::ParameterRemoved, true, detail);
        }
    }
}

fn shapes(out: &mut Out, route: &str, dir: Dir, at: &str, ours: &Shape, theirs: &Shape) {
    if dir == Dir::Answer && theirs.nullable && !ours.nullable && ours.ty != Ty::Any {
        let detail = "the platform may answer null; the spec does not allow it".into();
        out.push(route, at, Kind::NullableChanged, true, detail);
    }
    match (&ours.ty, &theirs.ty) {
        (Ty::Any, _) | (_, Ty::Any) => {}
        (Ty::Bool, Ty::Bool) | (Ty::Int, Ty::Int) | (Ty::Num, Ty::Num) => {}
        // An integer fits where a number is read.
        (Ty::Int, Ty::Num) if dir == Dir::Request => {}
        (Ty::Num, Ty::Int) if dir == Dir::Answer => {}
        (Ty::Str(o), Ty::Str(t)) => enums(out, route, dir, at, o.as_ref(), t.as_ref()),
        (Ty::List(o), Ty::List(t)) => shapes(out, route, dir, &format!("{at}[]"), o, t),
        (Ty::Map(o), Ty::Map(t)) => shapes(out, route, dir, &format!("{at}{{}}"), o, t),
        (Ty::Obj(o), Ty::Obj(t)) => fields(out, route, dir, at, o, t),
        (Ty::Obj(_) | Ty::Map(_), Ty::Obj(_) | Ty::Map(_)) => {}
        (o, Ty::Union(ts)) if dir == Dir::Request && ts.iter().any(|t| same_kind(o, &t.ty)) => {}
        (Ty::Union(os), t) if dir == Dir::Answer && os.iter().any(|o| same_kind(&o.ty, t)) => {}
        (Ty::Union(os), Ty::Union(ts)) if kinds(os) == kinds(ts) => {}
        (o, t) => {
            let detail = format!("{} in the spec, {} on the platform", o.name(), t.name());
            out.push(route, at, Kind::FieldRetyped, true, detail);
        }
    }
}

fn same_kind(a: &Ty, b: &Ty) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

fn kinds(shapes: &[Shape]) -> Vec<&'static str> {
    let mut k: Vec<&'static str> = shapes.iter().map(|s| s.ty.name()).collect();
    k.sort_unstable();
    k
}

fn enums(
    out: &mut Out,
    route: &str,
    dir: Dir,
    at: &str,
    ours: Option<&Enum>,
    theirs: Option<&Enum>,
) {
    match (ours, theirs) {
        (Some(o), Some(t)) => {
            for v in t.values.difference(&o.values) {
                // A value the client never sends is harmless; one it must
                // decode is fatal unless the spec keeps unknown values.
                let breaking = dir == Dir::Answer && !o.open;
                let detail = match (dir, breaking) {
                    (Dir::Request, _) => "the platform also takes it".to_owned(),
                    (Dir::Answer, true) => {
                        "the platform may answer it; the client refuses values it does not know"
                            .to_owned()
                    }
                    (Dir::Answer, false) => {
                        "the platform may answer it; the spec's enum is open".to_owned()
                    }
                };
                out.push(
                    route,
                    &format!("{at}={v}"),
                    Kind::EnumValueAdded,
                    breaking,
                    detail,
                );
            }
            for v in o.values.difference(&t.values) {
                let breaking = dir == Dir::Request;
                let detail = if breaking {
                    "the client may send it; the platform refuses it".to_owned()
                } else {
                    "the platform no longer answers it".to_owned()
                };
                out.push(
                    route,
                    &format!("{at}={v}"),
                    Kind::EnumValueRemoved,
                    breaking,
                    detail,
                );
            }
        }
        (Some(o), None) if dir == Dir::Answer && !o.open => out.push(
            route,
            at,
            Kind::FieldRetyped,
            true,
            "an enum in the spec, any string on the platform".into(),
        ),
        (None, Some(_)) if dir == Dir::Request => out.push(
            route,
            at,
            Kind::FieldRetyped,
            true,
            "any string in the spec, an enum on the platform".into(),
        ),
        _ => {}
    }
}

fn fields(
    out: &mut Out,
    route: &str,
    dir: Dir,
    at: &str,
    ours: &BTreeMap<String, Field>,
    theirs: &BTreeMap<String, Field>,
) {
    for (name, o) in ours {
        let here = format!("{at}.{name}");
        match theirs.get(name) {
            None => {
                // An answer field the client requires, gone: it cannot decode.
                let breaking = dir == Dir::Answer && o.required;
                let detail = match dir {
                    Dir::Request => "the client sends it; the platform ignores it",
                    Dir::Answer if breaking => {
                        "the client requires it; the platform no longer answers it"
                    }
                    Dir::Answer => "optional in the spec; the platform no longer answers it",
                };
                out.push(route, &here, Kind::FieldRemoved, breaking, detail.into());
            }
            Some(t) => {
                let lost = match dir {
                    Dir::Request => t.required && !o.required,
                    Dir::Answer => o.required && !t.required,
                };
                if lost {
                    let detail = match dir {
                        Dir::Request => "required by the platform, optional in the spec",
                        Dir::Answer => "required in the spec, optional on the platform",
                    };
                    out.push(route, &here, Kind::RequiredChanged, true, detail.into());
                }
                shapes(out, route, dir, &here, &o.shape, &t.shape);
            }
        }
    }
    for (name, t) in theirs {
        if !ours.contains_key(name) {
            let breaking = dir == Dir::Request && t.required;
            let detail = match dir {
                Dir::Request if breaking => "the platform requires it; the client never sends it",
                Dir::Request => "optional on the platform; the client does not send it",
                Dir::Answer => "the platform answers it; the client ignores it",
            };
            out.push(
                route,
                &format!("{at}.{name}"),
                Kind::FieldAdded,
                breaking,
                detail.into(),
            );
        }
    }
}
