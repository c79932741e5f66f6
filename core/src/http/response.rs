//! The client side: response heads from the provider.

use super::{Framing, HttpError, HttpLimits, merge_content_length, name_is, tokens};

const HEADER_SLOTS: usize = 128;

/// What the gateway needs from a provider's response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// Status code.
    pub status: u16,
    /// How the body is delimited.
    pub framing: Framing,
    /// Whether the connection can be reused after the body.
    pub keep_alive: bool,
    /// The `Content-Type` value.
    pub content_type: Option<String>,
    /// The `Retry-After` value, as sent.
    pub retry_after: Option<String>,
    /// Length of the head in bytes.
    pub head_len: usize,
}

impl ResponseHead {
    /// An interim (1xx) response other than 101, to be skipped.
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.status) && self.status != 101
    }

    /// `Content-Type` is `text/event-stream`.
    pub fn is_event_stream(&self) -> bool {
        self.media_type_is("text/event-stream")
    }

    /// `Content-Type` is `application/json` (or `+json`).
    pub fn is_json(&self) -> bool {
        self.media_type_is("application/json")
            || self
                .content_type
                .as_deref()
                .and_then(|c| c.split(';').next())
                .is_some_and(|m| m.trim().to_ascii_lowercase().ends_with("+json"))
    }

    fn media_type_is(&self, want: &str) -> bool {
        self.content_type
            .as_deref()
            .and_then(|c| c.split(';').next())
            .is_some_and(|m| m.trim().eq_ignore_ascii_case(want))
    }

    /// `Retry-After` as whole seconds, when it is given as seconds.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after.as_deref()?.trim().parse().ok()
    }
}

