use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::usage::Usage;

/// A chunk of the stream `id` (created 7, model `m`) with `delta`.
fn chunk(id: &str, delta: Value, finish: Option<&str>) -> Vec<u8> {
    json!({"id": id, "object": "chat.completion.chunk", "created": 7, "model": "m",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    .to_string()
    .into_bytes()
}

fn parse(b: &[u8]) -> Value {
    serde_json::from_slice(b).expect("a JSON chunk")
}

/// What a chat client reads of a stream's chunks: role, reasoning, text,
/// finish, and the chunks' ids.
fn view(chunks: &[Vec<u8>]) -> (String, String, String, Option<String>, Vec<String>) {
    let (mut role, mut reasoning, mut text, mut finish, mut ids) = (
        String::new(),
        String::new(),
        String::new(),
        None,
        Vec::new(),
    );
    for c in chunks {
        let v = parse(c);
        ids.push(v["id"].as_str().unwrap_or("").to_owned());
        let choice = &v["choices"][0];
        let d = &choice["delta"];
        role += d["role"].as_str().unwrap_or("");
        reasoning += d["reasoning_content"].as_str().unwrap_or("");
        text += d["content"].as_str().unwrap_or("");
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = Some(f.to_owned());
        }
    }
    (role, reasoning, text, finish, ids)
}

fn recorded(chunks: &[Vec<u8>]) -> Transcript {
    let mut t = Transcript::default();
    for c in chunks {
        t.record(c);
    }
    t
}

#[test]
fn the_transcript_holds_what_the_client_read() {
    let t = recorded(&[
        chunk("a", json!({"role": "assistant", "content": ""}), None),
        chunk("a", json!({"reasoning_content": "th\"ink"}), None),
        chunk("a", json!({"reasoning_content": " on"}), None),
        chunk("a", json!({"content": "Hel"}), None),
        chunk("a", json!({"content": "lo \u{e9}\n"}), None),
    ]);
    assert_eq!(t.reasoning_text(), "th\"ink on");
    assert_eq!(t.text(), "Hello \u{e9}\n");
    assert_eq!(t.id.as_deref(), Some(&b"\"a\""[..]));
    assert_eq!(t.created.as_deref(), Some(&b"7"[..]));
    assert!(!t.has_calls());
    assert_eq!(t.plan(Continuation::Prefix), Plan::Continue);
    assert_eq!(t.plan(Continuation::FinalAssistant), Plan::Continue);
    assert_eq!(
        t.plan(Continuation::None),
        Plan::No("the endpoint does not continue")
    );
}

#[test]
fn a_cut_in_the_reasoning_continues_it_only_where_the_server_reads_it() {
    let t = recorded(&[chunk("a", json!({"reasoning": "half a tho"}), None)]);
    assert_eq!(t.reasoning_name(), "reasoning");
    assert_eq!(t.plan(Continuation::Prefix), Plan::Continue);
    assert_eq!(t.plan(Continuation::ContinueFinalMessage), Plan::Continue);
    assert_eq!(t.plan(Continuation::FinalAssistant), Plan::Restart);
    assert_eq!(t.plan(Continuation::Partial), Plan::Restart);
}

#[test]
fn a_cut_after_a_tool_call_began_is_not_continued() {
    let t = recorded(&[chunk(
        "a",
        json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                "function": {"name": "f", "arguments": "{\"a"}}]}),
        None,
    )]);
    assert!(t.has_calls());
    assert_eq!(
        t.plan(Continuation::Prefix),
        Plan::No("the stream was cut in a tool call")
    );
}

