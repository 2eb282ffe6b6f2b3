//! The pure part of `cargo xtask bench`: measurements in (the samples of
//! every round, as the bench binaries print them), rows out, then the table
//! and `summary.json`.
//!
//! Every figure is ours against a peer of the same run: the row's ratio is
//! the median of the per-round ratios `ours[i] / peer[i]`, with their min and
//! max; ours and peer are the medians of their samples.

use serde::{Deserialize, Serialize};

/// One line of a bench binary's output.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Measurement {
    pub name: String,
    pub unit: String,
    pub ours: Vec<f64>,
    pub peer: Vec<f64>,
    #[serde(default)]
    pub note: String,
    #[serde(default)]
    pub goal: Option<Goal>,
    /// Also report the median of `ours - peer` (added latency).
    #[serde(default)]
    pub added: bool,
}

/// A goal on the median ratio or on our median.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq)]
pub struct Goal {
    pub on: On,
    pub op: Op,
    pub value: f64,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum On {
    Ratio,
    Ours,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
pub enum Op {
    #[serde(rename = ">=")]
    AtLeast,
    #[serde(rename = "<=")]
    AtMost,
    #[serde(rename = "<")]
    Below,
    #[serde(rename = "==")]
    Equal,
}

impl Op {
    fn holds(self, value: f64, bound: f64) -> bool {
        match self {
            Op::AtLeast => value >= bound,
            Op::AtMost => value <= bound,
            Op::Below => value < bound,
            Op::Equal => value == bound,
        }
    }

    fn symbol(self) -> &'static str {
        match self {
            Op::AtLeast => "≥",
            Op::AtMost => "≤",
            Op::Below => "<",
            Op::Equal => "=",
        }
    }
}

impl Goal {
    /// How the table and the JSON state it: `ratio ≥ 0.97`, `< 32 MiB`.
    pub fn describe(&self, unit: &str) -> String {
        match self.on {
            On::Ratio => format!("ratio {} {}", self.op.symbol(), number(self.value)),
            On::Ours => format!("{} {} {unit}", self.op.symbol(), number(self.value)),
        }
    }
}

/// One row of the table and of `summary.json`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Row {
    pub name: String,
    pub ours: Option<f64>,
    pub peer: Option<f64>,
    pub unit: String,
    /// Median of the per-round ratios; `None` when every peer sample is 0.
    pub ratio: Option<f64>,
    pub goal: Option<String>,
    /// `None` without a goal, or when the row could not be measured.
    pub met: Option<bool>,
    pub ratio_min: Option<f64>,
    pub ratio_max: Option<f64>,
    pub rounds: usize,
    /// Median of `ours - peer`, for rows that report what we add.
    pub added: Option<f64>,
    pub note: String,
    /// Why the row has no figures: a part not built yet, a group that failed.
    pub missing: Option<String>,
}

pub fn median(samples: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let mid = s.len() / 2;
    Some(if s.len() % 2 == 1 {
        s[mid]
    } else {
        (s[mid - 1] + s[mid]) / 2.0
    })
}

impl Row {
    pub fn of(m: &Measurement) -> Row {
        let ratios: Vec<f64> = m
            .ours
            .iter()
            .zip(&m.peer)
            .filter(|(_, p)| **p != 0.0)
            .map(|(o, p)| o / p)
            .collect();
        let ratio = median(&ratios);
        let ours = median(&m.ours);
        let on = |goal: &Goal| match goal.on {
            On::Ratio => ratio,
            On::Ours => ours,
        };
        let added: Vec<f64> = m.ours.iter().zip(&m.peer).map(|(o, p)| o - p).collect();
        Row {
            name: m.name.clone(),
            ours,
            peer: median(&m.peer),
            unit: m.unit.clone(),
            ratio,
            goal: m.goal.map(|g| g.describe(&m.unit)),
            met: m
                .goal
                .map(|g| on(&g).is_some_and(|v| g.op.holds(v, g.value))),
            ratio_min: ratios.iter().copied().reduce(f64::min),
            ratio_max: ratios.iter().copied().reduce(f64::max),
            rounds: m.ours.len().min(m.peer.len()),
            added: if m.added { median(&added) } else { None },
            note: m.note.clone(),
            missing: None,
        }
    }

