//! `validate_chat_request`: Ok, or a 400/404 with a well-formed error body.
//! When Ok, the body sent upstream is the input unless rewritten; a rewrite
//! is a JSON object; no assistant message upstream carries
//! `reasoning_content`; a stream upstream has `include_usage: true`; and a
//! rewritten body validates again to the same request, with no rewrite.
#![no_main]

use std::collections::BTreeMap;

use chatgate_core::Catalog;
use chatgate_core::validate_chat_request;
use libfuzzer_sys::fuzz_target;
use serde::Deserialize;
use serde_json::value::RawValue;

/// What the checks need of an upstream body. Values stay raw (and unknown
/// members are skipped), so nesting depth does not matter.
#[derive(Deserialize)]
struct Upstream {
    messages: Vec<BTreeMap<String, Box<RawValue>>>,
    stream_options: Option<Box<RawValue>>,
}

fn check_upstream(body: &[u8], stream: bool) {
    let up: Upstream = serde_json::from_slice(body).expect("the upstream body parses");
    for m in &up.messages {
        let role = m.get("role").expect("messages have roles");
        let role: String = serde_json::from_str(role.get()).expect("roles are strings");
        if role == "assistant" {
            assert!(
                !m.contains_key("reasoning_content"),
                "reasoning_content forwarded in an assistant message"
            );
        }
    }
    if stream {
        #[derive(Deserialize)]
        struct Options {
            include_usage: Option<bool>,
        }
        let raw = up.stream_options.expect("a stream has stream_options");
        let options: Options = serde_json::from_str(raw.get()).expect("stream_options");
        assert_eq!(options.include_usage, Some(true));
    }
}

fuzz_target!(|data: &[u8]| {
    let catalog = Catalog::default();
    let chat = match validate_chat_request(data, &catalog) {
        Ok(c) => c,
        Err(e) => {
            assert!(matches!(e.status, 400 | 404), "{e}");
            let body: serde_json::Value =
                serde_json::from_slice(&e.body()).expect("error bodies are JSON");
            assert!(body["error"]["message"].is_string());
            return;
        }
    };
    assert!(catalog.get(&chat.model).is_some());
    assert!(chat.reservation() >= 1);
    let upstream = chat.upstream_body(data);
    match &chat.rewritten {
        None => assert_eq!(upstream, data),
        Some(rewritten) => {
            assert_eq!(upstream, &rewritten[..]);
            match serde_json::from_slice::<serde_json::Value>(rewritten) {
                Ok(v) => assert!(v.is_object(), "a rewrite is a JSON object"),
                // Values the gateway does not read are kept raw: nesting
                // deeper than `Value` accepts, or escapes of lone surrogates
                // (valid JSON grammar, not representable in a `String`), come
                // from the client. A rewrite must not add such a problem.
                Err(e) => {
                    let orig = serde_json::from_slice::<serde_json::Value>(data);
                    assert!(orig.is_err(), "the input parses, its rewrite does not: {e}");
                }
            }
            let again = validate_chat_request(rewritten, &catalog).expect("a rewrite validates");
            assert_eq!(again.model, chat.model);
            assert_eq!(again.stream, chat.stream);
            assert_eq!(again.max_tokens, chat.max_tokens);
            assert_eq!(again.estimated_prompt_tokens, chat.estimated_prompt_tokens);
            assert_eq!(again.rewritten, None, "a rewrite is final");
        }
    }
    check_upstream(upstream, chat.stream);
});
