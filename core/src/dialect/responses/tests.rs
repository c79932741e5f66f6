//! The Responses translators' unit tests: Codex's own requests, every
//! refusal naming its field, and chat streams translated and reassembled.

use serde_json::{Value, json};

use super::events::{End, ResponseStream, body};
use super::request::{Asked, param_name, translate};
use crate::dialect::tests::{carry, chunk};
use crate::usage::Usage;

const TURN1: &[u8] = include_bytes!("../../../../tests/fixtures/codex/codex-0.169.0-turn1.json");
const TURN2: &[u8] = include_bytes!("../../../../tests/fixtures/codex/codex-0.169.0-turn2.json");

fn chat(body: &[u8]) -> (Value, Asked) {
    let (out, asked) = translate(body, None, None).unwrap_or_else(|e| panic!("{e:?}"));
    let v = serde_json::from_slice(&out)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)));
    (v, asked)
}

fn refused(body: Value) -> (String, String) {
    let e = translate(body.to_string().as_bytes(), None, None).expect_err("refused");
    (e.param.unwrap_or_default(), e.message)
}

#[test]
fn codex_first_turn_becomes_system_and_user_messages_and_function_tools() {
    let (v, asked) = chat(TURN1);
    let codex: Value = serde_json::from_slice(TURN1).unwrap();
    assert_eq!(v["model"], codex["model"]);
    assert_eq!(v["stream"], true);
    assert!(asked.stream);
    let roles: Vec<&str> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "system", "user", "user"]);
    // The second developer message's two parts, joined by a blank line.
    let parts = &codex["input"][1]["content"];
    let joined = format!(
        "{}\n\n{}",
        parts[0]["text"].as_str().unwrap(),
        parts[1]["text"].as_str().unwrap()
    );
    assert_eq!(v["messages"][1]["content"], joined.as_str());
    assert_eq!(
        v["messages"][3]["content"],
        codex["input"][3]["content"][0]["text"]
    );
    // Flat functions, the namespace's functions flattened, web_search left out.
    let names: Vec<&str> = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"exec_command"));
    assert!(names.contains(&"multi_agent_v1__spawn_agent"));
    assert!(!names.iter().any(|n| n.contains("web_search")));
    assert_eq!(
        asked.function("multi_agent_v1__spawn_agent"),
        (Some("multi_agent_v1"), "spawn_agent")
    );
    assert_eq!(asked.function("exec_command"), (None, "exec_command"));
    let exec = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "exec_command")
        .unwrap();
    let original = codex["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "exec_command")
        .unwrap();
    assert_eq!(exec["function"]["parameters"], original["parameters"]);
    assert_eq!(v["tool_choice"], "auto");
    assert_eq!(v["parallel_tool_calls"], true);
    // Codex's client-only fields are not sent to the provider.
    for gone in ["store", "include", "client_metadata", "reasoning", "input"] {
        assert!(v.get(gone).is_none(), "{gone}");
    }
    assert_eq!(v["prompt_cache_key"], codex["prompt_cache_key"]);
}

#[test]
fn codex_tool_turn_becomes_tool_calls_and_a_tool_message_without_reasoning() {
    let (v, _) = chat(TURN2);
    let messages = v["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(
        messages[n - 2],
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "exec_command", "arguments": "{\"cmd\": \"echo hi-from-shell\"}"}
        }]})
    );
    assert_eq!(messages[n - 1]["role"], "tool");
    assert_eq!(messages[n - 1]["tool_call_id"], "call_1");
    assert!(
        messages[n - 1]["content"]
            .as_str()
            .unwrap()
            .contains("hi-from-shell")
    );
    assert!(
        !v.to_string().contains("I should run a command"),
        "reasoning is never sent back"
    );
}