#[test]
fn each_server_is_asked_in_its_own_words() {
    let t = recorded(&[
        chunk("a", json!({"reasoning_content": "r\"1"}), None),
        chunk("a", json!({"content": "x\\y"}), None),
    ]);
    let body = br#"{"model":"m","messages":[{"role":"user","content":"q"}],"stream":true}"#;
    let ask = |mode| parse(&continuation_body(body, mode, &t).expect("a body"));
    let v = ask(Continuation::Prefix);
    assert_eq!(
        v["messages"][1],
        json!({"role": "assistant", "content": "x\\y", "reasoning_content": "r\"1", "prefix": true})
    );
    assert_eq!(v["stream"], true);
    let v = ask(Continuation::Partial);
    assert_eq!(
        v["messages"][1],
        json!({"role": "assistant", "content": "x\\y", "partial": true})
    );
    let v = ask(Continuation::ContinueFinalMessage);
    assert_eq!(v["continue_final_message"], true);
    assert_eq!(v["add_generation_prompt"], false);
    assert_eq!(v["messages"][1]["reasoning_content"], "r\"1");
    let v = ask(Continuation::FinalAssistant);
    assert_eq!(
        v["messages"][1],
        json!({"role": "assistant", "content": "x\\y"})
    );
    assert_eq!(v["messages"].as_array().map(Vec::len), Some(2));
    // Whitespace and an empty conversation are no trouble.
    let spaced = b" { \"messages\" : [ ] , \"model\":\"m\" } ";
    let v = parse(&continuation_body(spaced, Continuation::Prefix, &t).expect("a body"));
    assert_eq!(v["messages"][0]["prefix"], true);
    assert_eq!(
        continuation_body(b"{\"model\":\"m\"}", Continuation::Prefix, &t),
        None
    );
}

