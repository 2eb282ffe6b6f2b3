//! The inputs and contenders of the SSE benches, written once: a module of
//! this crate's criterion bench and, by path, of `sdk-bench`'s SSE rows,
//! so the two measure the same bytes through the same calls.

#![allow(dead_code)] // each includer runs what it measures, not every input

use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use futures_util::Stream;
use sdk_sse::SseParser;

/// Ingest progress as the relay sends it: small `event: node_start` events,
/// a `: keepalive` comment after every fourth.
pub fn job_progress(len: usize) -> Vec<u8> {
    let mut out = String::new();
    let mut i = 0u64;
    while out.len() < len {
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

/// 2 KiB JSON `data:` lines with umlauts, one per event.
pub fn chat(len: usize) -> Vec<u8> {
    let mut out = String::new();
    let mut i = 0u32;
    while out.len() < len {
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

/// One event whose single data line is `line` bytes long (terminator excluded).
pub fn one_line(line: usize) -> Vec<u8> {
    let mut out = b"data: ".to_vec();
    out.resize(line, b'x');
    out.extend_from_slice(b"\n\n");
    out
}

pub fn chunks(bytes: &[u8], size: usize) -> Vec<Bytes> {
    bytes.chunks(size).map(Bytes::copy_from_slice).collect()
}

/// Drains a stream whose items are all ready, counting `Ok` items.
pub fn drain<S: Stream<Item = Result<T, E>>, T, E: std::fmt::Debug>(stream: S) -> usize {
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

/// Ours as `EventStream` reads a body (`push_events`): events kept,
/// comments only counted.
pub fn ours(chunks: &[Bytes]) -> usize {
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    let mut n = 0;
    for chunk in chunks {
        parser
            .push_events(chunk, &mut events)
            .expect("ours parses the input");
        n += events.drain(..).map(black_box).count();
    }
    parser.finish().expect("a complete stream");
    n
}

pub fn eventsource_stream(chunks: &[Bytes]) -> usize {
    drain(eventsource_stream::EventStream::new(body(chunks)))
}

pub fn sseer(chunks: &[Bytes]) -> usize {
    drain(sseer::EventStream::new(body(chunks)))
}
