//! `cargo xtask codegen [--check]`, `cargo xtask demo`, `cargo xtask bench [--quick]` and
//! `cargo xtask conformance`.

mod bench;
mod codegen_bench;
mod conformance;
mod summary;

use std::path::PathBuf;
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["codegen"] => codegen(false),
        ["codegen", "--check"] => codegen(true),
        ["demo"] => demo(),
        ["conformance"] => conformance::run(&root()),
        ["bench"] => bench::run(&root(), false),
        ["bench", "--quick"] => bench::run(&root(), true),
        // Run by `bench` in release: the generator's own row.
        ["bench-codegen", rest @ ..] => {
            for m in codegen_bench::measure(&root(), rest == ["--quick"]) {
                println!("{}", serde_json::to_string(&m).expect("JSON"));
            }
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!(
                "usage: cargo xtask codegen [--check] | cargo xtask demo | cargo xtask bench [--quick] | cargo xtask conformance"
            );
            ExitCode::from(2)
        }
    }
}

/// Runs the demo as a package of its own, so that `cargo xtask codegen`
/// never needs the generated crates to compile.
fn demo() -> ExitCode {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // cargo's own progress shows: a first build takes minutes, and silence
    // through it reads as a hang.
    eprintln!(
        "building and running the demo (cargo run -p grag-demo); the first build \
         compiles the workspace, about two minutes on two cores"
    );
    let status = Command::new(cargo)
        .current_dir(root())
        .args(["run", "--package", "grag-demo"])
        .status();
    match status {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => ExitCode::from(s.code().map_or(1, |c| c.clamp(1, 255) as u8)),
        Err(e) => {
            eprintln!("error: could not run cargo: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root: xtask lives one level below it.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits inside the workspace")
        .to_path_buf()
}

fn codegen(check: bool) -> ExitCode {
    let root = root();
    let started = std::time::Instant::now();
    let result = if check {
        sdk_codegen::sync::stale(&root)
    } else {
        sdk_codegen::sync::write(&root)
    };
    match result {
        Err(e) => {
            eprintln!("error: the spec does not generate:\n{e}");
            ExitCode::FAILURE
        }
        Ok(paths) if check && !paths.is_empty() => {
            for p in &paths {
                eprintln!("stale: {}", p.display());
            }
            eprintln!("generated/ is out of date with spec/: run `cargo xtask codegen`");
            ExitCode::FAILURE
        }
        Ok(paths) => {
            let verb = if check { "up to date" } else { "regenerated" };
            for p in &paths {
                println!("wrote {}", p.display());
            }
            println!("generated/ {verb} in {:.1?}", started.elapsed());
            ExitCode::SUCCESS
        }
    }
}
