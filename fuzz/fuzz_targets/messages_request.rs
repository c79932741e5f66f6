//! A Messages request as a chat request: any input is refused with a
//! well-formed 400 (in the Anthropic error shape too), or translated into
//! a JSON object with the client's `model`, `max_tokens` and a `messages`
//! array (every message a role the chat validator knows), the same however
//! often it is translated; the Messages name of any chat parameter is
//! found without a panic. A token count's translation (no `max_tokens`)
//! takes whatever the answer's takes, and writes the same messages. With
//! reasoning replay on, the same request is refused the same way, or
//! translated the same but for the reasoning signed thinking blocks give
//! assistant messages.
#![no_main]

use chatgate_core::dialect::messages::errors;
use chatgate_core::dialect::messages::request::{param_name, translate, translate_count};
use chatgate_fuzz::{only_reasoning_added, seal};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = param_name(&String::from_utf8_lossy(data));
    let replayed = translate(data, Some(&seal()));
    match translate(data, None) {
        Err(e) => {
            assert_eq!(e.status, 400, "{e:?}");
            let body: serde_json::Value = serde_json::from_slice(&e.body()).expect("error body");
            assert!(body["error"]["message"].is_string());
            let body: serde_json::Value =
                serde_json::from_slice(&errors::body(&e, "req_1")).expect("Messages error body");
            assert_eq!(body["type"], "error");
            assert_eq!(body["error"]["type"], "invalid_request_error");
            assert!(body["error"]["message"].is_string());
            if let Some(param) = &e.param {
                let _ = param_name(param);
            }
            assert_eq!(replayed.err(), Some(e), "refused alike");
        }
        Ok((chat, asked)) => {
            let v: serde_json::Value = serde_json::from_slice(&chat)
                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&chat)));
            assert!(v.is_object(), "{v}");
            assert!(v["model"].is_string(), "{v}");
            let model: serde_json::Value =
                serde_json::from_slice(&asked.model).expect("the model as written");
            assert_eq!(v["model"], model);
            assert!(v.get("max_tokens").is_some(), "{v}");
            let messages = v["messages"].as_array().expect("messages");
            for m in messages {
                let role = m["role"].as_str().expect("a role");
                assert!(
                    ["system", "user", "assistant", "tool"].contains(&role),
                    "{m}"
                );
            }
            assert_eq!(asked.stream, v["stream"] == true);
            let (count, _) = translate_count(data).expect("a count takes what an answer takes");
            let count: serde_json::Value = serde_json::from_slice(&count).expect("JSON");
            assert_eq!(count["messages"], v["messages"]);
            assert!(count.get("max_tokens").is_none());
            let (with, with_asked) = replayed.expect("translated alike");
            assert_eq!(with_asked, asked);
            only_reasoning_added(&chat, &with).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(translate(data, None).ok(), Some((chat, asked)), "deterministic");
        }
    }
});
