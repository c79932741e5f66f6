//! The planned responses, read back as a client reads them: shapes,
//! lengths, tool rounds, faults, continuation.

use super::*;
use chatgate_core::SseFramer;
use chatgate_core::{EventKind, StreamTracker};

fn events_of(plan: &Plan) -> Vec<Vec<u8>> {
    plan.pieces
        .iter()
        .filter_map(|p| match p {
            Piece::Event(e) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

fn track(plan: &Plan) -> (Vec<EventKind>, StreamTracker, String, String) {
    let all: Vec<u8> = events_of(plan).concat();
    let mut f = SseFramer::new(1 << 22);
    let mut t = StreamTracker::new();
    let mut kinds = Vec::new();
    let mut reasoning = String::new();
    let mut content = String::new();
    while let Some(r) = f.next_event(&all).unwrap() {
        let ev = &all[r];
        kinds.push(t.observe(ev));
        if let Some(json) = ev.strip_prefix(b"data: ")
            && let Ok(v) = serde_json::from_slice::<Value>(json)
            && let Some(d) = v["choices"].get(0).map(|c| &c["delta"])
        {
            reasoning.push_str(d["reasoning_content"].as_str().unwrap_or(""));
            content.push_str(d["content"].as_str().unwrap_or(""));
        }
    }
    (kinds, t, reasoning, content)
}

/// A prompt cache that has seen nothing.
fn no_cache(_: &[u64]) -> usize {
    0
}

/// [`plan_chat`] by a simulator that made no tool call before.
fn chat_plan(
    body: &[u8],
    opts: &SimOptions,
    created: u64,
    seq: u64,
    seen: impl FnOnce(&[u64]) -> usize,
) -> Plan {
    plan_chat(body, opts, created, seq, seen, |_| None)
}

const ASK: &str = r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":"What is two plus two?"}],"stream":true,"stream_options":{"include_usage":true}}"#;

#[test]
fn stream_shape_follows_the_spec() {
    let plan = chat_plan(ASK.as_bytes(), &SimOptions::default(), 1000, 1, no_cache);
    assert_eq!(
        plan,
        chat_plan(ASK.as_bytes(), &SimOptions::default(), 1000, 1, no_cache),
        "deterministic"
    );
    let evs = events_of(&plan);
    let first: Value = serde_json::from_slice(&evs[0][6..]).unwrap();
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    assert!(first["choices"][0]["delta"]["reasoning_content"].is_string());
    let (kinds, t, reasoning, content) = track(&plan);
    assert_eq!(kinds.last(), Some(&EventKind::Done));
    assert_eq!(t.finish_reason(), Some("stop"));
    assert!(
        content.starts_with("You said: What is two plus two?"),
        "{content}"
    );
    assert!(!reasoning.is_empty());
    let u = t.usage().unwrap();
    assert_eq!(
        u.completion_tokens,
        u.reasoning_tokens + content.split_whitespace().count() as u64
    );
    // The usage chunk is the event before [DONE] and has empty choices.
    let usage_chunk: Value = serde_json::from_slice(&evs[evs.len() - 2][6..]).unwrap();
    assert_eq!(usage_chunk["choices"], serde_json::json!([]));
    let finish_chunk: Value = serde_json::from_slice(&evs[evs.len() - 3][6..]).unwrap();
    assert_eq!(finish_chunk["choices"][0]["delta"], serde_json::json!({}));
}

#[test]
fn length_with_empty_content() {
    let body = ASK.replace("\"stream\":true", "\"stream\":true,\"max_tokens\":5");
    let (_, t, reasoning, content) = track(&chat_plan(
        body.as_bytes(),
        &SimOptions::default(),
        0,
        1,
        no_cache,
    ));
    assert_eq!(t.finish_reason(), Some("length"));
    assert_eq!(content, "");
    assert_eq!(reasoning.split_whitespace().count(), 5);
    assert_eq!(t.usage().unwrap().completion_tokens, 5);
}

#[test]
fn tool_round_trip() {
    let body = r#"{"model":"m","messages":[{"role":"user","content":"weather in Paris"}],
        "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]}"#;
    let plan = chat_plan(body.as_bytes(), &SimOptions::default(), 0, 1, no_cache);
    let v: Value = serde_json::from_slice(&events_of(&plan)[0]).unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args["city"], "weather in Paris");
    let body2 = r#"{"model":"m","messages":[{"role":"user","content":"weather in Paris"},
        {"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},
        {"role":"tool","tool_call_id":"c","content":"sunny 21C"}],
        "tools":[{"type":"function","function":{"name":"get_weather"}}]}"#;
    let plan = chat_plan(body2.as_bytes(), &SimOptions::default(), 0, 1, no_cache);
    let v: Value = serde_json::from_slice(&events_of(&plan)[0]).unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert!(
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .starts_with("The tool returned: sunny 21C")
    );
}

#[test]
fn cached_tokens_are_the_seen_prefix_tokens_never_the_template() {
    let body = r#"{"model":"m","messages":[{"role":"user","content":"abcdefgh"},{"role":"assistant","content":"ok"},{"role":"user","content":"more"}]}"#;
    let opts = SimOptions {
        template_tokens: 40,
        ..SimOptions::default()
    };
    let usage = |seen: usize| {
        let mut asked = Vec::new();
        let plan = chat_plan(body.as_bytes(), &opts, 0, 1, |p: &[u64]| {
            asked = p.to_vec();
            seen
        });
        assert_eq!(asked.len(), 3, "one fingerprint per prefix");
        assert_eq!(plan.prefixes, asked, "all of them to remember");
        let v: Value = serde_json::from_slice(&events_of(&plan)[0]).unwrap();
        let u = &v["usage"];
        assert_eq!(
            u["prompt_tokens_details"]["cached_tokens"],
            u["cache_read_input_tokens"]
        );
        (
            u["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap(),
            u["prompt_tokens"].as_u64().unwrap(),
        )
    };
    // 3 + (4 + 2), + (4 + 1), + (4 + 1), + the template's 40.
    assert_eq!(usage(0), (0, 59));
    assert_eq!(usage(1), (9, 59));
    assert_eq!(usage(2), (14, 59));
    assert_eq!(usage(3), (19, 59));
    assert_eq!(usage(7), (19, 59), "never more than the messages");
    // A rejection is not answered: nothing to remember, nothing asked.
    let rejected = body.replace("]}", r#"],"x_sim":{"fault":"reject"}}"#);
    let plan = chat_plan(rejected.as_bytes(), &opts, 0, 1, |_: &[u64]| {
        panic!("a rejection asks no cache")
    });
    assert_eq!((plan.status, plan.prefixes.len()), (500, 0));
}

#[test]
fn faults_from_marker_and_param() {
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi [[sim:fault=reject,status=429]]"}]}"#;
    let plan = chat_plan(body.as_bytes(), &SimOptions::default(), 0, 1, no_cache);
    assert_eq!((plan.status, plan.retry_after), (429, Some(2)));
    let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"x_sim":{"fault":"reset","after":3}}"#;
    let plan = chat_plan(body.as_bytes(), &SimOptions::default(), 0, 1, no_cache);
    assert_eq!(plan.pieces.len(), 4);
    assert_eq!(plan.pieces[3], Piece::Reset);
    let body =
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"x_sim":{"fault":"nope"}}"#;
    assert_eq!(
        chat_plan(body.as_bytes(), &SimOptions::default(), 0, 1, no_cache).status,
        400
    );
}

/// A tool loop's request: the user, then `turns` assistant tool-call
/// messages (each `(call id, its extra members)`) with their results.
fn tool_loop(turns: &[(&str, &str)]) -> String {
    let mut messages = vec![r#"{"role":"system","content":"s"},{"role":"user","content":"go [[sim:calls=3,input=run {n}]]"}"#.to_owned()];
    for (id, extra) in turns {
        messages.push(format!(
            r#"{{"role":"assistant","content":null{extra},"tool_calls":[{{"id":"{id}","type":"function","function":{{"name":"f","arguments":"{{}}"}}}}]}}"#
        ));
        messages.push(format!(
            r#"{{"role":"tool","tool_call_id":"{id}","content":"ok {id}"}}"#
        ));
    }
    format!(
        r#"{{"model":"m","messages":[{}],"tools":[{{"type":"function","function":{{"name":"f","parameters":{{"type":"object","properties":{{"cmd":{{"type":"string"}}}}}}}}}}]}}"#,
        messages.join(",")
    )
}

fn error_of(plan: &Plan) -> (u16, Value) {
    let body = match &plan.pieces[0] {
        Piece::Event(b) => serde_json::from_slice(b).unwrap(),
        other => panic!("{other:?}"),
    };
    (plan.status, body)
}

#[test]
fn a_tool_turn_without_its_reasoning_is_refused_as_kimi_and_deepseek_refuse_it() {
    let body = tool_loop(&[("call_a", "")]);
    let kimi = SimOptions {
        require_reasoning_replay: Some(ReplayCheck::Kimi),
        ..SimOptions::default()
    };
    let plan = plan_chat(body.as_bytes(), &kimi, 0, 1, no_cache, |_| None);
    let (status, e) = error_of(&plan);
    assert_eq!(status, 400);
    assert_eq!(
        e,
        serde_json::json!({"error": {"message": "thinking is enabled but reasoning_content is missing in assistant tool call message at index 2", "type": "invalid_request_error"}})
    );
    let deepseek = SimOptions {
        require_reasoning_replay: Some(ReplayCheck::DeepSeek),
        ..SimOptions::default()
    };
    let plan = plan_chat(body.as_bytes(), &deepseek, 0, 1, no_cache, |_| None);
    let (status, e) = error_of(&plan);
    assert_eq!(status, 400);
    assert_eq!(
        e,
        serde_json::json!({"error": {"message": "The `reasoning_content` in the thinking mode must be passed back to the API.", "type": "invalid_request_error", "param": null, "code": "invalid_request_error"}})
    );
    // Present (even empty) for a call it does not know: answered.
    let body = tool_loop(&[("call_a", r#","reasoning_content":"""#)]);
    let plan = plan_chat(body.as_bytes(), &kimi, 0, 1, no_cache, |_| None);
    assert_eq!(plan.status, 200);
    // For a call it made: only what it produced then.
    let mine = |id: &str| (id == "call_a").then(|| "my thoughts".to_owned());
    let plan = plan_chat(body.as_bytes(), &kimi, 0, 1, no_cache, mine);
    let (status, e) = error_of(&plan);
    assert_eq!(
        (status, e["error"]["code"].as_str()),
        (400, Some("reasoning_mismatch"))
    );
    let body = tool_loop(&[("call_a", r#","reasoning_content":"my thoughts""#)]);
    assert_eq!(
        plan_chat(body.as_bytes(), &kimi, 0, 1, no_cache, mine).status,
        200
    );
    // A vLLM-like provider reads `reasoning`.
    let vllm = SimOptions {
        reasoning_field: ReasoningName::Reasoning,
        ..kimi.clone()
    };
    let plan = plan_chat(body.as_bytes(), &vllm, 0, 1, no_cache, mine);
    let (_, e) = error_of(&plan);
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("reasoning is missing")
    );
    let body = tool_loop(&[("call_a", r#","reasoning":"my thoughts""#)]);
    assert_eq!(
        plan_chat(body.as_bytes(), &vllm, 0, 1, no_cache, mine).status,
        200
    );
}

#[test]
fn it_calls_tools_as_many_rounds_as_asked_and_says_what_it_produced() {
    let given = |id: &str| (id.to_owned(), r#","reasoning_content":"""#);
    let mut ids: Vec<String> = Vec::new();
    for round in 0..4 {
        let turns: Vec<(String, &str)> = ids.iter().map(|id| given(id)).collect();
        let turns: Vec<(&str, &str)> = turns.iter().map(|(a, b)| (a.as_str(), *b)).collect();
        let body = tool_loop(&turns);
        let plan = plan_chat(
            body.as_bytes(),
            &SimOptions::default(),
            0,
            1,
            no_cache,
            |_| None,
        );
        let v: Value = match &plan.pieces[0] {
            Piece::Event(b) => serde_json::from_slice(b).unwrap(),
            other => panic!("{other:?}"),
        };
        let choice = &v["choices"][0];
        if round < 3 {
            assert_eq!(choice["finish_reason"], "tool_calls", "round {round}");
            let call = &choice["message"]["tool_calls"][0];
            let args: Value =
                serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
            assert_eq!(args["cmd"], format!("run {}", round + 1));
            let (produced_ids, reasoning) = plan.produced.clone().unwrap();
            assert_eq!(produced_ids, [call["id"].as_str().unwrap()]);
            assert_eq!(
                reasoning,
                choice["message"]["reasoning_content"].as_str().unwrap()
            );
            ids.push(produced_ids[0].clone());
        } else {
            assert_eq!(choice["finish_reason"], "stop");
            assert!(plan.produced.is_none());
        }
    }
    assert_eq!(ids.len(), 3);
    assert!(ids[0] != ids[1] && ids[1] != ids[2]);
}

#[test]
fn reasoning_goes_out_under_the_providers_name() {
    for (name, member) in [
        (ReasoningName::Reasoning, "\"reasoning\":"),
        (
            ReasoningName::ReasoningDetails,
            "\"reasoning_details\":[{\"type\":\"reasoning.text\",\"text\":",
        ),
    ] {
        let opts = SimOptions {
            reasoning_field: name,
            ..SimOptions::default()
        };
        let plan = chat_plan(ASK.as_bytes(), &opts, 0, 1, no_cache);
        let first = String::from_utf8(events_of(&plan)[0].clone()).unwrap();
        assert!(first.contains(member), "{first}");
        assert!(!first.contains("reasoning_content"), "{first}");
        let whole = ASK.replace("\"stream\":true", "\"stream\":false");
        let plan = chat_plan(whole.as_bytes(), &opts, 0, 1, no_cache);
        let body = String::from_utf8(events_of(&plan)[0].clone()).unwrap();
        assert!(body.contains(member), "{body}");
    }
}

#[test]
fn a_final_assistant_message_is_continued_with_the_rest_of_the_answer() {
    let opts = SimOptions {
        continuation: crate::Continuation::FinalAssistant,
        ..SimOptions::default()
    };
    let (_, whole, reasoning, content) = track(&chat_plan(ASK.as_bytes(), &opts, 0, 1, no_cache));
    let with_part = |part: Value| {
        let mut v: Value = serde_json::from_str(ASK).unwrap();
        v["messages"].as_array_mut().unwrap().push(part);
        v.to_string().into_bytes()
    };
    let whole_tokens = whole.usage().unwrap().completion_tokens;
    // Cut inside the answer (mid-word): the rest of the text after the
    // part sent back (llama.cpp's echo), no reasoning again.
    let cut = content.len() / 2;
    let part = serde_json::json!({"role": "assistant", "reasoning_content": reasoning, "content": &content[..cut]});
    let plan = chat_plan(&with_part(part), &opts, 0, 1, no_cache);
    let (kinds, t, r, c) = track(&plan);
    assert_eq!(kinds.last(), Some(&EventKind::Done));
    assert_eq!((r.as_str(), t.finish_reason()), ("", Some("stop")));
    assert_eq!(c, content, "the part, then the rest");
    let rest = t.usage().unwrap();
    assert!(rest.completion_tokens < whole_tokens, "{rest:?}");
    assert_eq!(rest.reasoning_tokens, 0);
    // Cut inside the reasoning: the rest of it, then the whole answer.
    let rcut = reasoning.len() / 3;
    let part = serde_json::json!({"role": "assistant", "reasoning_content": &reasoning[..rcut]});
    let (_, t, r, c) = track(&chat_plan(&with_part(part), &opts, 0, 1, no_cache));
    assert_eq!(format!("{}{r}", &reasoning[..rcut]), reasoning);
    assert_eq!(c, content);
    assert_eq!(t.finish_reason(), Some("stop"));
    // A server that refuses prefill: llama.cpp's 400.
    let refusing = SimOptions {
        continuation: crate::Continuation::Refuse,
        ..SimOptions::default()
    };
    let part = serde_json::json!({"role": "assistant", "content": &content[..cut]});
    let plan = chat_plan(&with_part(part), &refusing, 0, 1, no_cache);
    assert_eq!(plan.status, 400);
    // Without a mode, the same request is answered as before: the
    // part is a message like another.
    let part = serde_json::json!({"role": "assistant", "content": &content[..cut]});
    let plan = chat_plan(&with_part(part), &SimOptions::default(), 0, 1, no_cache);
    assert_eq!(plan.status, 200);
    let (_, _, _, c) = track(&plan);
    assert_ne!(format!("{}{c}", &content[..cut]), content);
}

#[test]
fn the_fault_a_question_names_does_not_strike_its_continuation() {
    let opts = SimOptions {
        continuation: crate::Continuation::Prefix,
        ..SimOptions::default()
    };
    let ask = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"Why? [[sim:fault=reset,after=3]]"}]}"#;
    let plan = chat_plan(ask.as_bytes(), &opts, 0, 1, no_cache);
    let (kinds, _, _, _) = track(&plan);
    assert_ne!(
        kinds.last(),
        Some(&EventKind::Done),
        "the first answer is cut"
    );
    let mut v: Value = serde_json::from_str(ask).unwrap();
    v["messages"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"role": "assistant", "content": "", "prefix": true}));
    let plan = chat_plan(v.to_string().as_bytes(), &opts, 0, 1, no_cache);
    let (kinds, t, _, _) = track(&plan);
    assert_eq!(
        kinds.last(),
        Some(&EventKind::Done),
        "its continuation is whole"
    );
    assert_eq!(t.finish_reason(), Some("stop"));
}
