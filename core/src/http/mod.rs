//! HTTP/1.1 on both sides of the gateway, without I/O.
//!
//! - [`parse_request_head`]: the server side, parsing what clients send
//!   (heads, then bodies by `Content-Length` or `chunked`), strict about
//!   every framing shape that could smuggle a second request.
//! - [`parse_response_head`]: the client side, parsing what the provider
//!   answers.
//! - [`ChunkedDecoder`] and [`BodyDecoder`]: body decoders shared by both
//!   sides.
//! - [`mod@write`]: serializers for request and response heads and chunk frames.
//!
//! Every parser resumes where it stopped, so feeding a message one byte at a
//! time costs O(bytes), and every buffer that grows has a cap with a typed
//! error ([`HttpError`]) that knows the HTTP status it maps to.
//!
//! | file | job |
//! |---|---|
//! | `head.rs` | the resumable head scanner |
//! | `request.rs` | request heads (strict) |
//! | `response.rs` | response heads |
//! | `body.rs`, `chunked.rs` | body framing by length, chunks or close |
//! | `write.rs` | head and chunk writers |

mod body;
mod chunked;
#[cfg(test)]
mod feeding;
mod head;
mod request;
mod response;
pub mod write;

pub use body::BodyDecoder;
pub use chunked::ChunkedDecoder;
pub use head::{HeadScanner, TLS_HANDSHAKE};
pub use request::{Method, RequestHead, header_value, leading_empty_lines, parse_request_head};
pub use response::{ResponseHead, parse_response_head};

/// Limits applied while parsing HTTP messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Largest header block, request line and final CRLF included (64 KiB).
    pub max_head: usize,
    /// Most header fields in one block (64).
    pub max_headers: usize,
    /// Largest body (2 MiB for requests).
    pub max_body: u64,
    /// Longest chunk-size line, extensions included.
    pub max_chunk_line: usize,
    /// Largest trailer section of a chunked body.
    pub max_trailers: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_head: 64 * 1024,
            max_headers: 64,
            max_body: 2 * 1024 * 1024,
            max_chunk_line: 4096,
            max_trailers: 64 * 1024,
        }
    }
}

/// Everything that can be wrong with an HTTP message, each mapped to a status.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HttpError {
    /// The header block is over [`HttpLimits::max_head`] (431).
    HeadTooLarge,
    /// More header fields than [`HttpLimits::max_headers`] (431).
    TooManyHeaders,
    /// A line ended with a bare LF (or a CR not followed by LF): 400.
    BareLineEnding,
    /// The request line or a header field is not valid HTTP/1.x (400),
    /// including obs-fold continuation lines and NUL bytes.
    Malformed(&'static str),
    /// Only HTTP/1.0 and HTTP/1.1 are spoken (505).
    UnsupportedVersion,
    /// Several `Content-Length` fields that disagree, or a list (400).
    ConflictingContentLength,
    /// A `Content-Length` that is not a plain decimal number (400).
    InvalidContentLength,
    /// Both `Content-Length` and `Transfer-Encoding` (400).
    LengthAndTransferEncoding,
    /// A `Transfer-Encoding` other than exactly `chunked` (400).
    UnsupportedTransferEncoding,
    /// HTTP/1.1 request without a `Host`, or with several (400).
    BadHost,
    /// An `Expect` other than `100-continue` (417).
    UnsupportedExpectation,
    /// Body over [`HttpLimits::max_body`] (413).
    BodyTooLarge,
    /// A chunk-size line, chunk terminator or trailer section is invalid (400).
    BadChunk(&'static str),
    /// The peer closed the connection in the middle of a message.
    Truncated,
    /// The bytes are a TLS handshake (a record of type 22), sent to a port
    /// that speaks plain HTTP: the client's base URL says `https://` (400,
    /// at once, instead of waiting for a head that never ends).
    TlsHandshake,
}

impl HttpError {
    /// The HTTP status this error is answered with.
    pub fn status(&self) -> u16 {
        match self {
            HttpError::HeadTooLarge | HttpError::TooManyHeaders => 431,
            HttpError::UnsupportedVersion => 505,
            HttpError::UnsupportedExpectation => 417,
            HttpError::BodyTooLarge => 413,
            _ => 400,
        }
    }
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::HeadTooLarge => f.write_str("the header block is too large"),
            HttpError::TooManyHeaders => f.write_str("too many header fields"),
            HttpError::BareLineEnding => f.write_str("lines must end with CRLF"),
            HttpError::Malformed(what) => write!(f, "malformed HTTP: {what}"),
            HttpError::UnsupportedVersion => f.write_str("unsupported HTTP version"),
            HttpError::ConflictingContentLength => f.write_str("conflicting Content-Length fields"),
            HttpError::InvalidContentLength => f.write_str("invalid Content-Length"),
            HttpError::LengthAndTransferEncoding => {
                f.write_str("Content-Length and Transfer-Encoding together")
            }
            HttpError::UnsupportedTransferEncoding => {
                f.write_str("only 'Transfer-Encoding: chunked' is supported")
            }
            HttpError::BadHost => f.write_str("exactly one Host header is required"),
            HttpError::UnsupportedExpectation => f.write_str("unsupported Expect"),
            HttpError::BodyTooLarge => f.write_str("the body is too large"),
            HttpError::BadChunk(what) => write!(f, "invalid chunked encoding: {what}"),
            HttpError::Truncated => f.write_str("the message ended early"),
            HttpError::TlsHandshake => f.write_str(
                "this port speaks plain HTTP and the client began a TLS handshake: use http:// in the base URL (or serve TLS here with --tls-cert and --tls-key)",
            ),
        }
    }
}