#[test]
fn a_string_input_and_instructions() {
    let (v, asked) = chat(
        json!({"model": "m", "instructions": "Be brief.", "input": "Hi \"you\"",
               "max_output_tokens": 50, "temperature": 0.2, "top_p": 0.9,
               "reasoning": {"effort": "low", "summary": "auto"},
               "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}, "strict": true}},
               "user": "u1", "safety_identifier": "s1", "metadata": {"a": "b"}, "store": true})
        .to_string()
        .as_bytes(),
    );
    assert_eq!(
        v,
        json!({"model": "m",
               "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \"you\""}],
               "max_tokens": 50, "temperature": 0.2, "top_p": 0.9, "user": "u1", "safety_identifier": "s1",
               "reasoning_effort": "low",
               "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}, "strict": true}}})
    );
    assert_eq!(asked.max_output_tokens, Some(50));
    assert!(!asked.stream);
}

#[test]
fn images_parallel_calls_and_a_tools_images() {
    let (v, _) = chat(
        json!({"model": "m", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "see"},
                                         {"type": "input_image", "image_url": "data:image/png;base64,AA", "detail": "low"}]},
            {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "b", "name": "close_agent", "namespace": "ns", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "a", "output": "one"},
            {"type": "function_call_output", "call_id": "b", "output": [
                {"type": "input_text", "text": "two"}, {"type": "input_image", "image_url": "https://x/i.png"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}
        ]})
        .to_string()
        .as_bytes(),
    );
    assert_eq!(
        v["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA", "detail": "low"}}]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "ns__close_agent", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "a", "content": "one"},
            {"role": "tool", "tool_call_id": "b", "content": "two"},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/i.png"}}]},
            {"role": "assistant", "content": "done"}
        ])
    );
}

