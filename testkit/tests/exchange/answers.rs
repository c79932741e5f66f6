//! Answers that go right: non-streamed and streamed, byte for byte what
//! the provider sent, what is forwarded to it, tool calls, a client that
//! writes byte by byte.

use chatgate_core::http::HeadScanner;
use chatgate_testkit::{Pair, sse_data};
use serde_json::{Value, json};

use crate::common::{MODEL, body, chunks, one, send, stream_body, upstream_sse};

#[test]
fn non_streamed_answer_with_reasoning_and_exact_ledger() {
    let mut pair = Pair::with_defaults();
    send(&mut pair, &body(""));
    let r = one(&pair);
    assert_eq!(r.status, 200);
    assert!(r.header("x-request-id").unwrap().starts_with("req_"));
    assert_eq!(r.header("x-ratelimit-limit-requests"), Some("60"));
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("59"));
    assert!(r.header("date").is_some());
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert!(
        v["choices"][0]["message"]["reasoning_content"]
            .as_str()
            .unwrap()
            .len()
            > 10
    );
    assert!(
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .starts_with("You said:")
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // The body is the provider's, byte for byte.
    let sim_body = {
        let b = &pair.upstream_sent;
        let len = HeadScanner::new().scan(b, 65536).unwrap().unwrap();
        b[len..].to_vec()
    };
    assert_eq!(r.body, sim_body);
    // The ledger.
    assert_eq!(pair.ledger.len(), 1);
    let rec = &pair.ledger[0];
    let u = &v["usage"];
    assert_eq!(rec.prompt_tokens, u["prompt_tokens"].as_u64().unwrap());
    assert_eq!(
        rec.completion_tokens,
        u["completion_tokens"].as_u64().unwrap()
    );
    assert_eq!(
        rec.reasoning_tokens,
        u["completion_tokens_details"]["reasoning_tokens"]
            .as_u64()
            .unwrap()
    );
    assert_eq!(
        rec.cost_nano_usd,
        rec.prompt_tokens * 2850 + rec.completion_tokens * 14250
    );
    assert_eq!(
        (
            rec.status,
            rec.stream,
            rec.complete,
            rec.client_disconnected
        ),
        (200, false, true, false)
    );
    assert_eq!(rec.finish_reason.as_deref(), Some("stop"));
    assert_eq!(rec.key, "test-key");
    assert_eq!(rec.model, MODEL);
    assert_eq!(Some(rec.request_id.as_str()), r.header("x-request-id"));
    // The simulator saw the provider's id for our request (a UUID, linked
    // to ours in the ledger) and the original body.
    let j = pair.sim.journal();
    let provider_id = chatgate_core::provider_request_id(&rec.request_id, 1);
    assert_eq!(j[0].request_id.as_deref(), Some(provider_id.as_str()));
    assert_eq!(
        rec.provider_request_id.as_deref(),
        Some(provider_id.as_str())
    );
    assert_eq!(j[0].body, body(""));
}

#[test]
fn streamed_answer_order_usage_and_byte_equality() {
    let mut pair = Pair::with_defaults();
    send(&mut pair, &stream_body(""));
    let r = one(&pair);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("text/event-stream; charset=utf-8")
    );
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    // Byte for byte what the provider sent.
    assert_eq!(r.body, upstream_sse(&pair));
    let data = sse_data(&r.body);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let cs = chunks(&r);
    // 1: reasoning first, role on the first chunk.
    assert_eq!(cs[0]["choices"][0]["delta"]["role"], "assistant");
    let mut phase = 0;
    let (mut reasoning, mut content) = (String::new(), String::new());
    for c in &cs {
        let choices = c["choices"].as_array().unwrap();
        if choices.is_empty() {
            assert!(c["usage"].is_object());
            assert!(phase >= 2);
            phase = 3;
            continue;
        }
        let d = &choices[0]["delta"];
        if let Some(t) = d["reasoning_content"].as_str() {
            assert_eq!(phase, 0, "reasoning after answer");
            reasoning.push_str(t);
        } else if let Some(t) = d["content"].as_str() {
            assert!(phase <= 1);
            phase = 1;
            content.push_str(t);
        } else if choices[0]["finish_reason"].is_string() {
            assert_eq!(d, &json!({}));
            phase = 2;
        }
    }
    assert_eq!(phase, 3, "usage chunk last before [DONE]");
    assert!(content.starts_with("You said: What is two plus two?"));
    assert!(!reasoning.is_empty());
    // include_usage was forced upstream although the client did not ask.
    let sent: Value = serde_json::from_str(&pair.sim.journal()[0].body).unwrap();
    assert_eq!(sent["stream_options"], json!({"include_usage": true}));
    let rec = &pair.ledger[0];
    let usage = &cs.last().unwrap()["usage"];
    assert_eq!(rec.prompt_tokens, usage["prompt_tokens"].as_u64().unwrap());
    assert_eq!(
        rec.completion_tokens,
        usage["completion_tokens"].as_u64().unwrap()
    );
    assert!(rec.stream && rec.complete);
    // The ledger line was appended before the client had the whole response.
    assert!(pair.ledger_at[0] < pair.received.len());
}

