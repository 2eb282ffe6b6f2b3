// A KbId where a DocumentId is expected: every ID is its own type.
use grag_client::KbId;
use grag_client::types::UploadDocument;

fn main() {
    let kb = KbId::parse("kb-methodik").unwrap();
    let _ = UploadDocument {
        document_id: kb,
        filename: "a.pdf".to_owned(),
        content_type: "application/pdf".to_owned(),
        content_base64: String::new(),
        metadata: None,
    };
}
