//! The answer's translation: chat streams as Messages events, checked
//! against the event grammar and reassembled; whole completions.

use serde_json::{Value, json};

use crate::dialect::End;
use crate::dialect::messages::events::{MessageStream, SIGNATURE_PREFIX, body};
use crate::dialect::messages::request::Asked;
use crate::dialect::tests::{carry, chunk};
use crate::usage::Usage;

/// What an Anthropic client reassembles from the events: the message,
/// and the events as parsed.
#[derive(Debug, Default)]
pub(crate) struct Reassembled {
    pub(crate) thinking: String,
    pub(crate) signature: String,
    pub(crate) text: String,
    /// Each tool call: id, name, the input's JSON text.
    pub(crate) calls: Vec<(String, String, String)>,
    pub(crate) stop_reason: Option<String>,
    pub(crate) usage: Value,
    pub(crate) stopped: bool,
    pub(crate) error: Option<Value>,
}

/// Reads the event stream as the SDKs do, checking its grammar: every
/// event named by its `event:` line as its `type` says, blocks opened,
/// written and closed one at a time with increasing indexes.
pub(crate) fn reassemble(stream: &[u8]) -> (Reassembled, Vec<Value>) {
    let text = std::str::from_utf8(stream).expect("UTF-8");
    let mut r = Reassembled::default();
    let mut events = Vec::new();
    let mut open: Option<(u64, String)> = None;
    let mut next = 0;
    let mut signed = false;
    let mut delta_seen = false;
    for frame in text.split("\n\n").filter(|f| !f.is_empty()) {
        let mut lines = frame.lines();
        let name = lines
            .next()
            .unwrap()
            .strip_prefix("event: ")
            .expect("event line");
        let data = lines
            .next()
            .unwrap()
            .strip_prefix("data: ")
            .expect("data line");
        let v: Value = serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {data}"));
        assert_eq!(v["type"], name, "{frame}");
        assert!(!r.stopped, "nothing after message_stop");
        assert_eq!(
            events.is_empty(),
            name == "message_start",
            "message_start first, and once: {frame}"
        );
        match name {
            "message_start" => assert_eq!(v["message"]["role"], "assistant"),
            "content_block_start" => {
                assert!(open.is_none(), "one block at a time");
                assert_eq!(v["index"], next);
                let b = &v["content_block"];
                let kind = b["type"].as_str().unwrap().to_owned();
                if kind == "tool_use" {
                    r.calls.push((
                        b["id"].as_str().unwrap().into(),
                        b["name"].as_str().unwrap().into(),
                        String::new(),
                    ));
                }
                open = Some((next, kind));
                signed = false;
                next += 1;
            }
            "content_block_delta" => {
                let (index, kind) = open.as_ref().expect("a block is open");
                assert_eq!(&v["index"], index);
                let d = &v["delta"];
                match (kind.as_str(), d["type"].as_str().unwrap()) {
                    ("thinking", "thinking_delta") => r.thinking += d["thinking"].as_str().unwrap(),
                    ("thinking", "signature_delta") => {
                        signed = true;
                        r.signature += d["signature"].as_str().unwrap()
                    }
                    ("text", "text_delta") => r.text += d["text"].as_str().unwrap(),
                    ("tool_use", "input_json_delta") => {
                        r.calls.last_mut().unwrap().2 += d["partial_json"].as_str().unwrap()
                    }
                    other => panic!("{other:?}"),
                }
            }
            "content_block_stop" => {
                let (index, kind) = open.take().expect("a block is open");
                assert_eq!(v["index"], index);
                assert!(kind != "thinking" || signed, "a thinking block is signed");
            }
            "message_delta" => {
                assert!(open.is_none());
                delta_seen = true;
                r.stop_reason = v["delta"]["stop_reason"].as_str().map(str::to_owned);
                r.usage = v["usage"].clone();
            }
            "message_stop" => {
                assert!(delta_seen, "message_delta before message_stop");
                r.stopped = true;
            }
            "ping" => {}
            "error" => r.error = Some(v["error"].clone()),
            other => panic!("unknown event {other}"),
        }
        events.push(v);
    }
    (r, events)
}

