//! The translators alone, for instruction counts (`bench/translate-cost.sh`
//! runs this under callgrind twice and prints the difference per run):
//!
//!   translate_cost WORKLOAD N
//!
//! `responses`, `messages`, `gemini`: the answer side, one 98-chunk stream
//! as the simulator writes it (a first chunk with the role, 59 more
//! `reasoning_content` deltas, 37 `content` deltas, the finish) translated
//! into the API's events. `req-responses`, `req-messages`, `req-gemini`:
//! the request side, a coding agent's conversation (40 tool-use rounds, 20
//! tools, 22–33 KB) translated into a chat request. Each N times; prints
//! the bytes written, so that nothing is optimized away.

use std::sync::Arc;

use chatgate_core::dialect::{Carry, End};
use chatgate_core::reasoning::ReasoningSeal;
use serde_json::{Value, json};

const WORDS: [&str; 8] = [
    "combine ",
    "steps ",
    "structure ",
    "up ",
    "matter ",
    "clear ",
    "simpler ",
    "view ",
];

/// The simulator's chunk carrying `delta` (and `finish`).
fn chunk(delta: Value, finish: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "id": "chatcmpl-18a604f262ee8eef00000001", "object": "chat.completion.chunk",
        "created": 1_796_221_650, "model": "reasoning-model-k3", "system_fingerprint": "fp_sim",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
    }))
    .expect("json")
}

fn stream() -> Vec<Vec<u8>> {
    let mut chunks = vec![chunk(
        json!({"role": "assistant", "content": null, "reasoning_content": WORDS[0]}),
        Value::Null,
    )];
    chunks.extend((1..60).map(|i| chunk(json!({"reasoning_content": WORDS[i % 8]}), Value::Null)));
    chunks.extend((0..37).map(|i| chunk(json!({"content": WORDS[i % 8]}), Value::Null)));
    chunks.push(chunk(json!({}), json!("stop")));
    chunks
}

/// A tool's output, as agents send it back.
const OUTPUT: &str = "fn handle() {\n    let x = compute();\n    println!(\"{}\", x);\n}\n";

fn messages_body() -> Value {
    let mut messages = vec![json!({"role": "user", "content": "Fix the bug in src/mod0.rs."})];
    for i in 0..40 {
        messages.push(json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I should read the file first.", "signature": "sig"},
            {"type": "text", "text": "Let me read the file."},
            {"type": "tool_use", "id": format!("toolu_{i:04}"), "name": "Read",
             "input": {"file_path": format!("/repo/src/mod{i}.rs")}}]}));
        messages.push(json!({"role": "user", "content": [{"type": "tool_result",
            "tool_use_id": format!("toolu_{i:04}"),
            "content": [{"type": "text", "text": OUTPUT.repeat(3)}]}]}));
    }
    let tools: Vec<Value> = (0..20)
        .map(|t| {
            json!({"name": format!("Tool{t}"),
        "description": "Does a thing with the repository. ".repeat(5),
        "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}},
                         "required": ["file_path"]}})
        })
        .collect();
    json!({"model": "m", "max_tokens": 4096, "stream": true, "system": "You are a coding agent. ".repeat(20),
           "thinking": {"type": "adaptive"}, "tools": tools, "messages": messages})
}

fn responses_body() -> Value {
    let mut input =
        vec![json!({"role": "user", "content": [{"type": "input_text", "text": "Fix the bug."}]})];
    for i in 0..40 {
        input.push(json!({"type": "reasoning", "id": format!("rs_{i}"),
            "summary": [{"type": "summary_text", "text": "I should read the file first."}]}));
        input.push(
            json!({"type": "function_call", "call_id": format!("call_{i}"), "name": "tool1",
            "arguments": json!({"file_path": format!("/repo/src/mod{i}.rs")}).to_string()}),
        );
        input.push(json!({"type": "function_call_output", "call_id": format!("call_{i}"), "output": OUTPUT.repeat(3)}));
        input.push(json!({"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": "Let me read the next file."}]}));
    }
    let tools: Vec<Value> = (0..20)
        .map(|t| {
            json!({"type": "function", "name": format!("tool{t}"),
        "description": "Does a thing with the repository. ".repeat(5),
        "parameters": {"type": "object", "properties": {"file_path": {"type": "string"}}}})
        })
        .collect();
    json!({"model": "m", "stream": true, "store": false, "instructions": "You are Codex. ".repeat(30),
           "tools": tools, "input": input})
}

