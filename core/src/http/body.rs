//! Body decoding by any of the three framings.

use super::chunked::ChunkedDecoder;
use super::{Framing, HttpError, HttpLimits};

/// Decodes a message body framed by `Content-Length`, `chunked`, or the end of
/// the connection, with a cap on its size.
#[derive(Debug, Clone)]
pub struct BodyDecoder {
    kind: Kind,
    decoded: u64,
    max_body: u64,
}

#[derive(Debug, Clone)]
enum Kind {
    Length { remaining: u64 },
    Chunked(Box<ChunkedDecoder>),
    UntilClose { closed: bool },
}

impl BodyDecoder {
    /// A decoder for `framing`; bodies over `limits.max_body` are an error.
    pub fn new(framing: Framing, limits: HttpLimits) -> Self {
        let kind = match framing {
            Framing::Empty => Kind::Length { remaining: 0 },
            Framing::Length(n) => Kind::Length { remaining: n },
            Framing::Chunked => Kind::Chunked(Box::new(ChunkedDecoder::new(limits))),
            Framing::UntilClose => Kind::UntilClose { closed: false },
        };
        BodyDecoder {
            kind,
            decoded: 0,
            max_body: limits.max_body,
        }
    }

    /// True once the whole body has been decoded.
    pub fn is_done(&self) -> bool {
        match &self.kind {
            Kind::Length { remaining } => *remaining == 0,
            Kind::Chunked(d) => d.is_done(),
            Kind::UntilClose { closed } => *closed,
        }
    }

    /// Decodes from `input`, appending body bytes to `out`; returns how many
    /// input bytes belonged to the body.
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, HttpError> {
        let room = self.max_body - self.decoded;
        let used = match &mut self.kind {
            Kind::Length { remaining } => {
                let take = (*remaining).min(input.len() as u64);
                if take > room {
                    return Err(HttpError::BodyTooLarge);
                }
                out.extend_from_slice(&input[..take as usize]);
                *remaining -= take;
                take as usize
            }
            Kind::Chunked(d) => {
                let used = d.decode(input, out)?;
                self.decoded = d.decoded();
                return Ok(used);
            }
            Kind::UntilClose { closed: true } => 0,
            Kind::UntilClose { closed: false } => {
                if input.len() as u64 > room {
                    return Err(HttpError::BodyTooLarge);
                }
                out.extend_from_slice(input);
                input.len()
            }
        };
        self.decoded += used as u64;
        Ok(used)
    }

