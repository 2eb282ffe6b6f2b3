//! `cargo xtask codegen [--check]` and `cargo xtask demo`.

mod demo;

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["codegen"] => codegen(false),
        ["codegen", "--check"] => codegen(true),
        ["demo"] => demo::run(),
        _ => {
            eprintln!("usage: cargo xtask codegen [--check] | cargo xtask demo");
            ExitCode::from(2)
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
