//! Which generated types only the platform sends. Every struct is
//! `#[non_exhaustive]`; the role is recorded so that `api.lock` tells a type
//! a caller builds from one it only reads.

use std::collections::BTreeSet;

use crate::model::{Model, Returns, Shape, TypeExpr};

/// The types reachable from an answer or a stream event and from nothing a
/// caller sends (a path or query parameter, a body).
pub fn answer_only(model: &Model) -> BTreeSet<&str> {
    let mut sent = Vec::new();
    let mut answered = Vec::new();
    for route in model.services.iter().flat_map(|s| &s.routes) {
        let params = route.path_params.iter().chain(&route.query).map(|(_, t)| t);
        sent.extend(params.chain(&route.body));
        if let Returns::Body(ty) = &route.returns {
            answered.push(ty);
        }
    }
    let events: Vec<TypeExpr> = (model.streams.iter().flat_map(|s| &s.events))
        .map(|e| TypeExpr::Named(model.types[e.ty].name.clone()))
        .collect();
    answered.extend(&events);
    let sent = reachable(model, sent);
    let mut out = reachable(model, answered);
    out.retain(|name| !sent.contains(name));
    out
}

/// The named types `roots` reach through fields, lists, maps and options.
fn reachable<'m>(model: &'m Model, roots: Vec<&TypeExpr>) -> BTreeSet<&'m str> {
    let mut out = BTreeSet::new();
    let mut todo: Vec<TypeExpr> = roots.into_iter().cloned().collect();
    while let Some(ty) = todo.pop() {
        match ty {
            TypeExpr::List(inner) | TypeExpr::Map(inner) | TypeExpr::Optional(inner) => {
                todo.push(*inner)
            }
            TypeExpr::Named(name) => {
                let Some(t) = model.types.iter().find(|t| t.name == name) else {
                    continue;
                };
                if out.insert(t.name.as_str())
                    && let Shape::Struct(fields) = &t.shape
                {
                    todo.extend(fields.iter().map(|f| f.ty.clone()));
                }
            }
            _ => {}
        }
    }
    out
}
