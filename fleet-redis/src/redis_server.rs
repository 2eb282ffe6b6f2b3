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
    /// Arguments after the port and the no-persistence ones.
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts one on a free loopback port; panics if it does not listen.
    pub fn start() -> Self {
        Self::start_with(Vec::new())
    }

    /// A replica of `primary` (`--replicaof`), on a free loopback port.
    pub fn replica_of(primary: &RedisServer) -> Self {
        let of = ["--replicaof", "127.0.0.1", &primary.port.to_string()];
        Self::start_with(of.map(String::from).to_vec())
    }

    fn start_with(extra: Vec<String>) -> Self {
        let mut server = Self {
            child: None,
            port: free_port(),
            extra,
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
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        listening(self.port, "redis-server");
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

/// Waits until something listens on `port` (panics after 5 s).
fn listening(port: u16, what: &str) {
    for _ in 0..500 {
        if TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{what} did not listen on {port}");
}

/// A `redis-server --sentinel` of one's own watching a master, its
/// configuration (which Sentinel rewrites) in a directory of its own;
/// killed and its directory removed when dropped.
#[derive(Debug)]
pub struct Sentinel {
    child: Child,
    port: u16,
    dir: std::path::PathBuf,
}

impl Sentinel {
    /// Watches `primary` as `master`: down after `down_after` without an
    /// answer, a failover once `quorum` sentinels agree.
    pub fn start(master: &str, primary: &RedisServer, quorum: u32, down_after: Duration) -> Self {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("sentinel-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("the sentinel's directory");
        let conf = dir.join("sentinel.conf");
        let text = format!(
            "port {port}\nbind 127.0.0.1\ndir {}\n\
             sentinel monitor {master} 127.0.0.1 {} {quorum}\n\
             sentinel down-after-milliseconds {master} {}\n\
             sentinel failover-timeout {master} 10000\n\
             sentinel parallel-syncs {master} 1\n",
            dir.display(),
            primary.port,
            down_after.as_millis(),
        );
        std::fs::write(&conf, text).expect("sentinel.conf");
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server --sentinel starts");
        listening(port, "redis-sentinel");
        Sentinel { child, port, dir }
    }

    /// `host:port`, as a Sentinel URL lists it.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
