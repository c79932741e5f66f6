//! The chat stream as Gemini responses. The input is a sequence of chat
//! chunk payloads (one per line), fed one per call or several per call;
//! its first byte also chooses what the request asked (thoughts shown or
//! not, SSE or a JSON array), how the stream ended (finished, with or
//! without a finish reason, or cut) and whether usage came. The output is
//! the same however the chunks are grouped and with the same-shape
//! shortcut or without, and well-formed: with SSE, `data: ` and one line
//! of JSON and `\r\n\r\n` for each response, and for a cut stream one
//! bare error line last; without, one JSON array, a cut stream's error its
//! last element. Each response has one candidate of the model's role
//! whose parts are texts (thoughts only when asked) and function calls
//! with object `args`; only the last has a `finishReason` and the usage
//! (as given), and only when the stream finished; nothing is written once
//! ended. A call's `thoughtSignature`, sent back in a model turn with
//! replay on, gives that turn the reasoning shown before it. The same
//! input read as a whole chat completion is one such response.
#![no_main]

use chatgate_core::Usage;
use chatgate_core::dialect::End;
use chatgate_core::dialect::gemini::events::{GeminiStream, body};
use chatgate_core::dialect::gemini::request::{Asked, translate};
use chatgate_fuzz::{Rng, carry};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

/// What the first byte chose.
#[derive(Debug, Clone, Copy)]
struct Flags {
    fail: bool,
    thoughts: bool,
    sse: bool,
    /// Which finish reason `end` is given, or which failure.
    reason: u8,
    usage: bool,
}

impl Flags {
    fn new(b: u8) -> Flags {
        Flags {
            fail: b & 1 == 1,
            thoughts: b & 2 != 0,
            sse: b & 4 == 0,
            reason: (b >> 4) & 3,
            usage: b & 64 != 0,
        }
    }

    fn asked(self, stream: bool) -> Asked {
        Asked {
            model: b"\"gemini-m\"".to_vec(),
            stream,
            sse: stream && self.sse,
            thoughts: self.thoughts,
        }
    }

