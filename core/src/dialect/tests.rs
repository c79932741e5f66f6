//! What the translators' tests share: chat chunks, and chat streams drawn
//! at random with what a chat client reassembles from them.

use proptest::prelude::*;
use serde_json::{Value, json};

/// A chat chunk with `delta` and, when given, a `finish_reason`.
pub(crate) fn chunk(delta: Value, finish: Option<&str>) -> Vec<u8> {
    json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m-1",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    .to_string()
    .into_bytes()
}

/// One delta of a chat stream.
#[derive(Debug, Clone)]
pub(crate) enum Delta {
    Reasoning(String),
    Text(String),
    /// A call's start (its index, id and name) or more of its arguments.
    CallStart(u8),
    CallArgs(u8, String),
}

pub(crate) fn delta() -> impl Strategy<Value = Delta> {
    let text = "[a-z \"\\\\\n\u{e9}\u{1F600}]{0,6}";
    prop_oneof![
        text.prop_map(Delta::Reasoning),
        text.prop_map(Delta::Text),
        (0u8..3).prop_map(Delta::CallStart),
        ((0u8..3), text).prop_map(|(i, t)| Delta::CallArgs(i, t)),
    ]
}

/// What a chat client reassembles from the deltas: reasoning, text,
/// and each call's name and arguments by index (a call's arguments
/// before its start are dropped, as a client would).
pub(crate) fn chat_view(deltas: &[Delta]) -> (String, String, Vec<(String, String)>) {
    let (mut reasoning, mut text) = (String::new(), String::new());
    let mut calls: Vec<(u8, String, String)> = Vec::new();
    for d in deltas {
        match d {
            Delta::Reasoning(t) => reasoning += t,
            Delta::Text(t) => text += t,
            Delta::CallStart(i) => calls.push((*i, format!("f{i}"), String::new())),
            Delta::CallArgs(i, t) => {
                if let Some(c) = calls.iter_mut().rev().find(|c| c.0 == *i) {
                    c.2 += t;
                }
            }
        }
    }
    let calls = calls.into_iter().map(|(_, n, a)| (n, a)).collect();
    (reasoning, text, calls)
}

pub(crate) fn chunks(deltas: &[Delta]) -> Vec<Vec<u8>> {
    let mut started = 0;
    deltas
        .iter()
        .map(|d| match d {
            Delta::Reasoning(t) => chunk(json!({"reasoning_content": t}), None),
            Delta::Text(t) => chunk(json!({"content": t}), None),
            Delta::CallStart(i) => {
                started += 1;
                chunk(
                    json!({"tool_calls": [{"index": i, "id": format!("call{started}"),
                           "function": {"name": format!("f{i}"), "arguments": ""}}]}),
                    None,
                )
            }
            Delta::CallArgs(i, t) => chunk(
                json!({"tool_calls": [{"index": i, "function": {"arguments": t}}]}),
                None,
            ),
        })
        .collect()
}