impl std::error::Error for HttpError {}

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Everything until the peer closes (responses only).
    UntilClose,
}

/// Case-insensitive ASCII comparison of a header name.
pub(crate) fn name_is(name: &str, expected: &str) -> bool {
    name.eq_ignore_ascii_case(expected)
}

/// Splits a comma-separated header value into trimmed, non-empty tokens.
pub(crate) fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(|t| t.trim_ascii())
        .filter(|t| !t.is_empty())
}

/// Parses one `Content-Length` value strictly: ASCII digits only.
pub(crate) fn parse_content_length(value: &[u8]) -> Result<u64, HttpError> {
    let value = value.trim_ascii();
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return Err(HttpError::InvalidContentLength);
    }
    value.iter().try_fold(0u64, |acc, &d| {
        acc.checked_mul(10)
            .and_then(|a| a.checked_add(u64::from(d - b'0')))
            .ok_or(HttpError::InvalidContentLength)
    })
}

/// Folds repeated `Content-Length` fields: identical values are one value,
/// differing values are an error.
pub(crate) fn merge_content_length(seen: Option<u64>, value: &[u8]) -> Result<u64, HttpError> {
    if value.contains(&b',') {
        return Err(HttpError::ConflictingContentLength);
    }
    let n = parse_content_length(value)?;
    match seen {
        Some(prev) if prev != n => Err(HttpError::ConflictingContentLength),
        _ => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_is_strict() {
        assert_eq!(parse_content_length(b"0"), Ok(0));
        assert_eq!(parse_content_length(b" 42 "), Ok(42));
        for bad in [
            &b""[..],
            b"+1",
            b"-1",
            b"0x10",
            b"1 2",
            b"99999999999999999999",
        ] {
            assert_eq!(
                parse_content_length(bad),
                Err(HttpError::InvalidContentLength)
            );
        }
        assert_eq!(merge_content_length(Some(5), b"5"), Ok(5));
        assert_eq!(
            merge_content_length(Some(5), b"6"),
            Err(HttpError::ConflictingContentLength)
        );
        assert_eq!(
            merge_content_length(None, b"5, 5"),
            Err(HttpError::ConflictingContentLength)
        );
    }

    #[test]
    fn statuses() {
        assert_eq!(HttpError::HeadTooLarge.status(), 431);
        assert_eq!(HttpError::BodyTooLarge.status(), 413);
        assert_eq!(HttpError::BadChunk("x").status(), 400);
        assert_eq!(HttpError::UnsupportedExpectation.status(), 417);
    }
}
