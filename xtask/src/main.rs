//! `cargo xtask codegen [--check]`, `cargo xtask demo`, `cargo xtask bench [--quick]` and
//! `cargo xtask conformance [semver]`.

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
        ["conformance", "semver"] => conformance::run_semver(&root()),
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
                "usage: cargo xtask codegen [--check] | cargo xtask demo | cargo xtask bench [--quick] | cargo xtask conformance [semver]"
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
        sdk_codegen::sync::verdicts(&root).and_then(|verdicts| {
            let written = sdk_codegen::sync::write(&root)?;
            print_verdicts(&root, &verdicts);
            Ok(written)
        })
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
            eprintln!(
                "generated code is out of date with its spec (spec/, runtime/fixture/): run `cargo xtask codegen`"
            );
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

/// Each change of each crate's record with its class, and the version it
/// led to (the newest entry of the crate's `CHANGELOG.md`).
fn print_verdicts(
    root: &std::path::Path,
    verdicts: &[(PathBuf, Vec<sdk_codegen::record::Change>)],
) {
    for (dir, changes) in verdicts.iter().filter(|(_, c)| !c.is_empty()) {
        let changelog =
            std::fs::read_to_string(root.join(dir).join("CHANGELOG.md")).unwrap_or_default();
        let version = changelog
            .lines()
            .find_map(|l| l.strip_prefix("## "))
            .unwrap_or("?");
        println!(
            "{}: {} change(s), now version {version}",
            dir.display(),
            changes.len()
        );
        for c in changes {
            let class = match c.class {
                sdk_codegen::record::Class::Breaking => "breaking",
                sdk_codegen::record::Class::Behaviour => "behaviour",
                sdk_codegen::record::Class::Compatible => "compatible",
            };
            match &c.action {
                Some(action) => println!("  {class}: {}; to do: {action}", c.what),
                None => println!("  {class}: {}", c.what),
            }
        }
    }
}
