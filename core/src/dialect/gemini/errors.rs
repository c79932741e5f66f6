//! The gateway's errors as Google's API words them:
//! `{"error":{"code":N,"message":…,"status":…,"details":[…]}}`, with the
//! status the Gemini clients act on (they read the HTTP status: Gemini CLI
//! and the SDKs retry 429 and 5xx, and wait as a `RetryInfo` says).
//!
//! | the gateway's error | status | `error.status` |
//! |---|---|---|
//! | 400, 405, 413, 417, 431, 505 (the request) | the same | `INVALID_ARGUMENT` (Google answers a request too large with 400 `INVALID_ARGUMENT`; the gateway keeps its own status) |
//! | 401 | 401 | `UNAUTHENTICATED` |
//! | 403 | 403 | `PERMISSION_DENIED` |
//! | 404 (unknown model, unknown path) | 404 | `NOT_FOUND` |
//! | 408 | 408 | `DEADLINE_EXCEEDED` |
//! | 429 (rate limit, budget) | 429 | `RESOURCE_EXHAUSTED`, with a `RetryInfo` when the gateway says when to retry |
//! | 502, the provider refused the request itself (a 4xx but 408 and 429) | 400 | `INVALID_ARGUMENT`, with the provider's words (asking again gets the same answer: a 5xx would be retried) |
//! | 502, the provider was overloaded (429, 503, 529) | 503 | `UNAVAILABLE` |
//! | 502, any other provider failure; 503 | the same | `UNAVAILABLE` |
//! | 504 | 504 | `DEADLINE_EXCEEDED` |
//! | 500, anything else | the same | `INTERNAL` |
//!
//! A refusal that names a parameter carries a `google.rpc.BadRequest`
//! detail with that field.

use crate::error::ApiError;

/// The gateway's error as Google's: HTTP status and the `status` string.
pub fn status_and_code(err: &ApiError) -> (u16, &'static str) {
    let provider = err.provider.as_deref();
    match err.status {
        401 => (401, "UNAUTHENTICATED"),
        403 => (403, "PERMISSION_DENIED"),
        404 => (404, "NOT_FOUND"),
        408 => (408, "DEADLINE_EXCEEDED"),
        429 => (429, "RESOURCE_EXHAUSTED"),
        502 => match provider {
            Some(p) if matches!(p.status, 429 | 503 | 529) => (503, "UNAVAILABLE"),
            Some(p) if p.is_refusal() => (400, "INVALID_ARGUMENT"),
            _ => (502, "UNAVAILABLE"),
        },
        503 => (503, "UNAVAILABLE"),
        504 => (504, "DEADLINE_EXCEEDED"),
        s @ 400..500 => (s, "INVALID_ARGUMENT"),
        s => (s, "INTERNAL"),
    }
}

/// The message: the gateway's, with the provider's own words added for a
/// refusal.
pub fn message(err: &ApiError) -> String {
    match err.provider.as_deref().filter(|p| p.is_refusal()) {
        Some(p) => {
            let said = p.message.as_deref().unwrap_or("no message");
            format!("{} The provider said: {said}", err.message)
        }
        None => err.message.clone(),
    }
}

/// `{"error":{"code":N,"message":"...","status":"..."}}`, with a
/// `google.rpc.RetryInfo` detail (`retryDelay`) for a 429 that carries a
/// retry-after, and a `google.rpc.BadRequest` one naming the field of a
/// refused parameter.
pub fn body(err: &ApiError) -> Vec<u8> {
    let (status, code) = status_and_code(err);
    let mut out = Vec::with_capacity(200 + err.message.len());
    error_object(&mut out, status, code, &message(err), |o| {
        let mut details = Vec::new();
        if let (429, Some(secs)) = (status, err.retry_after) {
            details.push(format!(
                "{{\"@type\":\"type.googleapis.com/google.rpc.RetryInfo\",\"retryDelay\":\"{secs}s\"}}"
            ));
        }
        if let Some(param) = err.param.as_deref().filter(|_| code == "INVALID_ARGUMENT") {
            let mut d = b"{\"@type\":\"type.googleapis.com/google.rpc.BadRequest\",\"fieldViolations\":[{\"field\":".to_vec();
            crate::json::write::string(&mut d, param);
            d.extend_from_slice(b",\"description\":");
            crate::json::write::string(&mut d, &err.message);
            d.extend_from_slice(b"}]}");
            details.push(String::from_utf8_lossy(&d).into_owned());
        }
        if !details.is_empty() {
            o.extend_from_slice(b",\"details\":[");
            o.extend_from_slice(details.join(",").as_bytes());
            o.push(b']');
        }
    });
    out
}

/// `{"error":{"code":…,"message":…,"status":…` + what `more` writes + `}}`.
fn error_object(
    out: &mut Vec<u8>,
    status: u16,
    code: &str,
    message: &str,
    more: impl FnOnce(&mut Vec<u8>),
) {
    out.extend_from_slice(b"{\"error\":{\"code\":");
    crate::http::write::push_decimal(out, u64::from(status));
    out.extend_from_slice(b",\"message\":");
    crate::json::write::string(out, message);
    out.extend_from_slice(b",\"status\":\"");
    out.extend_from_slice(code.as_bytes());
    out.push(b'"');
    more(out);
    out.extend_from_slice(b"}}");
}

/// What ends a stream cut short: the error object (`status`, 500 or 503),
/// as Google's server ends one.
///
/// With `sse`, the object is written bare on a line of its own, not as a
/// `data:` event: that is what both SDKs raise on. The JS SDK parses each
/// network read as JSON and raises its `ApiError` for an object with an
/// `error` whose `code` is 400 to 599 (a `data:` event would go on as an
/// empty response); were the object to arrive in one read with an event
/// before it, its text, left with no event delimiter, makes the reader
/// fail at the end instead. The Python SDK gathers a line that is not a
/// `data:` line until its braces balance and raises for `{"error":…`.
///
/// In a JSON array (`sse` false) it is the last element (`opened`: the
/// array's `[` and an element are written), and the array is closed.
pub fn stream_error(out: &mut Vec<u8>, sse: bool, opened: bool, status: u16, message: &str) {
    let code = if status == 503 {
        "UNAVAILABLE"
    } else {
        "INTERNAL"
    };
    if !sse {
        out.extend_from_slice(if opened { b",\r\n" } else { b"[" });
    }
    error_object(out, status, code, message, |_| {});
    out.extend_from_slice(if sse { b"\n" } else { b"]" });
}
