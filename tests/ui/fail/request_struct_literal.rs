// A request type is `#[non_exhaustive]` too: an optional field the spec adds
// must not break a call site, so a struct literal naming every field there is
// today does not compile outside the crate. `SearchRequest::new` and the
// setters do.
use grag_client::types::SearchRequest;

fn main() {
    let _ = SearchRequest {
        query_text: "Standsicherheit".into(),
        top_k: 3,
    };
}
