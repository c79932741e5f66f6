//! Reasoning carried by clients between turns. Any bytes as a signature or
//! as sealed reasoning are refused without a panic. A thinking text from
//! the input, signed, comes back as its assistant message's reasoning
//! exactly when neither the text nor the signature changed; sealed, the
//! same through a Responses reasoning item. Any body read as a request's
//! assistant turns and written for every replay mode and field stays the
//! JSON it was, with as many messages (and any other bytes are read
//! without a panic).
#![no_main]

use chatgate_core::dialect::{messages, responses};
use chatgate_core::reasoning::{ReasoningField, ReplayMode, ReplayPlan};
use chatgate_fuzz::seal;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

/// `s` with the byte at `at` (of its length) changed, when `tamper`.
fn changed(s: &str, tamper: bool, at: usize) -> String {
    if !tamper || s.is_empty() {
        return s.to_owned();
    }
    let mut b = s.as_bytes().to_vec();
    let i = at % b.len();
    b[i] = if b[i] == b'A' { b'B' } else { b'A' };
    String::from_utf8_lossy(&b).into_owned()
}

/// The reasoning the translated request's assistant message carries.
fn reasoning_of(chat: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(chat).expect("the chat request is JSON");
    v["messages"]
        .as_array()?
        .iter()
        .find(|m| m["role"] == "assistant")?
        .get("reasoning_content")
        .map(|r| r.as_str().expect("a string").to_owned())
}

fuzz_target!(|data: &[u8]| {
    let seal = seal();
    let flags = data.first().copied().unwrap_or(0);
    let at = data.get(1).copied().unwrap_or(0) as usize;
    let rest = data.get(2..).unwrap_or_default();
    let (text, junk) = match rest.iter().position(|&b| b == 0xff) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let text = String::from_utf8_lossy(text).into_owned();

    // Anything else is no signature and no sealed reasoning.
    assert!(!seal.verify(text.as_bytes(), junk) || junk == seal.sign(text.as_bytes()).as_bytes());
    if let Some(opened) = seal.open(junk) {
        assert_eq!(seal.seal(&opened).as_bytes(), junk, "only what it sealed opens");
    }

    // A signed thinking block, changed or not.
    let (tamper_text, tamper_sig) = (flags & 1 != 0, flags & 2 != 0);
    let signature = seal.sign(text.as_bytes());
    let sent_text = changed(&text, tamper_text, at);
    let sent_sig = changed(&signature, tamper_sig, at);
    let body = json!({"model": "m", "max_tokens": 10, "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": sent_text, "signature": sent_sig},
            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}]});
    let (chat, _) = messages::request::translate(body.to_string().as_bytes(), Some(&seal))
        .expect("a valid Messages request");
    let intact = sent_text == text && sent_sig == signature && !text.is_empty();
    assert_eq!(reasoning_of(&chat).as_deref(), intact.then_some(text.as_str()));

    // A sealed reasoning item, changed or not.
    let sealed = seal.seal(text.as_bytes());
    let sent = changed(&sealed, tamper_sig, at);
    let body = json!({"model": "m", "input": [
        {"type": "message", "role": "user", "content": "go"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "a summary"}], "encrypted_content": sent},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}]});
    let (chat, _) = responses::request::translate(body.to_string().as_bytes(), Some(&seal), None)
        .expect("a valid Responses request");
    let intact = sent == sealed && !text.is_empty();
    assert_eq!(reasoning_of(&chat).as_deref(), intact.then_some(text.as_str()));

    // Any body's turns, written for every mode and field.
    let plan = ReplayPlan::read(junk);
    let was: Option<Value> = serde_json::from_slice(junk).ok();
    for mode in [ReplayMode::Strip, ReplayMode::ToolCalls, ReplayMode::All] {
        for field in [ReasoningField::ReasoningContent, ReasoningField::Reasoning] {
            let applied = plan.apply(junk, mode, field);
            // A body that is not JSON is no request the validator let
            // through: reading it must only not panic.
            let (Some(out), Some(was)) = (applied.body, was.as_ref()) else {
                continue;
            };
            let now: Value = serde_json::from_slice(&out)
                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)));
            assert_eq!(
                now["messages"].as_array().map(Vec::len),
                was["messages"].as_array().map(Vec::len),
                "the same messages"
            );
        }
    }
});
