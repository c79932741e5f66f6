//! A Responses request as a chat request: any input is refused with a
//! well-formed 400, or translated into a JSON object with `model` and a
//! `messages` array (every message a role the chat validator knows), the
//! same however often it is translated. With reasoning replay on, the same
//! request is refused the same way, or translated the same but for the
//! reasoning its reasoning items give assistant messages.
#![no_main]

use chatgate_core::dialect::responses::request::translate;
use chatgate_fuzz::{only_reasoning_added, seal};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let replayed = translate(data, Some(&seal()), None);
    match translate(data, None, None) {
        Err(e) => {
            assert_eq!(e.status, 400, "{e:?}");
            let body: serde_json::Value = serde_json::from_slice(&e.body()).expect("error body");
            assert!(body["error"]["message"].is_string());
            assert_eq!(replayed.err(), Some(e), "refused alike");
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
            let (with, with_asked) = replayed.expect("translated alike");
            assert_eq!(with_asked, asked);
            only_reasoning_added(&chat, &with).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(translate(data, None, None).ok(), Some((chat, asked)), "deterministic");
        }
    }
});
