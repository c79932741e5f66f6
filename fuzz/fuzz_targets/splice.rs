//! A chat stream cut and finished by another request. The input is a
//! sequence of chat chunk payloads (one per line); its first byte chooses
//! how the continuing server is asked (`Continuation`) and the second
//! where the stream was cut. The chunks before the cut are what the
//! client has: recorded, they make a continuation body that is one JSON
//! object whose last message is the assistant's, holding exactly the
//! text the client has (and its reasoning when the server reads it). The
//! chunks after the cut, rewritten as a continuation's and as a
//! restart's, are each dropped, refused as a differing restart, or one
//! JSON object (when the chunk was one) that carries the first chunk's
//! id, no role and only choice 0.
#![no_main]

use chatgate_core::dialect::splice::{
    Continuation, Plan, Rewriter, Rewritten, Transcript, continuation_body,
};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const MODES: [Continuation; 5] = [
    Continuation::None,
    Continuation::Prefix,
    Continuation::Partial,
    Continuation::ContinueFinalMessage,
    Continuation::FinalAssistant,
];

const BODY: &[u8] =
    br#"{"model":"m","messages":[{"role":"user","content":"q"}],"stream":true,"n":1}"#;

fuzz_target!(|data: &[u8]| {
    let (Some(&mode), Some(&cut)) = (data.first(), data.get(1)) else {
        return;
    };
    let mode = MODES[usize::from(mode) % MODES.len()];
    let lines: Vec<&[u8]> = data[2..].split(|&b| b == b'\n').collect();
    let cut = usize::from(cut) % (lines.len() + 1);
    let mut part = Transcript::default();
    for line in &lines[..cut] {
        part.record(line);
    }
    let (text, reasoning) = (part.text(), part.reasoning_text());
    let plan = part.plan(mode);
    if mode == Continuation::None || part.has_calls() {
        assert!(matches!(plan, Plan::No(_)), "{plan:?}");
    }
    let body = continuation_body(BODY, mode, &part).expect("a chat body");
    let v: Value = serde_json::from_slice(&body).expect("the body is JSON");
    let last = v["messages"].as_array().and_then(|m| m.last()).expect("messages");
    assert_eq!(last["role"], "assistant");
    assert_eq!(last["content"].as_str(), Some(text.as_str()));
    if mode.continues_reasoning() && !reasoning.is_empty() {
        let name = if last.get("reasoning").is_some() { "reasoning" } else { "reasoning_content" };
        assert_eq!(last[name].as_str(), Some(reasoning.as_str()));
    }
    for restart in [false, true] {
        let mut r = if restart {
            Rewriter::restart(&part)
        } else {
            Rewriter::continuation(&part, mode == Continuation::FinalAssistant)
        };
        for line in &lines[cut..] {
            let is_object = serde_json::from_slice::<Value>(line).is_ok_and(|v| v.is_object());
            match r.rewrite(&part, line, None) {
                Rewritten::Drop => {}
                Rewritten::Diverged => assert!(restart, "only a restart diverges"),
                Rewritten::Chunk(c) if is_object => {
                    let out: Value = serde_json::from_slice(&c).expect("a JSON chunk");
                    let choices = out["choices"].as_array().map_or(0, Vec::len);
                    assert!(choices <= 1);
                    assert!(out["choices"][0]["delta"].get("role").is_none());
                    if choices == 1 {
                        assert_eq!(out["choices"][0]["index"], 0);
                    }
                }
                Rewritten::Chunk(c) => assert_eq!(&c[..], *line, "not an object: as it is"),
            }
        }
    }
});
