//! The Messages translators' unit tests: Claude Code's own requests, every
//! refusal naming its field, chat streams translated and reassembled, and
//! the error shape.

use serde_json::{Value, json};

use super::errors;
use super::events::{MessageStream, SIGNATURE_PREFIX, body};
use super::request::{Asked, param_name, translate};
use crate::dialect::End;
use crate::dialect::tests::chunk;
use crate::error::{ApiError, ProviderError, UpstreamFault};
use crate::usage::Usage;

const TURN1: &[u8] =
    include_bytes!("../../../../tests/fixtures/claude/claude-code-2.1.197-turn1.json");
const TURN2: &[u8] =
    include_bytes!("../../../../tests/fixtures/claude/claude-code-2.1.197-turn2.json");
const TITLE: &[u8] =
    include_bytes!("../../../../tests/fixtures/claude/claude-code-2.1.197-title.json");

fn chat(body: &[u8]) -> (Value, Asked) {
    let (out, asked) = translate(body).unwrap_or_else(|e| panic!("{e:?}"));
    let v = serde_json::from_slice(&out)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)));
    (v, asked)
}

fn refused(body: Value) -> (String, String) {
    let e = translate(body.to_string().as_bytes()).expect_err("refused");
    (e.param.unwrap_or_default(), e.message)
}