#[test]
fn refusals_name_the_responses_field() {
    let cases = [
        (json!({"input": "x"}), "model"),
        (json!({"model": "m"}), "input"),
        (json!({"model": 3, "input": "x"}), "model"),
        (json!({"model": "m", "input": 3}), "input"),
        (
            json!({"model": "m", "input": "x", "previous_response_id": "resp_1"}),
            "previous_response_id",
        ),
        (
            json!({"model": "m", "input": "x", "conversation": "c"}),
            "conversation",
        ),
        (
            json!({"model": "m", "input": "x", "prompt": {"id": "p"}}),
            "prompt",
        ),
        (
            json!({"model": "m", "input": "x", "background": true}),
            "background",
        ),
        (
            json!({"model": "m", "input": [{"type": "item_reference", "id": "x"}]}),
            "input[0].type",
        ),
        (
            json!({"model": "m", "input": [{"type": "nope"}]}),
            "input[0].type",
        ),
        (
            json!({"model": "m", "input": [{"content": "x"}]}),
            "input[0].type",
        ),
        (
            json!({"model": "m", "input": [{"role": "robot", "content": "x"}]}),
            "input[0].role",
        ),
        (
            json!({"model": "m", "input": [{"role": "user"}]}),
            "input[0].content",
        ),
        (
            json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}),
            "input[0].content[0].type",
        ),
        (
            json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]}),
            "input[0].content[0].image_url",
        ),
        (
            json!({"model": "m", "input": [{"role": "system", "content": [{"type": "input_image", "image_url": "u"}]}]}),
            "input[0].content",
        ),
        (
            json!({"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}),
            "input[0].call_id",
        ),
        (
            json!({"model": "m", "input": [{"type": "function_call", "call_id": "a", "name": "f", "arguments": {}}]}),
            "input[0].arguments",
        ),
        (
            json!({"model": "m", "input": [{"type": "function_call_output", "call_id": "a"}]}),
            "input[0].output",
        ),
        (
            json!({"model": "m", "input": "x", "tools": [{"type": "function"}]}),
            "tools[0].name",
        ),
        (
            json!({"model": "m", "input": "x", "tools": [{"name": "f"}]}),
            "tools[0].type",
        ),
        (
            json!({"model": "m", "input": "x", "tools": [{"type": "namespace", "name": "n", "tools": [{"type": "function"}]}]}),
            "tools[0].tools[0].name",
        ),
        (
            json!({"model": "m", "input": "x", "tools": [{"type": "function", "name": "a__b"}, {"type": "namespace", "name": "a", "tools": [{"type": "function", "name": "b"}]}]}),
            "tools",
        ),
        (
            json!({"model": "m", "input": "x", "text": {"format": {"type": "yaml"}}}),
            "text.format.type",
        ),
        (
            json!({"model": "m", "input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}}),
            "text.format.schema",
        ),
    ];
    for (body, param) in cases {
        let (got, message) = refused(body.clone());
        assert_eq!(got, param, "{body}: {message}");
    }
}

#[test]
fn syntax_errors_and_duplicates_are_invalid_json() {
    for body in [
        &b"{\"model\":\"m\",\"input\":"[..],
        b"[1]",
        b"",
        b"{\"model\":\"m\",\"model\":\"n\",\"input\":\"x\"}",
    ] {
        let e = translate(body, None, None).expect_err("refused");
        assert_eq!(e.code, "invalid_json", "{}", String::from_utf8_lossy(body));
    }
}

#[test]
fn chat_params_are_named_back() {
    assert_eq!(param_name("max_tokens"), "max_output_tokens");
    assert_eq!(param_name("reasoning_effort"), "reasoning.effort");
    assert_eq!(
        param_name("response_format.json_schema"),
        "text.format.json_schema"
    );
    assert_eq!(param_name("messages[3].content"), "input");
    assert_eq!(param_name("temperature"), "temperature");
}

/// What a Responses stream or body says: reasoning, text, calls (namespace,
/// name, call id, arguments), status, usage.
#[derive(Debug, Default, PartialEq)]
struct Reassembled {
    reasoning: String,
    text: String,
    calls: Vec<(Option<String>, String, String, String)>,
    status: String,
    usage: Option<Value>,
}

fn reassemble_events(out: &[u8]) -> (Reassembled, Vec<Value>) {
    let text = std::str::from_utf8(out).unwrap();
    let mut r = Reassembled::default();
    let mut events = Vec::new();
    for (sequence, block) in text.split("\n\n").filter(|b| !b.is_empty()).enumerate() {
        let (event, data) = block.split_once('\n').unwrap();
        let name = event.strip_prefix("event: ").unwrap();
        let v: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(v["type"], name);
        assert_eq!(v["sequence_number"], sequence);
        match name {
            "response.reasoning_summary_text.delta" => r.reasoning += v["delta"].as_str().unwrap(),
            "response.output_text.delta" => r.text += v["delta"].as_str().unwrap(),
            "response.output_item.done" if v["item"]["type"] == "function_call" => {
                let it = &v["item"];
                r.calls.push((
                    it["namespace"].as_str().map(str::to_owned),
                    it["name"].as_str().unwrap().to_owned(),
                    it["call_id"].as_str().unwrap().to_owned(),
                    it["arguments"].as_str().unwrap().to_owned(),
                ));
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                r.status = v["response"]["status"].as_str().unwrap().to_owned();
                r.usage = Some(v["response"]["usage"].clone());
                // The calls in the order of the output (a call may be done
                // before one added earlier).
                let output = v["response"]["output"].as_array().unwrap();
                let calls: Vec<_> = output
                    .iter()
                    .filter(|it| it["type"] == "function_call")
                    .map(|it| {
                        (
                            it["namespace"].as_str().map(str::to_owned),
                            it["name"].as_str().unwrap().to_owned(),
                            it["call_id"].as_str().unwrap().to_owned(),
                            it["arguments"].as_str().unwrap().to_owned(),
                        )
                    })
                    .collect();
                let mut by_done = r.calls.clone();
                let mut sorted = calls.clone();
                by_done.sort();
                sorted.sort();
                assert_eq!(by_done, sorted, "the same calls done as in the output");
                r.calls = calls;
            }
            _ => {}
        }
        events.push(v);
    }
    (r, events)
}

fn namespaced() -> Asked {
    let (_, asked) = translate(
        json!({"model": "m", "input": "x", "tools": [
            {"type": "function", "name": "f"},
            {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "g"}]}]})
        .to_string()
        .as_bytes(),
        None,
        None,
    )
    .unwrap();
    asked
}