fn thinking_asked() -> Asked {
    Asked {
        thinking: true,
        ..Asked::default()
    }
}

#[test]
fn a_stream_with_reasoning_text_and_two_calls() {
    let mut s = MessageStream::new(thinking_asked(), "req_7", carry());
    let mut out = Vec::new();
    for c in [
        chunk(
            json!({"role": "assistant", "reasoning_content": "Think"}),
            None,
        ),
        chunk(json!({"reasoning_content": "ing."}), None),
        chunk(json!({"content": "Hi \"you\"\n"}), None),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_a", "function": {"name": "f", "arguments": ""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"x\":"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "g", "arguments": "{}"}}]}),
            None,
        ),
        // Interleaved: the first call's arguments after the second began.
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
    ] {
        s.chunk(&c, &mut out).unwrap();
    }
    let usage = Usage {
        prompt_tokens: 30,
        completion_tokens: 12,
        cached_tokens: 10,
        ..Usage::default()
    };
    s.end(End::Finished(Some("tool_calls")), Some(&usage), &mut out);
    let (r, events) = reassemble(&out);
    assert_eq!(r.thinking, "Thinking.");
    // The gateway's own signature of exactly that text.
    assert!(r.signature.starts_with(SIGNATURE_PREFIX), "{}", r.signature);
    assert!(carry().seal.verify(b"Thinking.", r.signature.as_bytes()));
    assert!(!carry().seal.verify(b"Thinking", r.signature.as_bytes()));
    assert_eq!(r.text, "Hi \"you\"\n");
    assert_eq!(
        r.calls,
        [
            ("call_a".into(), "f".into(), "{\"x\":1}".into()),
            ("call_b".into(), "g".into(), "{}".into())
        ]
    );
    assert_eq!(r.stop_reason.as_deref(), Some("tool_use"));
    assert_eq!(
        r.usage,
        json!({"input_tokens": 20, "output_tokens": 12, "cache_read_input_tokens": 10,
               "cache_creation_input_tokens": 0})
    );
    assert!(r.stopped);
    assert_eq!(events[0]["message"]["id"], "msg_7");
    assert_eq!(events[0]["message"]["model"], "m-1");
}

#[test]
fn empty_ids_continue_a_call_and_calls_past_the_budget_fail_the_stream() {
    let mut s = MessageStream::new(Asked::default(), "req_4", carry());
    let mut out = Vec::new();
    s.chunk(
        &chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
        "function": {"name": "f", "arguments": "{\"a\""}}]}),
            None,
        ),
        &mut out,
    )
    .unwrap();
    // What some servers send on every later delta: an empty id and name.
    s.chunk(
        &chunk(
            json!({"tool_calls": [{"index": 0, "id": "", "type": "function",
        "function": {"name": "", "arguments": ":1}"}}]}),
            None,
        ),
        &mut out,
    )
    .unwrap();
    s.chunk(&chunk(json!({}), Some("tool_calls")), &mut out)
        .unwrap();
    s.end(End::Finished(Some("tool_calls")), None, &mut out);
    let (r, _) = reassemble(&out);
    assert_eq!(r.calls, [("call_a".into(), "f".into(), "{\"a\":1}".into())]);
    // A provider that starts calls without end: the stream fails at the
    // budget's limit, as an invalid provider stream.
    let mut s = MessageStream::new(Asked::default(), "req_4", carry());
    let mut out = Vec::new();
    let mut failed_at = None;
    for i in 0..300 {
        let c = chunk(
            json!({"tool_calls": [{"index": i, "id": format!("c{i}"),
        "function": {"name": "f", "arguments": "{}"}}]}),
            None,
        );
        if s.chunk(&c, &mut out).is_err() {
            failed_at = Some(i);
            break;
        }
    }
    assert_eq!(failed_at, Some(crate::dialect::MAX_ITEMS as u64));
    s.end(End::Failed("over budget"), None, &mut out);
    let (r, events) = reassemble(&out);
    assert!(!r.stopped);
    assert_eq!(events.last().unwrap()["type"], "error");
    // Arguments without end, kept for a call that waits for its block:
    // the same.
    let mut s = MessageStream::new(Asked::default(), "req_4", carry());
    let mut out = Vec::new();
    let open = |i: u64| {
        chunk(
            json!({"tool_calls": [{"index": i, "id": format!("c{i}"), "function": {"name": "f"}}]}),
            None,
        )
    };
    s.chunk(&open(0), &mut out).unwrap();
    s.chunk(&open(1), &mut out).unwrap();
    let big = "x".repeat(1 << 20);
    let mut failed = false;
    for _ in 0..20 {
        let c = chunk(
            json!({"tool_calls": [{"index": 1, "function": {"arguments": big}}]}),
            None,
        );
        if s.chunk(&c, &mut out).is_err() {
            failed = true;
            break;
        }
    }
    assert!(failed, "16 MiB kept at most");
}