fn minimal(extra: Value) -> Value {
    let mut v = json!({"model": "m", "max_tokens": 100,
                       "messages": [{"role": "user", "content": "Hi"}]});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

#[test]
fn claude_code_first_turn_becomes_system_and_user_messages_and_function_tools() {
    let (v, asked) = chat(TURN1);
    let cc: Value = serde_json::from_slice(TURN1).unwrap();
    assert_eq!(v["model"], cc["model"]);
    assert_eq!(v["stream"], true);
    assert_eq!(v["max_tokens"], 32000);
    assert!(asked.stream && asked.thinking && !asked.omit_thinking);
    assert_eq!(asked.model, br#""reasoning-model-k3""#);
    let roles: Vec<&str> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    // `system` first, then the user's message, then the `system`-role
    // message Claude Code puts in the list.
    assert_eq!(roles, ["system", "user", "system"]);
    let system = v["messages"][0]["content"].as_str().unwrap();
    for block in cc["system"].as_array().unwrap() {
        assert!(system.contains(block["text"].as_str().unwrap()));
    }
    let user = &v["messages"][1]["content"];
    assert_eq!(user[1], json!({"type": "text", "text": "say hi"}));
    assert_eq!(v["messages"][2]["content"], cc["messages"][1]["content"]);
    let tools = v["tools"].as_array().unwrap();
    assert_eq!(tools.len(), cc["tools"].as_array().unwrap().len());
    let bash = tools
        .iter()
        .find(|t| t["function"]["name"] == "Bash")
        .unwrap();
    let original = cc["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "Bash")
        .unwrap();
    assert_eq!(bash["function"]["parameters"], original["input_schema"]);
    assert_eq!(bash["function"]["description"], original["description"]);
    assert_eq!(v["reasoning_effort"], "high");
    assert_eq!(v["user"], cc["metadata"]["user_id"]);
    // Read and not applied: not sent to the provider.
    for gone in [
        "system",
        "metadata",
        "thinking",
        "context_management",
        "output_config",
    ] {
        assert!(v.get(gone).is_none(), "{gone}");
    }
    assert!(!v.to_string().contains("cache_control"));
}

#[test]
fn claude_code_tool_turn_becomes_tool_calls_and_a_tool_message_without_thinking() {
    let (v, _) = chat(TURN2);
    let messages = v["messages"].as_array().unwrap();
    let n = messages.len();
    let call = &messages[n - 2];
    assert_eq!(call["role"], "assistant");
    assert_eq!(call["content"], Value::Null);
    let tc = &call["tool_calls"][0];
    assert_eq!(tc["id"], "toolu_d3e4295d07d043beb5c6f4d1");
    assert_eq!(tc["function"]["name"], "Bash");
    let args: Value = serde_json::from_str(tc["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args["command"], "echo chatgate-tool-ok");
    assert_eq!(
        messages[n - 1],
        json!({"role": "tool", "tool_call_id": "toolu_d3e4295d07d043beb5c6f4d1",
               "content": "chatgate-tool-ok"})
    );
    assert!(
        !v.to_string().contains("Let me think about this"),
        "reasoning is never sent back"
    );
}

#[test]
fn claude_code_title_call_asks_for_a_json_schema() {
    let (v, asked) = chat(TITLE);
    let cc: Value = serde_json::from_slice(TITLE).unwrap();
    assert_eq!(v["response_format"]["type"], "json_schema");
    assert_eq!(
        v["response_format"]["json_schema"]["schema"],
        cc["output_config"]["format"]["schema"]
    );
    assert!(v.get("tools").is_none(), "an empty tool list is left out");
    assert!(!asked.thinking);
}

#[test]
fn blocks_images_tool_results_and_choices_translate() {
    let body = minimal(json!({
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "doc text"}}
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "chatgate.v1.x"},
                {"type": "redacted_thinking", "data": "xx"},
                {"type": "text", "text": "Calling."},
                {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"q": "a \"b\""}},
                {"type": "tool_use", "id": "toolu_2", "name": "get", "input": {}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                    {"type": "text", "text": "one"},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/r.png"}}
                ]},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "boom", "is_error": true},
                {"type": "text", "text": "and?"}
            ]}
        ],
        "tools": [
            {"name": "get", "description": "Gets.", "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 2},
            {"type": "bash_20250124", "name": "bash"}
        ],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
        "stop_sequences": ["END"],
        "temperature": 0.3, "top_p": 0.9, "top_k": 5,
        "thinking": {"type": "enabled", "budget_tokens": 2000},
        "context_management": {"edits": []}, "service_tier": "auto"
    }));
    let (v, asked) = chat(body.to_string().as_bytes());
    assert!(asked.thinking && !asked.stream);
    let m = v["messages"].as_array().unwrap();
    assert_eq!(m[0], json!({"role": "system", "content": "Be brief."}));
    assert_eq!(
        m[1]["content"][1]["image_url"]["url"],
        "data:image/png;base64,iVBORw0KGgo="
    );
    assert_eq!(
        m[1]["content"][2]["image_url"]["url"],
        "https://example.com/a.png"
    );
    assert_eq!(
        m[1]["content"][3],
        json!({"type": "text", "text": "doc text"})
    );
    // The text and the calls in one assistant message, thinking left out.
    assert_eq!(m[2]["content"], "Calling.");
    assert_eq!(m[2]["tool_calls"].as_array().unwrap().len(), 2);
    let args: Value = serde_json::from_str(
        m[2]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(args, json!({"q": "a \"b\""}));
    assert_eq!(
        m[3],
        json!({"role": "tool", "tool_call_id": "toolu_1", "content": "one"})
    );
    assert_eq!(
        m[4],
        json!({"role": "tool", "tool_call_id": "toolu_2", "content": "Error:\n\nboom"})
    );
    assert_eq!(m[5]["role"], "user");
    assert_eq!(m[5]["content"][0], json!({"type": "text", "text": "and?"}));
    assert_eq!(
        m[5]["content"][1]["image_url"]["url"],
        "https://example.com/r.png"
    );
    assert_eq!(m.len(), 6);
    assert_eq!(
        v["tools"].as_array().unwrap().len(),
        1,
        "server tools left out"
    );
    assert_eq!(v["tool_choice"], "required");
    assert_eq!(v["parallel_tool_calls"], false);
    assert_eq!(v["stop"], json!(["END"]));
    assert_eq!(
        (v["temperature"].clone(), v["top_k"].clone()),
        (json!(0.3), json!(5))
    );
    assert_eq!(v["reasoning_effort"], "low");
    assert!(v.get("context_management").is_none() && v.get("service_tier").is_none());
}

