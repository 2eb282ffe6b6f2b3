// A backend with both generated clients: each call's error is its own API's
// type, so `.class()` is never ambiguous, and each class is matched with a
// wildcard arm (a new taxonomy row may bring a new class). Built, never
// awaited: nothing here touches a network.
use core_client::{Core, SessionId};
use grag_client::{Grag, KbId, TenantId};

async fn both(grag: &Grag, core: &Core) -> (&'static str, &'static str) {
    let kb = KbId::parse("kb-1").unwrap();
    let grag_class = match grag.workspaces().list_documents(&kb).await {
        Ok(_) => "listed",
        Err(e) => match e.class() {
            grag_client::ErrorClass::FeatureDark => "dark",
            grag_client::ErrorClass::CircuitOpen => "open",
            _ => "other",
        },
    };
    let session = SessionId::parse("s-1").unwrap();
    let core_class = match core.sessions().get_session(&session).await {
        Ok(_) => "read",
        Err(e) => match e.class() {
            core_client::ErrorClass::ServerError => "5xx",
            _ => "other",
        },
    };
    (grag_class, core_class)
}

fn main() {
    let tenant = TenantId::parse("knoll").unwrap();
    let grag = Grag::new(grag_client::Config::new("http://127.0.0.1:1", "key", tenant)).unwrap();
    let tenant = core_client::TenantId::parse("knoll").unwrap();
    let core = Core::new(core_client::Config::new("http://127.0.0.1:1", "key", tenant)).unwrap();
    // The future is built to prove the calls type-check; it is dropped unpolled.
    drop(both(&grag, &core));
}
