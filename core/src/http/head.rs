//! Finding the end of a header block across partial reads.

use super::HttpError;

/// Finds the blank line that ends an HTTP header block, resuming where the
/// previous call stopped, so a head delivered one byte at a time is scanned
/// once (O(bytes)), not once per byte.
///
/// It also enforces CRLF line endings: a bare LF anywhere in the head is an
/// error as soon as it arrives (HTTP parsers that disagree on bare LF are the
/// root of request smuggling), and a head that grows past the cap without
/// ending is an error without waiting for more.
#[derive(Debug, Clone, Default)]
pub struct HeadScanner {
    scanned: usize,
}

impl HeadScanner {
    /// A scanner at the start of a head.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets progress, for the next message.
    pub fn reset(&mut self) {
        self.scanned = 0;
    }

    /// Looks at `buf` (the message so far, from its first byte; it only ever
    /// grows between calls) and returns the length of the head, CRLFCRLF
    /// included, once it is complete.
    ///
    /// Only the first `max_head` bytes are ever examined, so the answer does
    /// not depend on how much beyond the cap arrived in one read.
    ///
    /// Empty lines before the first line (which a server ignores, RFC 9112
    /// §2.2) belong to the head rather than end it: a caller that skips them
    /// and then meets `\r` | `\n\r\n` split across reads gets the head that
    /// follows, as it would have whole.
    pub fn scan(&mut self, buf: &[u8], max_head: usize) -> Result<Option<usize>, HttpError> {
        // A TLS record of type handshake: never the first byte of HTTP.
        if buf.first() == Some(&TLS_HANDSHAKE) {
            return Err(HttpError::TlsHandshake);
        }
        let visible = &buf[..buf.len().min(max_head)];
        let mut from = self.scanned.min(visible.len());
        while let Some(off) = memchr::memchr(b'\n', &visible[from..]) {
            let lf = from + off;
            if lf == 0 || visible[lf - 1] != b'\r' {
                return Err(HttpError::BareLineEnding);
            }
            // CRLF CRLF after a line with content; not an empty line
            // after another one (or after nothing).
            if lf >= 4 && &visible[lf - 3..lf] == b"\r\n\r" && visible[lf - 4] != b'\n' {
                self.scanned = lf + 1;
                return Ok(Some(lf + 1));
            }
            from = lf + 1;
        }
        self.scanned = visible.len();
        if buf.len() >= max_head {
            return Err(HttpError::HeadTooLarge);
        }
        Ok(None)
    }
}

/// The first byte of a TLS handshake record (RFC 8446 §5.1, `handshake(22)`).
pub const TLS_HANDSHAKE: u8 = 0x16;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_tls_handshake_is_told_at_its_first_byte() {
        assert_eq!(whole(&[0x16], 1024), Err(HttpError::TlsHandshake));
        assert_eq!(
            dribbled(&[0x16, 3, 1, 0, 0xa5], 1024),
            Err(HttpError::TlsHandshake)
        );
    }

    fn whole(input: &[u8], max: usize) -> Result<Option<usize>, HttpError> {
        HeadScanner::new().scan(input, max)
    }

    fn dribbled(input: &[u8], max: usize) -> Result<Option<usize>, HttpError> {
        let mut s = HeadScanner::new();
        for n in 1..=input.len() {
            if let Some(end) = s.scan(&input[..n], max)? {
                return Ok(Some(end));
            }
        }
        Ok(None)
    }

    #[test]
    fn finds_end_whole_and_dribbled() {
        let head = b"GET / HTTP/1.1\r\nHost: x\r\n\r\nBODY";
        assert_eq!(whole(head, 1024), Ok(Some(27)));
        assert_eq!(dribbled(head, 1024), Ok(Some(27)));
    }

    #[test]
    fn empty_lines_before_the_head_do_not_end_it() {
        let head = b"\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\nBODY";
        assert_eq!(whole(head, 1024), Ok(Some(head.len() - 4)));
        assert_eq!(dribbled(head, 1024), Ok(Some(head.len() - 4)));
        assert_eq!(whole(b"\r\n\r\n\r\n", 1024), Ok(None));
        assert_eq!(whole(b"X\r\n\r\n", 1024), Ok(Some(5)));
    }

    #[test]
    fn bare_lf_is_rejected() {
        let head = b"GET / HTTP/1.1\nHost: x\r\n\r\n";
        assert_eq!(whole(head, 1024), Err(HttpError::BareLineEnding));
        assert_eq!(dribbled(head, 1024), Err(HttpError::BareLineEnding));
    }

    #[test]
    fn nothing_past_the_cap_is_examined() {
        // A bare LF beyond the cap: 431 however the bytes arrive.
        let mut head = b"GET / HTTP/1.1\r\nX: ".to_vec();
        head.resize(100, b'a');
        head.extend_from_slice(b"\n\r\n");
        assert_eq!(whole(&head, 64), Err(HttpError::HeadTooLarge));
        assert_eq!(dribbled(&head, 64), Err(HttpError::HeadTooLarge));
        let mut s = HeadScanner::new();
        assert_eq!(s.scan(&head[..64], 64), Err(HttpError::HeadTooLarge));
    }

    #[test]
    fn cap_applies_before_end() {
        let head = b"GET / HTTP/1.1\r\nX: aaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
        assert_eq!(whole(head, 20), Err(HttpError::HeadTooLarge));
        assert_eq!(dribbled(head, 20), Err(HttpError::HeadTooLarge));
        assert_eq!(whole(head, head.len()), Ok(Some(head.len())));
        assert_eq!(whole(head, head.len() - 1), Err(HttpError::HeadTooLarge));
    }

    proptest! {
        #[test]
        fn random_splits_agree(
            lines in proptest::collection::vec("[a-zA-Z0-9: -]{0,40}", 0..8),
            ending in prop_oneof![Just("\r\n"), Just("\n"), Just("\r\n\r\n"), Just("")],
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..10),
            max in 16usize..400,
            empty_lines in 0usize..3,
        ) {
            let mut input = "\r\n".repeat(empty_lines);
            input.push_str("GET / HTTP/1.1\r\n");
            for l in &lines {
                input.push_str(l);
                input.push_str("\r\n");
            }
            input.push_str(ending);
            input.push_str("BODY");
            let input = input.as_bytes();
            let want = whole(input, max);
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(input.len() + 1)).collect();
            points.sort_unstable();
            let mut s = HeadScanner::new();
            let mut got = Ok(None);
            for p in points.into_iter().chain(std::iter::once(input.len())) {
                got = s.scan(&input[..p], max);
                if !matches!(got, Ok(None)) {
                    break;
                }
            }
            prop_assert_eq!(got, want);
        }
    }
}
