//! The micro-paths on their own, `n` times, for `valgrind --tool=callgrind`.
//! Only [`measured`] is counted (`--toggle-collect`): setup varies with time
//! (quanta, governor's clock, calibrates the TSC for a while). `cargo xtask
//! bench` runs each twice (n and 2n) and takes the difference, so entering
//! the loop cancels out and what remains is instructions per operation.

use bytes::Bytes;

use crate::admission;

/// The targets, as `sdk-bench micro <target> <n>` takes them.
pub const TARGETS: [&str; 7] = [
    "admission-ours",
    "admission-peer",
    "fail-fast-ours",
    "fail-fast-peer",
    "sse-job-ours",
    "sse-job-eventsource-stream",
    "sse-job-sseer",
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
        sse if sse.starts_with("sse-job-") => {
            let chunks = job_chunks();
            let (_, parse) = crate::sse::CONTENDERS
                .iter()
                .find(|(name, _)| Some(*name) == sse.strip_prefix("sse-job-"))
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

/// 64 KiB of job progress in 16 KiB chunks: one operation parses them all.
pub fn job_chunks() -> Vec<Bytes> {
    let bytes = crate::sse::job_progress(64 << 10);
    bytes.chunks(16 << 10).map(Bytes::copy_from_slice).collect()
}

/// Bytes one `sse-job-*` operation parses.
pub fn job_bytes() -> usize {
    job_chunks().iter().map(Bytes::len).sum()
}
