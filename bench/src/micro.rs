//! The micro-paths on their own, `n` times, for `valgrind --tool=callgrind`.
//! Only [`measured`] is counted (`--toggle-collect`): setup varies with time
//! (quanta, governor's clock, calibrates the TSC for a while). `cargo xtask
//! bench` runs each twice (n and 2n) and takes the difference, so entering
//! the loop cancels out and what remains is instructions per operation.
//!
//! `toggle-collect` counts the measured function's own thread only, so
//! every target runs on one current-thread runtime: the `get-*` pair runs
//! the bench server there too, and a call's count is the whole call, both
//! ends of the loopback (the same server for both contenders).

use bytes::Bytes;
use sdk_runtime::sse::MAX_LINE_BYTES;

use crate::admission;
use crate::pipeline::{self, SmallGet};
use crate::server;

/// The targets, as `sdk-bench micro <target> <n>` takes them.
pub const TARGETS: [&str; 14] = [
    "get-ours",
    "get-peer",
    "admission-ours",
    "admission-peer",
    "fail-fast-ours",
    "fail-fast-peer",
    "sse-job-ours",
    "sse-job-eventsource-stream",
    "sse-job-sseer",
    "sse-line-128k-ours",
    "sse-line-256k-ours",
    "sse-line-256k-sseer",
    "sse-line-1m-ours",
    "sse-line-1m-sseer",
];

/// The function callgrind counts: runs `operations` once.
#[inline(never)]
pub fn measured(operations: &dyn Fn()) {
    operations();
}

pub fn run(target: &str, n: u64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    match target {
        "get-ours" | "get-peer" => {
            let addr = rt.block_on(server::listen());
            let _guard = rt.enter();
            let get = &SmallGet::new(&format!("http://{addr}"));
            let ours = target == "get-ours";
            let calls = |n| async move {
                if ours {
                    pipeline::in_flight(n, || get.ours()).await
                } else {
                    pipeline::in_flight(n, || get.peer()).await
                }
            };
            // Every connection of the pool opened before counting starts.
            rt.block_on(calls(64));
            measured(&|| rt.block_on(calls(n)));
        }
        "admission-ours" => {
            let ours = admission::Ours::new();
            measured(&|| {
                rt.block_on(async {
                    for _ in 0..n {
                        ours.admit().await;
                    }
                })
            });
        }
        "admission-peer" => {
            let peer = admission::Peer::new();
            measured(&|| {
                rt.block_on(async {
                    for _ in 0..n {
                        peer.admit().await;
                    }
                })
            });
        }
        "fail-fast-ours" => {
            let grag = admission::open_breaker(&rt);
            measured(&|| {
                rt.block_on(async {
                    for _ in 0..n {
                        admission::refuse_ours(&grag).await;
                    }
                })
            });
        }
        "fail-fast-peer" => {
            let bucket = admission::exhausted();
            measured(&|| {
                rt.block_on(async {
                    for _ in 0..n {
                        admission::refuse_peer(&bucket).await;
                    }
                })
            });
        }
        sse if sse.starts_with("sse-") => {
            let (chunks, parser) = sse_input(sse);
            let (_, parse) = crate::sse::CONTENDERS
                .iter()
                .find(|(name, _)| *name == parser)
                .expect("a known parser");
            measured(&|| {
                for _ in 0..n {
                    std::hint::black_box(parse(&chunks));
                }
            });
        }
        other => panic!("unknown micro target {other}; one of {TARGETS:?}"),
    }
}

/// The chunks one operation of an `sse-*` target parses, and the parser:
/// 64 KiB of job progress in 16 KiB chunks, or one line in 1 KiB chunks.
fn sse_input(target: &str) -> (Vec<Bytes>, &'static str) {
    use crate::sse::{job_progress, one_line};
    let job = || (job_progress(64 << 10), 16 << 10);
    let ((bytes, chunk), parser) = match target {
        "sse-job-ours" => (job(), "ours"),
        "sse-job-eventsource-stream" => (job(), "eventsource-stream"),
        "sse-job-sseer" => (job(), "sseer"),
        "sse-line-128k-ours" => ((one_line(128 << 10), 1 << 10), "ours"),
        "sse-line-256k-ours" => ((one_line(256 << 10), 1 << 10), "ours"),
        "sse-line-256k-sseer" => ((one_line(256 << 10), 1 << 10), "sseer"),
        "sse-line-1m-ours" => ((one_line(MAX_LINE_BYTES), 1 << 10), "ours"),
        "sse-line-1m-sseer" => ((one_line(MAX_LINE_BYTES), 1 << 10), "sseer"),
        other => panic!("unknown micro target {other}; one of {TARGETS:?}"),
    };
    (
        bytes.chunks(chunk).map(Bytes::copy_from_slice).collect(),
        parser,
    )
}

/// Bytes one operation of the `sse-*` target parses.
pub fn bytes_per_op(target: &str) -> usize {
    sse_input(target).0.iter().map(Bytes::len).sum()
}
