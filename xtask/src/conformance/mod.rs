//! `cargo xtask conformance`: the generated documents checked by tools
//! nobody here wrote. An OpenAPI 3.1 validator and Redocly's recommended
//! lint read every `generated/<crate>/openapi.json`, openapi-python-client
//! generates a Python client from each (the GRAG one then makes a few calls
//! against `grag-sim`), promtool checks and unit-tests every rule file, and
//! Schemathesis fuzzes the GRAG document against `grag-sim` on a free
//! loopback port. The Python tools live in a virtual environment the
//! command makes itself (`target/conformance/venv`), Redocly in
//! `target/conformance/redocly` (npm), all at pinned versions. Last, the
//! generator's semver verdicts are rehearsed on scratch copies and held to
//! cargo-semver-checks (`target/conformance/tools`, crates.io); `cargo xtask
//! conformance semver` runs that step alone, as it needs neither Python nor npm.

mod clients;
mod rehearsal;
mod semver;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// The pinned tools (PyPI).
const SCHEMATHESIS: &str = "schemathesis==4.32.5";
const VALIDATOR: &str = "openapi-spec-validator==0.9.0";
/// A non-Rust generator (PyPI).
const PY_CLIENT: &str = "openapi-python-client==0.29.1";
/// Redocly's CLI (npm), for its `recommended` ruleset.
const REDOCLY: &str = "@redocly/cli@2.77.0";
/// Interpreters tried in order for the venv (`CONFORMANCE_PYTHON` first).
/// CPython 3.11.7 crashed inside Schemathesis's coverage phase
/// ("AST constructor recursion depth mismatch"), so newer ones go first.
const PYTHONS: [&str; 3] = ["python3.12", "python3.13", "python3"];
/// Schemathesis's run: every check, a fixed seed, this many cases per operation.
const EXAMPLES: &str = "30";
const SEED: &str = "1";
/// The key the simulator accepts during the run.
const KEY: &str = "conformance";

/// One check: what it found, or why it failed.
type Step<'a> = dyn Fn() -> Result<String, String> + 'a;

pub fn run(root: &Path) -> ExitCode {
    let started = Instant::now();
    let dir = root.join("target/conformance");
    let steps: [(&str, &Step); 6] = [
        ("OpenAPI 3.1 validator", &|| validate(root, &dir)),
        ("Redocly recommended lint", &|| clients::redocly(root, &dir)),
        ("openapi-python-client against grag-sim", &|| {
            clients::python(root, &dir, &venv(&dir)?)
        }),
        ("promtool", &|| promtool(root)),
        ("Schemathesis against grag-sim", &|| fuzz(root, &dir)),
        (SEMVER, &|| semver::run(root, &dir)),
    ];
    report(started, &steps)
}

/// The name of the semver step.
const SEMVER: &str = "generator's semver verdicts against cargo-semver-checks";

/// The semver step alone.
pub fn run_semver(root: &Path) -> ExitCode {
    let dir = root.join("target/conformance");
    report(Instant::now(), &[(SEMVER, &|| semver::run(root, &dir))])
}

/// Runs `steps` in order, each reported; a failure if any failed.
fn report(started: Instant, steps: &[(&str, &Step)]) -> ExitCode {
    let mut failed = false;
    for (name, step) in steps {
        println!("== {name}");
        match step() {
            Ok(summary) => println!("ok: {summary}"),
            Err(e) => {
                eprintln!("FAILED: {name}: {e}");
                failed = true;
            }
        }
    }
    println!("conformance took {:.0?}", started.elapsed());
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The `openapi.json` of every generated crate.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(root.join("generated"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path().join("openapi.json"))
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn validate(root: &Path, dir: &Path) -> Result<String, String> {
    let venv = venv(dir)?;
    let docs = documents(root);
    if docs.is_empty() {
        return Err("no generated/*/openapi.json: run `cargo xtask codegen`".into());
    }
    for doc in &docs {
        run_tool(Command::new(venv.join("openapi-spec-validator")).arg(doc))?;
    }
    Ok(format!("{VALIDATOR} accepts {} documents", docs.len()))
}

fn promtool(root: &Path) -> Result<String, String> {
    if Command::new("promtool").arg("--version").output().is_err() {
        println!("promtool is absent: installing Debian's `prometheus` package");
        run_tool(Command::new("apt-get").arg("update"))?;
        run_tool(
            Command::new("apt-get")
                .args(["install", "-y", "--no-install-recommends", "prometheus"])
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )?;
    }
    let version = Command::new("promtool")
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_owned()
        })
        .unwrap_or_default();
    let mut crates = 0;
    for doc in documents(root) {
        let crate_dir = doc.parent().expect("a file has a folder");
        if !crate_dir.join("alerts.rules.yml").is_file() {
            continue;
        }
        run_tool(Command::new("promtool").current_dir(crate_dir).args([
            "check",
            "rules",
            "alerts.rules.yml",
        ]))?;
        run_tool(Command::new("promtool").current_dir(crate_dir).args([
            "test",
            "rules",
            "alerts.test.yml",
        ]))?;
        crates += 1;
    }
    Ok(format!(
        "{version}: check rules and test rules pass for {crates} rule files"
    ))
}

