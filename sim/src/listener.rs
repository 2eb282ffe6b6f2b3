//! The listener and its connections: HTTP/1.1 keep-alive on loopback, the
//! deploy churn's closed listener and cut connections, and a connection a
//! fault closes after its answer or before it.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::ServiceExt;

use crate::shared::Shared;

/// Which accepted TCP connection a request came on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnId(pub u64);

/// The address a connection came from: the egress address the platform's
/// limits are kept per.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub std::net::IpAddr);

/// Asks the connection a request came on to close: once its answer is out
/// (an unhandled error behind uvicorn: no `Connection: close` header, just
/// the FIN after the last byte), or at once, before a byte of the answer
/// (a process that died after the write took effect).
#[derive(Clone)]
pub(crate) struct CloseConn {
    after_answer: Arc<tokio::sync::Notify>,
    now: Arc<tokio::sync::Notify>,
}

impl CloseConn {
    fn new() -> Self {
        CloseConn {
            after_answer: Arc::new(tokio::sync::Notify::new()),
            now: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// A guard that closes the connection when it is dropped: put it in the
    /// answer's body, which hyper drops once the body is written, after the
    /// headers went out without `Connection: close`.
    pub(crate) fn after_answer(self) -> CloseAfter {
        CloseAfter(self.after_answer)
    }

    /// Drops the connection now, unanswered.
    pub(crate) fn now(&self) {
        self.now.notify_one();
    }
}

pub(crate) struct CloseAfter(Arc<tokio::sync::Notify>);

impl Drop for CloseAfter {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

enum Turn {
    Shutdown,
    Churn,
    Accepted(io::Result<(TcpStream, SocketAddr)>),
    Reaped,
}

/// What the accept loop goes on with after a churn turn.
enum AfterChurn {
    /// Serve on this listener (`None`: the port is tried again next turn).
    Serve(Option<TcpListener>),
    /// Stop: the simulator is stopping, or the port could not be bound again.
    Stop,
}

/// Accepts connections; on a deploy churn closes the listener, cuts every
/// open connection, and binds the same port again when the refusal ends.
pub(crate) async fn accept_loop(
    shared: Arc<Shared>,
    listener: TcpListener,
    addr: SocketAddr,
    router: Router,
) {
    let mut listener = Some(listener);
    let mut shutdown = shared.shutdown.clone();
    let mut conns = JoinSet::new();
    let mut next_conn = 0u64;
    loop {
        let turn = match &listener {
            Some(l) => tokio::select! {
                _ = crate::shared::stopped(&mut shutdown) => Turn::Shutdown,
                _ = shared.faults.churn_started.notified() => Turn::Churn,
                r = l.accept() => Turn::Accepted(r),
                Some(_) = conns.join_next(), if !conns.is_empty() => Turn::Reaped,
            },
            None => Turn::Churn,
        };
        match turn {
            Turn::Shutdown => break,
            Turn::Reaped | Turn::Accepted(Err(_)) => {}
            Turn::Accepted(Ok((stream, peer))) => {
                next_conn += 1;
                let _ = stream.set_nodelay(true);
                conns.spawn(connection(
                    stream,
                    ConnId(next_conn),
                    Peer(peer.ip()),
                    router.clone(),
                    shared.clone(),
                ));
            }
            Turn::Churn => {
                let taken = listener.take();
                match churn_turn(&shared, taken, &mut conns, &mut shutdown, addr).await {
                    AfterChurn::Serve(l) => listener = l,
                    AfterChurn::Stop => break,
                }
            }
        }
    }
    drop(listener);
    drain(conns, shared.config.shutdown_grace).await;
}

/// A churn turn: while the deploy refuses connections the listener is
/// closed and every open connection cut; once it ends, the same port is
/// bound again.
async fn churn_turn(
    shared: &Shared,
    listener: Option<TcpListener>,
    conns: &mut JoinSet<()>,
    shutdown: &mut watch::Receiver<bool>,
    addr: SocketAddr,
) -> AfterChurn {
    if shared.faults.refused_until(Instant::now()).is_none() {
        return AfterChurn::Serve(match listener {
            Some(l) => Some(l),
            None => rebind(addr).await,
        });
    }
    drop(listener);
    conns.abort_all();
    shared.listener_closed.send_replace(true);
    shared
        .log
        .note("deploy churn: listener closed, open connections cut");
    // Refused until the clock (timed churn) or a step ends it.
    while let Some(until) = shared.faults.refused_until(Instant::now()) {
        let clock = async {
            match until {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = crate::shared::stopped(shutdown) => break,
            _ = clock => {}
            _ = shared.faults.churn_stepped.notified() => {}
        }
    }
    if *shutdown.borrow() {
        return AfterChurn::Stop;
    }
    let listener = rebind(addr).await;
    shared.listener_closed.send_replace(false);
    shared.log.note(match listener {
        Some(_) => "deploy churn: listener open again",
        None => "deploy churn: could not bind the port again",
    });
    match listener {
        Some(l) => AfterChurn::Serve(Some(l)),
        None => AfterChurn::Stop,
    }
}

/// Waits for the open connections to end, at most `grace`, then cuts them.
async fn drain(mut conns: JoinSet<()>, grace: Duration) {
    let grace = tokio::time::sleep(grace);
    tokio::pin!(grace);
    loop {
        tokio::select! {
            next = conns.join_next() => if next.is_none() { break },
            _ = &mut grace => { conns.abort_all(); break }
        }
    }
}

/// Binds the port again (retrying a little while a port in TIME_WAIT frees up).
async fn rebind(addr: SocketAddr) -> Option<TcpListener> {
    for _ in 0..200 {
        if let Ok(l) = TcpListener::bind(addr).await {
            return Some(l);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// Serves one connection (HTTP/1.1, keep-alive) until it closes or the sim
/// stops. An idle connection is closed after [`SimConfig::keep_alive_timeout`]
/// (hyper's header-read timer runs from the moment the connection waits for
/// its next request), and one whose request asked for it ([`CloseConn`]) once
/// its answer is out.
async fn connection(
    stream: TcpStream,
    id: ConnId,
    peer: Peer,
    router: Router,
    shared: Arc<Shared>,
) {
    let close = CloseConn::new();
    let on_request = close.clone();
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(id);
        req.extensions_mut().insert(peer);
        req.extensions_mut().insert(on_request.clone());
        router.clone().oneshot(req.map(Body::new))
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(hyper_util::rt::TokioTimer::new());
    builder.header_read_timeout(shared.config.keep_alive_timeout);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let mut shutdown = shared.shutdown.clone();
    tokio::select! {
        done = conn.as_mut() => {
            if let Err(e) = done
                && e.is_timeout()
            {
                shared.log.note(format!(
                    "keep-alive timeout: connection {} closed idle",
                    id.0
                ));
            }
        }
        _ = close.now.notified() => {
            shared.log.note(format!(
                "connection {} dropped before the answer",
                id.0
            ));
        }
        _ = close.after_answer.notified() => {
            // The answer is written and flushed (hyper dropped its body in
            // the poll that wrote its end). From here the connection is not
            // polled: uvicorn logs the traceback, reads nothing, then closes
            // without having said so. A request that came meanwhile was never
            // seen; the close resets it.
            tokio::time::sleep(shared.config.unhandled_close_after).await;
            shared.log.note(format!(
                "unhandled error: connection {} closed after its answer",
                id.0
            ));
        }
        _ = crate::shared::stopped(&mut shutdown) => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}
