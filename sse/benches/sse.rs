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
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use futures_util::Stream;
use sdk_sse::{Frame, SseParser};

fn job_progress() -> Vec<u8> {
    let mut out = String::new();
    let mut i = 0u32;
    while out.len() < 1 << 20 {
        out.push_str(&format!(
            "event: node_start\ndata: {{\"job_id\":\"j-4f1c2a\",\"node\":\"chunk_{i}\",\"ts\":17330{i:05}}}\n\n"
        ));
        if i % 4 == 3 {
            out.push_str(": keepalive\n\n");
        }
        i += 1;
    }
    out.into_bytes()
}

fn chat() -> Vec<u8> {
    let mut out = String::new();
    let mut i = 0u32;
    while out.len() < 1 << 20 {
        let mut line = format!("data: {{\"type\":\"token\",\"seq\":{i},\"text\":\"");
        while line.len() + "Größe und Gewicht ".len() <= 2048 - 3 {
            line.push_str("Größe und Gewicht ");
        }
        while line.len() < 2048 - 3 {
            line.push('.');
        }
        line.push_str("\"}\n\n");
        out.push_str(&line);
        i += 1;
    }
    out.into_bytes()
}

fn long_line() -> Vec<u8> {
    let mut out = b"data: ".to_vec();
    out.resize((1 << 20) - 2, b'x');
    out.extend_from_slice(b"\n\n");
    out
}

fn chunks(bytes: &[u8], size: usize) -> Vec<Bytes> {
    bytes.chunks(size).map(Bytes::copy_from_slice).collect()
}

/// Drains a stream whose items are all ready, counting `Ok` items.
fn drain<S: Stream<Item = Result<T, E>>, T, E: std::fmt::Debug>(stream: S) -> usize {
    let mut stream = pin!(stream);
    let mut cx = Context::from_waker(Waker::noop());
    let mut n = 0;
    loop {
        match stream.as_mut().poll_next(&mut cx) {
            Poll::Ready(Some(item)) => {
                black_box(item.expect("peer parses the input"));
                n += 1;
            }
            Poll::Ready(None) => return n,
            Poll::Pending => unreachable!("every chunk is ready"),
        }
    }
}

fn body(chunks: &[Bytes]) -> impl Stream<Item = Result<Bytes, std::io::Error>> + '_ {
    futures_util::stream::iter(chunks.iter().cloned().map(Ok))
}

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

/// Ours as `EventStream` reads a body: events kept, comments only counted.
fn run_ours_events(chunks: &[Bytes]) -> usize {
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    let mut n = 0;
    for chunk in chunks {
        parser.push_events(chunk, &mut events).unwrap();
        n += events.drain(..).map(black_box).count();
    }
    parser.finish().unwrap();
    n
}

fn run_eventsource_stream(chunks: &[Bytes]) -> usize {
    drain(eventsource_stream::EventStream::new(body(chunks)))
}

fn run_sseer(chunks: &[Bytes]) -> usize {
    drain(sseer::EventStream::new(body(chunks)))
}

fn bench_sse(c: &mut Criterion) {
    let inputs = [
        ("job_progress", job_progress(), 16 * 1024),
        ("chat", chat(), 16 * 1024),
        ("long_line", long_line(), 1024),
    ];
    type Run = fn(&[Bytes]) -> usize;
    let contenders: [(&str, Run); 4] = [
        ("ours", run_ours),
        ("ours_events", run_ours_events),
        ("eventsource_stream", run_eventsource_stream),
        ("sseer", run_sseer),
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
