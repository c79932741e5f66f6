//! `parse_response_head` (interim heads skipped as the exchange does) and
//! `BodyDecoder` on the rest: typed errors only, consumed <= input, the body
//! decodes the same split or whole, a head is consistent with its framing.
#![no_main]

use chatgate_core::http::BodyDecoder;
use chatgate_core::http::header_value;
use chatgate_core::http::parse_response_head;
use chatgate_core::http::{Framing, HeadScanner, HttpError, HttpLimits};
use chatgate_fuzz::split;
use libfuzzer_sys::fuzz_target;

/// Whether the head has field `name` with a non-empty list value
/// (`header_value` parses requests: the status line is swapped for a
/// request line).
fn has_header(head: &[u8], name: &str) -> bool {
    let Some(eol) = head.windows(2).position(|w| w == b"\r\n") else {
        return false;
    };
    let mut as_request = b"GET / HTTP/1.1".to_vec();
    as_request.extend_from_slice(&head[eol..]);
    header_value(&as_request, name)
        .is_some_and(|v| v.split(|&b| b == b',').any(|t| !t.trim_ascii().is_empty()))
}

fn decode(
    framing: Framing,
    limits: HttpLimits,
    pieces: &[&[u8]],
    eof: bool,
) -> (Vec<u8>, usize, bool, Option<HttpError>) {
    let mut d = BodyDecoder::new(framing, limits);
    let mut out = Vec::new();
    let mut consumed = 0;
    for piece in pieces {
        match d.decode(piece, &mut out) {
            Ok(n) => {
                assert!(n <= piece.len());
                consumed += n;
                if n < piece.len() {
                    assert!(d.is_done());
                    break;
                }
            }
            // Length and until-close bodies append before checking the
            // cap, so the output at an error depends on the split: drop it.
            Err(e) => return (Vec::new(), 0, false, Some(e)),
        }
    }
    if eof {
        if let Err(e) = d.finish() {
            return (Vec::new(), 0, false, Some(e));
        }
        assert!(d.is_done());
    }
    assert!(out.len() as u64 <= limits.max_body);
    (out, consumed, d.is_done(), None)
}

fuzz_target!(|data: &[u8]| {
    let limits = HttpLimits {
        max_headers: 128,
        ..HttpLimits::default()
    };
    let mut rest = data;
    let head = loop {
        let len = match HeadScanner::new().scan(rest, limits.max_head) {
            Ok(Some(len)) => len,
            Ok(None) | Err(_) => return,
        };
        assert!(len <= rest.len());
        match parse_response_head(&rest[..len], &limits) {
            Ok(h) => {
                assert_eq!(h.head_len, len);
                // Three digits; "000" to "099" are accepted (see README).
                assert!(h.status <= 999);
                assert!(
                    !(has_header(&rest[..len], "content-length")
                        && has_header(&rest[..len], "transfer-encoding")),
                    "Content-Length with Transfer-Encoding parsed OK"
                );
                if h.keep_alive {
                    assert_ne!(h.framing, Framing::UntilClose);
                }
                let _ = (h.is_event_stream(), h.is_json(), h.retry_after_secs());
                rest = &rest[len..];
                if !h.is_interim() {
                    break h;
                }
            }
            Err(e) => {
                assert!(matches!(e.status(), 400 | 431 | 505), "{e:?}");
                assert!(!matches!(e, HttpError::Truncated | HttpError::BadChunk(_)));
                return;
            }
        }
    };
    let small = HttpLimits {
        max_body: u64::from(data[0]),
        ..HttpLimits::default()
    };
    for body_limits in [HttpLimits::default(), small] {
        for eof in [false, true] {
            let want = decode(head.framing, body_limits, &[rest], eof);
            assert!(want.1 <= rest.len());
            assert!(want.0.len() <= want.1);
            if want.3.is_none() {
                match head.framing {
                    Framing::Empty => assert_eq!(want.1, 0),
                    Framing::Length(n) => {
                        assert_eq!(want.0, &rest[..want.1]);
                        assert_eq!(want.1 as u64, n.min(rest.len() as u64));
                    }
                    Framing::UntilClose => assert_eq!(want.0, rest),
                    Framing::Chunked => {}
                }
            }
            let pieces = split(rest);
            assert_eq!(decode(head.framing, body_limits, &pieces, eof), want);
        }
    }
});
