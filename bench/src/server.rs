//! One minimal local hyper server for the pipeline rows: three fixed routes
//! and nothing else, on 127.0.0.1 port 0, on a runtime of its own thread.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

pub const KBS: &str = "/workspaces/api/v1/kbs";
pub const DOCUMENTS: &str = "/workspaces/api/v1/kbs/kb-1/documents";
pub const SETTINGS: &str = "/workspaces/api/v1/settings";

/// A document list of about 106 KB, as JSON.
pub fn documents_body() -> Bytes {
    let docs: Vec<serde_json::Value> = (0..800)
        .map(|i| {
            serde_json::json!({
                "document_id": format!("doc-{i:05}"),
                "filename": format!("pruefbericht-{i:05}-anlage.pdf"),
                "content_type": "application/pdf",
                "status": "indexed",
                "created_at": "2026-11-30T08:15:00Z",
            })
        })
        .collect();
    Bytes::from(serde_json::to_vec(&docs).expect("JSON"))
}

/// A settings document of about 1 MB, for the PUT.
pub fn settings_body() -> serde_json::Value {
    let rows: Vec<serde_json::Value> = (0..8000)
        .map(|i| serde_json::json!({"key": format!("setting-{i:06}"), "value": "x".repeat(100)}))
        .collect();
    serde_json::json!({ "rows": rows })
}

/// The running server; it stops with the process.
pub struct Server {
    pub addr: SocketAddr,
    _runtime: tokio::runtime::Runtime,
}

impl Server {
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }
}

pub fn start() -> Server {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let addr = runtime.block_on(listen());
    Server {
        addr,
        _runtime: runtime,
    }
}

/// Binds 127.0.0.1 port 0 and serves it on the current runtime, until the
/// runtime stops: on a thread of its own ([`start`]), or beside the client
/// on one current-thread runtime, where callgrind counts both.
pub async fn listen() -> SocketAddr {
    let small = Bytes::from_static(br#"[{"kb_id":"kb-1","name":"Methodik"}]"#);
    let documents = documents_body();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let (small, documents) = (small.clone(), documents.clone());
            let service = hyper::service::service_fn(move |request| {
                answer(request, small.clone(), documents.clone())
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

async fn answer(
    request: Request<hyper::body::Incoming>,
    small: Bytes,
    documents: Bytes,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let json = |body: Bytes| {
        Response::builder()
            .header("content-type", "application/json")
            .body(Full::new(body))
            .expect("a response")
    };
    Ok(match request.uri().path() {
        KBS => json(small),
        DOCUMENTS => json(documents),
        SETTINGS => {
            let length = match request.into_body().collect().await {
                Ok(body) => body.to_bytes().len(),
                Err(_) => 0,
            };
            json(Bytes::from(format!(r#"{{"stored":{length}}}"#)))
        }
        _ => Response::builder()
            .status(404)
            .body(Full::new(Bytes::new()))
            .expect("a response"),
    })
}
