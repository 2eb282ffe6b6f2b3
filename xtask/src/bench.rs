//! `cargo xtask bench [--quick]`: builds the bench binary and xtask in
//! release, runs every group as a child process (so xtask never links the
//! runtime or the generated crates), adds instruction counts when valgrind
//! is installed, prints one table and writes `target/bench/summary.json`.
//!
//! A part that cannot be measured (not built yet, or its group failed) is a
//! row that says so, never a missing line or an aborted run.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use crate::summary::{self, Goal, Measurement, On, Op, Row};

/// Rows whose part has not landed: the name prefix a measurement of it will
/// carry, its unit and why it is missing. When a group prints a measurement
/// with the prefix, the row is measured instead: for the job store, a
/// `job-store` group in `sdk-bench`, named in `bench/groups.txt`.
const PLANNED: [(&str, &str, &str); 2] = [
    (
        "job store postgres",
        "jobs/s",
        "SDK_QUEUE_PG_URL is not set: the PostgreSQL store needs a server \
         (SDK_QUEUE_PG_URL=postgres://postgres@127.0.0.1:5432/test)",
    ),
    (
        "fleet",
        "µs",
        "no Redis: set GRAG_REDIS_URL or install redis-server (the bench starts its own)",
    ),
];

/// The groups of `sdk-bench`, in the order they run and print: one file both
/// read, so xtask need not link the bench (and all it measures) to know them.
const GROUPS: &str = include_str!("../../bench/groups.txt");

fn groups() -> impl Iterator<Item = &'static str> {
    GROUPS.lines().map(str::trim).filter(|g| !g.is_empty())
}

/// The callgrind rows: ours and the peer as `sdk-bench micro` names them,
/// what the peer is, and operations per run (the second run does twice as many).
const CALLGRIND: [(&str, &str, &str, &str, u64); 8] = [
    (
        "pipeline small GET, 8 in flight, server on the same thread",
        "get-ours",
        "get-peer",
        "bare reqwest, same headers/pool/decode",
        500,
    ),
    (
        "admission, uncontended",
        "admission-ours",
        "admission-peer",
        "governor check + tokio semaphore",
        5_000,
    ),
    (
        "open breaker: a refused call",
        "fail-fast-ours",
        "fail-fast-peer",
        "a refused governor check",
        5_000,
    ),
    (
        "sse job progress: vs eventsource-stream",
        "sse-job-ours",
        "sse-job-eventsource-stream",
        "eventsource-stream",
        4,
    ),
    (
        "sse job progress: vs sseer",
        "sse-job-ours",
        "sse-job-sseer",
        "sseer",
        4,
    ),
    (
        "sse one 256 KiB line, 1 KiB chunks: vs sseer",
        "sse-line-256k-ours",
        "sse-line-256k-sseer",
        "sseer",
        4,
    ),
    (
        "sse one 1024 KiB line, 1 KiB chunks: vs sseer",
        "sse-line-1m-ours",
        "sse-line-1m-sseer",
        "sseer",
        2,
    ),
    (
        "sse line growth: ours at the 1 MiB cap vs at 128 KiB",
        "sse-line-1m-ours",
        "sse-line-128k-ours",
        "ours on a 128 KiB line (linear: ratio 1, quadratic: 8)",
        2,
    ),
];

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

fn progress(started: Instant, what: &str) {
    eprintln!("[bench {:>5.1}s] {what}", started.elapsed().as_secs_f64());
}

/// Builds `packages` in release; the executables that built, by name.
fn build(root: &Path, packages: &[&str]) -> Vec<(String, PathBuf)> {
    let mut command = cargo();
    command
        .current_dir(root)
        .args([
            "build",
            "--release",
            "--keep-going",
            "--message-format=json-render-diagnostics",
        ])
        .stdout(Stdio::piped());
    for p in packages {
        command.args(["-p", p]);
    }
    let Ok(output) = command.output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact")
        .filter_map(|v| {
            let name = v["target"]["name"].as_str()?.to_owned();
            let exe = v["executable"].as_str()?;
            Some((name, PathBuf::from(exe)))
        })
        .collect()
}

