//! Row 6: the SSE parser against eventsource-stream and sseer, on the same
//! bytes in the same run, in MB/s of input.
//!
//! Ours is `SseParser::push_events`, the path `EventStream` reads a body
//! with. The peers are driven over the same `Bytes` chunks by polling with a
//! no-op waker (every chunk is ready), so no runtime is measured. Before the
//! timings, every contender's event count is checked against ours.

use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;
use sdk_runtime::sse::MAX_LINE_BYTES;

use crate::Opts;
use crate::report::{Goal, Measurement};
use crate::rounds::rotate;

#[path = "../../sse/benches/inputs/mod.rs"]
mod inputs;
use inputs::chunks;
pub use inputs::{chat, eventsource_stream, job_progress, one_line, ours, sseer};

type Parse = fn(&[Bytes]) -> usize;

pub const CONTENDERS: [(&str, Parse); 3] = [
    ("ours", ours),
    ("eventsource-stream", eventsource_stream),
    ("sseer", sseer),
];

/// MB/s of each contender over `rounds` interleaved rounds; each round
/// parses the input as many times as fit in about `target_ms`.
fn throughput(chunks: &[Bytes], rounds: usize, target_ms: f64) -> Vec<Vec<f64>> {
    let bytes: usize = chunks.iter().map(Bytes::len).sum();
    let want = ours(chunks);
    let mut runs: Vec<Box<dyn FnMut() -> f64 + '_>> = CONTENDERS
        .iter()
        .map(|&(name, parse)| {
            assert_eq!(parse(chunks), want, "{name}: event count");
            let started = Instant::now();
            parse(chunks);
            let once = started.elapsed().as_secs_f64() * 1e3;
            let reps = ((target_ms / once.max(1e-3)) as usize).max(1);
            Box::new(move || {
                let started = Instant::now();
                for _ in 0..reps {
                    black_box(parse(chunks));
                }
                (bytes * reps) as f64 / 1e6 / started.elapsed().as_secs_f64()
            }) as Box<dyn FnMut() -> f64>
        })
        .collect();
    let mut refs: Vec<&mut dyn FnMut() -> f64> = runs
        .iter_mut()
        .map(|r| r.as_mut() as &mut dyn FnMut() -> f64)
        .collect();
    rotate(rounds, &mut refs)
}

pub fn run(opts: &Opts) {
    let target_ms = if opts.quick { 30.0 } else { 70.0 };
    let mib = 1 << 20;
    let cap = MAX_LINE_BYTES;
    let mut inputs = vec![
        (
            "job progress, 16 KiB chunks".to_owned(),
            job_progress(mib),
            16 * 1024,
        ),
        (
            "chat 2 KiB lines, 16 KiB chunks".to_owned(),
            chat(mib),
            16 * 1024,
        ),
    ];
    // Line sizes up to the cap, in 1 KiB chunks: the last is the 1 MiB line.
    for line in [128 << 10, 256 << 10, 512 << 10, cap] {
        let name = format!("one {} KiB line, 1 KiB chunks", line >> 10);
        inputs.push((name, one_line(line), 1024));
    }
    let mut ours_at = Vec::new();
    for (name, bytes, size) in &inputs {
        let chunks = chunks(bytes, *size);
        let mut out = throughput(&chunks, opts.rounds, target_ms);
        let sseer = out.pop().expect("three contenders");
        let es = out.pop().expect("three contenders");
        let ours = out.pop().expect("three contenders");
        ours_at.push(ours.clone());
        Measurement::new(
            format!("sse {name}: vs eventsource-stream"),
            "MB/s",
            (ours.clone(), es),
        )
        .note("ours: SseParser::push_events; same chunks")
        .goal(Goal::ratio(">=", 3.0))
        .print();
        Measurement::new(format!("sse {name}: vs sseer"), "MB/s", (ours, sseer))
            .note("ours: SseParser::push_events; same chunks")
            .goal(Goal::ratio(">=", 1.2))
            .print();
    }
    // Linear growth: the cost per byte at the cap against at 128 KiB.
    let at_cap = ours_at.pop().expect("the cap's row");
    let at_128 = ours_at[2].clone();
    Measurement::new(
        "sse line growth: ours at the 1 MiB cap vs at 128 KiB",
        "MB/s",
        (at_cap, at_128),
    )
    .note(
        "8x the line: linear cost keeps MB/s (ratio 1), a parser that re-scans its open line \
         (quadratic) gives 1/8; the goal sits between",
    )
    .goal(Goal::ratio(">=", 0.5))
    .print();
}
