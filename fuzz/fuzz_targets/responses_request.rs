//! A Responses request as a chat request: any input is refused with a
//! well-formed 400, or translated into a JSON object with `model` and a
//! `messages` array (every message a role the chat validator knows), the
//! same however often it is translated.
#![no_main]

use chatgate_core::dialect::responses::request::translate;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match translate(data) {
        Err(e) => {
            assert_eq!(e.status, 400, "{e:?}");
            let body: serde_json::Value = serde_json::from_slice(&e.body()).expect("error body");
            assert!(body["error"]["message"].is_string());
        }
        Ok((chat, asked)) => {
            let v: serde_json::Value = serde_json::from_slice(&chat).unwrap_or_else(|e| {
                panic!("{e}: {}", String::from_utf8_lossy(&chat))
            });
            assert!(v["model"].is_string(), "{v}");
            let messages = v["messages"].as_array().expect("messages");
            for m in messages {
                let role = m["role"].as_str().expect("a role");
                assert!(["system", "user", "assistant", "tool"].contains(&role), "{m}");
            }
            assert_eq!(asked.stream, v["stream"] == true);
            assert_eq!(translate(data).ok(), Some((chat, asked)), "deterministic");
        }
    }
});