#[test]
fn thinking_is_shown_as_asked() {
    let run = |asked: Asked| {
        let mut s = MessageStream::new(asked, "req_1", carry());
        let mut out = Vec::new();
        s.chunk(
            &chunk(json!({"reasoning_content": "secret"}), None),
            &mut out,
        )
        .unwrap();
        s.chunk(&chunk(json!({"content": "ok"}), Some("stop")), &mut out)
            .unwrap();
        s.end(End::Finished(Some("stop")), None, &mut out);
        reassemble(&out).0
    };
    let shown = run(thinking_asked());
    assert_eq!(
        (shown.thinking.as_str(), shown.text.as_str()),
        ("secret", "ok")
    );
    let omitted = run(Asked {
        thinking: true,
        omit_thinking: true,
        ..Asked::default()
    });
    assert_eq!(omitted.thinking, "");
    assert!(omitted.signature.starts_with(SIGNATURE_PREFIX));
    let none = run(Asked::default());
    assert_eq!((none.thinking.as_str(), none.signature.as_str()), ("", ""));
    assert_eq!(none.stop_reason.as_deref(), Some("end_turn"));
}

#[test]
fn stop_reasons_map() {
    for (finish, extra, want) in [
        ("stop", json!({}), "end_turn"),
        ("length", json!({}), "max_tokens"),
        ("tool_calls", json!({}), "tool_use"),
        ("content_filter", json!({}), "refusal"),
        ("stop", json!({"stop_reason": "END"}), "stop_sequence"),
    ] {
        let mut c: Value =
            serde_json::from_slice(&chunk(json!({"content": "x"}), Some(finish))).unwrap();
        for (k, v) in extra.as_object().unwrap() {
            c["choices"][0][k] = v.clone();
        }
        let mut s = MessageStream::new(Asked::default(), "req_1", carry());
        let mut out = Vec::new();
        s.chunk(c.to_string().as_bytes(), &mut out).unwrap();
        s.end(End::Finished(Some(finish)), None, &mut out);
        let (r, events) = reassemble(&out);
        assert_eq!(r.stop_reason.as_deref(), Some(want), "{finish}");
        if want == "stop_sequence" {
            let delta = events
                .iter()
                .find(|e| e["type"] == "message_delta")
                .unwrap();
            assert_eq!(delta["delta"]["stop_sequence"], "END");
        }
        // The non-streamed body says the same.
        let b: Value = serde_json::from_slice(&body(
            Asked::default(),
            "req_1",
            carry(),
            &completion(&c),
            None,
        ))
        .unwrap();
        assert_eq!(b["stop_reason"], want);
    }
}

/// A chunk as the whole completion it would be (`delta` as `message`).
fn completion(chunk: &Value) -> Vec<u8> {
    let mut c = chunk.clone();
    c["object"] = json!("chat.completion");
    let delta = c["choices"][0]["delta"].take();
    c["choices"][0]["message"] = delta;
    c.to_string().into_bytes()
}