#[test]
fn unknown_parameters_and_reasoning_content_forwarding() {
    let mut pair = Pair::with_defaults();
    let b = r#"{"seed":42,"model":"reasoning-model-k3","presence_penalty":0.5,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b","reasoning_content":"old thoughts"},{"role":"user","content":"c"}],"frequency_penalty":1.0,"response_format":{"type":"text"},"parallel_tool_calls":true,"user":"u-1","logit_bias":{"50256":-100}}"#;
    send(&mut pair, b);
    assert_eq!(one(&pair).status, 200);
    let got = &pair.sim.journal()[0].body;
    assert_eq!(
        got,
        r#"{"seed":42,"model":"reasoning-model-k3","presence_penalty":0.5,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}],"frequency_penalty":1.0,"response_format":{"type":"text"},"parallel_tool_calls":true,"user":"u-1","logit_bias":{"50256":-100}}"#
    );
}

#[test]
fn tool_call_round_trip() {
    let mut pair = Pair::with_defaults();
    let tools = r#""tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]"#;
    send(
        &mut pair,
        &format!(
            r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"Paris"}}],{tools}}}"#
        ),
    );
    let v = one(&pair).json();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    let call = v["choices"][0]["message"]["tool_calls"][0].clone();
    let id = call["id"].as_str().unwrap();
    pair.received.clear();
    let follow = format!(
        r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"Paris"}},{{"role":"assistant","content":null,"tool_calls":[{call}]}},{{"role":"tool","tool_call_id":"{id}","content":"sunny"}}],{tools}}}"#
    );
    send(&mut pair, &follow);
    let v = one(&pair).json();
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert!(
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .contains("sunny")
    );
    // Streamed tool calls too.
    pair.received.clear();
    send(
        &mut pair,
        &format!(
            r#"{{"model":"{MODEL}","stream":true,"messages":[{{"role":"user","content":"Paris"}}],{tools}}}"#
        ),
    );
    let r = one(&pair);
    let cs = chunks(&r);
    assert!(
        cs.iter()
            .any(|c| c["choices"][0]["delta"]["tool_calls"].is_array())
    );
    assert_eq!(
        pair.ledger.last().unwrap().finish_reason.as_deref(),
        Some("tool_calls")
    );
}

#[test]
fn length_with_empty_content() {
    let mut pair = Pair::with_defaults();
    send(&mut pair, &body(r#""max_tokens":3"#));
    let v = one(&pair).json();
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["choices"][0]["message"]["content"], "");
    assert_eq!(v["usage"]["completion_tokens"], 3);
    assert_eq!(pair.ledger[0].finish_reason.as_deref(), Some("length"));
}

#[test]
fn byte_by_byte_client_gives_the_same_answer() {
    let mut whole = Pair::with_defaults();
    send(&mut whole, &stream_body(""));
    let mut dribble = Pair::with_defaults();
    let req = Pair::chat_request(&dribble.key.clone(), &stream_body(""));
    for b in &req {
        dribble.client_send(std::slice::from_ref(b));
    }
    let (a, b) = (one(&whole), one(&dribble));
    assert_eq!(a.body, b.body);
    assert_eq!(a.status, b.status);
}
