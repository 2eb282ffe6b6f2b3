//! What only the PostgreSQL store has: input it refuses before anything runs. These need no
//! server: the refusals come before (a bad name or URL) or from the connection itself (a port
//! nobody listens on).

use sdk_queue::{PgStore, StoreError};

async fn refusal(url: &str, schema: &str) -> String {
    match PgStore::connect(url, schema).await {
        Err(StoreError::Open { what, reason }) => format!("{what}: {reason}"),
        Err(other) => panic!("expected Open, got {other:?}"),
        Ok(_) => panic!("{url} {schema} was accepted"),
    }
}

#[tokio::test]
async fn a_schema_name_that_is_not_a_plain_identifier_is_refused() {
    for schema in [
        "",
        "Jobs",
        "a-b",
        "q\"; DROP SCHEMA public CASCADE; --",
        &"a".repeat(64),
    ] {
        let refused = refusal("postgres://postgres@127.0.0.1:1/test", schema).await;
        assert!(refused.contains("lower-case letters"), "{refused}");
    }
}

#[tokio::test]
async fn a_malformed_url_is_refused() {
    let refused = refusal("postgres://postgres@127.0.0.1:notaport/test", "jobs").await;
    assert!(refused.contains("invalid"), "{refused}");
}

#[tokio::test]
async fn a_server_that_does_not_answer_is_refused_at_connect() {
    // A loopback port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let refused = refusal(
        &format!("postgres://postgres@127.0.0.1:{port}/test"),
        "jobs",
    )
    .await;
    assert!(
        refused.starts_with("PostgreSQL schema \"jobs\""),
        "{refused}"
    );
}
