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

    /// True when the body's end is marked in the stream itself, so the
    /// connection can carry another message afterwards.
    pub fn is_self_delimited(&self) -> bool {
        !matches!(self.kind, Kind::UntilClose { .. })
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
