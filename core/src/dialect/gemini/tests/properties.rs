//! The answer's translation as properties: random chat streams, as
//! providers write them, translated; what a Gemini client reassembles is
//! what a chat client does, in either framing, and what the whole
//! answer's body says.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::events::{Reassembled, asked, reassemble};
use crate::dialect::End;
use crate::dialect::gemini::events::{GeminiStream, body};
use crate::dialect::tests::{Delta, carry, chat_view, chunk, chunks, delta, style};
use crate::usage::Usage;

/// The translation of `chunks` (then a `stop` and the usage), as SSE
/// events or a JSON array, with the same-shape shortcut or without.
fn run(chunks: &[Vec<u8>], sse: bool, thoughts: bool, shortcut: bool, usage: &Usage) -> Vec<u8> {
    let mut s = GeminiStream::new(asked(true, sse, thoughts), "req_8", carry());
    if !shortcut {
        s = s.without_shortcut();
    }
    let mut out = Vec::new();
    for c in chunks {
        s.chunk(c, &mut out).unwrap();
    }
    s.chunk(&chunk(json!({}), Some("stop")), &mut out).unwrap();
    s.end(End::Finished(Some("stop")), Some(usage), &mut out);
    out
}

/// The arguments' text as Gemini's `args`.
fn args_of(text: &str) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => v,
        _ if text.trim().is_empty() => json!({}),
        _ => json!({"arguments": text}),
    }
}

/// The whole completion the deltas make: what a chat client
/// reassembles, as one message (ids as `chunks` gives them).
fn whole(deltas: &[Delta]) -> Vec<u8> {
    let (reasoning, text, _) = chat_view(deltas);
    let mut calls: Vec<(u8, String, String, String)> = Vec::new();
    for d in deltas {
        match d {
            Delta::CallStart(i) => calls.push((
                *i,
                format!("call{}", calls.len() + 1),
                format!("f{i}"),
                String::new(),
            )),
            Delta::CallArgs(i, t) => {
                if let Some(c) = calls.iter_mut().rev().find(|c| c.0 == *i) {
                    c.3 += t;
                }
            }
            _ => {}
        }
    }
    let calls: Vec<Value> = calls
        .into_iter()
        .map(|(_, id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
        .collect();
    let mut message = json!({"role": "assistant", "reasoning_content": reasoning, "content": text});
    if !calls.is_empty() {
        message["tool_calls"] = json!(calls);
    }
    json!({"id": "c1", "object": "chat.completion", "model": "m-1",
           "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})
    .to_string()
    .into_bytes()
}

proptest! {
    /// As providers stream: reasoning and text in any order, then the
    /// tool calls, their deltas interleaved in any order.
    #[test]
    fn reassembled_it_says_what_the_chat_stream_said(
        texts in proptest::collection::vec(delta().prop_filter("text", |d| matches!(d, Delta::Reasoning(_) | Delta::Text(_))), 0..12),
        calls in proptest::collection::vec(delta().prop_filter("call", |d| matches!(d, Delta::CallStart(_) | Delta::CallArgs(..))), 0..12),
        style in style(),
        thoughts in any::<bool>(),
        prompt in 0u64..1000,
        completion in 0u64..1000,
        reasoning_tokens in 0u64..1000,
    ) {
        let deltas: Vec<Delta> = texts.into_iter().chain(calls).collect();
        let chunks = chunks(&deltas, style);
        let usage = Usage { prompt_tokens: prompt, completion_tokens: completion + reasoning_tokens, reasoning_tokens, ..Usage::default() };
        let out = run(&chunks, true, thoughts, true, &usage);
        // The same-shape shortcut changes nothing.
        prop_assert_eq!(&run(&chunks, true, thoughts, false, &usage), &out);
        let r = reassemble(&out, true);
        let (reasoning, text, calls) = chat_view(&deltas);
        prop_assert_eq!(&r.thoughts, &if thoughts { reasoning.clone() } else { String::new() });
        prop_assert_eq!(&r.text, &text);
        let got: Vec<(String, Value)> = r.calls.iter().map(|c| (c.1.clone(), c.2.clone())).collect();
        let want: Vec<(String, Value)> = calls.iter().map(|(n, a)| (n.clone(), args_of(a))).collect();
        prop_assert_eq!(got, want);
        // Only the first call is signed, when there was reasoning.
        for (k, c) in r.calls.iter().enumerate() {
            prop_assert_eq!(c.3.is_some(), k == 0 && !reasoning.is_empty());
        }
        prop_assert_eq!(r.finish.as_deref(), Some("STOP"));
        let mut usage_want = json!({"promptTokenCount": prompt, "candidatesTokenCount": completion,
                                    "totalTokenCount": prompt + completion + reasoning_tokens});
        if reasoning_tokens > 0 {
            usage_want["thoughtsTokenCount"] = json!(reasoning_tokens);
        }
        prop_assert_eq!(r.usage.clone(), Some(usage_want));
        // As a JSON array: the same answer.
        let array = reassemble(&run(&chunks, false, thoughts, true, &usage), false);
        prop_assert_eq!(&array, &r);
        // And the whole completion says the same in one response.
        let b: Value = serde_json::from_slice(&body(asked(false, false, thoughts), "req_8", carry(), &whole(&deltas), Some(&usage))).unwrap();
        let mut one = Reassembled::default();
        one.add(&b);
        prop_assert_eq!(one, r);
    }

    /// Any order at all, in either framing: the responses parse, the
    /// shortcut changes nothing, and the reasoning and text are whole.
    #[test]
    fn any_order_reads_whole(
        deltas in proptest::collection::vec(delta(), 0..24),
        thoughts in any::<bool>(),
        sse in any::<bool>(),
        style in style(),
    ) {
        let chunks = chunks(&deltas, style);
        let usage = Usage::default();
        let out = run(&chunks, sse, thoughts, true, &usage);
        prop_assert_eq!(&run(&chunks, sse, thoughts, false, &usage), &out);
        let r = reassemble(&out, sse);
        let (reasoning, text, _) = chat_view(&deltas);
        prop_assert_eq!(r.thoughts, if thoughts { reasoning } else { String::new() });
        prop_assert_eq!(r.text, text);
        prop_assert_eq!(r.finish.as_deref(), Some("STOP"));
    }
}
