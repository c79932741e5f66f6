//! The server side: request heads from clients.

use super::{Framing, HttpError, HttpLimits, merge_content_length, name_is, tokens};

/// Most header fields the parser has room for, whatever the limits say.
const HEADER_SLOTS: usize = 128;

/// Request methods the gateway distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// GET
    Get,
    /// HEAD
    Head,
    /// POST
    Post,
    /// PUT
    Put,
    /// DELETE
    Delete,
    /// PATCH
    Patch,
    /// OPTIONS
    Options,
    /// Any other token.
    Other,
}

impl Method {
    fn parse(s: &str) -> Method {
        match s {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "PATCH" => Method::Patch,
            "OPTIONS" => Method::Options,
            _ => Method::Other,
        }
    }

    /// The method's name (`OTHER` for methods the gateway does not know).
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Patch => "PATCH",
            Method::Options => "OPTIONS",
            Method::Other => "OTHER",
        }
    }
}

/// What the gateway needs from a request head; other fields are not kept.
#[derive(Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// The method.
    pub method: Method,
    /// The path of the request target, without the query string.
    pub path: String,
    /// The query string (after `?`, as written; empty without one).
    pub query: String,
    /// HTTP/1.0 (rather than 1.1).
    pub http10: bool,
    /// How the body is delimited.
    pub framing: Framing,
    /// Whether the connection may carry another request after this one.
    pub keep_alive: bool,
    /// `Expect: 100-continue` was sent.
    pub expect_continue: bool,
    /// `Upgrade: websocket` was asked for (never granted: the answer says
    /// so).
    pub websocket: bool,
    /// The `Authorization` value. Secret: never logged, never echoed.
    pub authorization: Option<String>,
    /// The `x-api-key` value (how the Anthropic clients send their key).
    /// Secret: never logged, never echoed.
    pub api_key: Option<String>,
    /// The `x-goog-api-key` value (how the Google clients send their key).
    /// Secret: never logged, never echoed.
    pub goog_api_key: Option<String>,
    /// The `Content-Type` value.
    pub content_type: Option<String>,
    /// The `traceparent` value, when the field was sent exactly once (two
    /// contradict each other: neither is trusted). Read by `trace`.
    pub traceparent: Option<Vec<u8>>,
    /// The `tracestate` fields' values, joined with commas (several fields
    /// are one list). Read by `trace`.
    pub tracestate: Option<Vec<u8>>,
    /// The hash of the conversation a session header names
    /// (`X-Claude-Code-Session-Id`, `session_id` or `session-id` as Codex
    /// and others send it, `x-session-id`; the first non-empty one), for
    /// affinity.
    pub session: Option<u64>,
    /// Length of the head in bytes, final CRLF included.
    pub head_len: usize,
}

impl std::fmt::Debug for RequestHead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestHead")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("http10", &self.http10)
            .field("framing", &self.framing)
            .field("keep_alive", &self.keep_alive)
            .field("expect_continue", &self.expect_continue)
            .field("websocket", &self.websocket)
            .field(
                "authorization",
                &self.authorization.as_ref().map(|_| "<redacted>"),
            )
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field(
                "goog_api_key",
                &self.goog_api_key.as_ref().map(|_| "<redacted>"),
            )
            .field("content_type", &self.content_type)
            .field(
                "traceparent",
                &self.traceparent.as_deref().map(String::from_utf8_lossy),
            )
            .field(
                "tracestate",
                &self.tracestate.as_deref().map(String::from_utf8_lossy),
            )
            .field("head_len", &self.head_len)
            .finish()
    }
}

/// The value of header `name` in a complete head (first occurrence), for the
/// rare reader that needs a field [`RequestHead`] does not keep.
pub fn header_value<'a>(head: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let mut slots = [httparse::EMPTY_HEADER; HEADER_SLOTS];
    let mut req = httparse::Request::new(&mut slots);
    req.parse(head).ok()?;
    req.headers
        .iter()
        .find(|h| name_is(h.name, name))
        .map(|h| h.value)
}