    /// The peer closed the connection: fine for a read-until-close body, an
    /// error ([`HttpError::Truncated`]) for an unfinished delimited one.
    pub fn finish(&mut self) -> Result<(), HttpError> {
        match &mut self.kind {
            Kind::UntilClose { closed } => {
                *closed = true;
                Ok(())
            }
            Kind::Length { remaining: 0 } => Ok(()),
            Kind::Length { .. } => Err(HttpError::Truncated),
            Kind::Chunked(d) => d.finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::feeding::{Decoded, Decoding, all_ways};

    #[test]
    fn every_framing_decodes_the_same_however_cut() {
        struct Case {
            framing: Framing,
            max_body: u64,
            /// The peer closes after the input.
            eof: bool,
            input: &'static [u8],
            /// Body, bytes consumed, finished.
            want: Result<(&'static [u8], usize, bool), HttpError>,
        }
        let case = |framing, max_body, eof, input, want| Case {
            framing,
            max_body,
            eof,
            input,
            want,
        };
        use Framing::{Chunked, Empty, Length, UntilClose};
        use HttpError::{BadChunk, BodyTooLarge, Truncated};
        let cases = [
            case(Empty, 10, false, b"GET /", Ok((b"", 0, true))),
            case(Empty, 10, true, b"", Ok((b"", 0, true))),
            case(Length(3), 10, false, b"abcdef", Ok((b"abc", 3, true))),
            case(Length(3), 10, false, b"ab", Ok((b"ab", 2, false))),
            case(Length(3), 10, true, b"ab", Err(Truncated)),
            case(Length(3), 10, true, b"abc", Ok((b"abc", 3, true))),
            case(Length(5), 4, false, b"abcd", Ok((b"abcd", 4, false))),
            case(Length(5), 4, false, b"abcde", Err(BodyTooLarge)),
            case(UntilClose, 4, false, b"abcd", Ok((b"abcd", 4, false))),
            case(UntilClose, 4, true, b"abcd", Ok((b"abcd", 4, true))),
            case(UntilClose, 4, true, b"", Ok((b"", 0, true))),
            case(UntilClose, 4, false, b"abcde", Err(BodyTooLarge)),
            case(
                Chunked,
                10,
                false,
                b"5\r\nhello\r\n0\r\n\r\nNEXT",
                Ok((b"hello", 15, true)),
            ),
            case(
                Chunked,
                10,
                true,
                b"5;x=y\r\nhello\r\n3\r\n!!!\r\n0\r\nT: 1\r\n\r\n",
                Ok((b"hello!!!", 33, true)),
            ),
            case(Chunked, 10, false, b"5\r\nhel", Ok((b"hel", 6, false))),
            case(Chunked, 10, true, b"5\r\nhel", Err(Truncated)),
            case(
                Chunked,
                4,
                false,
                b"5\r\nhello\r\n0\r\n\r\n",
                Err(BodyTooLarge),
            ),
            case(
                Chunked,
                10,
                false,
                b"5 5\r\nhello\r\n0\r\n\r\n",
                Err(BadChunk("invalid chunk size")),
            ),
        ];
        for c in cases {
            let limits = HttpLimits {
                max_body: c.max_body,
                ..HttpLimits::default()
            };
            let got = all_ways(c.input, || {
                Decoding::new(BodyDecoder::new(c.framing, limits), c.eof)
            });
            let want = c.want.map(|(body, consumed, done)| Decoded {
                body: body.to_vec(),
                consumed,
                done,
            });
            assert_eq!(
                got,
                want,
                "{:?} {:?}",
                c.framing,
                String::from_utf8_lossy(c.input)
            );
        }
    }

    #[test]
    fn length_stops_at_the_end() {
        let mut d = BodyDecoder::new(Framing::Length(3), HttpLimits::default());
        let mut out = Vec::new();
        assert_eq!(d.decode(b"ab", &mut out), Ok(2));
        assert!(!d.is_done());
        assert_eq!(d.decode(b"cdef", &mut out), Ok(1));
        assert!(d.is_done());
        assert_eq!(out, b"abc");
    }

    #[test]
    fn until_close_is_capped_and_ends_at_eof() {
        let limits = HttpLimits {
            max_body: 4,
            ..HttpLimits::default()
        };
        let mut d = BodyDecoder::new(Framing::UntilClose, limits);
        let mut out = Vec::new();
        assert_eq!(d.decode(b"abcd", &mut out), Ok(4));
        assert!(!d.is_done());
        assert_eq!(d.decode(b"e", &mut out), Err(HttpError::BodyTooLarge));
        // Nothing past the cap is output, whatever the split.
        assert_eq!(out, b"abcd");
        let mut whole = Vec::new();
        let mut d = BodyDecoder::new(Framing::UntilClose, limits);
        assert_eq!(d.decode(b"abcde", &mut whole), Err(HttpError::BodyTooLarge));
        assert!(whole.is_empty());
        let mut d = BodyDecoder::new(Framing::UntilClose, limits);
        d.decode(b"ab", &mut out).unwrap();
        assert_eq!(d.finish(), Ok(()));
        assert!(d.is_done());
    }

    #[test]
    fn truncated_length_body() {
        let mut d = BodyDecoder::new(Framing::Length(3), HttpLimits::default());
        d.decode(b"a", &mut Vec::new()).unwrap();
        assert_eq!(d.finish(), Err(HttpError::Truncated));
    }
}
