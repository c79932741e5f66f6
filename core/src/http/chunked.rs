//! `Transfer-Encoding: chunked`, decoded incrementally.
//!
//! Strict on every shape request smugglers use: the size is hex digits only
//! (no sign, no `0x`, at most 16 digits), followed only by optional spaces or
//! tabs and then either the line end or a `;` extension (RFC 9112 §7.1, so
//! `5 5` or `5 x` is not size 5), lines end with CRLF (never a bare LF), each
//! chunk's data is followed by exactly CRLF. Extensions are accepted and
//! ignored; trailers are read and dropped. Every line and the whole body are
//! capped.

use super::{HttpError, HttpLimits};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading the hex digits of a chunk size.
    Size { value: u64, digits: u8 },
    /// After the digits and at least one space or tab (BWS): more of them,
    /// then `;` or CR.
    SizeWhitespace { value: u64 },
    /// After the `;` that starts the extensions: anything but controls up
    /// to CR.
    Extension { value: u64 },
    /// Saw the CR ending the size line.
    SizeLf { value: u64 },
    /// Inside chunk data.
    Data { remaining: u64 },
    /// Expecting the CR after chunk data.
    DataCr,
    /// Expecting the LF after chunk data.
    DataLf,
    /// In the trailer section; `at_line_start` when the previous line ended.
    Trailer { at_line_start: bool, cr: bool },
    /// The last chunk and trailer section are complete.
    Done,
}

/// An incremental chunked-body decoder.
///
/// Feed it bytes with [`ChunkedDecoder::decode`]; it appends the data to an
/// output buffer and says how many input bytes it used. It stops at the end
/// of the body, so bytes of a pipelined next message stay unconsumed.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    line_len: usize,
    trailer_len: usize,
    decoded: u64,
    limits: HttpLimits,
}

impl ChunkedDecoder {
    /// A decoder at the start of a body.
    pub fn new(limits: HttpLimits) -> Self {
        ChunkedDecoder {
            state: State::Size {
                value: 0,
                digits: 0,
            },
            line_len: 0,
            trailer_len: 0,
            decoded: 0,
            limits,
        }
    }

    /// True once the terminating chunk and trailers have been read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Bytes of body data decoded so far.
    pub fn decoded(&self) -> u64 {
        self.decoded
    }

    /// Decodes from `input`, appending body data to `out`. Returns the number
    /// of input bytes consumed (all of them unless the body ended).
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, HttpError> {
        let mut i = 0;
        while i < input.len() {
            match self.state {
                State::Done => break,
                State::Data { remaining } => {
                    let take = remaining.min((input.len() - i) as u64) as usize;
                    out.extend_from_slice(&input[i..i + take]);
                    i += take;
                    let remaining = remaining - take as u64;
                    self.state = if remaining == 0 {
                        State::DataCr
                    } else {
                        State::Data { remaining }
                    };
                }
                // The usual shapes, whole in the input: a size line of
                // hex digits and CRLF, and the CRLF after the data, each
                // read at once; the same states and checks as `step`.
                State::Size {
                    value: 0,
                    digits: 0,
                } if let Some((value, used)) = self.size_line(&input[i..]) => {
                    self.state = self.sized(value)?;
                    i += used;
                }
                State::DataCr if input[i..].starts_with(b"\r\n") => {
                    self.state = State::Size {
                        value: 0,
                        digits: 0,
                    };
                    i += 2;
                }
                _ => {
                    self.step(input[i])?;
                    i += 1;
                }
            }
        }
        Ok(i)
    }