/// Runs `exe args`, stderr shown as it comes; the measurements it printed,
/// or why it failed.
fn measurements(exe: &Path, args: &[&str]) -> Result<Vec<Measurement>, String> {
    let output = Command::new(exe)
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("could not run {}: {e}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let parsed: Result<Vec<Measurement>, String> = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).map_err(|e| format!("unreadable line {l}: {e}")))
        .collect();
    if !output.status.success() {
        return Err(format!("`{}` failed: {}", args.join(" "), output.status));
    }
    parsed
}

/// Instructions callgrind counts for `target` run `n` times.
fn instructions(exe: &Path, target: &str, n: u64) -> Result<f64, String> {
    let output = Command::new("valgrind")
        .args([
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            // Only the measured loop: setup varies with time (TSC calibration).
            "--toggle-collect=sdk_bench::micro::measured*",
        ])
        .arg(exe)
        .args(["micro", target, &n.to_string()])
        .stdout(Stdio::null())
        .output()
        .map_err(|e| format!("valgrind: {e}"))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(format!("callgrind on {target}: {}", output.status));
    }
    stderr
        .lines()
        .find_map(|l| l.split("Collected :").nth(1))
        .and_then(|n| n.trim().parse::<f64>().ok())
        .ok_or_else(|| format!("no instruction count for {target}"))
}

/// Per operation: the difference of a run of `2n` and one of `n`, so the
/// setup (runtime, client, input) cancels out.
fn per_op(exe: &Path, target: &str, n: u64) -> Result<f64, String> {
    let once = instructions(exe, target, n)?;
    let twice = instructions(exe, target, 2 * n)?;
    Ok((twice - once) / n as f64)
}

fn valgrind_installed() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The goals in instructions, where the wall time also measures caches and
/// the machine's load: the growth row's, and against sseer the SSE rows' own
/// (1.2x its speed: at most 1/1.2 of its instructions per byte).
fn goal(ours: &str, peer: &str) -> Option<Goal> {
    let at_most = |value| {
        Some(Goal {
            on: On::Ratio,
            op: Op::AtMost,
            value,
        })
    };
    match (ours, peer) {
        ("sse-line-1m-ours", "sse-line-128k-ours") => at_most(2.0),
        (_, peer) if peer.ends_with("-sseer") => at_most(1.0 / 1.2),
        _ => None,
    }
}

fn callgrind(exe: &Path, quick: bool) -> Vec<Row> {
    let mut rows = Vec::new();
    // Ours parses the same input for both SSE rows: counted once.
    let mut counted: std::collections::HashMap<&str, Result<f64, String>> = Default::default();
    for (name, ours, peer, peer_is, n) in CALLGRIND {
        let n = if quick { (n / 4).max(2) } else { n };
        let name = format!("{name} (callgrind)");
        // Per byte for the parsers: each target's own input size.
        let bytes = |target: &str| {
            Command::new(exe)
                .args(["micro", "--bytes-per-op", target])
                .output()
                .ok()
                .and_then(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .trim()
                        .parse::<f64>()
                        .ok()
                })
        };
        let sse = ours.starts_with("sse-");
        let unit = if sse { "instr/byte" } else { "instr/op" };
        let (Some(per_ours), Some(per_peer)) = (
            if sse { bytes(ours) } else { Some(1.0) },
            if sse { bytes(peer) } else { Some(1.0) },
        ) else {
            rows.push(Row::failed(
                &name,
                "could not learn the bytes per operation",
            ));
            continue;
        };
        let mut count = |target: &'static str| {
            counted
                .entry(target)
                .or_insert_with(|| per_op(exe, target, n))
                .clone()
        };
        match (count(ours), count(peer)) {
            (Ok(o), Ok(p)) => {
                rows.push(Row::of(&Measurement {
                    name,
                    unit: unit.into(),
                    ours: vec![o / per_ours],
                    peer: vec![p / per_peer],
                    note: format!(
                        "instructions (valgrind --tool=callgrind) of {}x minus {n}x, per {}; peer: {peer_is}",
                        2 * n,
                        if unit == "instr/byte" { "byte" } else { "operation" }
                    ),
                    goal: goal(ours, peer),
                    added: false,
                }));
            }
            (Err(e), _) | (_, Err(e)) => rows.push(Row::failed(&name, &e)),
        }
    }
    rows
}

