//! A real nginx of the test's own in front of the simulator: its prefix,
//! configuration, logs, pid and temp paths in a directory of its own, on a
//! free loopback port, run in the foreground without a master process and
//! killed by its process id when dropped. The system's nginx service is never
//! used or touched.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Set by `.ci/run`: a missing nginx binary fails the suite instead of skipping it.
pub const REQUIRE: &str = "SDK_REQUIRE_NGINX";
/// The nginx binary to run, when it is not `nginx` on the `PATH` or `/usr/sbin/nginx`.
pub const BINARY: &str = "SDK_NGINX";

/// The nginx binary, or `None` (after saying how to run the suite) when it
/// is absent and not required. Panics when required and absent.
pub fn binary() -> Option<PathBuf> {
    let found = std::env::var_os(BINARY)
        .map(PathBuf::from)
        .into_iter()
        .chain(
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
                .map(|d| d.join("nginx")),
        )
        .chain([PathBuf::from("/usr/sbin/nginx")])
        .find(|p| p.is_file());
    let required = std::env::var(REQUIRE).is_ok_and(|v| !v.is_empty() && v != "0");
    match found {
        Some(path) => Some(path),
        None if required => panic!(
            "{REQUIRE} is set but no nginx binary was found (PATH, /usr/sbin/nginx or {BINARY}): \
             install it (apt-get install nginx-light)"
        ),
        // Written to the process's stderr, not through `eprintln!`, so a
        // passing test's line is not swallowed by the test harness.
        None => {
            use std::io::Write;
            let line = format!(
                "nginx suite skipped: install nginx (apt-get install nginx-light, or set {BINARY}=/path/to/nginx) \
                 and run `cargo test -p grag-tests --test it nginx::`; {REQUIRE}=1 makes it required\n"
            );
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
            None
        }
    }
}

/// How the proxy in front of the simulator is set up.
#[derive(Clone, Default)]
pub struct Setup {
    /// Directives at `http` level (e.g. a `limit_req_zone`).
    pub http: String,
    /// Directives at `server` level (`keepalive_timeout 2s;`); `$UPSTREAM`
    /// stands for the simulator's address (a `location` of its own).
    pub server: String,
    /// Directives in `location /` besides `proxy_pass` (`proxy_buffering off;`).
    pub location: String,
}

impl Setup {
    /// As a Plesk panel leaves it: nginx's defaults, so `proxy_buffering on`
    /// and HTTP/1.0 to the upstream.
    pub fn plesk_defaults() -> Setup {
        Setup::default()
    }

    /// What Plesk should set for the SSE routes: buffering off, HTTP/1.1
    /// with keep-alive to the upstream.
    pub fn unbuffered() -> Setup {
        Setup {
            location:
                "proxy_buffering off;\n proxy_http_version 1.1;\n proxy_set_header Connection \"\";"
                    .into(),
            ..Setup::default()
        }
    }

    pub fn http(mut self, directives: &str) -> Setup {
        self.http.push_str(directives);
        self.http.push('\n');
        self
    }

    pub fn server(mut self, directives: &str) -> Setup {
        self.server.push_str(directives);
        self.server.push('\n');
        self
    }

    pub fn location(mut self, directives: &str) -> Setup {
        self.location.push_str(directives);
        self.location.push('\n');
        self
    }
}

/// A running nginx. Killed (by its pid) when dropped.
pub struct Nginx {
    child: Child,
    dir: tempfile::TempDir,
    addr: SocketAddr,
}

impl Nginx {
    /// Starts `binary` proxying every path to `upstream` as `setup` says.
    pub fn start(binary: &Path, upstream: SocketAddr, setup: &Setup) -> Nginx {
        let mut last = String::new();
        // The free port is picked by binding port 0 and letting it go: another
        // process may take it in between, so a failed bind is tried again.
        for _ in 0..5 {
            let port = free_port();
            let dir = tempfile::tempdir().expect("a temp dir");
            let conf = dir.path().join("nginx.conf");
            std::fs::write(&conf, config(dir.path(), port, upstream, setup)).expect("nginx.conf");
            let mut child = Command::new(binary)
                .arg("-p")
                .arg(dir.path())
                .arg("-c")
                .arg(&conf)
                .arg("-e")
                .arg(dir.path().join("error.log"))
                .arg("-g")
                .arg("daemon off;")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("nginx starts");
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            let until = Instant::now() + Duration::from_secs(20);
            while Instant::now() < until {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if TcpStream::connect(addr).is_ok() {
                    return Nginx { child, dir, addr };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
            last = std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default();
            if let Some(mut stderr) = child.stderr.take() {
                use std::io::Read;
                let _ = stderr.read_to_string(&mut last);
            }
        }
        panic!("nginx did not start: {last}");
    }

    /// `http://127.0.0.1:<port>`: the base URL for a client behind the proxy.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The access log: one line per request,
    /// `<status> <connection> <connection_requests> <request_time> <uri>`.
    pub fn access(&self) -> Vec<Access> {
        std::fs::read_to_string(self.dir.path().join("access.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(Access::parse)
            .collect()
    }

    /// The access log once `until` holds for it (nginx writes a line when
    /// it finalizes the request, which may be after the client read the
    /// answer: a 413's line waits for the unread body to be discarded), or
    /// as it is after 10 s, for the assertion that follows to fail on.
    pub fn access_when(&self, until: impl Fn(&[Access]) -> bool) -> Vec<Access> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let lines = self.access();
            if until(&lines) || Instant::now() >= deadline {
                return lines;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// nginx's error log, for a failing test's message.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One line of the access log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub status: u16,
    /// nginx's connection serial number.
    pub connection: u64,
    /// Which request on its connection this was (1: a fresh connection).
    pub connection_requests: u64,
    pub uri: String,
}

impl Access {
    fn parse(line: &str) -> Option<Access> {
        let mut parts = line.split(' ');
        Some(Access {
            status: parts.next()?.parse().ok()?,
            connection: parts.next()?.parse().ok()?,
            connection_requests: parts.next()?.parse().ok()?,
            uri: parts.next()?.to_owned(),
        })
    }
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn config(dir: &Path, port: u16, upstream: SocketAddr, setup: &Setup) -> String {
    let dir = dir.display();
    format!(
        r#"# One process in the foreground: killed by its pid, nothing left behind.
master_process off;
worker_processes 1;
error_log {dir}/error.log info;
pid {dir}/nginx.pid;
events {{ worker_connections 256; }}
http {{
    log_format probe '$status $connection $connection_requests $uri';
    access_log {dir}/access.log probe;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    {http}
    server {{
        listen 127.0.0.1:{port};
        {server}
        location / {{
            proxy_pass http://{upstream};
            {location}
        }}
    }}
}}
"#,
        http = setup.http,
        server = setup.server.replace("$UPSTREAM", &upstream.to_string()),
        location = setup.location,
    )
}
