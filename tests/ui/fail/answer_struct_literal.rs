// An answer type is `#[non_exhaustive]`: a field the spec adds must not break
// a consumer's mock, so a struct literal naming every field there is today
// does not compile outside the crate. `SearchHit::new` and the setters do.
use grag_client::types::SearchHit;

fn main() {
    let _ = SearchHit {
        chunk_id: "c-1".into(),
        document_id: None,
        text: "text".into(),
        score: 0.5,
        metadata: None,
    };
}