#[test]
fn what_the_provider_cannot_read_is_refused_only_in_the_newest_user_message() {
    let pdf = json!({"type": "document", "source": {"type": "base64",
        "media_type": "application/pdf", "data": "JVBERi0="}});
    let unknown = json!({"type": "tool_reference", "tool_name": "x"});
    let body = minimal(json!({"messages": [
        {"role": "user", "content": [{"type": "text", "text": "read this"}, pdf.clone()]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [pdf.clone(), unknown.clone()]},
            {"type": "text", "text": "and now?"}
        ]},
        {"role": "system", "content": "a reminder"}
    ]}));
    let (v, _) = chat(body.to_string().as_bytes());
    let m = v["messages"].as_array().unwrap();
    let note = "[A content block was left out here: the provider reads only text and images.]";
    assert_eq!(m[0]["content"][1], json!({"type": "text", "text": note}));
    assert_eq!(m[2]["role"], "tool");
    assert_eq!(m[2]["content"], format!("{note}\n\n{note}"));
    assert_eq!(m[3]["content"], "and now?");
    // The same in the newest user message: refused, naming it.
    let body = minimal(json!({"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": [{"type": "text", "text": "read this"}, pdf]},
        {"role": "system", "content": "a reminder"}
    ]}));
    let (param, _) = refused(body);
    assert_eq!(param, "messages[2].content[1].source.type");
}

#[test]
fn tool_choice_and_effort_map() {
    let with_tool = |choice: Value| {
        let (v, _) = chat(
            minimal(
                json!({"tools": [{"name": "f", "input_schema": {"type": "object"}}],
                           "tool_choice": choice}),
            )
            .to_string()
            .as_bytes(),
        );
        v["tool_choice"].clone()
    };
    assert_eq!(with_tool(json!({"type": "auto"})), "auto");
    assert_eq!(with_tool(json!({"type": "none"})), "none");
    assert_eq!(
        with_tool(json!({"type": "tool", "name": "f"})),
        json!({"type": "function", "function": {"name": "f"}})
    );
    let effort =
        |extra: Value| chat(minimal(extra).to_string().as_bytes()).0["reasoning_effort"].clone();
    assert_eq!(effort(json!({"output_config": {"effort": "max"}})), "high");
    assert_eq!(
        effort(json!({"output_config": {"effort": "medium"}})),
        "medium"
    );
    assert_eq!(
        effort(json!({"thinking": {"type": "enabled", "budget_tokens": 10000}})),
        "medium"
    );
    assert_eq!(
        effort(json!({"thinking": {"type": "enabled", "budget_tokens": 32000}})),
        "high"
    );
    assert_eq!(
        effort(json!({"thinking": {"type": "adaptive"}})),
        Value::Null
    );
    assert_eq!(
        effort(json!({"thinking": {"type": "disabled"}})),
        Value::Null
    );
    let (_, asked) = chat(
        minimal(json!({"thinking": {"type": "adaptive", "display": "omitted"}}))
            .to_string()
            .as_bytes(),
    );
    assert!(asked.thinking && asked.omit_thinking);
}

