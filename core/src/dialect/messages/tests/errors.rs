//! The gateway's errors in the Anthropic shape, status and wording.

use serde_json::Value;

use crate::dialect::messages::errors;
use crate::error::{ApiError, ProviderError, UpstreamFault};

#[test]
fn errors_take_the_anthropic_shape_and_status() {
    let provider = |status: u16, code: Option<&str>, message: &str| {
        let mut e =
            ApiError::upstream(UpstreamFault::Rejected, "The provider refused the request.");
        e.provider = Some(Box::new(ProviderError {
            status,
            code: code.map(str::to_owned),
            message: Some(message.into()),
            ..ProviderError::default()
        }));
        e
    };
    let cases = [
        (ApiError::invalid_api_key(true), 401, "authentication_error"),
        (ApiError::model_not_found("x"), 404, "not_found_error"),
        (
            ApiError::rate_limited("slow down", 3),
            429,
            "rate_limit_error",
        ),
        (
            ApiError::insufficient_quota("spent"),
            429,
            "rate_limit_error",
        ),
        (
            ApiError::invalid_value("x", "bad"),
            400,
            "invalid_request_error",
        ),
        (
            ApiError::request_too_large(10),
            413,
            "invalid_request_error",
        ),
        (ApiError::overloaded("busy"), 529, "overloaded_error"),
        (ApiError::upstream_timeout("slow"), 504, "timeout_error"),
        (
            ApiError::upstream(UpstreamFault::Reset, "reset"),
            502,
            "api_error",
        ),
        (provider(503, None, "busy"), 529, "overloaded_error"),
        (
            provider(400, Some("context_length_exceeded"), "too many tokens"),
            400,
            "invalid_request_error",
        ),
        (provider(500, None, "oops"), 502, "api_error"),
    ];
    for (e, status, kind) in cases {
        assert_eq!(errors::status_and_type(&e), (status, kind), "{e}");
        let b: Value = serde_json::from_slice(&errors::body(&e, "req_5")).unwrap();
        assert_eq!(b["type"], "error");
        assert_eq!(b["error"]["type"], kind);
        assert_eq!(b["request_id"], "req_5");
        assert!(!b["error"]["message"].as_str().unwrap().is_empty());
    }
    let b: Value = serde_json::from_slice(&errors::body(
        &provider(400, Some("context_length_exceeded"), "too many tokens"),
        "r",
    ))
    .unwrap();
    assert_eq!(b["error"]["message"], "prompt is too long: too many tokens");
    // vLLM's words, when max_tokens is what overflows, and when the prompt
    // alone does; the OpenAI API's.
    let cases = [
        (
            "'max_tokens' or 'max_completion_tokens' is too large: 32000. This model's maximum \
             context length is 32768 tokens and your request has 1000 input tokens (32000 > 32768 - 1000).",
            "input length and `max_tokens` exceed context limit: 1000 + 32000 > 32768, decrease \
             input length or `max_tokens` and try again",
        ),
        (
            "This model's maximum context length is 32768 tokens. However, you requested 40000 \
             tokens (8000 in the messages, 32000 in the completion). Please reduce the length.",
            "input length and `max_tokens` exceed context limit: 8000 + 32000 > 32768, decrease \
             input length or `max_tokens` and try again",
        ),
        (
            "This model's maximum context length is 32768 tokens. However, you requested 72000 \
             tokens (40000 in the messages, 32000 in the completion).",
            "prompt is too long: 40000 tokens > 32768 maximum",
        ),
        (
            "This model's maximum context length is 128000 tokens. However, your messages \
             resulted in 130000 tokens. Please reduce the length of the messages.",
            "prompt is too long: 130000 tokens > 128000 maximum",
        ),
    ];
    for (said, want) in cases {
        assert_eq!(errors::overflow_message(said), want);
        let b: Value =
            serde_json::from_slice(&errors::body(&provider(400, None, said), "r")).unwrap();
        assert_eq!(b["error"]["message"], want);
    }
    let b: Value =
        serde_json::from_slice(&errors::body(&ApiError::invalid_api_key(true), "r")).unwrap();
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("x-api-key")
    );
}