fn gemini_body() -> Value {
    let mut contents = vec![json!({"role": "user", "parts": [{"text": "Fix the bug."}]})];
    for i in 0..40 {
        contents.push(json!({"role": "model", "parts": [{"text": "Let me read the file."},
            {"functionCall": {"name": "read_file", "args": {"path": format!("/repo/src/mod{i}.rs")}}}]}));
        contents.push(
            json!({"role": "user", "parts": [{"functionResponse": {"name": "read_file",
            "response": {"output": OUTPUT.repeat(3)}}}]}),
        );
    }
    let declarations: Vec<Value> = (0..20)
        .map(|t| {
            json!({"name": format!("fn{t}"),
        "description": "Does a thing. ".repeat(5),
        "parameters": {"type": "OBJECT", "properties": {"path": {"type": "STRING"}}}})
        })
        .collect();
    json!({"systemInstruction": {"parts": [{"text": "You are Gemini CLI. ".repeat(30)}]},
           "contents": contents, "tools": [{"functionDeclarations": declarations}],
           "generationConfig": {"thinkingConfig": {"includeThoughts": true}}})
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (workload, n) = match &args[..] {
        [_, w, n] => (w.as_str(), n.parse::<usize>().expect("a count")),
        _ => panic!("usage: translate_cost WORKLOAD N"),
    };
    let seal = Arc::new(ReasoningSeal::new(
        b"the translators' own deployment secret",
    ));
    let chunks = stream();
    let body = |v: Value| serde_json::to_vec(&v).expect("json");
    let (messages, responses, gemini) = (
        body(messages_body()),
        body(responses_body()),
        body(gemini_body()),
    );
    let mut written = 0;
    for _ in 0..n {
        let carry = Carry::new(Arc::clone(&seal));
        let mut out = Vec::with_capacity(4096);
        let mut feed = |chunk: &mut dyn FnMut(&[u8], &mut Vec<u8>)| {
            for c in &chunks {
                chunk(c, &mut out);
                written += out.len();
                out.clear();
            }
        };
        match workload {
            "responses" => {
                use chatgate_core::dialect::responses::events::ResponseStream;
                use chatgate_core::dialect::responses::request::Asked;
                let asked = Asked {
                    stream: true,
                    ..Asked::default()
                };
                let mut s = ResponseStream::new(asked, "req_00ff", 1, carry);
                feed(&mut |c, o| s.chunk(c, o).expect("within the budget"));
                s.end(End::Finished(Some("stop")), None, &mut out);
            }
            "messages" => {
                use chatgate_core::dialect::messages::events::MessageStream;
                use chatgate_core::dialect::messages::request::Asked;
                let asked = Asked {
                    stream: true,
                    thinking: true,
                    omit_thinking: false,
                    model: b"\"m\"".to_vec(),
                };
                let mut s = MessageStream::new(asked, "req_1", carry);
                feed(&mut |c, o| s.chunk(c, o).expect("within the budget"));
                s.end(End::Finished(Some("stop")), None, &mut out);
            }
            "gemini" => {
                use chatgate_core::dialect::gemini::events::GeminiStream;
                use chatgate_core::dialect::gemini::request::Asked;
                let asked = Asked {
                    model: b"\"m\"".to_vec(),
                    stream: true,
                    sse: true,
                    thoughts: true,
                };
                let mut s = GeminiStream::new(asked, "req_1", carry);
                feed(&mut |c, o| s.chunk(c, o).expect("within the budget"));
                s.end(End::Finished(Some("stop")), None, &mut out);
            }
            "req-messages" => {
                let (chat, _) =
                    chatgate_core::dialect::messages::request::translate(&messages, None)
                        .expect("valid");
                out = chat;
            }
            "req-responses" => {
                let (chat, _) =
                    chatgate_core::dialect::responses::request::translate(&responses, None, None)
                        .expect("valid");
                out = chat;
            }
            "req-gemini" => {
                let (chat, _) = chatgate_core::dialect::gemini::request::translate(
                    &gemini, "m", true, true, None,
                )
                .expect("valid");
                out = chat;
            }
            other => panic!("no workload {other}"),
        }
        written += out.len();
    }
    println!("{written}");
}
