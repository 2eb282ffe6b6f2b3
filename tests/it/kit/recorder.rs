//! A tiny recording HTTP server on `127.0.0.1:0` for the integration tests:
//! it keeps every request it sees (method, path, query, headers) and answers
//! with whatever the test's responder says.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::response::Response;
use sdk_runtime::Endpoint;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub headers: HeaderMap,
}

impl Recorded {
    /// Every value of header `name` (case-insensitive), as text.
    pub fn header_values(&self, name: &str) -> Vec<String> {
        self.headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().expect("header value is ASCII").to_owned())
            .collect()
    }

    /// The one value of header `name`, `None` when absent; panics when repeated.
    pub fn header(&self, name: &str) -> Option<String> {
        let mut values = self.header_values(name);
        assert!(
            values.len() <= 1,
            "{} {}: header {name} sent {} times: {values:?}",
            self.method,
            self.path,
            values.len()
        );
        values.pop()
    }
}

type Responder = dyn Fn(&Recorded) -> Response + Send + Sync;

struct Shared {
    requests: Mutex<Vec<Recorded>>,
    responder: Box<Responder>,
}

/// The running server. Stop it with [`Recorder::stop`].
pub struct Recorder {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Recorder {
    /// Binds `127.0.0.1:0` and serves every method and path with `responder`.
    pub async fn start(responder: impl Fn(&Recorded) -> Response + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        let shared = Arc::new(Shared {
            requests: Mutex::new(Vec::new()),
            responder: Box::new(responder),
        });
        let app = Router::new()
            .fallback(record)
            .with_state(Arc::clone(&shared));
        let (shutdown, signal) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = signal.await;
                })
                .await
        });
        Recorder {
            addr,
            shared,
            shutdown,
            task,
        }
    }

    /// `http://127.0.0.1:<port>`, the base URL to hand the client.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request recorded since the last `take`, in arrival order.
    pub fn take(&self) -> Vec<Recorded> {
        std::mem::take(&mut *lock(&self.shared.requests))
    }

    /// Stops the server, checks the port is closed, and returns the requests
    /// recorded since the last `take`.
    pub async fn stop(self) -> Vec<Recorded> {
        let Recorder {
            addr,
            shared,
            shutdown,
            task,
        } = self;
        let _ = shutdown.send(());
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the recording server stops within 10 s")
            .expect("the server task does not panic")
            .expect("the server ends without an I/O error");
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "the recording server still accepts connections on {addr}"
        );
        std::mem::take(&mut *lock(&shared.requests))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn record(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let recorded = Recorded {
        method: request.method().as_str().to_owned(),
        path: request.uri().path().to_owned(),
        query: request.uri().query().map(str::to_owned),
        headers: request.headers().clone(),
    };
    let response = (shared.responder)(&recorded);
    lock(&shared.requests).push(recorded);
    response
}

/// The routes of `endpoints` whose method and templated path match a concrete
/// request: `{placeholder}` segments match any one non-empty segment.
pub fn routes_matching(
    endpoints: &[&'static Endpoint],
    method: &str,
    path: &str,
) -> Vec<&'static Endpoint> {
    endpoints
        .iter()
        .copied()
        .filter(|e| e.method.as_str() == method && template_matches(e.path, path))
        .collect()
}

fn template_matches(template: &str, path: &str) -> bool {
    let mut template = template.split('/');
    let mut path = path.split('/');
    loop {
        match (template.next(), path.next()) {
            (None, None) => return true,
            (Some(t), Some(p)) => {
                let placeholder = t.starts_with('{') && t.ends_with('}');
                if placeholder && p.is_empty() || !placeholder && t != p {
                    return false;
                }
            }
            _ => return false,
        }
    }
}
