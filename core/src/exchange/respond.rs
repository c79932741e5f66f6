//! What the gateway writes to clients itself: error responses (metered
//! when the request is), the headers every response carries, body framing,
//! and the wording of HTTP and provider errors.

use super::Connection;
use crate::dialect::Dialect;
use crate::error::{ApiError, ErrorType, UpstreamFault};
use crate::gateway::Gateway;
use crate::http::Method;
use crate::http::write::{self, header, header_u64};
use crate::http::{HttpError, HttpLimits};
use crate::limits::{LimitStatus, push_reset};
use crate::time::{Instant, push_http_date};

impl Connection {
    /// Answers the current request (or a request that never parsed) with an
    /// error; `close` when the connection cannot carry another request.
    pub(super) fn respond_error(&mut self, now: Instant, err: ApiError, close: bool) {
        if self.req.as_ref().is_some_and(|r| r.awaiting_first_event) {
            // The head went out already (the first-event keep-alive): the
            // stream ends with the error.
            return self.fail_committed(now, err);
        }
        let close = close || self.closing_after_this();
        let unix = self.gw.wall().unix_secs(now);
        let mut out = Vec::with_capacity(512);
        let id = match &self.req {
            Some(r) => r.id.clone(),
            None => self.gw.next_request_id(),
        };
        let status = self.req.as_ref().and_then(|r| {
            r.limit_status.or_else(|| {
                let key = r.key.as_ref()?;
                Some(self.gw.limiter().status(&key.name, key.limits, now))
            })
        });
        let head_only = self.req.as_ref().is_some_and(|r| r.method == Method::Head);
        let shape = self.req.as_ref().and_then(|r| r.dialect.as_deref());
        let response = ErrorResponse {
            err: &err,
            request_id: &id,
            limits: status.as_ref(),
            close,
            unix_secs: unix,
            head_only,
            shape,
        };
        let status = response.write(&mut out);
        self.access_log(now, status, Some(err.code));
        if self.is_metered() {
            let mut rec = self.record(now, status);
            rec.error = Some(err.fault.map_or(err.code, UpstreamFault::as_str).to_owned());
            self.emit_ledger(now, rec, out);
        } else {
            self.push_client(now, &out);
        }
        self.end_response(close);
    }
}

/// The 503 for a connection refused at accept.
pub(super) fn refusal(gw: &Gateway, now: Instant, why: &str) -> Vec<u8> {
    closing_error(gw, now, &ApiError::overloaded(why))
}

/// The answer to plain HTTP on a TLS listener: `400 malformed_request`,
/// in plain HTTP (what the client can read), closing.
pub(super) fn plain_http_on_tls(gw: &Gateway, now: Instant) -> Vec<u8> {
    closing_error(
        gw,
        now,
        &ApiError::malformed(
            "This port speaks HTTPS (TLS) and the request came in plain HTTP: use https:// in the base URL.",
        ),
    )
}

/// `err` as a whole answer of its own, outside any request, closing the
/// connection.
fn closing_error(gw: &Gateway, now: Instant, err: &ApiError) -> Vec<u8> {
    let id = gw.next_request_id();
    let mut out = Vec::new();
    ErrorResponse {
        err,
        request_id: &id,
        limits: None,
        close: true,
        unix_secs: gw.wall().unix_secs(now),
        head_only: false,
        shape: None,
    }
    .write(&mut out);
    out
}

/// Appends body bytes for the client: one chunk, or raw for HTTP/1.0.
pub(super) fn client_body(out: &mut Vec<u8>, data: &[u8], chunked: bool) {
    if chunked {
        write::chunk(out, data);
    } else {
        out.extend_from_slice(data);
    }
}

/// `Date`, `X-Request-Id`, and `Connection: close` when it closes.
pub(super) fn common_headers(out: &mut Vec<u8>, request_id: &str, unix_secs: u64, close: bool) {
    out.extend_from_slice(b"Date: ");
    push_http_date(out, unix_secs);
    out.extend_from_slice(b"\r\n");
    header(out, "X-Request-Id", request_id);
    if close {
        header(out, "Connection", "close");
    }
}

