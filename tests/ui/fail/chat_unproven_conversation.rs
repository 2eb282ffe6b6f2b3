// A chat turn takes the proof that its conversation exists, not a bare ID:
// the platform silently drops turns for unknown conversations.
use grag_client::types::ChatRequest;
use grag_client::{ConversationId, Grag};

async fn turn(grag: &Grag) {
    let conversation = ConversationId::parse("c-1").unwrap();
    let body = ChatRequest::new(conversation.clone(), "Hallo");
    let _ = grag.bff().chat_stream(&conversation, &body).await;
}

fn main() {}
