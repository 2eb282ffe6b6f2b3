// Nor by spelling the config out and leaving the tenant away: its fields are private.
use grag_client::Config;

fn main() {
    let _ = Config {
        base_url: "http://127.0.0.1:8080".to_owned(),
        api_key: "key".to_owned(),
    };
}
