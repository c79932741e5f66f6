//! What the translators' tests share: chat chunks, and chat streams drawn
//! at random with what a chat client reassembles from them.

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::dialect::Carry;
use crate::reasoning::ReasoningSeal;

/// The secret the translators' tests sign and seal with.
pub(crate) const TEST_SECRET: &[u8] = b"the translators' tests' own secret, 32+";

/// A translator's carry with the tests' keys, nothing remembered.
pub(crate) fn carry() -> Carry {
    Carry::new(std::sync::Arc::new(ReasoningSeal::new(TEST_SECRET)))
}

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

/// How a provider writes its chunks: the name it gives reasoning
/// (`reasoning_content`, `reasoning`, or `reasoning_details` blocks), and
/// whether it escapes characters of member names (as a JSON writer may:
/// every client reads them unescaped).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Style {
    pub(crate) reasoning: u8,
    pub(crate) escaped: bool,
}

pub(crate) fn style() -> impl Strategy<Value = Style> {
    (0u8..3, any::<bool>()).prop_map(|(reasoning, escaped)| Style { reasoning, escaped })
}

/// The plain style: `reasoning_content`, names as they are.
pub(crate) const PLAIN: Style = Style {
    reasoning: 0,
    escaped: false,
};

/// The chunk `chunk` writes, in `style`.
pub(crate) fn styled(c: Vec<u8>, style: Style) -> Vec<u8> {
    if !style.escaped {
        return c;
    }
    let mut s = String::from_utf8(c).expect("chunks are JSON text");
    for (name, escaped) in [
        ("\"reasoning_content\":", "\"reasoning\\u005fcontent\":"),
        ("\"reasoning\":", "\"re\\u0061soning\":"),
        ("\"reasoning_details\":", "\"reasoning\\u005Fdetails\":"),
        ("\"content\":", "\"\\u0063ontent\":"),
        ("\"tool_calls\":", "\"tool\\u005fcalls\":"),
        ("\"arguments\":", "\"\\u0061rguments\":"),
        ("\"finish_reason\":", "\"fin\\u0069sh_reason\":"),
        ("\"delta\":", "\"d\\u0065lta\":"),
        ("\"choices\":", "\"ch\\u006fices\":"),
    ] {
        s = s.replace(name, escaped);
    }
    s.into_bytes()
}

pub(crate) fn chunks(deltas: &[Delta], style: Style) -> Vec<Vec<u8>> {
    let mut started = 0;
    deltas
        .iter()
        .map(|d| match d {
            Delta::Reasoning(t) => chunk(
                match style.reasoning {
                    0 => json!({"reasoning_content": t}),
                    1 => json!({"reasoning": t}),
                    _ => json!({"reasoning_details": [{"type": "reasoning.text", "text": t, "format": "unknown", "index": 0}]}),
                },
                None,
            ),
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
        .map(|c| styled(c, style))
        .collect()
}
