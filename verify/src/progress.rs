//! Progress on stderr, one line per step with its elapsed time, so stdout
//! holds only the report.

use std::io::Write;
use std::time::Instant;

/// Writes progress lines unless quiet (the tests run it quiet).
#[derive(Debug, Clone)]
pub struct Progress {
    started: Instant,
    quiet: bool,
}

impl Progress {
    pub fn stderr() -> Progress {
        Progress {
            started: Instant::now(),
            quiet: false,
        }
    }

    pub fn quiet() -> Progress {
        Progress {
            started: Instant::now(),
            quiet: true,
        }
    }

    /// A line now.
    pub fn note(&self, text: &str) {
        self.line(&format!(
            "[{:6.2} s] {text}",
            self.started.elapsed().as_secs_f64()
        ));
    }

    /// A step that says when it began and, on [`Step::done`], how long it took.
    pub fn step(&self, what: &str) -> Step<'_> {
        self.note(&format!("{what} …"));
        Step {
            progress: self,
            what: what.to_owned(),
            began: Instant::now(),
        }
    }

    fn line(&self, text: &str) {
        if !self.quiet {
            let _ = writeln!(std::io::stderr().lock(), "{text}");
        }
    }
}

pub struct Step<'p> {
    progress: &'p Progress,
    what: String,
    began: Instant,
}

impl Step<'_> {
    pub fn done(self, outcome: &str) {
        let took = self.began.elapsed().as_secs_f64();
        self.progress
            .note(&format!("{} → {outcome} ({took:.2} s)", self.what));
    }
}
