//! What a measurement prints: one JSON line per row on stdout, the samples
//! of every round for ours and the peer. `cargo xtask bench` turns them into
//! the table (medians, the ratio's median, min and max, the goal).

use serde::Serialize;

/// A goal on the median ratio (ours / peer) or on our median itself.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Goal {
    pub on: On,
    pub op: &'static str,
    pub value: f64,
}

#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum On {
    Ratio,
    Ours,
}

impl Goal {
    pub fn ratio(op: &'static str, value: f64) -> Option<Goal> {
        Some(Goal {
            on: On::Ratio,
            op,
            value,
        })
    }

    pub fn ours(op: &'static str, value: f64) -> Option<Goal> {
        Some(Goal {
            on: On::Ours,
            op,
            value,
        })
    }
}

/// One row: paired samples, round by round (ours[i] and peer[i] ran next to
/// each other), in `unit`.
#[derive(Debug, Serialize)]
pub struct Measurement {
    pub name: String,
    pub unit: &'static str,
    pub ours: Vec<f64>,
    pub peer: Vec<f64>,
    /// What "ours" and "peer" are, and anything the reader needs (an override).
    pub note: String,
    pub goal: Option<Goal>,
    /// Report the median of `ours - peer` as well (added latency).
    pub added: bool,
}

impl Measurement {
    pub fn new(name: impl Into<String>, unit: &'static str, samples: (Vec<f64>, Vec<f64>)) -> Self {
        Self {
            name: name.into(),
            unit,
            ours: samples.0,
            peer: samples.1,
            note: String::new(),
            goal: None,
            added: false,
        }
    }

    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = note.into();
        self
    }

    pub fn goal(mut self, goal: Option<Goal>) -> Self {
        self.goal = goal;
        self
    }

    pub fn added(mut self) -> Self {
        self.added = true;
        self
    }

    /// Prints the row as one JSON line.
    pub fn print(&self) {
        println!(
            "{}",
            serde_json::to_string(self).expect("a measurement serializes")
        );
    }
}
