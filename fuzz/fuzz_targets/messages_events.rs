//! The chat stream as the Messages event stream. The input is a sequence
//! of chat chunk payloads (one per line), fed one per call or several per
//! call; its first byte also chooses what the request asked (thinking
//! shown, omitted or not asked for), how the stream ended (finished, with
//! or without a finish reason, or cut) and whether usage came. The output
//! is the same however the chunks are grouped and with the same-shape
//! shortcut or without, and well-formed: each event
//! `event: NAME` and one `data:` line of a JSON object whose `type` is
//! NAME, `message_start` first; content blocks opened, written and closed
//! one at a time with indexes 0, 1, 2…, each delta of its block's kind;
//! then `message_delta` and `message_stop` (or, for a cut stream, an
//! `error` event) and nothing after; nothing written once ended; every
//! thinking block signed, and its signature the gateway's for the text it
//! showed. An answer past the translation's budget ends as a cut one. The
//! same input read as a whole chat completion is a JSON message object.
#![no_main]

use chatgate_core::Usage;
use chatgate_core::dialect::End;
use chatgate_core::dialect::messages::events::{MessageStream, SIGNATURE_PREFIX, body};
use chatgate_core::dialect::messages::request::Asked;
use chatgate_fuzz::{Rng, carry};
use libfuzzer_sys::fuzz_target;

/// What the first byte chose.
#[derive(Debug, Clone, Copy)]
struct Flags {
    fail: bool,
    thinking: bool,
    omit_thinking: bool,
    /// The request named its model (else the stream has only the
    /// provider's, if any).
    model: bool,
    /// Which finish reason `end` is given, or which failure.
    reason: u8,
    usage: bool,
}

impl Flags {
    fn new(b: u8) -> Flags {
        Flags {
            fail: b & 1 == 1,
            thinking: b & 2 != 0,
            omit_thinking: b & 4 != 0,
            model: b & 8 != 0,
            reason: (b >> 4) & 3,
            usage: b & 64 != 0,
        }
    }

    fn asked(self) -> Asked {
        Asked {
            stream: true,
            thinking: self.thinking,
            omit_thinking: self.omit_thinking,
            model: if self.model {
                b"\"claude-m\"".to_vec()
            } else {
                Vec::new()
            },
        }
    }

    fn end(self) -> End<'static> {
        match (self.fail, self.reason) {
            (true, 0 | 1) => End::Failed("cut"),
            (true, 2) => End::Failed("the provider is overloaded"),
            (true, _) => End::Failed("the gateway is shutting down"),
            (false, 0) => End::Finished(None),
            (false, 1) => End::Finished(Some("stop")),
            (false, 2) => End::Finished(Some("length")),
            (false, _) => End::Finished(Some("tool_calls")),
        }
    }
}

/// The translation, and whether the answer went past the budget (then
/// ended as a cut stream, as the exchange ends it).
fn run(
    chunks: &[&[u8]],
    groups: &mut Rng,
    flags: Flags,
    usage: Option<&Usage>,
    shortcut: bool,
) -> (Vec<u8>, bool) {
    let mut s = MessageStream::new(flags.asked(), "req_1", carry());
    if !shortcut {
        s = s.without_shortcut();
    }
    let mut out = Vec::new();
    let mut i = 0;
    let mut over = false;
    'feed: while i < chunks.len() {
        let n = 1 + groups.upto(3);
        let mut part = Vec::new();
        for c in &chunks[i..(i + n).min(chunks.len())] {
            if s.chunk(c, &mut part).is_err() {
                out.extend_from_slice(&part);
                over = true;
                break 'feed;
            }
        }
        out.extend_from_slice(&part);
        i += n;
    }
    let end = if over { End::Failed("over budget") } else { flags.end() };
    s.end(end, usage, &mut out);
    let mut after = Vec::new();
    for c in chunks {
        let _ = s.chunk(c, &mut after);
    }
    s.end(End::Finished(None), usage, &mut after);
    assert!(after.is_empty(), "nothing written once ended");
    (out, over)
}

