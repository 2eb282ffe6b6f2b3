//! The measurements of `cargo xtask bench`, each against a peer in the same
//! run, interleaved over several rounds. Prints one JSON line per row (the
//! samples of every round); xtask makes the table and the summary.
//!
//! ```text
//! sdk-bench <group> [--quick]     groups: pipeline admission fairness sse sse-memory job-store fleet
//! sdk-bench micro <target> <n>    one micro-path n times, for callgrind
//! ```

mod admission;
mod alloc;
mod fairness;
mod fleet;
mod job_store;
mod micro;
mod pipeline;
mod report;
mod rounds;
mod server;
mod sse;
mod sse_memory;

use std::process::ExitCode;

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

/// How long to measure.
pub struct Opts {
    pub quick: bool,
    pub rounds: usize,
}

/// The groups, in the order `cargo xtask bench` runs them: one file both read.
const GROUPS: &str = include_str!("../groups.txt");

fn groups() -> impl Iterator<Item = &'static str> {
    GROUPS.lines().map(str::trim).filter(|g| !g.is_empty())
}

/// The measurement a group names.
fn group(name: &str) -> Option<fn(&Opts)> {
    Some(match name {
        "pipeline" => pipeline::run,
        "admission" => admission::run,
        "fairness" => fairness::run,
        "sse" => sse::run,
        "sse-memory" => sse_memory::run,
        "job-store" => job_store::run,
        "fleet" => fleet::run,
        _ => return None,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let quick = args.contains(&"--quick");
    let opts = Opts {
        quick,
        // Many short rounds: the median of per-round ratios rides out the
        // load of a shared machine better than a few long ones.
        rounds: if quick { 3 } else { 11 },
    };
    if let Some(run) = args.first().and_then(|name| group(name)) {
        run(&opts);
        return ExitCode::SUCCESS;
    }
    match args.as_slice() {
        ["sse-memory-child", case, total] => match total.parse() {
            Ok(total) => sse_memory::child(case, total),
            Err(_) => return usage(),
        },
        ["micro", "--bytes-per-op", target] => println!("{}", micro::bytes_per_op(target)),
        ["micro", target, n] => match n.parse() {
            Ok(n) => micro::run(target, n),
            Err(_) => return usage(),
        },
        _ => return usage(),
    }
    ExitCode::SUCCESS
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: sdk-bench <{}> [--quick] | sdk-bench micro <{}> <n>",
        groups().collect::<Vec<_>>().join("|"),
        micro::TARGETS.join("|")
    );
    ExitCode::from(2)
}

#[cfg(test)]
mod tests {
    use super::{group, groups};

    #[test]
    fn every_listed_group_runs_a_measurement() {
        let listed: Vec<&str> = groups().collect();
        assert!(listed.contains(&"pipeline"), "groups.txt reads {listed:?}");
        let unknown: Vec<&&str> = listed.iter().filter(|g| group(g).is_none()).collect();
        assert!(
            unknown.is_empty(),
            "listed, but no measurement: {unknown:?}"
        );
        let mut unique = listed.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), listed.len(), "a group listed twice");
    }
}
