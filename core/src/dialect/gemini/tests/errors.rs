//! The gateway's errors in Google's shape and status; the model list.

use serde_json::{Value, json};

use crate::dialect::gemini::{errors, models};
use crate::error::{ApiError, ProviderError, UpstreamFault};

fn provider(status: u16, message: &str) -> ApiError {
    let mut e = ApiError::upstream(UpstreamFault::Rejected, "The provider refused the request.");
    e.provider = Some(Box::new(ProviderError {
        status,
        message: Some(message.into()),
        ..ProviderError::default()
    }));
    e
}

#[test]
fn errors_take_googles_shape_and_status() {
    let cases = [
        (ApiError::invalid_value("x", "bad"), 400, "INVALID_ARGUMENT"),
        (ApiError::invalid_api_key(true), 401, "UNAUTHENTICATED"),
        (ApiError::model_not_found("x"), 404, "NOT_FOUND"),
        (
            ApiError::method_not_allowed("PUT", "POST"),
            405,
            "INVALID_ARGUMENT",
        ),
        (ApiError::request_timeout(), 408, "DEADLINE_EXCEEDED"),
        (ApiError::request_too_large(10), 413, "INVALID_ARGUMENT"),
        (
            ApiError::rate_limited("slow down", 3),
            429,
            "RESOURCE_EXHAUSTED",
        ),
        (
            ApiError::insufficient_quota("spent"),
            429,
            "RESOURCE_EXHAUSTED",
        ),
        (
            ApiError::upstream(UpstreamFault::Reset, "reset"),
            502,
            "UNAVAILABLE",
        ),
        (provider(503, "busy"), 503, "UNAVAILABLE"),
        (provider(429, "slow"), 503, "UNAVAILABLE"),
        (provider(400, "too many tokens"), 400, "INVALID_ARGUMENT"),
        (provider(500, "oops"), 502, "UNAVAILABLE"),
        (ApiError::overloaded("busy"), 503, "UNAVAILABLE"),
        (ApiError::upstream_timeout("slow"), 504, "DEADLINE_EXCEEDED"),
    ];
    for (e, status, code) in cases {
        assert_eq!(errors::status_and_code(&e), (status, code), "{e}");
        let b: Value = serde_json::from_slice(&errors::body(&e)).unwrap();
        assert_eq!(b["error"]["code"], status, "{b}");
        assert_eq!(b["error"]["status"], code);
        assert!(!b["error"]["message"].as_str().unwrap().is_empty());
    }
    let mut other = ApiError::overloaded("x");
    other.status = 500;
    assert_eq!(errors::status_and_code(&other), (500, "INTERNAL"));
    let b: Value =
        serde_json::from_slice(&errors::body(&ApiError::rate_limited("slow down", 3))).unwrap();
    assert_eq!(
        b["error"]["details"],
        json!([{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "3s"}])
    );
    let b: Value =
        serde_json::from_slice(&errors::body(&provider(400, "too many tokens"))).unwrap();
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .ends_with("The provider said: too many tokens")
    );
    assert!(b["error"].get("details").is_none());
    let b: Value = serde_json::from_slice(&errors::body(&ApiError::invalid_value(
        "generationConfig.topK",
        "bad",
    )))
    .unwrap();
    assert_eq!(
        b["error"]["details"][0]["fieldViolations"][0]["field"],
        "generationConfig.topK"
    );
}

#[test]
fn a_stream_error_is_a_bare_line_or_the_arrays_last_element() {
    let mut out = Vec::new();
    errors::stream_error(&mut out, true, true, 503, "cut \"short\"");
    let text = std::str::from_utf8(&out).unwrap();
    assert!(
        text.ends_with("}\n") && !text.starts_with("data:"),
        "{text}"
    );
    let v: Value = serde_json::from_str(text).unwrap();
    assert_eq!(
        v,
        json!({"error": {"code": 503, "message": "cut \"short\"", "status": "UNAVAILABLE"}})
    );
    let mut out = b"[{}".to_vec();
    errors::stream_error(&mut out, false, true, 500, "cut");
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v[1]["error"]["status"], "INTERNAL");
    let mut out = Vec::new();
    errors::stream_error(&mut out, false, false, 500, "cut");
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1);
}

#[test]
fn models_are_listed_as_google_lists_them() {
    let v: Value =
        serde_json::from_slice(&models::list_body(["a", "org/b \"x\""].into_iter())).unwrap();
    let all = v["models"].as_array().unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[1]["name"], "models/org/b \"x\"");
    assert_eq!(all[1]["displayName"], "org/b \"x\"");
    assert_eq!(
        all[0]["supportedGenerationMethods"],
        json!(["generateContent", "streamGenerateContent", "countTokens"])
    );
    let one: Value = serde_json::from_slice(&models::model_body("a")).unwrap();
    assert_eq!(one, all[0]);
    let none: Value = serde_json::from_slice(&models::list_body(std::iter::empty())).unwrap();
    assert_eq!(none, json!({"models": []}));
}
