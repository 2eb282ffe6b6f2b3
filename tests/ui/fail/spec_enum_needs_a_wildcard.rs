// The spec's enums are `#[non_exhaustive]`: a value the spec adds later is a
// new variant, so a match over one needs a wildcard arm, even one that names
// every value there is today and `Unknown`.
use grag_client::types::ChatRole;

fn shown(role: ChatRole) -> &'static str {
    match role {
        ChatRole::System => "system",
        ChatRole::User => "user",
        ChatRole::Assistant => "assistant",
        ChatRole::Unknown(_) => "unknown",
    }
}

fn main() {
    let _ = shown(ChatRole::User);
}