/// Number of empty lines (CRLF) before a request line; RFC 9112 §2.2 says a
/// server should ignore at least one, which keeps clients that add a stray
/// CRLF after a body working.
pub fn leading_empty_lines(buf: &[u8]) -> usize {
    let mut n = 0;
    while buf[n..].starts_with(b"\r\n") {
        n += 2;
    }
    n
}

/// Parses a complete request head (`head` ends with CRLFCRLF, as found by
/// [`super::HeadScanner`]).
pub fn parse_request_head(head: &[u8], limits: &HttpLimits) -> Result<RequestHead, HttpError> {
    let mut slots = [httparse::EMPTY_HEADER; HEADER_SLOTS];
    let slots = &mut slots[..limits.max_headers.min(HEADER_SLOTS)];
    let mut req = httparse::Request::new(slots);
    let head_len = match req.parse(head) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Err(HttpError::Malformed("incomplete head")),
        Err(httparse::Error::TooManyHeaders) => return Err(HttpError::TooManyHeaders),
        Err(httparse::Error::Version) => return Err(HttpError::UnsupportedVersion),
        Err(httparse::Error::HeaderName) => {
            return Err(HttpError::Malformed("invalid header name"));
        }
        Err(httparse::Error::HeaderValue) => {
            return Err(HttpError::Malformed("invalid header value"));
        }
        Err(httparse::Error::NewLine) => return Err(HttpError::BareLineEnding),
        Err(_) => return Err(HttpError::Malformed("invalid request line")),
    };
    // httparse fills these on Complete.
    let method = Method::parse(req.method.unwrap_or(""));
    let target = req.path.unwrap_or("");
    let http10 = req.version == Some(0);
    if !target.starts_with('/') {
        return Err(HttpError::Malformed("the request target must be a path"));
    }
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path.to_owned(), query.to_owned()),
        None => (target.to_owned(), String::new()),
    };

    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut transfer_encoding = false;
    let mut hosts = 0;
    let mut close = false;
    let mut keep_alive_token = false;
    let mut expect_continue = false;
    let mut websocket = false;
    let mut authorization = None;
    let mut api_key = None;
    let mut goog_api_key = None;
    let mut content_type = None;
    let mut traceparents = 0;
    let mut traceparent = None;
    let mut tracestate: Option<Vec<u8>> = None;
    let mut session = None;
    for h in req.headers.iter() {
        let name = h.name;
        if name_is(name, "content-length") {
            content_length = Some(merge_content_length(content_length, h.value)?);
        } else if name_is(name, "transfer-encoding") {
            // Every coding, over every field, must be exactly one `chunked`.
            for t in tokens(h.value) {
                if chunked || !t.eq_ignore_ascii_case(b"chunked") {
                    return Err(HttpError::UnsupportedTransferEncoding);
                }
                chunked = true;
            }
            transfer_encoding = true;
        } else if name_is(name, "host") {
            hosts += 1;
        } else if name_is(name, "connection") {
            for t in tokens(h.value) {
                close |= t.eq_ignore_ascii_case(b"close");
                keep_alive_token |= t.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name_is(name, "expect") {
            if http10 {
                continue;
            }
            if h.value.trim_ascii().eq_ignore_ascii_case(b"100-continue") {
                expect_continue = true;
            } else {
                return Err(HttpError::UnsupportedExpectation);
            }
        } else if name_is(name, "upgrade") {
            websocket |= tokens(h.value).any(|t| t.eq_ignore_ascii_case(b"websocket"));
        } else if name_is(name, "authorization") {
            authorization = Some(lossy(h.value));
        } else if name_is(name, "x-api-key") {
            api_key = Some(lossy(h.value));
        } else if name_is(name, "x-goog-api-key") {
            goog_api_key = Some(lossy(h.value));
        } else if name_is(name, "content-type") {
            content_type = Some(lossy(h.value));
        } else if name_is(name, "traceparent") {
            traceparents += 1;
            traceparent = Some(h.value.to_vec());
        } else if name_is(name, "tracestate") {
            // Several fields are one list.
            let all = tracestate.get_or_insert_with(Vec::new);
            if !all.is_empty() {
                all.push(b',');
            }
            all.extend_from_slice(h.value);
        } else if session.is_none()
            && (name_is(name, "x-claude-code-session-id")
                || name_is(name, "session_id")
                || name_is(name, "session-id")
                || name_is(name, "x-session-id"))
        {
            let value = h.value.trim_ascii();
            if !value.is_empty() {
                session = Some(crate::endpoints::affinity_hash(value));
            }
        }
    }
    // Two traceparents contradict each other: neither is trusted.
    if traceparents > 1 {
        traceparent = None;
    }
    if transfer_encoding && !chunked {
        return Err(HttpError::UnsupportedTransferEncoding);
    }
    if chunked && content_length.is_some() {
        return Err(HttpError::LengthAndTransferEncoding);
    }
    if chunked && http10 {
        return Err(HttpError::UnsupportedTransferEncoding);
    }
    if hosts > 1 || (hosts == 0 && !http10) {
        return Err(HttpError::BadHost);
    }
    let framing = if chunked {
        Framing::Chunked
    } else {
        match content_length {
            Some(0) | None => Framing::Empty,
            Some(n) => Framing::Length(n),
        }
    };
    let keep_alive = if http10 {
        keep_alive_token && !close
    } else {
        !close
    };
    Ok(RequestHead {
        method,
        path,
        query,
        http10,
        framing,
        keep_alive,
        expect_continue,
        websocket,
        authorization,
        api_key,
        goog_api_key,
        content_type,
        traceparent,
        tracestate,
        session,
        head_len,
    })
}

fn lossy(value: &[u8]) -> String {
    let value = value.trim_ascii();
    match std::str::from_utf8(value) {
        // The usual case, without the lossy decoder's chunking.
        Ok(s) => s.to_owned(),
        Err(_) => String::from_utf8_lossy(value).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::feeding::{HeadReading, all_ways};

    /// Reads a head every way (see [`all_ways`]), as the exchange does:
    /// leading empty lines skipped, scanned across reads, then parsed once
    /// complete. Gives the head and the bytes it used.
    fn read_with(limits: HttpLimits, s: &str) -> Result<(RequestHead, usize), HttpError> {
        let (head, consumed) = all_ways(s.as_bytes(), || HeadReading::request(limits))?
            .unwrap_or_else(|| panic!("incomplete head: {s:?}"));
        assert!(s[..consumed].ends_with("\r\n\r\n"), "{s:?}");
        Ok((head, consumed))
    }

    fn parse(s: &str) -> Result<RequestHead, HttpError> {
        read_with(HttpLimits::default(), s).map(|(head, _)| head)
    }

    #[test]
    fn parses_a_typical_request() {
        let h = parse(
            "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer k\r\n\
             Content-Type: application/json\r\nContent-Length: 12\r\n\r\n",
        )
        .unwrap();
        assert_eq!(h.method, Method::Post);
        assert_eq!(h.path, "/v1/chat/completions");
        assert_eq!(h.framing, Framing::Length(12));
        assert!(h.keep_alive);
        assert_eq!(h.authorization.as_deref(), Some("Bearer k"));
        assert!(!format!("{h:?}").contains("Bearer k"));
    }

    #[test]
    fn a_session_header_names_the_conversation() {
        let hash = |s: &str| crate::endpoints::affinity_hash(s.as_bytes());
        for header in [
            "X-Claude-Code-Session-Id",
            "session_id",
            "Session-Id",
            "x-session-id",
        ] {
            let h = parse(&format!(
                "GET / HTTP/1.1\r\nHost: a\r\n{header}:  s-1 \r\n\r\n"
            ))
            .unwrap();
            assert_eq!(h.session, Some(hash("s-1")), "{header}");
        }
        // The first non-empty one.
        let h = parse("GET / HTTP/1.1\r\nHost: a\r\nx-session-id:\r\nsession_id: b\r\nx-session-id: c\r\n\r\n")
            .unwrap();
        assert_eq!(h.session, Some(hash("b")));
        assert_eq!(
            parse("GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap().session,
            None
        );
    }

    #[test]
    fn connection_semantics() {
        assert!(
            !parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
                .unwrap()
                .keep_alive
        );
        assert!(!parse("GET / HTTP/1.0\r\n\r\n").unwrap().keep_alive);
        assert!(
            parse("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
                .unwrap()
                .keep_alive
        );
    }

    #[test]
    fn smuggling_shapes_are_rejected() {
        let cases = [
            (
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
                HttpError::LengthAndTransferEncoding,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
                HttpError::ConflictingContentLength,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n\r\n",
                HttpError::ConflictingContentLength,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                HttpError::UnsupportedTransferEncoding,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
                HttpError::UnsupportedTransferEncoding,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n",
                HttpError::UnsupportedTransferEncoding,
            ),
            (
                "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
                HttpError::UnsupportedTransferEncoding,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n",
                HttpError::InvalidContentLength,
            ),
            ("GET / HTTP/1.1\r\n\r\n", HttpError::BadHost),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
                HttpError::BadHost,
            ),
            (
                "GET / HTTP/2.0\r\nHost: a\r\n\r\n",
                HttpError::UnsupportedVersion,
            ),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nExpect: magic\r\n\r\n",
                HttpError::UnsupportedExpectation,
            ),
        ];
        for (input, want) in cases {
            assert_eq!(parse(input), Err(want), "{input:?}");
        }
        // obs-fold, NUL and a space before the colon are syntax errors.
        for input in [
            "GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nContent-Length : 5\r\n\r\n",
            "GET http://x/ HTTP/1.1\r\nHost: a\r\n\r\n",
        ] {
            assert_eq!(parse(input).map_err(|e| e.status()), Err(400), "{input:?}");
        }
    }

    #[test]
    fn duplicate_identical_content_length_is_one() {
        let h =
            parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\n")
                .unwrap();
        assert_eq!(h.framing, Framing::Length(5));
    }

    #[test]
    fn too_many_headers() {
        let mut s = String::from("GET / HTTP/1.1\r\nHost: a\r\n");
        for i in 0..64 {
            s.push_str(&format!("X-{i}: v\r\n"));
        }
        s.push_str("\r\n");
        assert_eq!(parse(&s), Err(HttpError::TooManyHeaders));
    }

    #[test]
    fn leading_crlf_skipped() {
        assert_eq!(leading_empty_lines(b"\r\n\r\nGET"), 4);
        assert_eq!(leading_empty_lines(b"\r\n\r"), 2);
        assert_eq!(leading_empty_lines(b"GET"), 0);
        // However the empty lines are cut, the head after them is read.
        for s in [
            "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
            "\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
            "\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
        ] {
            let (h, consumed) = read_with(HttpLimits::default(), s).unwrap();
            assert_eq!((h.method, consumed), (Method::Get, s.len()), "{s:?}");
        }
        assert_eq!(
            parse("\r\n\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"),
            Err(HttpError::BareLineEnding)
        );
    }

    #[test]
    fn pipelined_bytes_stay_unread() {
        let s = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nBODYGET / HTTP/1.1\r\n";
        let (h, consumed) = read_with(HttpLimits::default(), s).unwrap();
        assert_eq!(h.head_len, consumed);
        assert_eq!(&s[consumed..], "BODYGET / HTTP/1.1\r\n");
    }

    #[test]
    fn bare_line_endings_and_the_head_cap() {
        for s in [
            "GET / HTTP/1.1\nHost: a\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\n\n",
            "GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n",
        ] {
            assert_eq!(parse(s).map_err(|e| e.status()), Err(400), "{s:?}");
        }
        for s in [
            "GET / HTTP/1.1\nHost: a\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\n\n",
        ] {
            assert_eq!(parse(s), Err(HttpError::BareLineEnding), "{s:?}");
        }
        let tight = HttpLimits {
            max_head: 32,
            ..HttpLimits::default()
        };
        assert_eq!(
            read_with(tight, "GET / HTTP/1.1\r\nHost: aaaaaaaaaaaaaaaa\r\n\r\n"),
            Err(HttpError::HeadTooLarge)
        );
        assert!(read_with(tight, "GET / HTTP/1.1\r\nHost: aa\r\n\r\n").is_ok());
    }
}