#[test]
fn refusals_name_the_messages_field() {
    let cases = [
        (json!({"max_tokens": 1, "messages": []}), "model"),
        (json!({"model": "m", "messages": []}), "max_tokens"),
        (json!({"model": "m", "max_tokens": 1}), "messages"),
        (
            minimal(json!({"stop_sequences": ["a", "b", "c", "d", "e"]})),
            "stop_sequences",
        ),
        (
            minimal(json!({"messages": [{"role": "tool", "content": "x"}]})),
            "messages[0].role",
        ),
        (
            minimal(json!({"messages": [{"role": "user", "content": [{"type": "audio"}]}]})),
            "messages[0].content[0].type",
        ),
        (
            minimal(json!({"messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "file", "file_id": "f"}}]}]})),
            "messages[0].content[0].source.type",
        ),
        (
            minimal(json!({"messages": [{"role": "user", "content": [
                {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "x"}}]}]})),
            "messages[0].content[0].source.type",
        ),
        (
            minimal(json!({"messages": [{"role": "assistant", "content": [
                {"type": "tool_use", "id": "t", "name": "f", "input": "x"}]}]})),
            "messages[0].content[0].input",
        ),
        (
            minimal(json!({"thinking": {"type": "sometimes"}})),
            "thinking.type",
        ),
        (
            minimal(json!({"output_config": {"effort": "extreme"}})),
            "output_config.effort",
        ),
        (
            minimal(
                json!({"tool_choice": {"type": "all"}, "tools": [{"name": "f", "input_schema": {}}]}),
            ),
            "tool_choice.type",
        ),
        (
            minimal(
                json!({"tools": [{"name": "f", "input_schema": {}}, {"name": "f", "input_schema": {}}]}),
            ),
            "tools",
        ),
        (
            minimal(json!({"system": [{"type": "image"}]})),
            "system[0].type",
        ),
    ];
    for (body, param) in cases {
        let (got, message) = refused(body.clone());
        assert_eq!(got, param, "{body}: {message}");
        assert!(!message.is_empty());
    }
    let e = translate(b"[1]").unwrap_err();
    assert_eq!(e.code, "invalid_json");
    let e = translate(br#"{"model":"m","model":"n","max_tokens":1,"messages":[]}"#).unwrap_err();
    assert!(e.message.contains("duplicate"), "{}", e.message);
    assert_eq!(param_name("stop"), "stop_sequences");
    assert_eq!(param_name("reasoning_effort"), "output_config.effort");
    assert_eq!(param_name("messages[3].content"), "messages");
    assert_eq!(param_name("temperature"), "temperature");
}

/// What an Anthropic client reassembles from the events: the message,
/// and the events as parsed.
#[derive(Debug, Default)]
pub(super) struct Reassembled {
    pub(super) thinking: String,
    pub(super) signature: String,
    pub(super) text: String,
    /// Each tool call: id, name, the input's JSON text.
    pub(super) calls: Vec<(String, String, String)>,
    pub(super) stop_reason: Option<String>,
    pub(super) usage: Value,
    pub(super) stopped: bool,
    pub(super) error: Option<Value>,
}

/// Reads the event stream as the SDKs do, checking its grammar: every
/// event named by its `event:` line as its `type` says, blocks opened,
/// written and closed one at a time with increasing indexes.
pub(super) fn reassemble(stream: &[u8]) -> (Reassembled, Vec<Value>) {
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
    let mut s = MessageStream::new(thinking_asked(), "req_7");
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
        s.chunk(&c, &mut out);
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
    assert_eq!(r.signature, format!("{SIGNATURE_PREFIX}7"));
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
fn empty_ids_continue_a_call_and_calls_are_capped() {
    let mut s = MessageStream::new(Asked::default(), "req_4");
    let mut out = Vec::new();
    s.chunk(
        &chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
        "function": {"name": "f", "arguments": "{\"a\""}}]}),
            None,
        ),
        &mut out,
    );
    // What some servers send on every later delta: an empty id and name.
    s.chunk(
        &chunk(
            json!({"tool_calls": [{"index": 0, "id": "", "type": "function",
        "function": {"name": "", "arguments": ":1}"}}]}),
            None,
        ),
        &mut out,
    );
    s.chunk(&chunk(json!({}), Some("tool_calls")), &mut out);
    s.end(End::Finished(Some("tool_calls")), None, &mut out);
    let (r, _) = reassemble(&out);
    assert_eq!(r.calls, [("call_a".into(), "f".into(), "{\"a\":1}".into())]);
    // A provider that starts calls without end: the first 256 are kept.
    let mut s = MessageStream::new(Asked::default(), "req_4");
    let mut out = Vec::new();
    for i in 0..300 {
        s.chunk(
            &chunk(
                json!({"tool_calls": [{"index": i, "id": format!("c{i}"),
            "function": {"name": "f", "arguments": "{}"}}]}),
                None,
            ),
            &mut out,
        );
    }
    s.end(End::Finished(Some("tool_calls")), None, &mut out);
    assert_eq!(reassemble(&out).0.calls.len(), 256);
}