    /// A row without figures: `why` says what is missing.
    pub fn missing(name: &str, unit: &str, goal: Option<String>, why: &str) -> Row {
        Row {
            name: name.into(),
            ours: None,
            peer: None,
            unit: unit.into(),
            ratio: None,
            goal,
            met: None,
            ratio_min: None,
            ratio_max: None,
            rounds: 0,
            added: None,
            note: String::new(),
            missing: Some(why.into()),
        }
    }

    /// A measured row whose goal could not be checked counts as missed.
    pub fn failed(name: &str, why: &str) -> Row {
        Row {
            met: Some(false),
            ..Row::missing(name, "", None, why)
        }
    }
}

/// Three significant digits or so, without exponent noise.
pub fn number(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 || a == a.trunc() && a < 1e15 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 0.1 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn cell(v: Option<f64>) -> String {
    v.map_or_else(|| "—".into(), number)
}

/// The table, as Markdown (it reads in a terminal and pastes into
/// `bench/README.md`), and the rows' notes under it, each once for its run of rows.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| # | row | ours | peer | unit | ratio (min–max) | ours − peer | goal | met |\n\
         |---|-----|-----:|-----:|------|-----------------|------------:|------|-----|\n",
    );
    for (i, r) in rows.iter().enumerate() {
        let ratio = match (r.ratio, r.ratio_min, r.ratio_max) {
            (Some(m), Some(lo), Some(hi)) if r.rounds > 1 => {
                format!("{} ({}–{})", number(m), number(lo), number(hi))
            }
            (Some(m), ..) => number(m),
            _ => "—".into(),
        };
        let met = match (&r.missing, r.met) {
            (Some(_), Some(false)) => "failed",
            (Some(_), _) => "missing",
            (None, Some(true)) => "yes",
            (None, Some(false)) => "**no**",
            (None, None) => "—",
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            i + 1,
            r.name,
            cell(r.ours),
            cell(r.peer),
            r.unit,
            ratio,
            r.added
                .map_or_else(String::new, |a| format!("{} {}", number(a), r.unit)),
            r.goal.as_deref().unwrap_or("—"),
            met,
        ));
    }
    out.push('\n');
    // Each note once, for the run of consecutive rows it belongs to.
    let texts: Vec<&str> = rows
        .iter()
        .map(|r| r.missing.as_deref().unwrap_or(&r.note))
        .collect();
    let mut first = 0;
    while first < texts.len() {
        let last = (first..texts.len())
            .take_while(|&i| texts[i] == texts[first])
            .last()
            .unwrap_or(first);
        if !texts[first].is_empty() {
            let rows = if last > first {
                format!("{}–{}", first + 1, last + 1)
            } else {
                format!("{}", first + 1)
            };
            out.push_str(&format!("- {rows}: {}\n", texts[first]));
        }
        first = last + 1;
    }
    out
}