#[test]
fn a_broken_stream_ends_with_an_error_event_not_a_stop() {
    let mut s = MessageStream::new(Asked::default(), "req_2", carry());
    let mut out = Vec::new();
    s.chunk(&chunk(json!({"content": "partial"}), None), &mut out)
        .unwrap();
    s.end(
        End::Failed("the provider's connection was reset"),
        None,
        &mut out,
    );
    let (r, events) = reassemble(&out);
    assert!(!r.stopped);
    assert!(events.iter().all(|e| e["type"] != "message_delta"));
    let e = r.error.unwrap();
    assert_eq!(e["type"], "api_error");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("connection was reset")
    );
    let mut s = MessageStream::new(Asked::default(), "req_2", carry());
    let mut out = Vec::new();
    s.end(End::Failed("the gateway was shutting down"), None, &mut out);
    assert_eq!(
        reassemble(&out).0.error.unwrap()["type"],
        "overloaded_error"
    );
}

#[test]
fn a_whole_completion_is_a_message() {
    let completion = json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "reasoning_content": "why", "content": "Here.",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": [1]}"}},
                {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": "not json"}}
            ]}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}});
    let usage = Usage {
        prompt_tokens: 5,
        completion_tokens: 7,
        ..Usage::default()
    };
    let b: Value = serde_json::from_slice(&body(
        thinking_asked(),
        "req_3",
        carry(),
        completion.to_string().as_bytes(),
        Some(&usage),
    ))
    .unwrap();
    assert_eq!(b["id"], "msg_3");
    assert_eq!(b["type"], "message");
    assert_eq!(b["role"], "assistant");
    assert_eq!(b["model"], "m");
    assert_eq!(b["content"][0]["type"], "thinking");
    assert_eq!(b["content"][0]["thinking"], "why");
    assert!(
        b["content"][0]["signature"]
            .as_str()
            .unwrap()
            .starts_with(SIGNATURE_PREFIX)
    );
    assert_eq!(b["content"][1], json!({"type": "text", "text": "Here."}));
    assert_eq!(
        b["content"][2],
        json!({"type": "tool_use", "id": "call_1", "name": "f", "input": {"a": [1]}})
    );
    assert_eq!(b["content"][3]["input"], json!({"arguments": "not json"}));
    assert_eq!(b["stop_reason"], "tool_use");
    assert_eq!(b["stop_sequence"], Value::Null);
    assert_eq!(b["usage"]["input_tokens"], 5);
    assert_eq!(b["usage"]["output_tokens"], 7);
}

