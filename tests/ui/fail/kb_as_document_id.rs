// A KbId where a DocumentId is expected: every ID is its own type.
use grag_client::KbId;
use grag_client::types::UploadDocument;

fn main() {
    let kb = KbId::parse("kb-methodik").unwrap();
    let _ = UploadDocument::new(kb, "a.pdf", "application/pdf", "");
}
