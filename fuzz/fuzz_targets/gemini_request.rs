//! A Gemini request as a chat request: any input is refused with a
//! well-formed 400 (in Google's error shape too: `INVALID_ARGUMENT`), or
//! translated into a JSON object with the path's `model` and a `messages`
//! array (every message a role the chat validator knows), `stream` as the
//! method asked, the same however often it is translated; the Gemini name
//! of any chat parameter is found without a panic. A token count's
//! translation of the same body (no `max_tokens`, no `stream`) writes the
//! same messages. With reasoning replay on, the same request is refused
//! the same way, or translated the same but for the reasoning a
//! `thoughtSignature` gives assistant messages. The input's length
//! chooses whether the method streams and whether with `alt=sse`.
#![no_main]

use chatgate_core::dialect::gemini::errors;
use chatgate_core::dialect::gemini::request::{param_name, translate, translate_count};
use chatgate_fuzz::{only_reasoning_added, seal};
use libfuzzer_sys::fuzz_target;

const MODEL: &str = "gemini/m \"1\"";

fuzz_target!(|data: &[u8]| {
    let _ = param_name(&String::from_utf8_lossy(data));
    let stream = data.len() % 2 == 1;
    let sse = data.len() % 3 != 0;
    let replayed = translate(data, MODEL, stream, sse, Some(&seal()));
    match translate(data, MODEL, stream, sse, None) {
        Err(e) => {
            assert_eq!(e.status, 400, "{e:?}");
            let body: serde_json::Value = serde_json::from_slice(&e.body()).expect("error body");
            assert!(body["error"]["message"].is_string());
            assert_eq!(errors::status_and_code(&e), (400, "INVALID_ARGUMENT"));
            let body: serde_json::Value =
                serde_json::from_slice(&errors::body(&e)).expect("Gemini error body");
            assert_eq!(body["error"]["code"], 400);
            assert_eq!(body["error"]["status"], "INVALID_ARGUMENT");
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
            assert_eq!(v["model"], MODEL);
            let model: serde_json::Value =
                serde_json::from_slice(&asked.model).expect("the model as a JSON string");
            assert_eq!(model, MODEL);
            let messages = v["messages"].as_array().expect("messages");
            for m in messages {
                let role = m["role"].as_str().expect("a role");
                assert!(
                    ["system", "user", "assistant", "tool"].contains(&role),
                    "{m}"
                );
            }
            assert_eq!(asked.stream, stream);
            assert_eq!(asked.sse, stream && sse);
            assert_eq!(v["stream"] == true, stream, "{v}");
            // The same body as a token count (unless it is the wrapped
            // shape, which a count reads inside).
            let wrapped = serde_json::from_slice::<serde_json::Value>(data)
                .map_or(true, |b| b.get("generateContentRequest").is_some());
            if !wrapped {
                let (count, _) =
                    translate_count(data, MODEL).expect("a count takes what an answer takes");
                let count: serde_json::Value = serde_json::from_slice(&count).expect("JSON");
                assert_eq!(count["messages"], v["messages"]);
                assert!(count.get("max_tokens").is_none() && count.get("stream").is_none());
            }
            let (with, with_asked) = replayed.expect("translated alike");
            assert_eq!(with_asked, asked);
            only_reasoning_added(&chat, &with).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                translate(data, MODEL, stream, sse, None).ok(),
                Some((chat, asked)),
                "deterministic"
            );
        }
    }
});