/// The OpenAI-style `x-ratelimit-*` headers.
pub(super) fn limit_headers(out: &mut Vec<u8>, s: &LimitStatus) {
    header_u64(out, "x-ratelimit-limit-requests", s.limit_requests);
    header_u64(out, "x-ratelimit-limit-tokens", s.limit_tokens);
    header_u64(out, "x-ratelimit-remaining-requests", s.remaining_requests);
    header_u64(out, "x-ratelimit-remaining-tokens", s.remaining_tokens);
    out.extend_from_slice(b"x-ratelimit-reset-requests: ");
    push_reset(out, s.reset_requests_ms);
    out.extend_from_slice(b"\r\nx-ratelimit-reset-tokens: ");
    push_reset(out, s.reset_tokens_ms);
    out.extend_from_slice(b"\r\n");
}

/// A complete error response, to write.
struct ErrorResponse<'a> {
    err: &'a ApiError,
    request_id: &'a str,
    limits: Option<&'a LimitStatus>,
    close: bool,
    unix_secs: u64,
    /// A HEAD request: no body.
    head_only: bool,
    /// The API whose shape the body takes (`None`: the OpenAI shape the
    /// specification gives chat completions).
    shape: Option<&'a dyn Dialect>,
}

impl ErrorResponse<'_> {
    /// Writes it; the status it went out with.
    fn write(&self, out: &mut Vec<u8>) -> u16 {
        let err = self.err;
        let (status, body) = match self.shape {
            None => (err.status, err.body()),
            Some(d) => d.error(err, self.request_id),
        };
        write::status_line(out, status);
        common_headers(out, self.request_id, self.unix_secs, self.close);
        header(out, "Content-Type", "application/json");
        header_u64(out, "Content-Length", body.len() as u64);
        if let Some(s) = err.retry_after {
            header_u64(out, "Retry-After", s);
        }
        if let Some(allow) = err.allow {
            header(out, "Allow", allow);
        }
        let refused = err.provider.as_ref().is_some_and(|p| p.is_refusal());
        if err.kind == ErrorType::InsufficientQuota || refused {
            // The official SDKs retry 429s and 5xx unless told not to: a
            // spent budget, or a request the provider refused, gets the same
            // answer.
            header(out, "x-should-retry", "false");
        }
        if let Some(s) = self.limits {
            limit_headers(out, s);
        }
        write::end_head(out);
        if !self.head_only {
            out.extend_from_slice(&body);
        }
        status
    }
}

/// The client-facing error for a request the HTTP codec refused.
pub(super) fn http_error(e: &HttpError, limits: &HttpLimits) -> ApiError {
    match e {
        HttpError::HeadTooLarge => ApiError::headers_too_large(format!(
            "The request header block is larger than {} bytes.",
            limits.max_head
        )),
        HttpError::TooManyHeaders => ApiError::headers_too_large(format!(
            "The request has more than {} header fields.",
            limits.max_headers
        )),
        HttpError::BodyTooLarge => ApiError::request_too_large(limits.max_body),
        HttpError::UnsupportedVersion => ApiError::version_not_supported(),
        HttpError::UnsupportedExpectation => ApiError::expectation_failed(),
        HttpError::TlsHandshake => ApiError::malformed(
            "This port speaks plain HTTP and the client began a TLS handshake: use http:// in the base URL, or serve TLS on this port (--tls-cert, --tls-key).",
        ),
        other => ApiError::malformed(format!("Malformed HTTP request: {other}.")),
    }
}

/// `The provider returned HTTP 400: its message` from an error body (read
/// into `provider` already), or from its first bytes when it has none.
pub(super) fn provider_error_message(
    provider: &crate::error::ProviderError,
    body: &[u8],
) -> String {
    let status = provider.status;
    let detail = provider.message.clone().unwrap_or_else(|| {
        String::from_utf8_lossy(&body[..body.len().min(200)])
            .chars()
            .filter(|c| !c.is_control())
            .take(500)
            .collect()
    });
    if detail.trim().is_empty() {
        format!("The provider returned HTTP {status}.")
    } else {
        format!("The provider returned HTTP {status}: {detail}")
    }
}

impl Connection {
    /// `200` with a JSON body.
    pub(super) fn respond_json(&mut self, now: Instant, body: &[u8]) {
        let close = self.closing_after_this();
        let req = self.req.as_ref().expect("request in progress");
        let mut out = Vec::with_capacity(256 + body.len());
        write::status_line(&mut out, 200);
        common_headers(&mut out, &req.id, self.gw.wall().unix_secs(now), close);
        header(&mut out, "Content-Type", "application/json");
        header_u64(&mut out, "Content-Length", body.len() as u64);
        write::end_head(&mut out);
        if req.method != Method::Head {
            out.extend_from_slice(body);
        }
        self.access_log(now, 200, None);
        self.push_client(now, &out);
        self.end_response(close);
    }
}
