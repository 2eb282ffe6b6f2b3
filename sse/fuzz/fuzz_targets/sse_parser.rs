//! Any bytes, cut anywhere, with small caps: the parser never panics, never
//! holds more than its caps, and every cut yields what the whole input does
//! (the same frames, then the same error or none).

#![no_main]

use libfuzzer_sys::fuzz_target;
use sdk_sse::{Frame, SseError, SseParser};

/// Small caps, so the fuzzer reaches them.
const LINE: usize = 64;
const EVENT: usize = 256;

fn parse<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> (Vec<Frame>, Option<SseError>) {
    let mut parser = SseParser::with_limits(LINE, EVENT);
    let mut frames = Vec::new();
    for chunk in chunks {
        if let Err(e) = parser.push_into(chunk, &mut frames) {
            return (frames, Some(e));
        }
    }
    let end = parser.finish().err();
    (frames, end)
}

fuzz_target!(|data: &[u8]| {
    let Some((&seed, input)) = data.split_first() else {
        return;
    };
    let whole = parse([input]);
    for frame in &whole.0 {
        match frame {
            // Data is joined by `\n`s the cap counts, so it is never larger.
            Frame::Event(e) => assert!(e.data.len() <= EVENT * 3, "event data past its cap"),
            Frame::Comment(c) => assert!(c.len() <= LINE * 3, "comment past the line cap"),
        }
    }
    // Cut every `step` bytes, and byte by byte.
    let step = usize::from(seed % 31) + 1;
    assert_eq!(parse(input.chunks(step)), whole, "cut every {step} bytes");
    assert_eq!(parse(input.chunks(1)), whole, "cut byte by byte");
});