/// `grag-sim`, built and started on a free loopback port; its URL.
fn start_sim(root: &Path) -> Result<(Sim, String), String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    run_tool(
        Command::new(&cargo)
            .current_dir(root)
            .args(["build", "--quiet", "-p", "grag-sim"]),
    )?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free loopback port: {e}"))?
        .port();
    let sim = Sim(Command::new(root.join("target/debug/grag-sim"))
        .args(["--port", &port.to_string(), "--api-key", KEY])
        // The platform's strict setting: a scoped request without its
        // tenant is refused, as the document requires it (the default
        // serves it as tenant `default`, policy §3's hazard).
        .arg("--strict-tenant")
        // Compressed time: streams end in seconds, not minutes.
        .args(["--scale", "0.01"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("grag-sim does not start: {e}"))?);
    wait_for(port)?;
    Ok((sim, format!("http://127.0.0.1:{port}")))
}

fn fuzz(root: &Path, dir: &Path) -> Result<String, String> {
    let venv = venv(dir)?;
    let (sim, url) = start_sim(root)?;
    let report = dir.join("schemathesis");
    let _ = std::fs::remove_dir_all(&report);
    let doc = root.join("generated/grag-client/openapi.json");
    let started = Instant::now();
    let output = Command::new(venv.join("schemathesis"))
        .current_dir(dir)
        .arg("run")
        .arg(&doc)
        .args([
            "--url",
            &url,
            "--header",
            &format!("Authorization: Bearer {KEY}"),
        ])
        .args([
            "--checks",
            "all",
            "--seed",
            SEED,
            "--max-examples",
            EXAMPLES,
        ])
        .args([
            "--workers",
            "2",
            "--generation-database",
            "none",
            "--no-color",
        ])
        .args(["--report", "junit", "--report-dir"])
        .arg(&report)
        .output()
        .map_err(|e| format!("schemathesis does not run: {e}"))?;
    let took = started.elapsed();
    drop(sim);
    let text = String::from_utf8_lossy(&output.stdout);
    std::fs::write(dir.join("schemathesis.txt"), text.as_bytes())
        .map_err(|e| format!("cannot write the log: {e}"))?;
    let cases = text
        .lines()
        .find(|l| l.contains(" generated"))
        .map(str::trim)
        .unwrap_or("(no case count in the output)")
        .to_owned();
    if !output.status.success() {
        // The findings, as Schemathesis prints them.
        print!("{text}");
        return Err(format!(
            "{cases} (log: target/conformance/schemathesis.txt)"
        ));
    }
    Ok(format!(
        "{SCHEMATHESIS}, every check, seed {SEED}, {EXAMPLES} cases per operation: {cases} in {:.0?}",
        took
    ))
}

/// The simulator, stopped when dropped.
struct Sim(Child);

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until the simulator accepts connections.
fn wait_for(port: u16) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!(
        "grag-sim did not listen on 127.0.0.1:{port} within 30 s"
    ))
}

/// The venv's `bin/`, made and filled with the pinned tools when needed.
fn venv(dir: &Path) -> Result<PathBuf, String> {
    let venv = dir.join("venv");
    let bin = venv.join("bin");
    let pinned = |tool: &str, pin: &str| {
        let version = pin.split("==").nth(1).unwrap_or("");
        Command::new(bin.join("pip"))
            .args(["show", tool])
            .output()
            .is_ok_and(|o| {
                String::from_utf8_lossy(&o.stdout).contains(&format!("Version: {version}\n"))
            })
    };
    if pinned("schemathesis", SCHEMATHESIS)
        && pinned("openapi-spec-validator", VALIDATOR)
        && pinned("openapi-python-client", PY_CLIENT)
    {
        return Ok(bin);
    }
    if !bin.join("pip").is_file() {
        let python = std::env::var("CONFORMANCE_PYTHON")
            .ok()
            .into_iter()
            .chain(PYTHONS[..2].iter().map(|p| p.to_string()))
            .chain(pyenv_pythons())
            .chain(std::iter::once(PYTHONS[2].to_owned()))
            .find(|p| {
                Command::new(p)
                    .arg("--version")
                    .output()
                    .is_ok_and(|o| o.status.success())
            })
            .ok_or("no python3 found (set CONFORMANCE_PYTHON)")?;
        println!("making {} with {python}", venv.display());
        run_tool(Command::new(&python).args(["-m", "venv"]).arg(&venv))?;
    }
    println!("installing {SCHEMATHESIS}, {VALIDATOR} and {PY_CLIENT} from PyPI");
    run_tool(Command::new(bin.join("pip")).args([
        "install",
        "--quiet",
        SCHEMATHESIS,
        VALIDATOR,
        PY_CLIENT,
    ]))?;
    Ok(bin)
}

/// pyenv's CPython 3.12 and newer (`$PYENV_ROOT/versions/3.1x.y/bin/python3`),
/// newest first: a machine with pyenv may not put them on `PATH`.
fn pyenv_pythons() -> Vec<String> {
    let root = std::env::var("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|_| std::env::var("HOME").map(|h| Path::new(&h).join(".pyenv")));
    let Ok(Ok(entries)) = root.map(|r| std::fs::read_dir(r.join("versions"))) else {
        return Vec::new();
    };
    let mut found: Vec<((u32, u32), String)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let mut parts = name.split('.').map(|p| p.parse::<u32>().ok());
            let (Some(Some(3)), Some(Some(minor))) = (parts.next(), parts.next()) else {
                return None;
            };
            let python = e.path().join("bin/python3");
            (minor >= 12 && python.is_file()).then(|| ((3, minor), python.display().to_string()))
        })
        .collect();
    found.sort();
    found.into_iter().rev().map(|(_, p)| p).collect()
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Runs `command`, its output shown; an error unless it succeeds.
fn run_tool(command: &mut Command) -> Result<(), String> {
    let shown = format!("{command:?}");
    let status = command.status().map_err(|e| format!("{shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown}: {status}"))
    }
}
