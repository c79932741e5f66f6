//! The client-facing error: the documented JSON error body and the HTTP status it
//! travels with.
//!
//! Every error the gateway answers with, from a malformed request line to a
//! provider that stalls, ends up as one [`ApiError`]. Its body is always
//! `{"error": {"message", "type", "param", "code"}}`.

use serde::Serialize;

/// The `type` field of an error body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorType {
    /// The request is wrong: bad HTTP, bad JSON, bad parameter, unknown path or model.
    InvalidRequest,
    /// Missing or invalid API key.
    Authentication,
    /// A per-key rate limit was hit.
    RateLimit,
    /// The key's spend budget for its period is used up (`x-should-retry:
    /// false`: retrying before the period resets is in vain).
    InsufficientQuota,
    /// The provider failed, rejected the request or did not answer in time.
    Upstream,
    /// The gateway itself cannot serve the request now (overloaded, shutting down).
    Server,
}

impl ErrorType {
    /// The wire name, e.g. `invalid_request_error`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::InvalidRequest => "invalid_request_error",
            ErrorType::Authentication => "authentication_error",
            ErrorType::RateLimit => "rate_limit_error",
            ErrorType::InsufficientQuota => "insufficient_quota",
            ErrorType::Upstream => "upstream_error",
            ErrorType::Server => "server_error",
        }
    }
}

/// One error answer: status, body fields and the headers that go with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status code.
    pub status: u16,
    /// The `type` field.
    pub kind: ErrorType,
    /// The `code` field (README, *Errors*), e.g. `invalid_value`.
    pub code: &'static str,
    /// The offending parameter, e.g. `messages[0].role`, when there is one.
    pub param: Option<String>,
    /// Human-readable explanation. Never contains a key or message content.
    pub message: String,
    /// `Retry-After` in whole seconds (429, and 502 when the provider sent one).
    pub retry_after: Option<u64>,
    /// `Allow` header value for 405 (e.g. `GET, HEAD`).
    pub allow: Option<&'static str>,
    /// For 502/504: what exactly went wrong with the provider (the ledger's
    /// `error` field names it; the client sees `code`).
    pub fault: Option<UpstreamFault>,
    /// For a 502 that carries the provider's refusal: the provider's status
    /// and its own error fields, added to the body as `error.provider`.
    pub provider: Option<Box<ProviderError>>,
}

/// The provider's own error, as it answered (an added member of the
/// gateway's 502 body, so agents can tell a context overflow from a
/// content refusal; `type` and `code` stay `upstream_error`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProviderError {
    /// The provider's HTTP status.
    pub status: u16,
    /// Its error `type`, when it sent one.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// Its error `code` (a string, or a number written as one).
    pub code: Option<String>,
    /// Its error `param`.
    pub param: Option<String>,
    /// Its error message (at most 500 characters of it).
    pub message: Option<String>,
}

impl ProviderError {
    /// Reads a provider's error body: the OpenAI shape (`{"error":
    /// {message, type, param, code}}`), an `error` string, or a top-level
    /// `message`, as far as it is there.
    pub fn read(status: u16, body: &[u8]) -> ProviderError {
        let mut p = ProviderError {
            status,
            ..ProviderError::default()
        };
        let Ok(serde_json::Value::Object(top)) = serde_json::from_slice(body) else {
            return p;
        };
        let text = |v: Option<&serde_json::Value>| -> Option<String> {
            match v? {
                serde_json::Value::String(s) => Some(s.chars().take(500).collect()),
                serde_json::Value::Number(n) => Some(n.to_string()),
                _ => None,
            }
        };
        // A message is a string, or not there.
        let message =
            |v: Option<&serde_json::Value>| v.filter(|m| m.is_string()).and_then(|m| text(Some(m)));
        match top.get("error") {
            Some(serde_json::Value::Object(e)) => {
                p.kind = text(e.get("type"));
                p.code = text(e.get("code"));
                p.param = text(e.get("param"));
                p.message = message(e.get("message"));
            }
            Some(serde_json::Value::String(_)) => p.message = message(top.get("error")),
            _ => {}
        }
        if p.message.is_none() {
            p.message = message(top.get("message"));
        }
        p
    }

    /// Whether this refusal says the request is too long for the model's
    /// context: the OpenAI code `context_length_exceeded`, or the words
    /// of servers that do not send it (vLLM's `maximum context length`,
    /// llama.cpp's `context size`).
    pub fn is_context_overflow(&self) -> bool {
        let said = self.message.as_deref().unwrap_or("");
        self.is_refusal()
            && (self.code.as_deref() == Some("context_length_exceeded")
                || said.contains("context length")
                || said.contains("maximum context")
                || said.contains("context size"))
    }

