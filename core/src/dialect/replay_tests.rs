//! Reasoning through the dialects, both ways: what the answer's
//! translation gives the client to carry (a signed thinking block, a
//! sealed reasoning item) and what the request's translation makes of it
//! when it comes back; the provider's three names for reasoning; member
//! names escaped; and the budget every translator keeps.

use serde_json::{Value, json};

use crate::dialect::tests::{PLAIN, Style, carry, chunk, styled};
use crate::dialect::{End, MAX_ITEMS, messages, responses};

fn messages_request(body: &Value) -> Value {
    let seal = carry().seal;
    let (out, _) = messages::request::translate(body.to_string().as_bytes(), Some(&seal))
        .unwrap_or_else(|e| panic!("{e:?}"));
    serde_json::from_slice(&out).unwrap()
}

fn responses_request(body: &Value) -> Value {
    let seal = carry().seal;
    let (out, _) = responses::request::translate(body.to_string().as_bytes(), Some(&seal), None)
        .unwrap_or_else(|e| panic!("{e:?}"));
    serde_json::from_slice(&out).unwrap()
}

/// A Messages conversation whose assistant turn holds `thinking` and a
/// tool call.
fn with_thinking(thinking: Value) -> Value {
    json!({"model": "m", "max_tokens": 100, "messages": [
        {"role": "user", "content": "run it"},
        {"role": "assistant", "content": [thinking,
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}]})
}

#[test]
fn a_thinking_block_the_gateway_signed_goes_back_as_reasoning() {
    // The answer's translation signs the thinking it shows...
    let asked = messages::request::Asked {
        thinking: true,
        ..Default::default()
    };
    let mut s = messages::events::MessageStream::new(asked, "req_1", carry());
    let mut out = Vec::new();
    for c in [
        chunk(
            json!({"reasoning_content": "I should list \"files\" \u{e9}"}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "toolu_1", "function": {"name": "Bash", "arguments": "{}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
    ] {
        s.chunk(&c, &mut out).unwrap();
    }
    s.end(End::Finished(Some("tool_calls")), None, &mut out);
    let (r, _) = crate::dialect::messages::tests::events::reassemble(&out);
    // ...and the block the client sends back unchanged is the reasoning.
    let v = messages_request(&with_thinking(
        json!({"type": "thinking", "thinking": r.thinking, "signature": r.signature}),
    ));
    assert_eq!(
        v["messages"][1]["reasoning_content"],
        "I should list \"files\" \u{e9}"
    );
    assert_eq!(v["messages"][1]["tool_calls"][0]["id"], "toolu_1");
}

#[test]
fn a_foreign_changed_or_unsigned_thinking_block_is_left_out_not_refused() {
    let seal = carry().seal;
    let good = seal.sign(b"mine");
    for thinking in [
        // Another provider's signature (a conversation begun elsewhere).
        json!({"type": "thinking", "thinking": "mine", "signature": "ErUBCkYIARgCIkA..."}),
        // The text changed under the gateway's signature.
        json!({"type": "thinking", "thinking": "not mine", "signature": good}),
        // No signature, an empty one, another secret's.
        json!({"type": "thinking", "thinking": "mine"}),
        json!({"type": "thinking", "thinking": "mine", "signature": ""}),
        json!({"type": "thinking", "thinking": "mine",
               "signature": crate::reasoning::ReasoningSeal::new(b"another deployment's secret, 32 bytes+").sign(b"mine")}),
        json!({"type": "redacted_thinking", "data": "abc"}),
    ] {
        let v = messages_request(&with_thinking(thinking.clone()));
        assert!(
            v["messages"][1].get("reasoning_content").is_none(),
            "{thinking}"
        );
        assert_eq!(v["messages"][1]["tool_calls"][0]["id"], "toolu_1");
    }
    // Without replay (no model replays reasoning), even a good block is
    // left out, as the specification has it.
    let body = with_thinking(json!({"type": "thinking", "thinking": "mine", "signature": good}));
    let (out, _) = messages::request::translate(body.to_string().as_bytes(), None).unwrap();
    assert!(
        !String::from_utf8(out)
            .unwrap()
            .contains("reasoning_content")
    );
}

/// The Responses events of one answer whose reasoning is `reasoning`
/// and which calls one function.
fn sealed_answer(reasoning: &str, encrypted: bool) -> Vec<Value> {
    let asked = responses::request::Asked {
        encrypted_reasoning: encrypted,
        ..Default::default()
    };
    let mut s = responses::events::ResponseStream::new(asked, "req_2", 1, carry());
    let mut out = Vec::new();
    for c in [
        chunk(json!({"reasoning_content": reasoning}), None),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "shell", "arguments": "{}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
    ] {
        s.chunk(&c, &mut out).unwrap();
    }
    s.end(End::Finished(Some("tool_calls")), None, &mut out);
    let text = String::from_utf8(out).unwrap();
    text.split("\n\n")
        .filter(|b| !b.is_empty())
        .map(|b| serde_json::from_str(b.split_once("data: ").unwrap().1).unwrap())
        .collect()
}

/// The output items of the answer's `response.completed`.
fn output(events: &[Value]) -> Vec<Value> {
    events.last().unwrap()["response"]["output"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn a_reasoning_item_the_gateway_sealed_goes_back_as_reasoning() {
    let events = sealed_answer("think \"hard\" \u{1F600}", true);
    let items = output(&events);
    let sealed = items[0]["encrypted_content"].as_str().unwrap();
    assert!(sealed.starts_with(crate::reasoning::SEALED_PREFIX));
    // The item as `.done` showed it is the one the response holds.
    let done = events
        .iter()
        .find(|e| e["type"] == "response.output_item.done" && e["item"]["type"] == "reasoning")
        .unwrap();
    assert_eq!(done["item"]["encrypted_content"], sealed);
    let added = events
        .iter()
        .find(|e| e["type"] == "response.output_item.added" && e["item"]["type"] == "reasoning")
        .unwrap();
    assert_eq!(added["item"]["encrypted_content"], Value::Null);
    // Codex sends the items back as it got them (without their ids), with
    // the summary replaced: only the sealed text counts.
    let mut reasoning = items[0].clone();
    reasoning.as_object_mut().unwrap().remove("id");
    reasoning["summary"] = json!([{"type": "summary_text", "text": "a summary"}]);
    let v = responses_request(&json!({"model": "m", "input": [
        {"type": "message", "role": "user", "content": "go"},
        reasoning, items[1],
        {"type": "function_call_output", "call_id": "call_1", "output": "done"}]}));
    assert_eq!(
        v["messages"][1]["reasoning_content"],
        "think \"hard\" \u{1F600}"
    );
    assert_eq!(v["messages"][1]["tool_calls"][0]["id"], "call_1");
    // Without `include`, no sealed text: the summary is replayed.
    let plain = output(&sealed_answer("r", false));
    assert!(plain[0].get("encrypted_content").is_none());
    let v = responses_request(&json!({"model": "m", "input": [
        {"type": "message", "role": "user", "content": "go"},
        plain[0], plain[1]]}));
    assert_eq!(v["messages"][1]["reasoning_content"], "r");
}

#[test]
fn a_tampered_or_foreign_sealed_item_is_left_out_not_refused() {
    let items = output(&sealed_answer("secret plan", true));
    let sealed = items[0]["encrypted_content"].as_str().unwrap();
    let mut tampered = sealed.to_owned().into_bytes();
    let at = tampered.len() - 5;
    tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
    for encrypted in [
        String::from_utf8(tampered).unwrap(),
        "gAAAAABoOpenAIsOwnEncryptedReasoning==".to_owned(),
        crate::reasoning::ReasoningSeal::new(b"another deployment's secret, 32 bytes+")
            .seal(b"secret plan"),
    ] {
        let v = responses_request(&json!({"model": "m", "input": [
            {"type": "message", "role": "user", "content": "go"},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "secret plan"}],
             "encrypted_content": encrypted},
            items[1]]}));
        assert!(
            v["messages"][1].get("reasoning_content").is_none(),
            "{encrypted}"
        );
        assert_eq!(v["messages"][1]["tool_calls"][0]["id"], "call_1");
    }
}

#[test]
fn reasoning_items_join_the_assistant_message_that_follows_them() {
    let v = responses_request(&json!({"model": "m", "input": [
        {"type": "message", "role": "user", "content": "go"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "one"}], "content": null, "encrypted_content": null},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "I'll run it"}]},
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "two"}]},
        {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "three"}]},
        {"type": "function_call", "call_id": "c2", "name": "shell", "arguments": "{}"}]}));
    let m = &v["messages"];
    assert_eq!(m[1]["content"], "I'll run it");
    assert_eq!(m[1]["reasoning_content"], "onetwo");
    assert_eq!(m[1]["tool_calls"][0]["id"], "c1");
    assert_eq!(m[3]["reasoning_content"], "three");
    assert_eq!(m[3]["tool_calls"][0]["id"], "c2");
}