/// Parses a complete response head (found by [`super::HeadScanner`]).
pub fn parse_response_head(head: &[u8], limits: &HttpLimits) -> Result<ResponseHead, HttpError> {
    let mut slots = [httparse::EMPTY_HEADER; HEADER_SLOTS];
    let slots = &mut slots[..limits.max_headers.min(HEADER_SLOTS)];
    let mut res = httparse::Response::new(slots);
    let head_len = match res.parse(head) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Err(HttpError::Malformed("incomplete head")),
        Err(httparse::Error::TooManyHeaders) => return Err(HttpError::TooManyHeaders),
        Err(httparse::Error::Version) => return Err(HttpError::UnsupportedVersion),
        Err(httparse::Error::NewLine) => return Err(HttpError::BareLineEnding),
        Err(_) => return Err(HttpError::Malformed("invalid status line or header")),
    };
    let status = res.code.unwrap_or(0);
    if !(100..=999).contains(&status) {
        return Err(HttpError::Malformed("status code below 100"));
    }
    let http10 = res.version == Some(0);
    let mut content_length = None;
    let mut te_last_chunked = None;
    let mut close = false;
    let mut keep_alive_token = false;
    let mut content_type = None;
    let mut retry_after = None;
    for h in res.headers.iter() {
        if name_is(h.name, "content-length") {
            content_length = Some(merge_content_length(content_length, h.value)?);
        } else if name_is(h.name, "transfer-encoding") {
            // A field with no coding at all is still a Transfer-Encoding:
            // not chunked, so the body runs until close.
            te_last_chunked.get_or_insert(false);
            for t in tokens(h.value) {
                te_last_chunked = Some(t.eq_ignore_ascii_case(b"chunked"));
            }
        } else if name_is(h.name, "connection") {
            for t in tokens(h.value) {
                close |= t.eq_ignore_ascii_case(b"close");
                keep_alive_token |= t.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name_is(h.name, "content-type") {
            content_type = Some(String::from_utf8_lossy(h.value).trim().to_owned());
        } else if name_is(h.name, "retry-after") {
            retry_after = Some(String::from_utf8_lossy(h.value).trim().to_owned());
        }
    }
    if te_last_chunked.is_some() && content_length.is_some() {
        // RFC 9112 §6.1: a likely response-splitting attempt; treat as broken.
        return Err(HttpError::LengthAndTransferEncoding);
    }
    let framing = if (100..200).contains(&status) || status == 204 || status == 304 {
        Framing::Empty
    } else {
        match (te_last_chunked, content_length) {
            (Some(true), _) => Framing::Chunked,
            (Some(false), _) => Framing::UntilClose,
            (None, Some(0)) => Framing::Empty,
            (None, Some(n)) => Framing::Length(n),
            (None, None) => Framing::UntilClose,
        }
    };
    let persistent = if http10 {
        keep_alive_token && !close
    } else {
        !close
    };
    Ok(ResponseHead {
        status,
        keep_alive: persistent && framing != Framing::UntilClose,
        framing,
        content_type,
        retry_after,
        head_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::feeding::{HeadReading, all_ways};

    /// Reads a head every way (see [`all_ways`]), as the exchange does:
    /// scanned across reads, then parsed once complete.
    fn parse_with(limits: HttpLimits, s: &str) -> Result<ResponseHead, HttpError> {
        let (head, consumed) = all_ways(s.as_bytes(), || HeadReading::response(limits))?
            .unwrap_or_else(|| panic!("incomplete head: {s:?}"));
        assert!(s[..consumed].ends_with("\r\n\r\n"), "{s:?}");
        Ok(head)
    }

    fn parse(s: &str) -> Result<ResponseHead, HttpError> {
        parse_with(HttpLimits::default(), s)
    }

    #[test]
    fn framings() {
        let h = parse("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap();
        assert_eq!(h.framing, Framing::Chunked);
        assert!(h.keep_alive && h.is_event_stream() && !h.is_json());
        let h = parse(
            "HTTP/1.1 200 OK\r\nContent-Length: 10\r\nContent-Type: application/json\r\n\r\n",
        )
        .unwrap();
        assert_eq!(h.framing, Framing::Length(10));
        assert!(h.is_json());
        let h = parse("HTTP/1.1 200 OK\r\n\r\n").unwrap();
        assert_eq!(h.framing, Framing::UntilClose);
        assert!(!h.keep_alive);
        let h = parse("HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n").unwrap();
        assert_eq!(h.framing, Framing::Empty);
        let h = parse("HTTP/1.1 100 Continue\r\n\r\n").unwrap();
        assert!(h.is_interim());
        let h = parse("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n").unwrap();
        assert!(!h.keep_alive);
        let h =
            parse("HTTP/1.1 429 Too Many\r\nRetry-After: 7\r\nContent-Length: 0\r\n\r\n").unwrap();
        assert_eq!(h.retry_after_secs(), Some(7));
    }

    #[test]
    fn broken_heads() {
        assert_eq!(
            parse("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Err(HttpError::LengthAndTransferEncoding)
        );
        assert!(
            parse("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n").is_err()
        );
        assert!(parse("garbage garbage\r\n\r\n").is_err());
        assert!(parse("HTTP/1.1 020 X\r\nContent-Length: 0\r\n\r\n").is_err());
        assert_eq!(
            parse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding:\r\n\r\n"),
            Err(HttpError::LengthAndTransferEncoding)
        );
        assert_eq!(
            parse("HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\n\r\n")
                .unwrap()
                .framing,
            Framing::UntilClose
        );
        assert_eq!(
            parse("HTTP/1.1 200 OK\r\nContent-Length: 0\n\r\n"),
            Err(HttpError::BareLineEnding)
        );
        assert_eq!(
            parse("HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n"),
            Err(HttpError::BareLineEnding)
        );
        assert_eq!(
            parse("HTTP/2 200 OK\r\n\r\n"),
            Err(HttpError::UnsupportedVersion)
        );
    }

    #[test]
    fn head_ends_where_the_body_starts() {
        let s = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nBODY";
        let h = parse(s).unwrap();
        assert_eq!((h.head_len, h.framing), (s.len() - 4, Framing::Length(4)));
        let s = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n";
        assert_eq!(parse(s).unwrap().head_len, 25);
    }

    #[test]
    fn head_and_field_caps() {
        let tight = HttpLimits {
            max_head: 40,
            max_headers: 2,
            ..HttpLimits::default()
        };
        assert_eq!(
            parse_with(
                tight,
                "HTTP/1.1 200 OK\r\nX-Long: aaaaaaaaaaaaaaaaaaaa\r\n\r\n"
            ),
            Err(HttpError::HeadTooLarge)
        );
        assert_eq!(
            parse_with(tight, "HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n"),
            Err(HttpError::TooManyHeaders)
        );
        assert!(parse_with(tight, "HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\n\r\n").is_ok());
    }
}