#[test]
fn thinking_is_shown_as_asked() {
    let run = |asked: Asked| {
        let mut s = MessageStream::new(asked, "req_1");
        let mut out = Vec::new();
        s.chunk(
            &chunk(json!({"reasoning_content": "secret"}), None),
            &mut out,
        );
        s.chunk(&chunk(json!({"content": "ok"}), Some("stop")), &mut out);
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
        let mut s = MessageStream::new(Asked::default(), "req_1");
        let mut out = Vec::new();
        s.chunk(c.to_string().as_bytes(), &mut out);
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
        let b: Value =
            serde_json::from_slice(&body(Asked::default(), "req_1", &completion(&c), None))
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
    let mut s = MessageStream::new(Asked::default(), "req_2");
    let mut out = Vec::new();
    s.chunk(&chunk(json!({"content": "partial"}), None), &mut out);
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
    let mut s = MessageStream::new(Asked::default(), "req_2");
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
fn errors_take_the_anthropic_shape_and_status() {
    let provider = |status: u16, code: Option<&str>, message: &str| {
        let mut e =
            ApiError::upstream(UpstreamFault::Rejected, "The provider refused the request.");
        e.provider = Some(Box::new(ProviderError {
            status,
            code: code.map(str::to_owned),
            message: Some(message.into()),
            ..ProviderError::default()
        }));
        e
    };
    let cases = [
        (ApiError::invalid_api_key(true), 401, "authentication_error"),
        (ApiError::model_not_found("x"), 404, "not_found_error"),
        (
            ApiError::rate_limited("slow down", 3),
            429,
            "rate_limit_error",
        ),
        (
            ApiError::insufficient_quota("spent"),
            429,
            "rate_limit_error",
        ),
        (
            ApiError::invalid_value("x", "bad"),
            400,
            "invalid_request_error",
        ),
        (
            ApiError::request_too_large(10),
            413,
            "invalid_request_error",
        ),
        (ApiError::overloaded("busy"), 529, "overloaded_error"),
        (ApiError::upstream_timeout("slow"), 504, "timeout_error"),
        (
            ApiError::upstream(UpstreamFault::Reset, "reset"),
            502,
            "api_error",
        ),
        (provider(503, None, "busy"), 529, "overloaded_error"),
        (
            provider(400, Some("context_length_exceeded"), "too many tokens"),
            400,
            "invalid_request_error",
        ),
        (provider(500, None, "oops"), 502, "api_error"),
    ];
    for (e, status, kind) in cases {
        assert_eq!(errors::status_and_type(&e), (status, kind), "{e}");
        let b: Value = serde_json::from_slice(&errors::body(&e, "req_5")).unwrap();
        assert_eq!(b["type"], "error");
        assert_eq!(b["error"]["type"], kind);
        assert_eq!(b["request_id"], "req_5");
        assert!(!b["error"]["message"].as_str().unwrap().is_empty());
    }
    let b: Value = serde_json::from_slice(&errors::body(
        &provider(400, Some("context_length_exceeded"), "too many tokens"),
        "r",
    ))
    .unwrap();
    assert_eq!(b["error"]["message"], "prompt is too long: too many tokens");
    // vLLM's words, when max_tokens is what overflows, and when the prompt
    // alone does; the OpenAI API's.
    let cases = [
        (
            "'max_tokens' or 'max_completion_tokens' is too large: 32000. This model's maximum \
             context length is 32768 tokens and your request has 1000 input tokens (32000 > 32768 - 1000).",
            "input length and `max_tokens` exceed context limit: 1000 + 32000 > 32768, decrease \
             input length or `max_tokens` and try again",
        ),
        (
            "This model's maximum context length is 32768 tokens. However, you requested 40000 \
             tokens (8000 in the messages, 32000 in the completion). Please reduce the length.",
            "input length and `max_tokens` exceed context limit: 8000 + 32000 > 32768, decrease \
             input length or `max_tokens` and try again",
        ),
        (
            "This model's maximum context length is 32768 tokens. However, you requested 72000 \
             tokens (40000 in the messages, 32000 in the completion).",
            "prompt is too long: 40000 tokens > 32768 maximum",
        ),
        (
            "This model's maximum context length is 128000 tokens. However, your messages \
             resulted in 130000 tokens. Please reduce the length of the messages.",
            "prompt is too long: 130000 tokens > 128000 maximum",
        ),
    ];
    for (said, want) in cases {
        assert_eq!(errors::overflow_message(said), want);
        let b: Value =
            serde_json::from_slice(&errors::body(&provider(400, None, said), "r")).unwrap();
        assert_eq!(b["error"]["message"], want);
    }
    let b: Value =
        serde_json::from_slice(&errors::body(&ApiError::invalid_api_key(true), "r")).unwrap();
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("x-api-key")
    );
}

#[test]
fn the_shortcut_is_taken_for_a_chunk_shaped_like_the_last() {
    let provider = |delta: &str| {
        format!(
            r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":null}}]}}"#
        )
    };
    for asked in [thinking_asked(), Asked::default()] {
        let mut s = MessageStream::new(asked.clone(), "req_9");
        let mut out = Vec::new();
        s.chunk(
            provider(r#"{"role":"assistant","reasoning_content":"A"}"#).as_bytes(),
            &mut out,
        );
        s.chunk(
            provider(r#"{"reasoning_content":"B"}"#).as_bytes(),
            &mut out,
        );
        assert!(s.has_shape(), "learned from a chunk of one reasoning delta");
        s.chunk(
            provider(r#"{"reasoning_content":"C"}"#).as_bytes(),
            &mut out,
        );
        s.chunk(provider(r#"{"content":"Hi"}"#).as_bytes(), &mut out);
        s.chunk(provider(r#"{"content":" there"}"#).as_bytes(), &mut out);
        assert!(s.has_shape(), "learned from a chunk of one text delta");
        s.chunk(
            provider(r#"{"content":", \"you\"\n"}"#).as_bytes(),
            &mut out,
        );
        // A quote the shape cannot hold: read the long way, and right.
        s.chunk(
            provider(r#"{"content":"a","refusal":null}"#).as_bytes(),
            &mut out,
        );
        // Shaped alike, but what the shortcut does not copy as it is.
        s.chunk(provider(r#"{"content":"b"}"#).as_bytes(), &mut out);
        s.chunk(provider(r#"{"content":"\ud800"}"#).as_bytes(), &mut out);
        s.chunk(
            provider(r#"{"content":"\ud83d\ude00"}"#).as_bytes(),
            &mut out,
        );
        let mut bad = provider(r#"{"content":"cX"}"#).into_bytes();
        let at = bad.iter().position(|&b| b == b'X').unwrap();
        bad[at] = 0xff;
        s.chunk(&bad, &mut out);
        // Reasoning after the text: a new thinking block, not the text's.
        s.chunk(
            provider(r#"{"reasoning_content":"D"}"#).as_bytes(),
            &mut out,
        );
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
    use crate::dialect::tests::{Delta, chat_view, chunks, delta};

    /// The translation of `chunks`, with the same-shape shortcut or
    /// without.
    fn run(chunks: &[Vec<u8>], asked: &Asked, shortcut: bool) -> Vec<u8> {
        let mut s = MessageStream::new(asked.clone(), "req_8");
        if !shortcut {
            s = s.without_shortcut();
        }
        let mut out = Vec::new();
        for c in chunks {
            s.chunk(c, &mut out);
        }
        s.chunk(&chunk(json!({}), Some("stop")), &mut out);
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
        ) {
            let deltas: Vec<Delta> = texts.into_iter().chain(calls).collect();
            let chunks = chunks(&deltas);
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
        ) {
            let asked = Asked { thinking, omit_thinking, ..Asked::default() };
            let chunks = chunks(&deltas);
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
