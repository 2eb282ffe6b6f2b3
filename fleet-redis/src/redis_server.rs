//! A `redis-server` of one's own on a free loopback port, for the fleet's
//! tests, its demo scene and its bench: started and stopped by whoever
//! needs it, so it can be killed (SIGKILL) and started again on the same
//! port. Behind the `redis-server` feature (and in the runtime's own tests);
//! nothing in a client uses it.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Set (as `.ci/run` does) to fail instead of skipping without redis-server.
pub const REQUIRED: &str = "SDK_FLEET_REDIS_REQUIRED";

/// Whether redis-server can run here; without it, says how to run `suite`
/// (and fails when [`REQUIRED`] is set).
pub fn available(suite: &str) -> bool {
    let found = installed();
    if !found {
        assert!(
            std::env::var_os(REQUIRED).is_none(),
            "{REQUIRED} is set but redis-server is not installed"
        );
        eprintln!(
            "{suite}: skipped, redis-server is not installed (apt-get install redis-server; \
             set {REQUIRED}=1 to make this suite required)"
        );
    }
    found
}

/// Whether a `redis-server` binary answers `--version`.
pub fn installed() -> bool {
    Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A free loopback port (bound and let go).
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A running `redis-server`, killed when dropped.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
}

impl RedisServer {
    /// Starts one on a free loopback port; panics if it does not listen.
    pub fn start() -> Self {
        let mut server = Self {
            child: None,
            port: free_port(),
        };
        server.restart();
        server
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Whether it runs (not [`kill`](Self::kill)ed).
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// Starts it again on the same port (after [`kill`](Self::kill)); no
    /// persistence, so it comes back empty, as a restarted cache does.
    pub fn restart(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--dir", &std::env::temp_dir().display().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        for _ in 0..500 {
            if TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("redis-server did not listen on {}", self.port);
    }

    /// SIGSTOP: the server keeps its connections and answers nothing, as
    /// a Redis stuck in a long command or a paused VM does.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT: a frozen server answers again, the commands sent meanwhile
    /// first.
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("a running redis-server");
        let status = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("kill(1)");
        assert!(status.success(), "kill {signal} redis-server: {status}");
    }

    /// SIGKILL: no goodbye to any client.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