    fn end(self) -> End<'static> {
        match (self.fail, self.reason) {
            (true, 0 | 1) => End::Failed("cut"),
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
    let mut s = GeminiStream::new(flags.asked(true), "req_1", carry());
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

/// The responses (and the error, last) the output holds, as a client
/// reads them.
fn objects(out: &[u8], sse: bool) -> Vec<Value> {
    let text = std::str::from_utf8(out).expect("UTF-8 out");
    if !sse {
        let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        return v.as_array().expect("a JSON array").clone();
    }
    let mut all = Vec::new();
    let mut rest = text;
    while let Some(event) = rest.strip_prefix("data: ") {
        let (data, after) = event.split_once("\r\n\r\n").expect("an event's blank line");
        assert!(!data.contains('\n'), "one line of data");
        all.push(serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {data}")));
        rest = after;
    }
    if !rest.is_empty() {
        let line = rest.strip_suffix('\n').expect("a bare error line, last");
        assert!(!line.contains('\n'), "one line");
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v.get("error").is_some(), "{v}");
        all.push(v);
    }
    all
}

/// One response's parts checked; the text of its thoughts, and its first
/// call's signature.
fn parts(v: &Value, flags: Flags) -> (String, Option<String>) {
    let c = &v["candidates"][0];
    assert_eq!(c["index"], 0, "{v}");
    assert_eq!(c["content"]["role"], "model", "{v}");
    assert!(v["modelVersion"].is_string() && v["responseId"] == "1", "{v}");
    let mut thoughts = String::new();
    let mut signature = None;
    for p in c["content"]["parts"].as_array().expect("parts") {
        if let Some(f) = p.get("functionCall") {
            assert!(f["id"].as_str().is_some_and(|id| !id.is_empty()), "{p}");
            assert!(f["name"].is_string() && f["args"].is_object(), "{p}");
            if let Some(s) = p.get("thoughtSignature") {
                assert!(signature.is_none(), "one signature");
                signature = Some(s.as_str().expect("a string").to_owned());
            }
        } else {
            let t = p["text"].as_str().expect("a text part");
            assert!(!t.is_empty(), "{p}");
            if p.get("thought").is_some() {
                assert!(flags.thoughts, "thoughts only when asked");
                assert_eq!(p["thought"], true);
                thoughts += t;
            }
        }
    }
    (thoughts, signature)
}

/// The reasoning a `thoughtSignature` gives a model turn sent back.
fn replayed(signature: &str) -> Option<Value> {
    let turn = json!({"contents": [
        {"role": "user", "parts": [{"text": "go"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}, "thoughtSignature": signature}]}
    ]});
    let (chat, _) = translate(turn.to_string().as_bytes(), "m", false, false, Some(&carry().seal))
        .expect("a valid turn");
    let v: Value = serde_json::from_slice(&chat).expect("JSON");
    v["messages"][1].get("reasoning_content").cloned()
}

fuzz_target!(|data: &[u8]| {
    let flags = Flags::new(data.first().copied().unwrap_or(0));
    let byte = |i: usize| u64::from(data.get(i).copied().unwrap_or(0));
    let usage = Usage {
        prompt_tokens: byte(1) * 3,
        completion_tokens: data.len() as u64,
        reasoning_tokens: byte(2),
        cached_tokens: byte(3),
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
    let fail = flags.fail || over;

    let all = objects(&one, flags.sse);
    assert!(!all.is_empty(), "a last output");
    let (last, responses) = all.split_last().expect("one at least");
    let mut shown = String::new();
    let mut signature = None;
    // Every response, the last one too when the stream finished.
    let finished = if fail { responses } else { &all[..] };
    for v in finished {
        assert!(v.get("error").is_none(), "an error only last: {v}");
        let (thoughts, signed) = parts(v, flags);
        let is_last = std::ptr::eq(v, last);
        assert_eq!(v["candidates"][0].get("finishReason").is_some(), is_last, "{v}");
        assert_eq!(v.get("usageMetadata").is_some(), is_last, "{v}");
        if signature.is_none() {
            shown += &thoughts;
            signature = signed;
        }
    }
    if fail {
        let e = &last["error"];
        assert!([500, 503].contains(&e["code"].as_u64().expect("a code")), "{e}");
        assert!(e["status"].is_string() && e["message"].is_string(), "{e}");
    } else {
        let reason = last["candidates"][0]["finishReason"].as_str().expect("a finish");
        assert!(["STOP", "MAX_TOKENS", "SAFETY", "OTHER"].contains(&reason), "{reason}");
        let u = &last["usageMetadata"];
        let want = usage.copied().unwrap_or_default();
        let thoughts = want.reasoning_tokens.min(want.completion_tokens);
        assert_eq!(u["promptTokenCount"], want.prompt_tokens);
        assert_eq!(u["candidatesTokenCount"], want.completion_tokens - thoughts);
        assert_eq!(u["totalTokenCount"], want.prompt_tokens + want.completion_tokens);
    }
    // The signature carries the reasoning shown before its call.
    if let Some(s) = signature {
        let reasoning = replayed(&s).expect("the gateway's own signature opens");
        if flags.thoughts {
            assert_eq!(reasoning, Value::String(shown), "the reasoning shown");
        }
    }

    // The input as a whole completion.
    let whole = body(flags.asked(false), "req_1", carry(), data, usage);
    let v: Value = serde_json::from_slice(&whole)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&whole)));
    let (_, signature) = parts(&v, flags);
    assert!(v["candidates"][0]["finishReason"].is_string(), "{v}");
    assert!(v["usageMetadata"]["totalTokenCount"].is_u64(), "{v}");
    if let Some(s) = signature {
        assert!(replayed(&s).is_some(), "the gateway's own signature opens");
    }
});