fn sample_chunks() -> Vec<Vec<u8>> {
    vec![
        chunk(json!({"role": "assistant", "content": ""}), None),
        chunk(json!({"reasoning_content": "Think "}), None),
        chunk(json!({"reasoning_content": "\"hard\"\n"}), None),
        chunk(json!({"content": "Hello, "}), None),
        chunk(json!({"content": "wörld \u{1F600}"}), None),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "f", "arguments": ""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"x\":"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function", "function": {"name": "ns__g", "arguments": "{}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
    ]
}

fn usage() -> Usage {
    Usage {
        prompt_tokens: 10,
        completion_tokens: 7,
        total_tokens: 17,
        reasoning_tokens: 3,
        cached_tokens: 2,
        ..Usage::default()
    }
}

#[test]
fn a_chat_stream_reassembles_to_the_same_text_reasoning_and_calls() {
    let mut s = ResponseStream::new(namespaced(), "req_0123", 1_700_000_000, carry());
    let mut out = Vec::new();
    for c in sample_chunks() {
        s.chunk(&c, &mut out).unwrap();
    }
    s.end(End::Finished(Some("tool_calls")), Some(&usage()), &mut out);
    let (r, events) = reassemble_events(&out);
    assert_eq!(r.reasoning, "Think \"hard\"\n");
    assert_eq!(r.text, "Hello, wörld \u{1F600}");
    assert_eq!(
        r.calls,
        vec![
            (None, "f".into(), "call_a".into(), "{\"x\":1}".into()),
            (Some("ns".into()), "g".into(), "call_b".into(), "{}".into()),
        ]
    );
    assert_eq!(r.status, "completed");
    assert_eq!(
        r.usage.unwrap(),
        json!({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 2},
               "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 3}, "total_tokens": 17})
    );
    let names: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(names[..2], ["response.created", "response.in_progress"]);
    assert_eq!(names.last(), Some(&"response.completed"));
    // The final response repeats every item whole, in order.
    let last = events.last().unwrap();
    let output = last["response"]["output"].as_array().unwrap();
    let kinds: Vec<&str> = output.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["reasoning", "message", "function_call", "function_call"]
    );
    assert_eq!(output[0]["summary"][0]["text"], "Think \"hard\"\n");
    assert_eq!(output[1]["content"][0]["text"], "Hello, wörld \u{1F600}");
    assert_eq!(last["response"]["id"], "resp_0123");
    assert_eq!(last["response"]["model"], "m-1");
    // Every item added is done, once, before the end.
    let added = names
        .iter()
        .filter(|n| **n == "response.output_item.added")
        .count();
    let done = names
        .iter()
        .filter(|n| **n == "response.output_item.done")
        .count();
    assert_eq!((added, done), (4, 4));
}

#[test]
fn fed_split_or_whole_the_stream_is_the_same() {
    let chunks = sample_chunks();
    let run = |groups: &[usize]| {
        let mut s = ResponseStream::new(Asked::default(), "req_1", 1, carry());
        let mut out = Vec::new();
        let mut i = 0;
        for &g in groups {
            // Output written in several calls equals one.
            let mut part = Vec::new();
            for c in &chunks[i..i + g] {
                s.chunk(c, &mut part).unwrap();
            }
            out.extend_from_slice(&part);
            i += g;
        }
        s.end(End::Finished(None), None, &mut out);
        out
    };
    let whole = run(&[chunks.len()]);
    assert_eq!(run(&[1; 10]), whole);
    assert_eq!(run(&[3, 3, 4]), whole);
}

