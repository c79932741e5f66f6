//! `HeadScanner` + `parse_request_head`: whole == byte by byte == split; a
//! parsed head is consistent (one framing, never Content-Length together with
//! Transfer-Encoding); failures are typed and map to a 4xx/5xx status; a
//! TLS handshake is told by its first byte, and only by it.
#![no_main]

use chatgate_core::http::{header_value, leading_empty_lines, parse_request_head};
use chatgate_core::http::{Framing, HeadScanner, HttpError, HttpLimits};
use chatgate_fuzz::{bytewise, split};
use libfuzzer_sys::fuzz_target;

/// Scans reads as the exchange does, stopping at the first answer.
fn scan(pieces: &[&[u8]], max_head: usize) -> Result<Option<usize>, HttpError> {
    let mut scanner = HeadScanner::new();
    let mut buf = Vec::new();
    let mut last = scanner.scan(&buf, max_head);
    for piece in pieces {
        if !matches!(last, Ok(None)) {
            break;
        }
        buf.extend_from_slice(piece);
        last = scanner.scan(&buf, max_head);
    }
    last
}

fuzz_target!(|data: &[u8]| {
    let tight = HttpLimits {
        max_head: 200,
        max_headers: 4,
        ..HttpLimits::default()
    };
    for limits in [HttpLimits::default(), tight] {
        // The exchange skips empty lines before a request line.
        let input = &data[leading_empty_lines(data)..];
        let whole = scan(&[input], limits.max_head);
        let pieces = split(input);
        let max = limits.max_head;
        let dribbled = scan(&bytewise(input), max);
        assert_eq!(dribbled, whole, "byte by byte");
        let split_scan = scan(&pieces, max);
        assert_eq!(split_scan, whole, "split {pieces:?}");
        let len = match whole {
            Ok(Some(len)) => len,
            Ok(None) => {
                assert!(input.len() < limits.max_head);
                continue;
            }
            Err(HttpError::TlsHandshake) => {
                // Told by the first byte alone: a TLS record's type.
                assert_eq!(input.first(), Some(&chatgate_core::http::TLS_HANDSHAKE));
                continue;
            }
            Err(e) => {
                assert!(matches!(
                    e,
                    HttpError::BareLineEnding | HttpError::HeadTooLarge
                ));
                continue;
            }
        };
        assert!(len <= input.len() && len <= limits.max_head);
        let head = &input[..len];
        assert!(head.ends_with(b"\r\n\r\n"));
        let cl = header_value(head, "content-length").is_some();
        let te = header_value(head, "transfer-encoding").is_some();
        match parse_request_head(head, &limits) {
            Ok(h) => {
                assert_eq!(
                    h.head_len, len,
                    "the parser and the scanner agree on the end"
                );
                assert!(
                    !(cl && te),
                    "Content-Length with Transfer-Encoding parsed OK"
                );
                match h.framing {
                    Framing::Empty => assert!(!te),
                    Framing::Length(n) => assert!(n > 0 && cl && !te),
                    Framing::Chunked => assert!(te && !h.http10),
                    Framing::UntilClose => panic!("a request body cannot be read until close"),
                }
                assert!(h.path.starts_with('/') && !h.path.contains('?'));
            }
            Err(e) => {
                assert!(matches!(e.status(), 400 | 417 | 431 | 505), "{e:?}");
                assert!(!matches!(
                    e,
                    HttpError::Truncated | HttpError::BodyTooLarge | HttpError::BadChunk(_)
                ));
            }
        }
    }
});
