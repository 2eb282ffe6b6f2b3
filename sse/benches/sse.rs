//! The SSE parser against the crates a user could pick instead, on the same
//! bytes in the same run, in MB/s of input:
//!
//! - `job_progress`: ingest progress as the relay sends it, small
//!   `event: node_start` events with a `: keepalive` comment after every
//!   fourth, cut into 16 KiB chunks (so events straddle chunk ends);
//! - `chat`: 2 KiB JSON `data:` lines, one per event, in 16 KiB chunks;
//! - `long_line`: one event whose single data line is 1 MiB, in 1 KiB chunks
//!   (a parser that re-scans its open line on every chunk is quadratic here).
//!
//! `ours` is `SseParser::push_into` (comments' text kept, as in main),
//! `ours_events` is `push_events`, the path `EventStream` takes.
//!
//! Every contender is driven over the same `Bytes` chunks by polling with a
//! no-op waker (all inputs are ready), so no runtime is measured. Before the
//! timings, each one's event count is checked against ours.
//!
//! Run with `cargo bench -p sdk-sse --bench sse -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sdk_sse::{Frame, SseParser};

mod inputs;
use inputs::{chat, chunks, eventsource_stream, job_progress, one_line, ours, sseer};

/// Ours through the public `push_into`, frames (comments too) materialized.
fn run_ours(chunks: &[Bytes]) -> usize {
    let mut parser = SseParser::new();
    let mut frames = Vec::new();
    let mut n = 0;
    for chunk in chunks {
        parser.push_into(chunk, &mut frames).unwrap();
        n += frames
            .drain(..)
            .filter(|f| matches!(black_box(f), Frame::Event(_)))
            .count();
    }
    parser.finish().unwrap();
    n
}

fn bench_sse(c: &mut Criterion) {
    let inputs = [
        ("job_progress", job_progress(1 << 20), 16 * 1024),
        ("chat", chat(1 << 20), 16 * 1024),
        ("long_line", one_line((1 << 20) - 2), 1024),
    ];
    type Run = fn(&[Bytes]) -> usize;
    let contenders: [(&str, Run); 4] = [
        ("ours", run_ours),
        ("ours_events", ours),
        ("eventsource_stream", eventsource_stream),
        ("sseer", sseer),
    ];
    let mut group = c.benchmark_group("sse");
    for (name, bytes, chunk) in &inputs {
        let chunks = chunks(bytes, *chunk);
        let want = run_ours(&chunks);
        for (peer, run) in &contenders {
            assert_eq!(run(&chunks), want, "{peer} on {name}: event count");
        }
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        for (peer, run) in &contenders {
            group.bench_with_input(BenchmarkId::new(*name, peer), &chunks, |b, chunks| {
                b.iter(|| run(chunks))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_sse);
criterion_main!(benches);
