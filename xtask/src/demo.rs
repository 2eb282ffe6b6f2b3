//! `cargo xtask demo`: a narrated walk through the generated client.

use std::process::ExitCode;

pub fn run() -> ExitCode {
    eprintln!("the demo arrives with the simulator");
    ExitCode::FAILURE
}