#[test]
fn the_shortcut_is_taken_for_a_chunk_shaped_like_the_last() {
    let provider = |delta: &str| {
        format!(
            r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":null}}]}}"#
        )
    };
    for asked in [thinking_asked(), Asked::default()] {
        let mut s = MessageStream::new(asked.clone(), "req_9", carry());
        let mut out = Vec::new();
        s.chunk(
            provider(r#"{"role":"assistant","reasoning_content":"A"}"#).as_bytes(),
            &mut out,
        )
        .unwrap();
        s.chunk(
            provider(r#"{"reasoning_content":"B"}"#).as_bytes(),
            &mut out,
        )
        .unwrap();
        assert!(s.has_shape(), "learned from a chunk of one reasoning delta");
        s.chunk(
            provider(r#"{"reasoning_content":"C"}"#).as_bytes(),
            &mut out,
        )
        .unwrap();
        s.chunk(provider(r#"{"content":"Hi"}"#).as_bytes(), &mut out)
            .unwrap();
        s.chunk(provider(r#"{"content":" there"}"#).as_bytes(), &mut out)
            .unwrap();
        assert!(s.has_shape(), "learned from a chunk of one text delta");
        s.chunk(
            provider(r#"{"content":", \"you\"\n"}"#).as_bytes(),
            &mut out,
        )
        .unwrap();
        // A quote the shape cannot hold: read the long way, and right.
        s.chunk(
            provider(r#"{"content":"a","refusal":null}"#).as_bytes(),
            &mut out,
        )
        .unwrap();
        // Shaped alike, but what the shortcut does not copy as it is.
        s.chunk(provider(r#"{"content":"b"}"#).as_bytes(), &mut out)
            .unwrap();
        s.chunk(provider(r#"{"content":"\ud800"}"#).as_bytes(), &mut out)
            .unwrap();
        s.chunk(
            provider(r#"{"content":"\ud83d\ude00"}"#).as_bytes(),
            &mut out,
        )
        .unwrap();
        let mut bad = provider(r#"{"content":"cX"}"#).into_bytes();
        let at = bad.iter().position(|&b| b == b'X').unwrap();
        bad[at] = 0xff;
        s.chunk(&bad, &mut out).unwrap();
        // Reasoning after the text: a new thinking block, not the text's.
        s.chunk(
            provider(r#"{"reasoning_content":"D"}"#).as_bytes(),
            &mut out,
        )
        .unwrap();
        s.end(End::Finished(Some("stop")), None, &mut out);
        let (r, _) = reassemble(&out);
        assert_eq!(r.text, "Hi there, \"you\"\nab\u{FFFD}\u{1F600}c\u{FFFD}");
        let want = if asked.thinking { "ABCD" } else { "" };
        assert_eq!(r.thinking, want);
    }
}

mod properties {
    use proptest::prelude::*;
    use serde_json::json;

    use super::{Asked, End, MessageStream, chunk, reassemble};
    use crate::dialect::tests::{Delta, carry, chat_view, chunks, delta, style};

    /// The translation of `chunks`, with the same-shape shortcut or
    /// without.
    fn run(chunks: &[Vec<u8>], asked: &Asked, shortcut: bool) -> Vec<u8> {
        let mut s = MessageStream::new(asked.clone(), "req_8", carry());
        if !shortcut {
            s = s.without_shortcut();
        }
        let mut out = Vec::new();
        for c in chunks {
            s.chunk(c, &mut out).unwrap();
        }
        s.chunk(&chunk(json!({}), Some("stop")), &mut out).unwrap();
        s.end(End::Finished(Some("stop")), None, &mut out);
        out
    }

    proptest! {
        /// As providers stream: reasoning and text in any order, then the
        /// tool calls, their deltas interleaved in any order.
        #[test]
        fn reassembled_it_says_what_the_chat_stream_said(
            texts in proptest::collection::vec(delta().prop_filter("text", |d| matches!(d, Delta::Reasoning(_) | Delta::Text(_))), 0..12),
            calls in proptest::collection::vec(delta().prop_filter("call", |d| matches!(d, Delta::CallStart(_) | Delta::CallArgs(..))), 0..12),
            style in style(),
        ) {
            let deltas: Vec<Delta> = texts.into_iter().chain(calls).collect();
            let chunks = chunks(&deltas, style);
            let asked = Asked { thinking: true, ..Asked::default() };
            let whole = run(&chunks, &asked, true);
            // The same-shape shortcut changes nothing.
            prop_assert_eq!(&run(&chunks, &asked, false), &whole);
            let (r, _) = reassemble(&whole);
            let (reasoning, text, calls) = chat_view(&deltas);
            prop_assert_eq!(r.thinking, reasoning);
            prop_assert_eq!(r.text, text);
            let got: Vec<(String, String)> = r.calls.into_iter().map(|c| (c.1, c.2)).collect();
            let got_calls = !got.is_empty();
            prop_assert_eq!(got, calls);
            prop_assert!(r.stopped);
            // `stop` after tool calls (as some servers say it) is tool use.
            let want = if got_calls { "tool_use" } else { "end_turn" };
            prop_assert_eq!(r.stop_reason.as_deref(), Some(want));
        }

        /// Any order at all: the stream keeps its grammar (blocks one at a
        /// time, in order), and the reasoning and text are whole.
        #[test]
        fn any_order_keeps_the_grammar(
            deltas in proptest::collection::vec(delta(), 0..24),
            thinking in any::<bool>(),
            omit_thinking in any::<bool>(),
            style in style(),
        ) {
            let asked = Asked { thinking, omit_thinking, ..Asked::default() };
            let chunks = chunks(&deltas, style);
            let out = run(&chunks, &asked, true);
            prop_assert_eq!(&run(&chunks, &asked, false), &out);
            let (r, _) = reassemble(&out);
            let (reasoning, text, _) = chat_view(&deltas);
            let shown = if thinking && !omit_thinking { reasoning } else { String::new() };
            prop_assert_eq!(r.thinking, shown);
            prop_assert_eq!(r.text, text);
            prop_assert!(r.stopped);
        }
    }
}