pub fn run(root: &Path, quick: bool) -> ExitCode {
    let started = Instant::now();
    progress(started, "building sdk-bench and xtask in release");
    let built = build(root, &["sdk-bench", "xtask"]);
    let exe = |name: &str| {
        built
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p.clone())
    };
    let flag: &[&str] = if quick { &["--quick"] } else { &[] };
    let mut rows = bench_rows(exe("sdk-bench").as_deref(), started, flag);
    progress(started, "running codegen");
    rows.extend(codegen_rows(exe("xtask").as_deref(), flag));
    for (prefix, unit, why) in PLANNED {
        if !rows.iter().any(|r| r.name.starts_with(prefix)) {
            rows.push(Row::missing(prefix, unit, None, why));
        }
    }
    let table = summary::table(&rows);
    println!("{table}");
    let dir = exe("sdk-bench")
        .or_else(|| exe("xtask"))
        .and_then(|p| Some(p.parent()?.parent()?.to_path_buf()))
        .unwrap_or_else(|| root.join("target"))
        .join("bench");
    write_summary(&dir, &rows, &table, started, quick)
}

/// Every group of `sdk-bench`, then the instruction counts when valgrind is here.
fn bench_rows(bench: Option<&Path>, started: Instant, flag: &[&str]) -> Vec<Row> {
    let Some(bench) = bench else {
        return vec![Row::failed(
            "runtime and SSE groups",
            "sdk-bench did not build in release (does generated/ compile?)",
        )];
    };
    let mut rows = Vec::new();
    for group in groups() {
        progress(started, &format!("running {group}"));
        let args: Vec<&str> = [group].iter().chain(flag).copied().collect();
        match measurements(bench, &args) {
            Ok(ms) => rows.extend(ms.iter().map(Row::of)),
            Err(e) => rows.push(Row::failed(group, &e)),
        }
    }
    if valgrind_installed() {
        progress(started, "counting instructions with callgrind");
        rows.extend(callgrind(bench, flag.contains(&"--quick")));
    } else {
        eprintln!("valgrind is not installed: no instruction counts");
        rows.push(Row::missing(
            "instruction counts (callgrind)",
            "instr/op",
            None,
            "valgrind is not installed on this machine",
        ));
    }
    rows
}

/// The generator's own row, measured by xtask in release.
fn codegen_rows(xtask: Option<&Path>, flag: &[&str]) -> Vec<Row> {
    let Some(xtask) = xtask else {
        return vec![Row::failed("codegen", "xtask did not build in release")];
    };
    let args: Vec<&str> = ["bench-codegen"].iter().chain(flag).copied().collect();
    match measurements(xtask, &args) {
        Ok(ms) => ms.iter().map(Row::of).collect(),
        Err(e) => vec![Row::failed("codegen", &e)],
    }
}

/// Writes `summary.json` and `table.md` into `dir`.
fn write_summary(dir: &Path, rows: &[Row], table: &str, started: Instant, quick: bool) -> ExitCode {
    let written = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(dir.join("summary.json"), summary::json(rows)))
        .and_then(|()| std::fs::write(dir.join("table.md"), table));
    let elapsed = started.elapsed().as_secs_f64();
    match written {
        Ok(()) => {
            println!(
                "wrote {} ({} rows) in {elapsed:.0} s{}",
                dir.join("summary.json").display(),
                rows.len(),
                if quick { ", --quick" } else { "" }
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: could not write {}: {e}", dir.display());
            ExitCode::FAILURE
        }
    }
}