    /// A size line at the start of `input` (no size byte read yet) that is
    /// hex digits and CRLF, within the line limit: its size and length.
    /// `None` for any other shape (whitespace, an extension, a line cut by
    /// the input's end, an error), which `step` reads a byte at a time.
    fn size_line(&self, input: &[u8]) -> Option<(u64, usize)> {
        let digits = input
            .iter()
            .take(17)
            .take_while(|b| b.is_ascii_hexdigit())
            .count();
        // The CR is the line's last counted byte.
        if digits == 0 || digits > 16 || self.line_len + digits + 1 > self.limits.max_chunk_line {
            return None;
        }
        if input.get(digits..digits + 2) != Some(b"\r\n") {
            return None;
        }
        let value = input[..digits].iter().fold(0u64, |v, &b| {
            let d = match b {
                b'0'..=b'9' => b - b'0',
                b'a'..=b'f' => b - b'a' + 10,
                _ => b - b'A' + 10,
            };
            (v << 4) | u64::from(d)
        });
        Some((value, digits + 2))
    }

    /// The state after a size line of `value` ended: the trailers after
    /// the last chunk, or the chunk's data, within the body's cap.
    fn sized(&mut self, value: u64) -> Result<State, HttpError> {
        self.line_len = 0;
        if value == 0 {
            return Ok(State::Trailer {
                at_line_start: true,
                cr: false,
            });
        }
        self.decoded = self.decoded.saturating_add(value);
        if self.decoded > self.limits.max_body {
            return Err(HttpError::BodyTooLarge);
        }
        Ok(State::Data { remaining: value })
    }

    /// Call when the peer closed: an unfinished body is an error.
    pub fn finish(&self) -> Result<(), HttpError> {
        if self.is_done() {
            Ok(())
        } else {
            Err(HttpError::Truncated)
        }
    }

    fn count_line_byte(&mut self) -> Result<(), HttpError> {
        self.line_len += 1;
        if self.line_len > self.limits.max_chunk_line {
            return Err(HttpError::BadChunk("chunk-size line too long"));
        }
        Ok(())
    }