/// `summary.json`: one object per row.
pub fn json(rows: &[Row]) -> String {
    serde_json::to_string_pretty(rows).expect("rows serialize") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measurement(ours: &[f64], peer: &[f64], goal: Option<Goal>) -> Measurement {
        Measurement {
            name: "pipeline".into(),
            unit: "calls/s".into(),
            ours: ours.to_vec(),
            peer: peer.to_vec(),
            note: "n".into(),
            goal,
            added: false,
        }
    }

    const AT_LEAST_097: Goal = Goal {
        on: On::Ratio,
        op: Op::AtLeast,
        value: 0.97,
    };

    #[test]
    fn medians_of_odd_and_even_counts_skip_non_finite_samples() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn the_ratio_is_the_median_of_per_round_ratios_with_min_and_max() {
        // Round 2 is slow for both: its ratio is still 1, though the medians differ.
        let row = Row::of(&measurement(
            &[100.0, 10.0, 90.0],
            &[100.0, 10.0, 100.0],
            Some(AT_LEAST_097),
        ));
        assert_eq!(row.ours, Some(90.0));
        assert_eq!(row.peer, Some(100.0));
        assert_eq!(row.ratio, Some(1.0));
        assert_eq!(row.ratio_min, Some(0.9));
        assert_eq!(row.ratio_max, Some(1.0));
        assert_eq!(row.rounds, 3);
        assert_eq!(row.met, Some(true));
        assert_eq!(row.goal.as_deref(), Some("ratio ≥ 0.97"));
    }

    #[test]
    fn a_goal_on_ours_and_a_missed_goal() {
        let goal = Goal {
            on: On::Ours,
            op: Op::Below,
            value: 100.0,
        };
        let row = Row::of(&Measurement {
            unit: "ns".into(),
            ..measurement(&[150.0, 140.0, 160.0], &[30.0, 30.0, 30.0], Some(goal))
        });
        assert_eq!(row.met, Some(false));
        assert_eq!(row.goal.as_deref(), Some("< 100 ns"));
    }

    #[test]
    fn a_zero_peer_has_no_ratio_and_a_row_without_goal_no_verdict() {
        let row = Row::of(&measurement(&[1.0, 1.0], &[0.0, 0.0], None));
        assert_eq!(row.ratio, None);
        assert_eq!(row.met, None);
        let goal = Goal {
            on: On::Ours,
            op: Op::Equal,
            value: 0.0,
        };
        let row = Row::of(&measurement(&[0.0], &[362.0], Some(goal)));
        assert_eq!((row.ratio, row.met), (Some(0.0), Some(true)));
    }

    #[test]
    fn added_is_the_median_difference() {
        let row = Row::of(&Measurement {
            added: true,
            ..measurement(&[180.0, 175.0, 190.0], &[160.0, 165.0, 170.0], None)
        });
        assert_eq!(row.added, Some(20.0));
    }

    #[test]
    fn measurements_parse_from_the_bench_binaries_lines() {
        let line = r#"{"name":"admission","unit":"ns","ours":[360.0,390.0],"peer":[88.0,90.0],"note":"x","goal":{"on":"ratio","op":"<=","value":2.0},"added":false}"#;
        let m: Measurement = serde_json::from_str(line).unwrap();
        let row = Row::of(&m);
        assert_eq!(row.goal.as_deref(), Some("ratio ≤ 2"));
        assert_eq!(row.met, Some(false));
    }

    #[test]
    fn summary_json_has_one_object_per_row_with_the_issues_fields() {
        let rows = vec![
            Row::of(&measurement(&[97.0], &[100.0], Some(AT_LEAST_097))),
            Row::missing("job store", "jobs/s", None, "not built yet"),
        ];
        let value: serde_json::Value = serde_json::from_str(&json(&rows)).unwrap();
        let objects = value.as_array().unwrap();
        assert_eq!(objects.len(), 2);
        for object in objects {
            for field in ["name", "ours", "peer", "unit", "ratio", "goal", "met"] {
                assert!(object.get(field).is_some(), "{field} in {object}");
            }
        }
        assert_eq!(objects[0]["met"], true);
        assert_eq!(objects[1]["ours"], serde_json::Value::Null);
        assert_eq!(objects[1]["missing"], "not built yet");
    }

    #[test]
    fn the_table_has_a_line_per_row_and_says_what_is_missing() {
        let rows = vec![
            Row::of(&measurement(
                &[90.0, 95.0, 80.0],
                &[100.0; 3],
                Some(AT_LEAST_097),
            )),
            Row::missing("job store", "jobs/s", None, "not built yet: sdk-queue"),
            Row::failed("sse", "exit status 101"),
            Row::of(&measurement(&[1.0], &[1.0], None)),
            Row::of(&measurement(&[1.0], &[1.0], None)),
        ];
        let table = table(&rows);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines[2],
            "| 1 | pipeline | 90 | 100 | calls/s | 0.90 (0.80–0.95) |  | ratio ≥ 0.97 | **no** |"
        );
        assert!(lines[3].ends_with("| missing |"), "{}", lines[3]);
        assert!(lines[4].ends_with("| failed |"), "{}", lines[4]);
        assert!(
            table.contains(
                "\n- 1: n\n- 2: not built yet: sdk-queue\n- 3: exit status 101\n- 4–5: n\n"
            ),
            "{table}"
        );
    }

    #[test]
    fn numbers_keep_about_three_significant_digits() {
        assert_eq!(number(43427.6), "43428");
        assert_eq!(number(17.26), "17.3");
        assert_eq!(number(0.904), "0.90");
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.0123), "0.012");
    }
}