    /// Whether the request itself was refused (a 4xx other than 408 and
    /// 429): sending it again gets the same answer.
    pub fn is_refusal(&self) -> bool {
        (400..500).contains(&self.status) && self.status != 408 && self.status != 429
    }
}

/// Why the store the instances share (the shared limiter's Redis) could
/// not decide: what a driver hands [`crate::Connection::handle_admission`]
/// and [`crate::Settlement::finish`] instead of a verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreError {
    /// This runtime has no shared store (the blocking example, or no
    /// `--redis`): the configured fallback applies.
    NotConfigured,
    /// It could not be reached, or the connection broke (the cause).
    Unreachable(String),
    /// It did not answer within the timeout.
    Timeout(std::time::Duration),
    /// It refused the gateway (authentication, database selection).
    Refused(String),
    /// It answered something that is not a verdict.
    Protocol(String),
    /// A key's spend had to be rebuilt from the ledger first, and could
    /// not be.
    Ledger(String),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::NotConfigured => f.write_str("no shared store is configured"),
            StoreError::Unreachable(why) => write!(f, "the shared store is unreachable: {why}"),
            StoreError::Timeout(d) => write!(f, "the shared store did not answer within {d:?}"),
            StoreError::Refused(why) => write!(f, "the shared store refused the gateway: {why}"),
            StoreError::Protocol(why) => write!(f, "the shared store answered wrongly: {why}"),
            StoreError::Ledger(why) => write!(f, "the spend could not be rebuilt: {why}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// What went wrong with the provider, as the ledger's `error` field names
/// it. Clients see only the documented `upstream_error`/`upstream_timeout`
/// codes (and a message); operators see which of these happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UpstreamFault {
    /// The provider's host name did not resolve.
    Dns,
    /// No TCP connection (refused, unreachable, or not within the connect
    /// timeout).
    Connect,
    /// The TLS handshake or the certificate check failed.
    Tls,
    /// No response head within the first-byte timeout, or a non-streamed
    /// body that stopped arriving.
    Timeout,
    /// The provider answered with an error status.
    Rejected,
    /// Not HTTP, not JSON, the wrong content type, a broken chunked
    /// framing, a body over the cap, or a stream that ended before its
    /// first event.
    Invalid,
    /// The connection failed or closed before the response was complete.
    Reset,
    /// A stream sent nothing for the idle timeout.
    Stalled,
    /// A stream event over the size cap.
    EventTooLarge,
    /// The provider sent an error event in its stream.
    ErrorEvent,
    /// After `finish_reason`, the provider did not end the stream within
    /// the tail timeout (the answer itself is complete).
    TailTimeout,
}

impl UpstreamFault {
    /// Every kind, in a stable order.
    pub const ALL: [UpstreamFault; 11] = [
        UpstreamFault::Dns,
        UpstreamFault::Connect,
        UpstreamFault::Tls,
        UpstreamFault::Timeout,
        UpstreamFault::Rejected,
        UpstreamFault::Invalid,
        UpstreamFault::Reset,
        UpstreamFault::Stalled,
        UpstreamFault::EventTooLarge,
        UpstreamFault::ErrorEvent,
        UpstreamFault::TailTimeout,
    ];

    /// The name in the ledger's `error` field.
    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamFault::Dns => "upstream_dns",
            UpstreamFault::Connect => "upstream_connect",
            UpstreamFault::Tls => "upstream_tls",
            UpstreamFault::Timeout => "upstream_timeout",
            UpstreamFault::Rejected => "upstream_rejected",
            UpstreamFault::Invalid => "upstream_invalid",
            UpstreamFault::Reset => "upstream_reset",
            UpstreamFault::Stalled => "upstream_stalled",
            UpstreamFault::EventTooLarge => "upstream_event_too_large",
            UpstreamFault::ErrorEvent => "upstream_error_event",
            UpstreamFault::TailTimeout => "upstream_tail_timeout",
        }
    }
}

impl ApiError {
    pub(crate) fn new(
        status: u16,
        kind: ErrorType,
        code: &'static str,
        message: impl Into<String>,
    ) -> Self {
        ApiError {
            status,
            kind,
            code,
            param: None,
            message: message.into(),
            retry_after: None,
            allow: None,
            fault: None,
            provider: None,
        }
    }

    /// Sets `param`.
    #[must_use]
    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// 400 `invalid_value` for `param`.
    pub fn invalid_value(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(400, ErrorType::InvalidRequest, "invalid_value", message).with_param(param)
    }