#[test]
fn a_continuation_reads_as_the_same_stream() {
    let t = recorded(&[
        chunk("first", json!({"role": "assistant", "content": ""}), None),
        chunk("first", json!({"content": "Hello"}), None),
    ]);
    let mut r = Rewriter::continuation(&t, false);
    let earlier = Usage {
        prompt_tokens: 10,
        completion_tokens: 3,
        total_tokens: 13,
        ..Usage::default()
    };
    assert_eq!(
        r.rewrite(
            &t,
            &chunk("second", json!({"role": "assistant", "content": ""}), None),
            None
        ),
        Rewritten::Drop,
        "a second role chunk"
    );
    let Rewritten::Chunk(c) = r.rewrite(
        &t,
        &chunk(
            "second",
            json!({"role": "assistant", "content": " world"}),
            None,
        ),
        None,
    ) else {
        panic!("text goes out")
    };
    let v = parse(&c);
    assert_eq!(v["id"], "first");
    assert_eq!(v["created"], 7);
    assert_eq!(v["choices"][0]["delta"], json!({"content": " world"}));
    assert!(
        c.starts_with(b"{\"id\":\"first\",\"object\":"),
        "the envelope first"
    );
    let usage = json!({"id": "second", "object": "chat.completion.chunk", "created": 9, "model": "m",
        "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25,
        "completion_tokens_details": {"reasoning_tokens": 0}}});
    let Rewritten::Chunk(c) = r.rewrite(&t, usage.to_string().as_bytes(), Some(&earlier)) else {
        panic!("usage goes out")
    };
    let v = parse(&c);
    assert_eq!(v["usage"]["prompt_tokens"], 30);
    assert_eq!(v["usage"]["completion_tokens"], 8);
    assert_eq!(v["usage"]["total_tokens"], 38);
    assert_eq!(v["id"], "first");
    // A call after the text is numbered after the client's calls (none).
    let call = chunk(
        "second",
        json!({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": ""}}]}),
        None,
    );
    let Rewritten::Chunk(c) = r.rewrite(&t, &call, None) else {
        panic!("a call goes out")
    };
    assert_eq!(
        parse(&c)["choices"][0]["delta"]["tool_calls"][0]["index"],
        0
    );
    // A model that thinks again after the text is not shown thinking.
    assert_eq!(
        r.rewrite(
            &t,
            &chunk("second", json!({"reasoning_content": "hm"}), None),
            None
        ),
        Rewritten::Drop
    );
}

#[test]
fn an_echo_of_the_part_before_the_continuation_is_taken_off() {
    let t = recorded(&[
        chunk("a", json!({"role": "assistant", "content": ""}), None),
        chunk("a", json!({"content": "1, 2, 3,"}), None),
    ]);
    let first = |text: &str| {
        let mut r = Rewriter::continuation(&t, true);
        let mut out = String::new();
        for c in [json!({"content": text}), json!({"content": " 9"})] {
            if let Rewritten::Chunk(c) = r.rewrite(&t, &chunk("b", c, None), None) {
                out += parse(&c)["choices"][0]["delta"]["content"]
                    .as_str()
                    .unwrap_or("");
            }
        }
        out
    };
    // llama.cpp's server: the part, then the rest, in its first delta.
    assert_eq!(first("1, 2, 3, 4"), " 4 9");
    assert_eq!(first("1, 2, 3,"), " 9");
    // A first delta that does not begin with all of the part is the
    // rest; a later one that repeats it is text of its own.
    assert_eq!(first(" 4, 1, 2, 3,"), " 4, 1, 2, 3, 9");
    assert_eq!(first("1, 2"), "1, 2 9", "not all of the part: its own text");
    // A server that does not echo: its first delta is its own, even when
    // it begins with the part.
    let mut r = Rewriter::continuation(&t, false);
    let Rewritten::Chunk(c) = r.rewrite(
        &t,
        &chunk("b", json!({"content": "1, 2, 3, 4"}), None),
        None,
    ) else {
        panic!("text goes out")
    };
    assert_eq!(parse(&c)["choices"][0]["delta"]["content"], "1, 2, 3, 4");
}

#[test]
fn a_restart_is_spliced_only_where_it_repeats_the_client_byte_for_byte() {
    let t = recorded(&[
        chunk(
            "a",
            json!({"role": "assistant", "reasoning_content": "think"}),
            None,
        ),
        chunk("a", json!({"content": "Hello wo"}), None),
    ]);
    let mut r = Rewriter::restart(&t);
    let mut out = Vec::new();
    for c in [
        chunk(
            "b",
            json!({"role": "assistant", "reasoning_content": "thin"}),
            None,
        ),
        chunk("b", json!({"reasoning_content": "k harder"}), None),
        chunk("b", json!({"content": "Hel"}), None),
        chunk("b", json!({"content": "lo w"}), None),
        chunk("b", json!({"content": "orld"}), None),
        chunk("b", json!({}), Some("stop")),
    ] {
        assert!(r.owes() || !out.is_empty());
        match r.rewrite(&t, &c, None) {
            Rewritten::Chunk(c) => out.push(c),
            Rewritten::Drop => {}
            Rewritten::Diverged => panic!("it repeats"),
        }
    }
    let (role, reasoning, text, finish, ids) = view(&out);
    assert_eq!(
        (role.as_str(), reasoning.as_str()),
        ("", ""),
        "no second role, no reasoning again"
    );
    assert_eq!(text, "rld");
    assert_eq!(finish.as_deref(), Some("stop"));
    assert!(ids.iter().all(|i| i == "a"));

    let mut r = Rewriter::restart(&t);
    assert_eq!(
        r.rewrite(&t, &chunk("b", json!({"content": "Hello, wo"}), None), None),
        Rewritten::Diverged
    );
    let mut r = Rewriter::restart(&t);
    assert_eq!(
        r.rewrite(&t, &chunk("b", json!({"content": "Hell"}), None), None),
        Rewritten::Drop
    );
    assert_eq!(
        r.rewrite(&t, &chunk("b", json!({}), Some("stop")), None),
        Rewritten::Diverged,
        "an answer shorter than what the client has"
    );
}

#[test]
fn a_restart_after_a_cut_in_the_reasoning_sends_only_new_reasoning() {
    let t = recorded(&[chunk("a", json!({"reasoning_content": "abc"}), None)]);
    let mut r = Rewriter::restart(&t);
    let got = |r: &mut Rewriter, delta| match r.rewrite(&t, &chunk("b", delta, None), None) {
        Rewritten::Chunk(c) => Some(parse(&c)["choices"][0]["delta"].clone()),
        Rewritten::Drop => None,
        Rewritten::Diverged => panic!("reasoning never diverges the splice"),
    };
    assert_eq!(got(&mut r, json!({"reasoning_content": "ab"})), None);
    assert_eq!(
        got(&mut r, json!({"reasoning_content": "cde"})),
        Some(json!({"reasoning_content": "de"}))
    );
    let mut r = Rewriter::restart(&t);
    assert_eq!(
        got(&mut r, json!({"reasoning_content": "xyz"})),
        None,
        "another chain"
    );
    assert_eq!(got(&mut r, json!({"reasoning_content": "more"})), None);
    assert_eq!(
        got(&mut r, json!({"content": "Answer"})),
        Some(json!({"content": "Answer"}))
    );
}

proptest! {
    /// A stream cut anywhere in its reasoning or text and finished by a
    /// continuation of the rest (as the simulator continues) reads, to a
    /// client, as the uncut stream: one role, one id, the same reasoning,
    /// text and finish.
    #[test]
    fn a_continued_stream_reads_as_the_uncut_one(
        reasoning in proptest::collection::vec("[a-z \"\\\\\u{e9}]{1,4}", 0..5),
        text in proptest::collection::vec("[a-z \"\\\\\n\u{1F600}]{1,4}", 1..5),
        cut in 0usize..12,
        prefix in any::<bool>(),
    ) {
        // The final_assistant servers (llama.cpp's) echo the part first.
        let echo = !prefix;
        let mut whole = vec![chunk("a", json!({"role": "assistant", "content": ""}), None)];
        whole.extend(reasoning.iter().map(|r| chunk("a", json!({"reasoning_content": r}), None)));
        whole.extend(text.iter().map(|t| chunk("a", json!({"content": t}), None)));
        whole.push(chunk("a", json!({}), Some("stop")));
        let cut = 1 + cut % (whole.len() - 1);
        let sent = &whole[..cut];
        let part = recorded(sent);
        let mode = if prefix { Continuation::Prefix } else { Continuation::FinalAssistant };
        let plan = part.plan(mode);
        let mut r = match plan {
            Plan::Continue => Rewriter::continuation(&part, echo),
            Plan::Restart => Rewriter::restart(&part),
            Plan::No(why) => panic!("{why}"),
        };
        // What the continuing server sends: the rest, in its own chunks
        // (another id, a role first); a restart sends it all again.
        let rest: Vec<Vec<u8>> = match plan {
            Plan::Restart => whole.iter().map(|c| {
                let mut v = parse(c);
                v["id"] = json!("b");
                v.to_string().into_bytes()
            }).collect(),
            _ => {
                // A server that echoes the part sends it before its first
                // text (llama.cpp's, in one delta).
                let mut echoed = !echo;
                std::iter::once(chunk("b", json!({"role": "assistant", "content": ""}), None))
                    .chain(whole[cut..].iter().map(|c| {
                        let mut v = parse(c);
                        v["id"] = json!("b");
                        if let Some(t) = v["choices"][0]["delta"]["content"].as_str()
                            && !t.is_empty()
                            && !std::mem::replace(&mut echoed, true)
                        {
                            v["choices"][0]["delta"]["content"] = json!(format!("{}{t}", part.text()));
                        }
                        v.to_string().into_bytes()
                    }))
                    .collect()
            }
        };
        let mut client = sent.to_vec();
        for c in &rest {
            match r.rewrite(&part, c, None) {
                Rewritten::Chunk(c) => client.push(c),
                Rewritten::Drop => {}
                Rewritten::Diverged => panic!("the same answer"),
            }
        }
        prop_assert_eq!(view(&client), view(&whole));
    }
}