fuzz_target!(|data: &[u8]| {
    let flags = Flags::new(data.first().copied().unwrap_or(0));
    let byte = |i: usize| u64::from(data.get(i).copied().unwrap_or(0));
    let usage = Usage {
        prompt_tokens: byte(1) * 3,
        completion_tokens: data.len() as u64,
        cached_tokens: byte(2),
        cache_read_input_tokens: byte(3),
        cache_created_input_tokens: byte(4),
        ..Usage::default()
    };
    let usage = flags.usage.then_some(&usage);
    let chunks: Vec<&[u8]> = data
        .split(|&b| b == b'\n')
        .filter(|c| !c.is_empty())
        .collect();
    let (one, over) = run(&chunks, &mut Rng::from_prefix(&[0]), flags, usage, true);
    let grouped = run(&chunks, &mut Rng::from_prefix(data), flags, usage, true);
    assert_eq!((&one, over), (&grouped.0, grouped.1), "the same however the chunks are grouped");
    let slow = run(&chunks, &mut Rng::from_prefix(&[0]), flags, usage, false);
    assert_eq!((&one, over), (&slow.0, slow.1), "the same without the same-shape shortcut");
    let flags = Flags {
        fail: flags.fail || over,
        ..flags
    };
    let seal = carry().seal;

    let text = std::str::from_utf8(&one).expect("UTF-8 out");
    // The open block: its index, its kind, whether it was signed.
    let mut open: Option<(u64, String, bool)> = None;
    // The open thinking block's text, as shown.
    let mut thinking = String::new();
    let mut next = 0u64;
    let mut delta_seen = false;
    let mut ended = false;
    for (seq, frame) in text.split("\n\n").enumerate() {
        if frame.is_empty() {
            assert!(text.ends_with("\n\n") && seq == text.split("\n\n").count() - 1);
            continue;
        }
        assert!(!ended, "nothing after the last event: {frame}");
        let (event, data) = frame.split_once('\n').expect("event and data lines");
        let name = event.strip_prefix("event: ").expect("event line");
        let data = data.strip_prefix("data: ").expect("one data line");
        assert!(!data.contains('\n'), "one data line");
        let v: serde_json::Value =
            serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {data}"));
        assert_eq!(v["type"], name);
        assert_eq!(
            seq == 0,
            name == "message_start",
            "message_start first, once"
        );
        match name {
            "message_start" => {
                let m = &v["message"];
                assert_eq!(m["id"], "msg_1");
                assert_eq!(m["type"], "message");
                assert_eq!(m["role"], "assistant");
                assert!(m["model"].is_string(), "{m}");
                assert_eq!(m["content"], serde_json::json!([]));
            }
            "content_block_start" => {
                assert!(!delta_seen, "no block after message_delta");
                assert!(open.is_none(), "one block at a time");
                assert_eq!(v["index"], next, "indexes 0, 1, 2…");
                let b = &v["content_block"];
                let kind = b["type"].as_str().expect("a block type").to_owned();
                match kind.as_str() {
                    "thinking" => assert!(flags.thinking, "thinking only when asked"),
                    "text" => assert_eq!(b["text"], ""),
                    "tool_use" => {
                        assert!(b["id"].is_string() && b["name"].is_string(), "{b}");
                        assert_eq!(b["input"], serde_json::json!({}));
                    }
                    other => panic!("block {other}"),
                }
                open = Some((next, kind, false));
                next += 1;
                thinking.clear();
            }
            "content_block_delta" => {
                let (index, kind, signed) = open.as_mut().expect("a block is open");
                assert_eq!(v["index"], *index);
                assert!(!*signed, "the signature last");
                let d = &v["delta"];
                match (kind.as_str(), d["type"].as_str().expect("a delta type")) {
                    ("thinking", "thinking_delta") => {
                        assert!(!flags.omit_thinking, "thinking omitted as asked");
                        thinking += d["thinking"].as_str().expect("a string");
                    }
                    ("thinking", "signature_delta") => {
                        let sig = d["signature"].as_str().expect("a string");
                        assert!(sig.starts_with(SIGNATURE_PREFIX), "{sig}");
                        // The gateway's signature of the text it showed.
                        assert!(
                            flags.omit_thinking || seal.verify(thinking.as_bytes(), sig.as_bytes()),
                            "{sig} for {thinking:?}"
                        );
                        *signed = true;
                    }
                    ("text", "text_delta") => assert!(d["text"].is_string()),
                    ("tool_use", "input_json_delta") => assert!(d["partial_json"].is_string()),
                    other => panic!("{other:?}"),
                }
            }
            "content_block_stop" => {
                let (index, kind, signed) = open.take().expect("a block is open");
                assert_eq!(v["index"], index);
                assert!(kind != "thinking" || signed, "a thinking block signed");
            }
            "message_delta" => {
                assert!(!flags.fail, "no message_delta for a cut stream");
                assert!(open.is_none(), "every block closed before message_delta");
                assert!(!delta_seen, "one message_delta");
                delta_seen = true;
                let reason = v["delta"]["stop_reason"].as_str().expect("a stop reason");
                assert!(
                    [
                        "end_turn",
                        "stop_sequence",
                        "max_tokens",
                        "tool_use",
                        "refusal"
                    ]
                    .contains(&reason),
                    "{reason}"
                );
                let sequence = &v["delta"]["stop_sequence"];
                assert_eq!(reason == "stop_sequence", sequence.is_string(), "{v}");
                assert!(sequence.is_null() || sequence.is_string(), "{v}");
                let u = &v["usage"];
                let want = usage.copied().unwrap_or_default();
                let cached = want.cached_tokens.max(want.cache_read_input_tokens);
                assert_eq!(u["input_tokens"], want.prompt_tokens.saturating_sub(cached));
                assert_eq!(u["output_tokens"], want.completion_tokens);
                assert_eq!(u["cache_read_input_tokens"], cached);
                assert_eq!(
                    u["cache_creation_input_tokens"],
                    want.cache_created_input_tokens
                );
            }
            "message_stop" => {
                assert!(delta_seen, "message_delta before message_stop");
                ended = true;
            }
            "error" => {
                assert!(flags.fail, "an error event only for a cut stream");
                let kind = v["error"]["type"].as_str().expect("an error type");
                assert!(["api_error", "overloaded_error"].contains(&kind), "{kind}");
                assert!(v["error"]["message"].is_string());
                ended = true;
            }
            other => panic!("unknown event {other}"),
        }
    }
    assert!(ended, "a last event");
    assert!(one.ends_with(b"\n\n"));

    // The input as a whole completion.
    let message = body(flags.asked(), "req_1", carry(), data, usage);
    let m: serde_json::Value = serde_json::from_slice(&message)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&message)));
    assert_eq!(m["type"], "message");
    assert_eq!(m["role"], "assistant");
    assert!(m["model"].is_string(), "{m}");
    for b in m["content"].as_array().expect("content") {
        match b["type"].as_str().expect("a block type") {
            "thinking" => {
                assert!(flags.thinking);
                let sig = b["signature"].as_str().expect("a signature");
                let shown = b["thinking"].as_str().expect("a text");
                assert!(
                    flags.omit_thinking || seal.verify(shown.as_bytes(), sig.as_bytes()),
                    "{sig} for {shown:?}"
                );
            }
            "text" => assert!(b["text"].is_string()),
            "tool_use" => assert!(b["input"].is_object(), "{b}"),
            other => panic!("block {other}"),
        }
    }
});