    /// 400 `invalid_type` for `param`: the value has the wrong JSON type.
    pub fn invalid_type(param: impl Into<String>, expected: &str) -> Self {
        let param = param.into();
        let message = format!("Invalid type for '{param}': expected {expected}.");
        Self::new(400, ErrorType::InvalidRequest, "invalid_type", message).with_param(param)
    }

    /// 400 `missing_required_parameter` for `param`.
    pub fn missing(param: impl Into<String>) -> Self {
        let param = param.into();
        let message = format!("Missing required parameter: '{param}'.");
        Self::new(
            400,
            ErrorType::InvalidRequest,
            "missing_required_parameter",
            message,
        )
        .with_param(param)
    }

    /// 400 `invalid_json`: the body is not a JSON object.
    pub fn invalid_json(detail: impl std::fmt::Display) -> Self {
        Self::new(
            400,
            ErrorType::InvalidRequest,
            "invalid_json",
            format!("The request body is not valid JSON: {detail}."),
        )
    }

    /// 400 `unsupported_content_type`.
    pub fn unsupported_content_type() -> Self {
        Self::new(
            400,
            ErrorType::InvalidRequest,
            "unsupported_content_type",
            "The request body must be sent with 'Content-Type: application/json'.",
        )
    }

    /// 404 `model_not_found`.
    pub fn model_not_found(model: &str) -> Self {
        // The model string comes from the client; cap what is echoed back.
        let shown: String = model.chars().take(128).collect();
        Self::new(
            404,
            ErrorType::InvalidRequest,
            "model_not_found",
            format!(
                "The model '{shown}' does not exist. GET /v1/models lists the available models."
            ),
        )
        .with_param("model")
    }

    /// 429 `insufficient_quota`: the key's budget cannot cover the
    /// request (`type` and `code` both `insufficient_quota`).
    pub fn insufficient_quota(message: impl Into<String>) -> Self {
        Self::new(
            429,
            ErrorType::InsufficientQuota,
            "insufficient_quota",
            message,
        )
    }

    /// 401 `invalid_api_key`.
    pub fn invalid_api_key(missing: bool) -> Self {
        let message = if missing {
            "Missing API key: send 'Authorization: Bearer <API_KEY>'."
        } else {
            "Invalid API key."
        };
        Self::new(401, ErrorType::Authentication, "invalid_api_key", message)
    }

    /// 404 `unknown_url`.
    pub fn unknown_url(method: &str, path: &str) -> Self {
        let shown: String = path.chars().take(256).collect();
        let method: String = method.chars().take(16).collect();
        Self::new(
            404,
            ErrorType::InvalidRequest,
            "unknown_url",
            format!("Unknown request URL: {method} {shown}."),
        )
    }

    /// 426 for a WebSocket upgrade on the Responses API: served over HTTP
    /// only (Codex falls back to it at once).
    pub fn websocket_not_served() -> Self {
        Self::new(
            426,
            ErrorType::InvalidRequest,
            "websocket_not_supported",
            "This gateway serves the Responses API over HTTP, not WebSocket: send the request \
             as a POST (for Codex, leave supports_websockets out of the provider's table).",
        )
    }

    /// 405 `method_not_allowed` with `Allow: allow`.
    pub fn method_not_allowed(method: &str, allow: &'static str) -> Self {
        let method: String = method.chars().take(16).collect();
        let mut e = Self::new(
            405,
            ErrorType::InvalidRequest,
            "method_not_allowed",
            format!("Method {method} is not allowed here; use {allow}."),
        );
        e.allow = Some(allow);
        e
    }

    /// 413 `request_too_large`.
    pub fn request_too_large(limit: u64) -> Self {
        Self::new(
            413,
            ErrorType::InvalidRequest,
            "request_too_large",
            format!("The request body is larger than {limit} bytes."),
        )
    }

    /// 431 `headers_too_large`.
    pub fn headers_too_large(message: impl Into<String>) -> Self {
        Self::new(431, ErrorType::InvalidRequest, "headers_too_large", message)
    }

    /// 400 `malformed_request`: the HTTP framing itself is wrong.
    pub fn malformed(message: impl Into<String>) -> Self {
        Self::new(400, ErrorType::InvalidRequest, "malformed_request", message)
    }

    /// 408 `request_timeout`: the client was too slow sending its request.
    pub fn request_timeout() -> Self {
        Self::new(
            408,
            ErrorType::InvalidRequest,
            "request_timeout",
            "The request was not received in time.",
        )
    }

    /// 417 `expectation_failed`.
    pub fn expectation_failed() -> Self {
        Self::new(
            417,
            ErrorType::InvalidRequest,
            "expectation_failed",
            "Only 'Expect: 100-continue' is supported.",
        )
    }