/// A whole completion whose reasoning is under `name`, its member names
/// escaped.
fn completion(reasoning: Value, finish: &str) -> Vec<u8> {
    let c = json!({"id": "x", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "answer"}, "finish_reason": finish}]});
    let mut c = c;
    for (k, v) in reasoning.as_object().unwrap() {
        c["choices"][0]["message"][k] = v.clone();
    }
    styled(
        c.to_string().into_bytes(),
        Style {
            escaped: true,
            ..PLAIN
        },
    )
}

#[test]
fn escaped_names_and_every_reasoning_name_read_the_same_in_both_dialects() {
    for reasoning in [
        json!({"reasoning_content": "because"}),
        json!({"reasoning": "because"}),
        json!({"reasoning_details": [{"type": "reasoning.text", "text": "be"},
                                     {"type": "reasoning.encrypted", "data": "xyz"},
                                     {"type": "reasoning.text", "text": "cause"}]}),
        // OpenRouter's habit: the text twice, as a string and in details.
        json!({"reasoning": "because", "reasoning_details": [{"type": "reasoning.text", "text": "because"}]}),
    ] {
        let body = completion(reasoning.clone(), "length");
        let text = String::from_utf8_lossy(&body).into_owned();
        assert!(text.contains("fin\\u0069sh_reason"), "{text}");
        let asked = messages::request::Asked {
            thinking: true,
            ..Default::default()
        };
        let m: Value = serde_json::from_slice(&messages::events::body(
            asked,
            "req_1",
            carry(),
            &body,
            None,
        ))
        .unwrap();
        assert_eq!(m["stop_reason"], "max_tokens", "{text}");
        assert_eq!(m["content"][0]["type"], "thinking", "{text}");
        assert_eq!(m["content"][0]["thinking"], "because", "{text}");
        assert!(carry().seal.verify(
            b"because",
            m["content"][0]["signature"].as_str().unwrap().as_bytes()
        ));
        assert_eq!(m["content"][1]["text"], "answer", "{text}");
        let r: Value = serde_json::from_slice(&responses::events::body(
            Default::default(),
            "req_1",
            1,
            carry(),
            &body,
            None,
        ))
        .unwrap();
        assert_eq!(r["status"], "incomplete", "{text}");
        assert_eq!(r["output"][0]["summary"][0]["text"], "because", "{text}");
        assert_eq!(r["output"][1]["content"][0]["text"], "answer", "{text}");
    }
}

