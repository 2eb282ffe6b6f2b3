//! The documents the suites upload, plain and as the base64 a request
//! carries. Shared with the `fleet` binary by a `#[path]` include.

use base64::Engine;

/// "Die Brücke wird alle sechs Jahre geprüft." in base64: the document the
/// stream and fleet tests upload.
pub const TEXT_B64: &str = "RGllIEJyw7xja2Ugd2lyZCBhbGxlIHNlY2hzIEphaHJlIGdlcHLDvGZ0Lg==";

/// A three-paragraph report, for the tests that read what was chunked.
pub const TEXT: &str = "Das Gutachten bewertet die Standsicherheit der Brücke.\n\n\
    Die Prüfung der Tragwerke erfolgt alle sechs Jahre nach DIN 1076.\n\n\
    Schäden an Lagern werden in der Schadensklasse 3 eingeordnet.";

/// `text` as the base64 an upload carries.
pub fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}