    /// 505 `http_version_not_supported`.
    pub fn version_not_supported() -> Self {
        Self::new(
            505,
            ErrorType::InvalidRequest,
            "http_version_not_supported",
            "Only HTTP/1.0 and HTTP/1.1 are supported.",
        )
    }

    /// 429 `rate_limit_exceeded` with `Retry-After`.
    pub fn rate_limited(message: impl Into<String>, retry_after_secs: u64) -> Self {
        let mut e = Self::new(429, ErrorType::RateLimit, "rate_limit_exceeded", message);
        e.retry_after = Some(retry_after_secs.max(1));
        e
    }

    /// 502 `upstream_error`.
    pub fn upstream(fault: UpstreamFault, message: impl Into<String>) -> Self {
        let mut e = Self::new(502, ErrorType::Upstream, "upstream_error", message);
        e.fault = Some(fault);
        e
    }

    /// 504 `upstream_timeout`.
    pub fn upstream_timeout(message: impl Into<String>) -> Self {
        let mut e = Self::new(504, ErrorType::Upstream, "upstream_timeout", message);
        e.fault = Some(UpstreamFault::Timeout);
        e
    }

    /// 503 `server_overloaded`: too many connections, or shutting down.
    pub fn overloaded(message: impl Into<String>) -> Self {
        Self::new(503, ErrorType::Server, "server_overloaded", message)
    }

    /// The JSON body, `{"error": {...}}`.
    pub fn body(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Body<'a> {
            error: Inner<'a>,
        }
        #[derive(Serialize)]
        struct Inner<'a> {
            message: &'a str,
            #[serde(rename = "type")]
            kind: &'a str,
            param: Option<&'a str>,
            code: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            provider: Option<&'a ProviderError>,
        }
        let body = Body {
            error: Inner {
                message: &self.message,
                kind: self.kind.as_str(),
                param: self.param.as_deref(),
                code: self.code,
                provider: self.provider.as_deref(),
            },
        };
        // Serializing plain strings into a Vec cannot fail.
        serde_json::to_vec(&body).expect("error body serializes")
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status, self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_contract_shape() {
        let e = ApiError::invalid_value("temperature", "must be \"between\" 0 and 2");
        let v: serde_json::Value = serde_json::from_slice(&e.body()).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["code"], "invalid_value");
        assert_eq!(v["error"]["param"], "temperature");
        assert_eq!(v["error"]["message"], "must be \"between\" 0 and 2");
        let e = ApiError::invalid_api_key(true);
        let v: serde_json::Value = serde_json::from_slice(&e.body()).unwrap();
        assert!(v["error"]["param"].is_null());
        assert_eq!(e.status, 401);
    }

    #[test]
    fn the_providers_own_error_is_kept_beside_the_gateways() {
        let body = br#"{"error":{"message":"This model's maximum context length is 2048 tokens","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        let p = ProviderError::read(400, body);
        assert!(p.is_refusal());
        assert_eq!(p.code.as_deref(), Some("context_length_exceeded"));
        let mut e = ApiError::upstream(UpstreamFault::Rejected, "The provider returned HTTP 400.");
        e.provider = Some(Box::new(p));
        let v: serde_json::Value = serde_json::from_slice(&e.body()).unwrap();
        assert_eq!(v["error"]["type"], "upstream_error");
        assert_eq!(v["error"]["code"], "upstream_error");
        assert_eq!(v["error"]["provider"]["status"], 400);
        assert_eq!(v["error"]["provider"]["code"], "context_length_exceeded");
        assert_eq!(v["error"]["provider"]["param"], "messages");
        assert_eq!(v["error"]["provider"]["type"], "invalid_request_error");
        // Other shapes, numbers as codes, and no body at all.
        let p = ProviderError::read(400, br#"{"error":"bad","message":"x"}"#);
        assert_eq!(p.message.as_deref(), Some("bad"));
        let p = ProviderError::read(422, br#"{"error":{"code":42}}"#);
        assert_eq!(p.code.as_deref(), Some("42"));
        let p = ProviderError::read(400, b"");
        assert_eq!((p.status, p.message), (400, None));
        assert!(!ProviderError::read(429, b"").is_refusal());
        assert!(!ProviderError::read(408, b"").is_refusal());
        assert!(!ProviderError::read(500, b"").is_refusal());
        let e = ApiError::upstream(UpstreamFault::Rejected, "x");
        let v: serde_json::Value = serde_json::from_slice(&e.body()).unwrap();
        assert!(
            v["error"].get("provider").is_none(),
            "only when there is one"
        );
    }

    #[test]
    fn retry_after_is_at_least_one() {
        assert_eq!(ApiError::rate_limited("x", 0).retry_after, Some(1));
    }
}
