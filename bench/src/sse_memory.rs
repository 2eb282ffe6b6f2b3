//! Row 7: the SSE parser's memory, each case in a child process of its own
//! so only that case's peak resident set counts (`VmHWM`).
//!
//! - a generated 1 GiB stream (job progress and chat events, 16 KiB
//!   chunks) through `EventStream`, the path a caller reads; peer: the same
//!   child generating the same chunks and dropping them unparsed (the floor);
//! - an endless line and an endless event (data lines, no blank line),
//!   offered 64 MiB each: ours must end with its typed error at the cap;
//!   peer: sseer on the same bytes, which keeps them.

use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use sdk_runtime::sse::{EventStream, MAX_EVENT_BYTES, MAX_LINE_BYTES, SseError, StreamFailure};
use serde::{Deserialize, Serialize};

use crate::Opts;
use crate::report::{Goal, Measurement};

const CHUNK: usize = 16 * 1024;
/// What an endless case offers: 64 times the cap.
const ENDLESS: usize = 64 << 20;

/// What a child reports on its one line of stdout.
#[derive(Debug, Serialize, Deserialize)]
struct Child {
    peak_rss_kib: u64,
    outcome: String,
    seconds: f64,
}

/// The peak resident set of this process so far, from `/proc/self/status`.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmHWM line")
}

/// `total` bytes of `pattern` repeated, in `CHUNK`-sized pieces that cut
/// anywhere (the pattern is not a multiple of the chunk size).
fn repeated(pattern: Bytes, total: usize) -> impl Iterator<Item = Bytes> + Send + 'static {
    let mut offset = 0usize;
    let mut sent = 0usize;
    std::iter::from_fn(move || {
        if sent >= total {
            return None;
        }
        let take = CHUNK.min(pattern.len() - offset).min(total - sent);
        let chunk = pattern.slice(offset..offset + take);
        offset = (offset + take) % pattern.len();
        sent += take;
        Some(chunk)
    })
}

/// A mix of job progress and chat events, about 1 MiB, ending at an event boundary.
fn mix() -> Bytes {
    let mut out = crate::sse::job_progress(512 << 10);
    out.extend(crate::sse::chat(512 << 10));
    Bytes::from(out)
}

/// The pattern and the length of the fewest whole repetitions that reach
/// `total`: the stream ends at an event boundary.
fn whole(pattern: Bytes, total: usize) -> (Bytes, usize) {
    let n = total.div_ceil(pattern.len());
    let len = pattern.len() * n;
    (pattern, len)
}

fn body(
    chunks: impl Iterator<Item = Bytes> + Send + 'static,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send + Unpin + 'static {
    futures_util::stream::iter(chunks.map(Ok))
}

/// Runs one case in this (child) process and prints its line.
pub fn child(case: &str, total: usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let started = Instant::now();
    let outcome = rt.block_on(async {
        match case {
            "parse" => {
                let (mix, total) = whole(mix(), total);
                let mut stream =
                    EventStream::new(body(repeated(mix, total)), Duration::from_secs(60));
                let mut events = 0u64;
                while let Some(event) = stream.next().await {
                    std::hint::black_box(event.expect("the mix parses"));
                    events += 1;
                }
                format!("{events} events in {total} bytes")
            }
            "generate" => {
                let (mix, total) = whole(mix(), total);
                let mut n = 0usize;
                for chunk in repeated(mix, total) {
                    n += std::hint::black_box(chunk).len();
                }
                format!("{n} bytes, unparsed")
            }
            "endless-line" | "endless-event" => {
                let pattern = endless(case);
                let mut stream =
                    EventStream::new(body(repeated(pattern, total)), Duration::from_secs(60));
                match stream.next().await {
                    Some(Err(StreamFailure::Malformed(e @ SseError::LineTooLong { .. })))
                        if case == "endless-line" =>
                    {
                        format!("typed error: {e}")
                    }
                    Some(Err(StreamFailure::Malformed(e @ SseError::EventTooLarge { .. })))
                        if case == "endless-event" =>
                    {
                        format!("typed error: {e}")
                    }
                    other => panic!("{case}: expected the cap's typed error, got {other:?}"),
                }
            }
            "endless-line-sseer" | "endless-event-sseer" => {
                let pattern = endless(case.trim_end_matches("-sseer"));
                let mut stream = sseer::EventStream::new(body(repeated(pattern, total)));
                let mut items = 0u64;
                while let Some(item) = stream.next().await {
                    std::hint::black_box(item).ok();
                    items += 1;
                }
                format!("no error after {} MiB ({items} items)", total >> 20)
            }
            other => panic!("unknown case {other}"),
        }
    });
    let line = Child {
        peak_rss_kib: peak_rss_kib(),
        outcome,
        seconds: started.elapsed().as_secs_f64(),
    };
    println!("{}", serde_json::to_string(&line).expect("JSON"));
}

/// The repeated unit of an endless case: the stream starts `data: ` and
/// then never ends its line, or sends 1 KiB data lines and never the blank
/// line that ends the event.
fn endless(case: &str) -> Bytes {
    match case {
        // `data: ` and `x`s without a line break: repeated, the next
        // `data: ` is just more of the same line.
        "endless-line" => {
            let mut line = b"data: ".to_vec();
            line.resize(CHUNK, b'x');
            Bytes::from(line)
        }
        "endless-event" => {
            let mut line = b"data: ".to_vec();
            line.resize(1023, b'x');
            line.push(b'\n');
            Bytes::from(line.repeat(16))
        }
        other => panic!("unknown case {other}"),
    }
}

fn spawn(case: &str, total: usize) -> Child {
    let exe = std::env::current_exe().expect("the bench binary");
    let output = Command::new(exe)
        .args(["sse-memory-child", case, &total.to_string()])
        .output()
        .expect("the child runs");
    assert!(
        output.status.success(),
        "{case}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().expect("a line");
    serde_json::from_str(line).expect("the child's line")
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

pub fn run(opts: &Opts) {
    let total = if opts.quick { 256 << 20 } else { 1 << 30 };
    let ours = spawn("parse", total);
    let floor = spawn("generate", total);
    Measurement::new(
        format!("sse memory: peak RSS parsing a {} MiB stream", total >> 20),
        "MiB",
        (vec![mib(ours.peak_rss_kib)], vec![mib(floor.peak_rss_kib)]),
    )
    .note(format!(
        "child process VmHWM; ours: EventStream over 16 KiB chunks ({}, {:.0} MB/s); \
         peer: the same child generating the chunks unparsed",
        ours.outcome,
        total as f64 / 1e6 / ours.seconds
    ))
    .goal(Goal::ours("<", 32.0))
    .print();

    for (case, cap) in [
        ("endless-line", MAX_LINE_BYTES),
        ("endless-event", MAX_EVENT_BYTES),
    ] {
        let ours = spawn(case, ENDLESS);
        let peer = spawn(&format!("{case}-sseer"), ENDLESS);
        Measurement::new(
            format!("sse memory: {case} ({} MiB offered)", ENDLESS >> 20),
            "MiB",
            (vec![mib(ours.peak_rss_kib)], vec![mib(peer.peak_rss_kib)]),
        )
        .note(format!(
            "ours: {} (cap {} KiB); peer: sseer, {}",
            ours.outcome,
            cap >> 10,
            peer.outcome
        ))
        .goal(Goal::ours("<", 32.0))
        .print();
    }
}
