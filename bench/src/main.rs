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

pub const GROUPS: [&str; 7] = [
    "pipeline",
    "admission",
    "fairness",
    "sse",
    "sse-memory",
    "job-store",
    "fleet",
];

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
    match args.as_slice() {
        ["pipeline", ..] => pipeline::run(&opts),
        ["admission", ..] => admission::run(&opts),
        ["fairness", ..] => fairness::run(&opts),
        ["sse", ..] => sse::run(&opts),
        ["sse-memory", ..] => sse_memory::run(&opts),
        ["job-store", ..] => job_store::run(&opts),
        ["fleet", ..] => fleet::run(&opts),
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
        GROUPS.join("|"),
        micro::TARGETS.join("|")
    );
    ExitCode::from(2)
}
