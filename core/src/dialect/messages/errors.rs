//! The gateway's errors as the Messages API words them:
//! `{"type":"error","error":{"type":…,"message":…},"request_id":…}`, with
//! the status the Anthropic clients act on.
//!
//! | the gateway's error | status | `error.type` |
//! |---|---|---|
//! | 400, 405, 408, 413, 417, 431, 505 (the request) | the same | `invalid_request_error` |
//! | 401 | 401 | `authentication_error` |
//! | 403 | 403 | `permission_error` |
//! | 404 (unknown model, unknown path) | 404 | `not_found_error` |
//! | 429 (rate limit, budget) | 429 | `rate_limit_error` |
//! | 502, the provider refused the request itself (a 4xx but 408 and 429) | 400 | `invalid_request_error` (a context overflow worded as the Messages API words one: see [`overflow_message`]) |
//! | 502, the provider was overloaded (429, 503, 529) | 529 | `overloaded_error` |
//! | 502, any other provider failure | 502 | `api_error` |
//! | 503 (the gateway overloaded or shutting down) | 529 | `overloaded_error` |
//! | 504 | 504 | `timeout_error` |
//! | anything else | the same | `api_error` |

use crate::error::ApiError;

/// The status and `error.type` the Messages API answers `err` with.
pub fn status_and_type(err: &ApiError) -> (u16, &'static str) {
    let provider = err.provider.as_deref().map(|p| p.status);
    match err.status {
        401 => (401, "authentication_error"),
        403 => (403, "permission_error"),
        404 => (404, "not_found_error"),
        429 => (429, "rate_limit_error"),
        502 => match provider {
            Some(429 | 503 | 529) => (529, "overloaded_error"),
            _ if err.provider.as_deref().is_some_and(|p| p.is_refusal()) => {
                (400, "invalid_request_error")
            }
            _ => (502, "api_error"),
        },
        503 => (529, "overloaded_error"),
        504 => (504, "timeout_error"),
        s @ 400..500 => (s, "invalid_request_error"),
        s => (s, "api_error"),
    }
}

/// The message the Messages API answers `err` with: the gateway's, with
/// the provider's own words added for a refusal (a context overflow
/// worded as the Messages API words one), and the key header Anthropic
/// clients send named for a missing key.
pub fn message(err: &ApiError) -> String {
    if err.code == "invalid_api_key" && err.message.starts_with("Missing") {
        return "Missing API key: send 'x-api-key: <API_KEY>' or 'Authorization: Bearer <API_KEY>'."
            .into();
    }
    if let Some(p) = err.provider.as_deref().filter(|p| p.is_refusal()) {
        let said = p.message.as_deref().unwrap_or("no message");
        if p.is_context_overflow() {
            return overflow_message(said);
        }
        return format!("{} The provider said: {said}", err.message);
    }
    err.message.clone()
}

/// A provider's refusal of a request too long for its context, as the
/// Messages API words it: `input length and `max_tokens` exceed context
/// limit: N + K > C, …` when the prompt fits and `max_tokens` is what
/// overflows (Claude Code asks again with a smaller `max_tokens`), `prompt
/// is too long: N tokens > C maximum` when the prompt alone does not fit
/// (Claude Code compacts the conversation), and `prompt is too long:` with
/// the provider's words when they do not say the numbers. Read from the
/// words of vLLM and the OpenAI API (`maximum context length is C tokens`,
/// `N in the messages, K in the completion`, `is too large: K`, `your
/// request has N input tokens`, `your messages resulted in N tokens`).
pub fn overflow_message(said: &str) -> String {
    let context = number_after(said, "maximum context length is ");
    let prompt = number_before(said, " in the messages")
        .or_else(|| number_after(said, "your request has "))
        .or_else(|| number_after(said, "your messages resulted in "));
    let completion =
        number_before(said, " in the completion").or_else(|| number_after(said, "is too large: "));
    match (prompt, completion, context) {
        (Some(n), Some(k), Some(c)) if n < c => format!(
            "input length and `max_tokens` exceed context limit: {n} + {k} > {c}, decrease \
             input length or `max_tokens` and try again"
        ),
        (Some(n), _, Some(c)) => format!("prompt is too long: {n} tokens > {c} maximum"),
        _ => format!("prompt is too long: {said}"),
    }
}

/// The number that follows `marker` in `text`.
fn number_after(text: &str, marker: &str) -> Option<u64> {
    let at = text.find(marker)? + marker.len();
    let digits = text[at..].bytes().take_while(u8::is_ascii_digit).count();
    text[at..at + digits].parse().ok()
}

/// The number just before `marker` in `text`.
fn number_before(text: &str, marker: &str) -> Option<u64> {
    let end = text.find(marker)?;
    let digits = text[..end]
        .bytes()
        .rev()
        .take_while(u8::is_ascii_digit)
        .count();
    text[end - digits..end].parse().ok()
}

/// The error's JSON body.
pub fn body(err: &ApiError, request_id: &str) -> Vec<u8> {
    let (_, kind) = status_and_type(err);
    let mut out = Vec::with_capacity(160 + err.message.len());
    error_object(&mut out, kind, &message(err));
    out.pop();
    out.extend_from_slice(b",\"request_id\":");
    crate::json::write::string(&mut out, request_id);
    out.push(b'}');
    out
}

/// `{"type":"error","error":{"type":KIND,"message":MESSAGE}}`.
fn error_object(out: &mut Vec<u8>, kind: &str, message: &str) {
    out.extend_from_slice(b"{\"type\":\"error\",\"error\":{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"message\":");
    crate::json::write::string(out, message);
    out.extend_from_slice(b"}}");
}

/// A stream's `error` event: what ends a Messages stream that broke off.
pub(crate) fn event(out: &mut Vec<u8>, kind: &str, message: &str) {
    out.extend_from_slice(b"event: error\ndata: ");
    error_object(out, kind, message);
    out.extend_from_slice(b"\n\n");
}
