// A client cannot be configured without a tenant.
use grag_client::{Config, Grag};

fn main() {
    let _ = Grag::new(Config::new("http://127.0.0.1:8080", "key"));
}