    fn step(&mut self, b: u8) -> Result<(), HttpError> {
        self.state = match self.state {
            State::Size { value, digits } => {
                self.count_line_byte()?;
                match b {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        if digits >= 16 {
                            return Err(HttpError::BadChunk("chunk size too large"));
                        }
                        let d = (b as char).to_digit(16).unwrap_or(0) as u64;
                        State::Size {
                            value: (value << 4) | d,
                            digits: digits + 1,
                        }
                    }
                    _ if digits == 0 => return Err(HttpError::BadChunk("missing chunk size")),
                    b'\r' => State::SizeLf { value },
                    b';' => State::Extension { value },
                    b' ' | b'\t' => State::SizeWhitespace { value },
                    b'\n' => return Err(HttpError::BareLineEnding),
                    _ => return Err(HttpError::BadChunk("invalid chunk size")),
                }
            }
            State::SizeWhitespace { value } => {
                self.count_line_byte()?;
                match b {
                    b' ' | b'\t' => State::SizeWhitespace { value },
                    b';' => State::Extension { value },
                    b'\r' => State::SizeLf { value },
                    b'\n' => return Err(HttpError::BareLineEnding),
                    // `5 5` or `5 x`: another parser could read a different
                    // size (or none) here, so nothing but BWS may follow.
                    _ => return Err(HttpError::BadChunk("invalid chunk size")),
                }
            }
            State::Extension { value } => {
                self.count_line_byte()?;
                match b {
                    b'\r' => State::SizeLf { value },
                    b'\n' => return Err(HttpError::BareLineEnding),
                    0..=8 | 10..=31 | 127 => {
                        return Err(HttpError::BadChunk("control character in chunk extension"));
                    }
                    _ => State::Extension { value },
                }
            }
            State::SizeLf { value } => {
                if b != b'\n' {
                    return Err(HttpError::BareLineEnding);
                }
                self.sized(value)?
            }
            State::DataCr => match b {
                b'\r' => State::DataLf,
                _ => return Err(HttpError::BadChunk("chunk data not followed by CRLF")),
            },
            State::DataLf => match b {
                b'\n' => State::Size {
                    value: 0,
                    digits: 0,
                },
                _ => return Err(HttpError::BadChunk("chunk data not followed by CRLF")),
            },
            State::Trailer { at_line_start, cr } => {
                self.trailer_len += 1;
                if self.trailer_len > self.limits.max_trailers {
                    return Err(HttpError::BadChunk("trailer section too large"));
                }
                match (cr, b) {
                    (true, b'\n') if at_line_start => State::Done,
                    (true, b'\n') => State::Trailer {
                        at_line_start: true,
                        cr: false,
                    },
                    (true, _) | (false, b'\n') => return Err(HttpError::BareLineEnding),
                    (false, b'\r') => State::Trailer {
                        at_line_start,
                        cr: true,
                    },
                    (false, 0) => return Err(HttpError::BadChunk("NUL in trailer")),
                    (false, _) => State::Trailer {
                        at_line_start: false,
                        cr: false,
                    },
                }
            }
            State::Data { .. } | State::Done => unreachable!("handled in decode"),
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::feeding::{Decoding, all_ways};
    use proptest::prelude::*;

    fn limits(max_body: u64) -> HttpLimits {
        HttpLimits {
            max_body,
            ..HttpLimits::default()
        }
    }

    /// Decodes `input` every way (see [`all_ways`]); a complete body gives
    /// its bytes and the input it used.
    fn decode_all_ways(input: &[u8], max_body: u64) -> Result<(Vec<u8>, usize), HttpError> {
        let decoded = all_ways(input, || {
            Decoding::new(ChunkedDecoder::new(limits(max_body)), false)
        })?;
        assert!(decoded.done, "body not complete");
        Ok((decoded.body, decoded.consumed))
    }

    #[test]
    fn decodes_chunks_extensions_and_trailers() {
        let input = b"5\r\nhello\r\n6;name=\"v\"\r\n world\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let (out, n) = decode_all_ways(input, 1024).unwrap();
        assert_eq!(out, b"hello world");
        assert_eq!(&input[n..], b"NEXT");
    }

    #[test]
    fn uppercase_hex_and_leading_zeros() {
        let (out, _) = decode_all_ways(b"000A\r\n0123456789\r\n0\r\n\r\n", 1024).unwrap();
        assert_eq!(out.len(), 10);
    }

    #[test]
    fn whitespace_before_extension_or_line_end() {
        for input in [
            &b"5 \t;a=b\r\nhello\r\n0\r\n\r\n"[..],
            b"5\t \r\nhello\r\n0 \r\n\r\n",
            b"5;a=b c\r\nhello\r\n0\r\n\r\n",
        ] {
            let (out, n) = decode_all_ways(input, 1024).unwrap();
            assert_eq!((&out[..], n), (&b"hello"[..], input.len()));
        }
    }

    #[test]
    fn rejects_smuggling_shapes() {
        const INVALID_SIZE: HttpError = HttpError::BadChunk("invalid chunk size");
        const NO_CRLF: HttpError = HttpError::BadChunk("chunk data not followed by CRLF");
        let cases: &[(&[u8], HttpError)] = &[
            // bare LF after size
            (b"5\nhello\r\n0\r\n\r\n", HttpError::BareLineEnding),
            // bare LF after data
            (b"5\r\nhello\n0\r\n\r\n", NO_CRLF),
            // data longer than size
            (b"5\r\nhelloX\r\n0\r\n\r\n", NO_CRLF),
            // sign
            (
                b"-5\r\nhello\r\n0\r\n\r\n",
                HttpError::BadChunk("missing chunk size"),
            ),
            // 0x prefix
            (b"0x5\r\nhello\r\n0\r\n\r\n", INVALID_SIZE),
            // empty size
            (
                b"\r\nhello\r\n0\r\n\r\n",
                HttpError::BadChunk("missing chunk size"),
            ),
            // 17 digits
            (
                b"11111111111111111\r\n",
                HttpError::BadChunk("chunk size too large"),
            ),
            // bare LF in trailer
            (b"5\r\nhello\r\n0\r\nX: 1\n\r\n", HttpError::BareLineEnding),
            // control char in extension
            (
                b"5;\x01\r\nhello\r\n0\r\n\r\n",
                HttpError::BadChunk("control character in chunk extension"),
            ),
            // junk after the size's whitespace: `5 5` is not 5 (nor 0x55)
            (b"5 5\r\nhello\r\n0\r\n\r\n", INVALID_SIZE),
            (b"5 x\r\nhello\r\n0\r\n\r\n", INVALID_SIZE),
            (b"5\t\x01\r\nhello\r\n0\r\n\r\n", INVALID_SIZE),
            (b"5 \n\r\nhello\r\n0\r\n\r\n", HttpError::BareLineEnding),
            (b"5\r\nhello\r\n0 0\r\n\r\n", INVALID_SIZE),
        ];
        for (input, want) in cases {
            assert_eq!(
                decode_all_ways(input, 1024),
                Err(want.clone()),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn body_cap_counts_declared_sizes() {
        assert_eq!(
            decode_all_ways(b"5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n", 9),
            Err(HttpError::BodyTooLarge)
        );
        assert!(decode_all_ways(b"5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n", 10).is_ok());
    }

    /// The size line's cap counts its digits and CR, read whole or a byte
    /// at a time (`all_ways` feeds both).
    #[test]
    fn size_line_cap_counts_digits_and_cr() {
        let capped = |input: &[u8]| {
            all_ways(input, || {
                let limits = HttpLimits {
                    max_chunk_line: 3,
                    ..limits(1024)
                };
                Decoding::new(ChunkedDecoder::new(limits), false)
            })
            .map(|d| d.body)
        };
        assert_eq!(capped(b"05\r\nhello\r\n0\r\n\r\n"), Ok(b"hello".to_vec()));
        assert_eq!(
            capped(b"005\r\nhello\r\n0\r\n\r\n"),
            Err(HttpError::BadChunk("chunk-size line too long"))
        );
        // 16 digits is the most a size has; this one is past any body.
        assert_eq!(
            decode_all_ways(b"FFFFFFFFFFFFFFFF\r\n", 1024),
            Err(HttpError::BodyTooLarge)
        );
    }

    #[test]
    fn truncated_body_is_an_error_at_eof() {
        let mut d = ChunkedDecoder::new(limits(100));
        let mut out = Vec::new();
        d.decode(b"5\r\nhel", &mut out).unwrap();
        assert_eq!(d.finish(), Err(HttpError::Truncated));
    }

    proptest! {
        #[test]
        fn random_splits_agree(
            sizes in proptest::collection::vec(0usize..300, 0..6),
            ext in any::<bool>(),
            trailer in any::<bool>(),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
        ) {
            let mut body = Vec::new();
            let mut expect = Vec::new();
            for (i, n) in sizes.iter().copied().filter(|&n| n > 0).enumerate() {
                let data: Vec<u8> = (0..n).map(|j| b'a' + ((i + j) % 26) as u8).collect();
                body.extend_from_slice(format!("{n:X}{}\r\n", if ext { ";x=y" } else { "" }).as_bytes());
                body.extend_from_slice(&data);
                body.extend_from_slice(b"\r\n");
                expect.extend_from_slice(&data);
            }
            body.extend_from_slice(if trailer { &b"0\r\nT: v\r\n\r\nNEXT"[..] } else { &b"0\r\n\r\nNEXT"[..] });
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(body.len() + 1)).collect();
            points.sort_unstable();
            let mut d = ChunkedDecoder::new(limits(1 << 20));
            let mut out = Vec::new();
            let mut used = 0;
            let mut last = 0;
            for p in points.into_iter().chain(std::iter::once(body.len())) {
                if !d.is_done() {
                    used += d.decode(&body[last.max(used)..p.max(used)], &mut out).unwrap();
                }
                last = p;
            }
            prop_assert!(d.is_done());
            prop_assert_eq!(out, expect);
            prop_assert_eq!(&body[used..], b"NEXT");
        }
    }
}