#[test]
fn length_is_incomplete_and_a_cut_stream_fails() {
    let mut s = ResponseStream::new(Asked::default(), "req_2", 1, carry());
    let mut out = Vec::new();
    s.chunk(&chunk(json!({"content": "abc"}), None), &mut out)
        .unwrap();
    s.chunk(&chunk(json!({}), Some("length")), &mut out)
        .unwrap();
    s.end(End::Finished(Some("length")), None, &mut out);
    let (_, events) = reassemble_events(&out);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.incomplete");
    assert_eq!(
        last["response"]["incomplete_details"]["reason"],
        "max_output_tokens"
    );

    let mut s = ResponseStream::new(Asked::default(), "req_3", 1, carry());
    let mut out = Vec::new();
    s.chunk(&chunk(json!({"content": "abc"}), None), &mut out)
        .unwrap();
    s.end(
        End::Failed("the provider reset the connection"),
        None,
        &mut out,
    );
    // Nothing after the end.
    s.chunk(&chunk(json!({"content": "more"}), None), &mut out)
        .unwrap();
    s.end(End::Finished(None), None, &mut out);
    let (r, events) = reassemble_events(&out);
    assert_eq!(r.status, "failed");
    assert_eq!(r.text, "abc");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.failed");
    assert_eq!(last["response"]["error"]["code"], "server_error");
    assert!(
        last["response"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("reset")
    );
}

#[test]
fn a_whole_completion_becomes_a_response_object() {
    let completion = json!({"id": "c", "object": "chat.completion", "created": 5, "model": "m-2",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Sure.", "reasoning_content": "Because.",
            "tool_calls": [
                {"id": "call_x", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}},
                {"id": "call_y", "type": "function", "function": {"name": "ns__g", "arguments": "{}"}}]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17}});
    let out = body(
        namespaced(),
        "req_9",
        5,
        carry(),
        completion.to_string().as_bytes(),
        Some(&usage()),
    );
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["object"], "response");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["model"], "m-2");
    let output = v["output"].as_array().unwrap();
    assert_eq!(output[0]["summary"][0]["text"], "Because.");
    assert_eq!(output[1]["content"][0]["text"], "Sure.");
    assert_eq!(output[2]["call_id"], "call_x");
    assert_eq!(output[2]["arguments"], "{\"a\":1}");
    assert_eq!(output[3]["namespace"], "ns");
    assert_eq!(output[3]["name"], "g");
    assert_eq!(v["usage"]["output_tokens_details"]["reasoning_tokens"], 3);
}

#[test]
fn calls_numbered_alike_stay_apart_and_text_between_deltas_does_not_split_a_call() {
    let mut s = ResponseStream::new(Asked::default(), "req_4", 1, carry());
    let mut out = Vec::new();
    // Two calls both numbered 0 (some providers do), text in between the
    // first call's arguments.
    for c in [
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{\"x\":"}}]}),
            None,
        ),
        chunk(json!({"content": "\n"}), None),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "c2", "function": {"name": "g", "arguments": "{}"}}]}),
            None,
        ),
        chunk(json!({"refusal": "no"}), Some("tool_calls")),
    ] {
        s.chunk(&c, &mut out).unwrap();
    }
    s.end(End::Finished(None), None, &mut out);
    let (r, _) = reassemble_events(&out);
    assert_eq!(
        r.calls,
        vec![
            (None, "f".into(), "c1".into(), "{\"x\":1}".into()),
            (None, "g".into(), "c2".into(), "{}".into()),
        ]
    );
    assert_eq!(r.text, "\nno", "a refusal is what the model said");
}

