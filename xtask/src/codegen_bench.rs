//! Row 8, run by `cargo xtask bench` as `xtask bench-codegen` in release:
//! the generator's wall time for both APIs (load, validate, emit, format,
//! in memory: nothing is written), and generated lines per endpoint.
//!
//! The peer of the wall time is what formatting alone cost before one
//! rustfmt process formatted a crate: the same Rust files through one
//! `rustfmt` process each, one after another, in the same run.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::summary::{Goal, Measurement, On, Op};

fn render(root: &Path) -> Vec<sdk_codegen::emit::File> {
    sdk_codegen::sync::render(root).unwrap_or_else(|e| panic!("the spec does not generate:\n{e}"))
}

fn rustfmt_each(files: &[sdk_codegen::emit::File]) {
    for file in files
        .iter()
        .filter(|f| f.path.extension().is_some_and(|e| e == "rs"))
    {
        let mut child = Command::new("rustfmt")
            .args(["--edition", "2024", "--emit", "stdout", "--quiet"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("rustfmt runs");
        child
            .stdin
            .take()
            .expect("piped stdin")
            .write_all(file.contents.as_bytes())
            .expect("rustfmt reads");
        assert!(child.wait().expect("rustfmt ends").success());
    }
}

fn ms(f: impl FnOnce()) -> f64 {
    let started = Instant::now();
    f();
    started.elapsed().as_secs_f64() * 1e3
}

/// Every API folder of `spec/` with its files, as the generator finds them.
fn apis(root: &Path) -> Vec<Vec<(PathBuf, String)>> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("spec"))
        .expect("spec/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("api.yaml").is_file())
        .collect();
    dirs.sort();
    dirs.iter()
        .map(|d| sdk_codegen::load::read_dir(d).expect("a readable spec"))
        .collect()
}

pub fn measure(root: &Path, quick: bool) -> Vec<Measurement> {
    let rounds = if quick { 3 } else { 7 };
    let files = render(root);
    let (mut ours, mut peer) = (Vec::new(), Vec::new());
    // A warm-up of each (page cache, rustfmt's binary), then interleaved rounds.
    ms(|| drop(render(root)));
    ms(|| rustfmt_each(&files));
    for round in 0..rounds {
        if round % 2 == 0 {
            ours.push(ms(|| drop(render(root))));
            peer.push(ms(|| rustfmt_each(&files)));
        } else {
            peer.push(ms(|| rustfmt_each(&files)));
            ours.push(ms(|| drop(render(root))));
        }
    }
    let rust_files = files
        .iter()
        .filter(|f| f.path.extension().is_some_and(|e| e == "rs"))
        .count();
    let wall = Measurement {
        name: "codegen: both APIs, load + validate + emit + format".into(),
        unit: "ms".into(),
        ours,
        peer,
        note: format!(
            "release, in memory; peer: the same {rust_files} Rust files through one rustfmt process each, in series (formatting alone, as it was done before)"
        ),
        goal: Some(Goal {
            on: On::Ours,
            op: Op::Below,
            value: 200.0,
        }),
        added: false,
    };

    let specs = apis(root);
    let endpoints: usize = specs
        .iter()
        .map(|files| {
            let model = sdk_codegen::model(files).expect("a valid spec");
            model.services.iter().map(|s| s.routes.len()).sum::<usize>()
        })
        .sum();
    let generated: usize = files
        .iter()
        .filter(|f| f.path.extension().is_some_and(|e| e == "rs"))
        .map(|f| f.contents.lines().count())
        .sum();
    let spec: usize = specs
        .iter()
        .flatten()
        .map(|(_, text)| text.lines().count())
        .sum();
    let per = |lines: usize| lines as f64 / endpoints as f64;
    let lines = Measurement {
        name: "codegen: lines per endpoint, generated Rust vs spec YAML".into(),
        unit: "lines".into(),
        ours: vec![per(generated)],
        peer: vec![per(spec)],
        note: format!(
            "{generated} generated Rust lines and {spec} spec lines for {endpoints} endpoints"
        ),
        goal: None,
        added: false,
    };
    vec![wall, lines]
}
