//! `ChunkedDecoder`: whole == split == byte by byte (same output, same bytes
//! consumed, same end, same error); never consumes more than it was given or
//! past the end of the body; output never exceeds `max_body`.
#![no_main]

use chatgate_core::http::ChunkedDecoder;
use chatgate_core::http::{HttpError, HttpLimits};
use chatgate_fuzz::{bytewise, split};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, PartialEq, Eq)]
struct Decoded {
    out: Vec<u8>,
    /// Input bytes consumed (0 after an error: how much of the input was
    /// taken before it depends on the split).
    consumed: usize,
    done: bool,
    error: Option<HttpError>,
}

fn decode(pieces: &[&[u8]], limits: HttpLimits) -> Decoded {
    let mut d = ChunkedDecoder::new(limits);
    let mut out = Vec::new();
    let mut consumed = 0;
    let mut error = None;
    for piece in pieces {
        let before = out.len();
        match d.decode(piece, &mut out) {
            Ok(n) => {
                assert!(n <= piece.len(), "consumed {n} of {}", piece.len());
                assert!(out.len() - before <= n, "more output than input");
                // Everything is consumed until the body ends.
                assert!(n == piece.len() || d.is_done());
                consumed += n;
            }
            Err(e) => {
                error = Some(e);
                consumed = 0;
                break;
            }
        }
        assert!(out.len() as u64 <= limits.max_body);
        assert!(out.len() as u64 <= d.decoded());
        if d.is_done() {
            // Nothing more is taken once the body ended.
            let mut sink = Vec::new();
            assert_eq!(d.decode(b"5\r\nhello\r\n", &mut sink), Ok(0));
            assert!(sink.is_empty());
            break;
        }
    }
    assert!(out.len() as u64 <= limits.max_body, "output over max_body");
    if error.is_none() && !d.is_done() {
        assert_eq!(d.finish(), Err(HttpError::Truncated));
    }
    Decoded {
        done: d.is_done(),
        out,
        consumed,
        error,
    }
}

fuzz_target!(|data: &[u8]| {
    let small = HttpLimits {
        max_body: u64::from(data.first().copied().unwrap_or(0)),
        max_chunk_line: 16,
        max_trailers: 64,
        ..HttpLimits::default()
    };
    for limits in [HttpLimits::default(), small] {
        let want = decode(&[data], limits);
        assert!(want.consumed <= data.len());
        let pieces = split(data);
        let got = decode(&pieces, limits);
        assert_eq!(got, want, "split {pieces:?}");
        assert_eq!(decode(&bytewise(data), limits), want, "byte by byte");
        if want.done {
            assert!(want.error.is_none());
            assert!(data[..want.consumed].ends_with(b"\r\n"));
        }
    }
});
