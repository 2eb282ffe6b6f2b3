// The proof that a conversation exists cannot be made by hand: only
// `ensure_conversation` hands one out.
use grag_client::{ConversationId, Existing};

fn main() {
    let conversation = ConversationId::parse("c-1").unwrap();
    let _ = Existing(conversation);
}
