//! Drift against documents a real FastAPI app produces: the ledger service
//! written as the spec has it, and with a route, a parameter, fields and
//! enum values moved (`tests/fastapi/ledger_app.py`). The app runs in a venv
//! the test makes itself (`target/tmp/fastapi-venv`) at the versions pinned
//! in `tests/fastapi/requirements.txt`.
//!
//! Without python3 (or without PyPI) the suite says how to run it and
//! passes; `GRAG_VERIFY_REQUIRE_FASTAPI=1` (set by `.ci/run`) makes that a failure.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use grag_verify::drift::{self, DriftReport, Kind, Override};
use grag_verify::progress::Progress;

const REQUIRE: &str = "GRAG_VERIFY_REQUIRE_FASTAPI";
const PYTHON: &str = "GRAG_VERIFY_PYTHON";

fn here() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The venv's python with the pinned packages, or `None` after saying why not.
fn python() -> Option<&'static Path> {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match VENV.get_or_init(make_venv) {
        Ok(p) => Some(p),
        Err(why) if std::env::var(REQUIRE).is_ok_and(|v| !v.is_empty() && v != "0") => {
            panic!("{REQUIRE} is set but the FastAPI venv could not be made: {why}")
        }
        Err(why) => {
            use std::io::Write;
            let line = format!(
                "fastapi drift suite skipped: {why}; install python3 with venv (apt-get install python3-venv, \
                 or set {PYTHON}) and run `cargo test -p grag-verify --test fastapi`; {REQUIRE}=1 makes it required\n"
            );
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
            None
        }
    }
}

fn make_venv() -> Result<PathBuf, String> {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fastapi-venv");
    let python = venv.join("bin").join("python");
    let requirements = here().join("tests/fastapi/requirements.txt");
    let wanted = std::fs::read_to_string(&requirements).map_err(|e| e.to_string())?;
    let stamp = venv.join("requirements.txt");
    if python.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&wanted) {
        return Ok(python);
    }
    let base = std::env::var(PYTHON).unwrap_or_else(|_| "python3".into());
    run(Command::new(&base)
        .args(["-m", "venv", "--clear"])
        .arg(&venv))?;
    run(Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "--no-input", "-r"])
        .arg(&requirements))?;
    std::fs::write(&stamp, wanted).map_err(|e| e.to_string())?;
    Ok(python)
}

fn run(command: &mut Command) -> Result<Vec<u8>, String> {
    let shown = format!("{command:?}");
    let out = command.output().map_err(|e| format!("{shown}: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{shown} failed: {}", err.trim()));
    }
    Ok(out.stdout)
}

/// The app's document in `variant`, written to a file; drift of the ledger against it.
fn drift_against(python: &Path, variant: &str) -> DriftReport {
    let app = here().join("tests/fastapi/ledger_app.py");
    let doc =
        run(Command::new(python).arg(&app).arg(variant)).expect("the app prints its document");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ledger.json");
    std::fs::write(&file, doc).unwrap();
    let over: Override = format!("ledger={}", file.display()).parse().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // No origin is reached: the ledger's document is the file.
    runtime
        .block_on(drift::run(
            "http://127.0.0.1:9",
            &[over],
            Some("ledger"),
            &Progress::quiet(),
        ))
        .unwrap()
}

#[test]
fn the_ledger_written_as_the_spec_has_it_shows_no_drift() {
    let Some(python) = python() else { return };
    let report = drift_against(python, "same");
    assert_eq!(report.services[0].unavailable, None, "{report}");
    assert_eq!(report.findings().count(), 0, "{report}");
}

#[test]
fn the_ledger_moved_on_shows_every_move_with_its_judgement() {
    let Some(python) = python() else { return };
    let report = drift_against(python, "moved");
    let mut found: Vec<(Kind, String, String, bool)> = report
        .findings()
        .map(|f| (f.kind, f.route.clone(), f.at.clone(), f.breaking))
        .collect();
    found.sort();
    let (spend, totals) = (
        "GET /ledger/api/v1/ledger/spend",
        "GET /ledger/api/v1/ledger/totals",
    );
    let mut expected: Vec<(Kind, String, String, bool)> = [
        (
            Kind::RouteAdded,
            "GET /ledger/api/v1/ledger/export",
            "",
            false,
        ),
        (Kind::ParameterAdded, totals, "query.period", true),
        (Kind::FieldAdded, spend, "answer.items[].share", false),
        (Kind::FieldRetyped, totals, "answer.calls", true),
        (
            Kind::EnumValueRemoved,
            spend,
            "query.group_by=provider",
            true,
        ),
        (
            Kind::EnumValueRemoved,
            spend,
            "answer.group_by=provider",
            false,
        ),
        (
            Kind::EnumValueAdded,
            spend,
            "query.group_by=pipeline",
            false,
        ),
        // The spec's grouping enum is open: a new value decodes.
        (
            Kind::EnumValueAdded,
            spend,
            "answer.group_by=pipeline",
            false,
        ),
    ]
    .into_iter()
    .map(|(k, r, a, b)| (k, r.to_owned(), a.to_owned(), b))
    .collect();
    expected.sort();
    assert_eq!(found, expected, "{report}");
    assert_eq!(report.exit(), grag_verify::Exit::Platform);
}