#[test]
fn every_translator_fails_a_stream_past_its_budget() {
    let call = |i: usize| {
        chunk(
            json!({"tool_calls": [{"index": i, "id": format!("c{i}"), "function": {"name": "f", "arguments": "{}"}}]}),
            None,
        )
    };
    let mut r = responses::events::ResponseStream::new(Default::default(), "req_1", 1, carry());
    let mut m = messages::events::MessageStream::new(Default::default(), "req_1", carry());
    let mut out = Vec::new();
    let (mut r_failed, mut m_failed) = (None, None);
    for i in 0..MAX_ITEMS + 5 {
        if r_failed.is_none() && r.chunk(&call(i), &mut out).is_err() {
            r_failed = Some(i);
        }
        if m_failed.is_none() && m.chunk(&call(i), &mut out).is_err() {
            m_failed = Some(i);
        }
    }
    assert_eq!(r_failed, Some(MAX_ITEMS));
    assert_eq!(m_failed, Some(MAX_ITEMS));
    // Text without end: a Responses item keeps all of it for its `done`.
    let mut r = responses::events::ResponseStream::new(Default::default(), "req_1", 1, carry());
    let big = "x".repeat(1 << 20);
    let failed = (0..20).any(|_| {
        r.chunk(&chunk(json!({"content": big}), None), &mut Vec::new())
            .is_err()
    });
    assert!(failed);
}

#[test]
fn replay_refuses_nothing_that_replay_off_accepts() {
    // Found by the fuzzer: a reasoning item whose `encrypted_content` is
    // not a string was refused with replay on, and accepted (left out)
    // with it off. Malformed reasoning items, and an `include` that is no
    // list of names, are left out either way.
    for body in [
        json!({"model": "m", "input": [{"type": "reasoning", "encrypted_content": true},
               {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]}),
        json!({"model": "m", "input": [{"type": "reasoning", "summary": "not a list"}]}),
        json!({"model": "m", "input": [{"type": "reasoning", "summary": [1, {"text": 2}]}]}),
        json!({"model": "m", "input": "hi", "include": "reasoning.encrypted_content"}),
        json!({"model": "m", "input": "hi", "include": [7]}),
    ] {
        let text = body.to_string();
        let off = responses::request::translate(text.as_bytes(), None, None);
        let on = responses::request::translate(text.as_bytes(), Some(&carry().seal), None);
        assert!(off.is_ok(), "{body}: {off:?}");
        assert_eq!(off.map(|o| o.0), on.map(|o| o.0), "{body}");
    }
}

mod recorder {
    use proptest::prelude::*;

    use crate::dialect::chunk::{AnswerRecorder, record_chunk};
    use crate::dialect::tests::{Delta, chat_view, chunks, delta, style};
    use crate::reasoning::AnswerReasoning;

    proptest! {
        /// The chat path's reader keeps what a client reads of the
        /// reasoning, and each call's id, whatever the provider names
        /// reasoning and however it writes its names; its same-shape
        /// shortcut reads what walking every chunk reads.
        #[test]
        fn it_keeps_the_reasoning_and_calls_a_chat_client_reads(
            deltas in proptest::collection::vec(delta(), 0..24),
            style in style(),
        ) {
            let chunks = chunks(&deltas, style);
            let mut fast = AnswerRecorder::default();
            let mut slow = AnswerReasoning::new();
            for c in &chunks {
                fast.chunk(c);
                record_chunk(c, &mut slow);
            }
            let fast = fast.into_log();
            let (reasoning, _, _) = chat_view(&deltas);
            prop_assert_eq!(fast.text(), Some(reasoning.as_bytes()));
            prop_assert_eq!(slow.text(), Some(reasoning.as_bytes()));
            prop_assert_eq!(fast.calls(), slow.calls());
            let starts = deltas.iter().filter(|d| matches!(d, Delta::CallStart(_))).count();
            prop_assert_eq!(fast.calls().len(), starts);
        }
    }
}