#[test]
fn the_reason_passed_in_decides_and_usage_cannot_overflow() {
    let mut s = ResponseStream::new(Asked::default(), "req_5", 1, carry());
    let mut out = Vec::new();
    s.chunk(&chunk(json!({"content": "a"}), None), &mut out)
        .unwrap();
    let huge = Usage {
        prompt_tokens: u64::MAX,
        completion_tokens: 1,
        ..Usage::default()
    };
    s.end(End::Finished(Some("length")), Some(&huge), &mut out);
    let (r, _) = reassemble_events(&out);
    assert_eq!(r.status, "incomplete");
    assert_eq!(r.usage.unwrap()["total_tokens"], u64::MAX);
}

#[test]
fn a_bad_byte_is_placed_where_it_is() {
    let e = translate(b"{\"model\":\"m\",\"input\":\"\xff\"}", None, None).expect_err("refused");
    assert_eq!(e.code, "invalid_json");
    assert!(e.message.contains("column"), "{}", e.message);
}

#[test]
fn what_a_provider_sends_badly_is_made_readable() {
    let mut s = ResponseStream::new(Asked::default(), "req_6", 1, carry());
    let mut out = Vec::new();
    let mut bad = br#"{"choices":[{"delta":{"content":"a"#.to_vec();
    bad.extend_from_slice(b"\xff");
    bad.extend_from_slice(br#"b\ud800c\ud83d\ude00\\ud800"}}]}"#);
    s.chunk(&bad, &mut out).unwrap();
    s.end(End::Finished(None), None, &mut out);
    let (r, _) = reassemble_events(&out);
    assert_eq!(r.text, "a\u{FFFD}b\u{FFFD}c\u{1F600}\\ud800");
}

#[test]
fn a_freeform_tool_is_a_function_of_its_input_both_ways() {
    let (v, asked) = chat(
        json!({"model": "m", "tools": [{"type": "custom", "name": "apply_patch", "description": "Patch files",
                                        "format": {"type": "grammar", "syntax": "lark", "definition": "start: \"x\""}}],
               "input": [
                   {"role": "user", "content": "fix it"},
                   {"type": "custom_tool_call", "call_id": "p1", "name": "apply_patch", "input": "*** Begin Patch\n\"q\""},
                   {"type": "custom_tool_call_output", "call_id": "p1", "output": "Done!"}]})
        .to_string()
        .as_bytes(),
    );
    assert_eq!(asked.custom, ["apply_patch"]);
    let f = &v["tools"][0]["function"];
    assert_eq!(f["name"], "apply_patch");
    assert_eq!(f["parameters"]["required"], json!(["input"]));
    assert!(
        f["parameters"]["properties"]["input"]["description"]
            .as_str()
            .unwrap()
            .contains("start: \"x\"")
    );
    let call = &v["messages"][1]["tool_calls"][0]["function"];
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"input": "*** Begin Patch\n\"q\""}));
    assert_eq!(
        v["messages"][2],
        json!({"role": "tool", "tool_call_id": "p1", "content": "Done!"})
    );

    // The model's call comes back as a custom_tool_call with its input.
    let mut s = ResponseStream::new(asked, "req_7", 1, carry());
    let mut out = Vec::new();
    for c in [
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "p2", "function": {"name": "apply_patch", "arguments": "{\"input\":\"*** Begin"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": " Patch\\n\\\"q\\\"\"}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
    ] {
        s.chunk(&c, &mut out).unwrap();
    }
    s.end(End::Finished(None), None, &mut out);
    let (_, events) = reassemble_events(&out);
    let done: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "response.output_item.done")
        .collect();
    assert_eq!(done.len(), 1);
    let item = &done[0]["item"];
    assert_eq!(item["type"], "custom_tool_call");
    assert_eq!(item["call_id"], "p2");
    assert_eq!(item["input"], "*** Begin Patch\n\"q\"");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "response.custom_tool_call_input.done"
                && e["input"] == "*** Begin Patch\n\"q\"")
    );
    assert!(
        !events
            .iter()
            .any(|e| e["type"] == "response.function_call_arguments.delta")
    );
}

mod properties {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::{End, ResponseStream, chunk, reassemble_events};
    use crate::dialect::responses::request::Asked;
    use crate::dialect::tests::{carry, chat_view, chunks, delta, style};

    proptest! {
        #[test]
        fn reassembled_it_says_what_the_chat_stream_said(
            deltas in proptest::collection::vec(delta(), 0..24),
            groups in proptest::collection::vec(1usize..4, 0..24),
            style in style(),
        ) {
            let chunks = chunks(&deltas, style);
            let run = |groups: &[usize]| {
                let mut s = ResponseStream::new(Asked::default(), "req_8", 1, carry());
                let mut out = Vec::new();
                let (mut i, mut g) = (0, groups.iter().cycle());
                while i < chunks.len() {
                    let n = *g.next().unwrap_or(&1);
                    let mut part = Vec::new();
                    for c in &chunks[i..(i + n).min(chunks.len())] {
                        s.chunk(c, &mut part).unwrap();
                    }
                    out.extend_from_slice(&part);
                    i += n;
                }
                s.chunk(&chunk(json!({}), Some("stop")), &mut out).unwrap();
                s.end(End::Finished(None), None, &mut out);
                out
            };
            let whole = run(&[usize::MAX]);
            // The same-shape shortcut changes nothing.
            let mut slow = ResponseStream::new(Asked::default(), "req_8", 1, carry()).without_shortcut();
            let mut plain = Vec::new();
            for c in &chunks {
                slow.chunk(c, &mut plain).unwrap();
            }
            slow.chunk(&chunk(json!({}), Some("stop")), &mut plain).unwrap();
            slow.end(End::Finished(None), None, &mut plain);
            prop_assert_eq!(&plain, &whole);
            if !groups.is_empty() {
                prop_assert_eq!(&run(&groups), &whole);
            }
            let (r, events) = reassemble_events(&whole);
            let (reasoning, text, calls) = chat_view(&deltas);
            prop_assert_eq!(r.reasoning, reasoning);
            prop_assert_eq!(r.text, text);
            // A call started but never given arguments still counts.
            let got: Vec<(String, String)> = r.calls.into_iter().map(|c| (c.1, c.3)).collect();
            prop_assert_eq!(got, calls);
            prop_assert_eq!(r.status, "completed");
            let last: &Value = events.last().unwrap();
            prop_assert_eq!(&last["type"], "response.completed");
        }
    }
}

#[test]
fn the_shortcut_is_taken_for_a_chunk_shaped_like_the_last() {
    let mut s = ResponseStream::new(Asked::default(), "req_9", 1, carry());
    let mut out = Vec::new();
    let provider = |delta: &str| {
        format!(
            r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":null}}]}}"#
        )
    };
    s.chunk(
        provider(r#"{"role":"assistant","content":"Hi"}"#).as_bytes(),
        &mut out,
    )
    .unwrap();
    s.chunk(provider(r#"{"content":" there"}"#).as_bytes(), &mut out)
        .unwrap();
    assert!(s.has_shape(), "learned from a chunk of one text delta");
    s.chunk(
        provider(r#"{"content":", \"you\"\n"}"#).as_bytes(),
        &mut out,
    )
    .unwrap();
    assert!(s.has_shape());
    // A quote the shape cannot hold: read the long way, and right.
    s.chunk(
        provider(r#"{"content":"a","refusal":null}"#).as_bytes(),
        &mut out,
    )
    .unwrap();
    // Shaped alike, but what the shortcut does not copy as it is: an
    // unpaired surrogate, a pair, invalid UTF-8.
    s.chunk(provider(r#"{"content":"b"}"#).as_bytes(), &mut out)
        .unwrap();
    assert!(s.has_shape());
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
    s.end(End::Finished(Some("stop")), None, &mut out);
    let (r, _) = reassemble_events(&out);
    assert_eq!(r.text, "Hi there, \"you\"\nab\u{FFFD}\u{1F600}c\u{FFFD}");
}
