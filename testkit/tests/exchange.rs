//! Whole conversations through the exchange, in memory, on a virtual clock:
//! client ↔ Connection ↔ simulated provider.

use std::time::Duration;

use chatgate_core::LedgerRecord;
use chatgate_core::Limits;
use chatgate_core::UpstreamFailure;
use chatgate_core::http::BodyDecoder;
use chatgate_core::http::parse_response_head;
use chatgate_core::http::{HeadScanner, HttpLimits};
use chatgate_sim::{ExchangeEnd, SimOptions};
use chatgate_testkit::{
    ClientResponse, Pair, ProviderScript, UpstreamReads, parse_responses, sse_data,
};
use serde_json::{Value, json};

const MODEL: &str = "reasoning-model-k3";

fn body(extra: &str) -> String {
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!(",{extra}")
    };
    format!(
        r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"What is two plus two?"}}]{extra}}}"#
    )
}

fn stream_body(extra: &str) -> String {
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!(",{extra}")
    };
    body(&format!(r#""stream":true{extra}"#))
}

fn send(pair: &mut Pair, body: &str) {
    let req = Pair::chat_request(&pair.key.clone(), body);
    pair.client_send(&req);
}

fn responses(pair: &Pair) -> Vec<ClientResponse> {
    parse_responses(&pair.received).expect("well-formed responses")
}

fn one(pair: &Pair) -> ClientResponse {
    let mut r = responses(pair);
    assert_eq!(r.len(), 1, "{:?}", String::from_utf8_lossy(&pair.received));
    r.remove(0)
}

/// The SSE body the simulator sent, de-chunked.
fn upstream_sse(pair: &Pair) -> Vec<u8> {
    let bytes = &pair.upstream_sent;
    let len = HeadScanner::new().scan(bytes, 65536).unwrap().unwrap();
    let head = parse_response_head(&bytes[..len], &HttpLimits::default()).unwrap();
    let mut d = BodyDecoder::new(
        head.framing,
        HttpLimits {
            max_body: u64::MAX,
            ..HttpLimits::default()
        },
    );
    let mut out = Vec::new();
    let _ = d.decode(&bytes[len..], &mut out);
    out
}

fn chunks(resp: &ClientResponse) -> Vec<Value> {
    sse_data(&resp.body)
        .into_iter()
        .filter(|d| d != "[DONE]")
        .map(|d| serde_json::from_str(&d).expect("chunk JSON"))
        .collect()
}

fn error_of(resp: &ClientResponse) -> (u16, String, String, Value) {
    let v = resp.json();
    (
        resp.status,
        v["error"]["type"].as_str().unwrap_or("").to_owned(),
        v["error"]["code"].as_str().unwrap_or("").to_owned(),
        v["error"]["param"].clone(),
    )
}

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
fn invalid_requests_never_reach_the_provider() {
    let mut pair = Pair::with_defaults();
    send(&mut pair, &body(r#""temperature":3"#));
    send(
        &mut pair,
        r#"{"model":"nope","messages":[{"role":"user","content":"x"}]}"#,
    );
    send(&mut pair, "{not json");
    let rs = responses(&pair);
    assert_eq!(
        error_of(&rs[0]),
        (
            400,
            "invalid_request_error".into(),
            "invalid_value".into(),
            json!("temperature")
        )
    );
    assert_eq!(
        error_of(&rs[1]),
        (
            404,
            "invalid_request_error".into(),
            "model_not_found".into(),
            json!("model")
        )
    );
    assert_eq!(error_of(&rs[2]).2, "invalid_json");
    assert_eq!(pair.upstream_opened, 0);
    assert!(pair.sim.journal().is_empty());
    // Metered as rejected requests, on the same connection.
    assert_eq!(
        pair.ledger.iter().map(|r| r.status).collect::<Vec<_>>(),
        [400, 404, 400]
    );
    assert_eq!(pair.ledger[0].error.as_deref(), Some("invalid_value"));
    assert!(!pair.client_closed);
}

#[test]
fn body_size_limit_is_exact() {
    let mut pair = Pair::with_defaults();
    let limit = 2 * 1024 * 1024;
    let mut exact = body(r#""pad":"PAD""#);
    let pad = limit - exact.len() + 3;
    exact = exact.replace("PAD", &"x".repeat(pad));
    assert_eq!(exact.len(), limit);
    send(&mut pair, &exact);
    assert_eq!(one(&pair).status, 200);

    let mut pair = Pair::with_defaults();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {}\r\nContent-Length: {}\r\n\r\n",
        pair.key,
        limit + 1
    );
    // Decided from Content-Length, before a single body byte.
    pair.client_send(head.as_bytes());
    let r = one(&pair);
    assert_eq!(
        error_of(&r),
        (
            413,
            "invalid_request_error".into(),
            "request_too_large".into(),
            Value::Null
        )
    );
    assert_eq!(r.header("connection"), Some("close"));
    assert!(pair.client_closed);

    // A chunked body is counted while it is decoded.
    let mut pair = Pair::with_defaults();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {}\r\nTransfer-Encoding: chunked\r\n\r\n",
        pair.key
    );
    pair.client_send(head.as_bytes());
    let chunk = format!("100000\r\n{}\r\n", "x".repeat(0x100000));
    pair.client_send(chunk.as_bytes());
    pair.client_send(chunk.as_bytes());
    assert!(pair.received.is_empty());
    pair.client_send(b"1\r\nx\r\n");
    assert_eq!(one(&pair).status, 413);
}

#[test]
fn routes_methods_and_auth() {
    let mut pair = Pair::with_defaults();
    let key = pair.key.clone();
    for path in [
        "/v1/embeddings",
        "/v1/completions",
        "/v1/images/generations",
        "/v2/models",
        "/",
    ] {
        pair.client_send(
            format!("POST {path} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\n\r\n")
                .as_bytes(),
        );
    }
    // Route comes before auth: an unknown path without a key is still 404.
    pair.client_send(b"GET /v1/nothing HTTP/1.1\r\nHost: gw\r\n\r\n");
    pair.client_send(b"GET /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n\r\n");
    pair.client_send(b"GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n");
    pair.client_send(b"GET /v1/models HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer sk-cg-0000000000000000000000000000000000000000000\r\n\r\n");
    pair.client_send(
        format!("GET /v1/models?x=1 HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\n\r\n")
            .as_bytes(),
    );
    let rs = responses(&pair);
    for r in &rs[..6] {
        assert_eq!(error_of(r).2, "unknown_url");
        assert_eq!(r.status, 404);
    }
    assert_eq!(rs[6].status, 405);
    assert_eq!(rs[6].header("allow"), Some("POST"));
    assert_eq!(rs[6].json()["error"]["code"], "method_not_allowed");
    assert_eq!(
        error_of(&rs[7]),
        (
            401,
            "authentication_error".into(),
            "invalid_api_key".into(),
            Value::Null
        )
    );
    assert_eq!(error_of(&rs[8]).0, 401);
    assert_eq!(rs[9].status, 200);
    let v = rs[9].json();
    assert_eq!(v["object"], "list");
    assert_eq!(
        v["data"][0],
        json!({"id": MODEL, "object": "model", "created": 0, "owned_by": "chatgate"})
    );
    assert_eq!(rs[9].header("x-ratelimit-limit-tokens"), Some("100000"));
    // Unauthenticated and model-list requests are not metered.
    assert!(pair.ledger.is_empty());
    assert!(!pair.client_closed);
}

#[test]
fn a_keep_alive_connection_can_change_keys() {
    // The per-connection authentication cache never lets a different
    // value through, nor a key removed by a reload.
    let mut pair = Pair::with_defaults();
    let key = pair.key.clone();
    let models = |k: &str| {
        format!("GET /v1/models HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {k}\r\n\r\n")
    };
    pair.client_send(models(&key).as_bytes());
    pair.client_send(models(&key).as_bytes());
    let mut wrong = key.clone();
    wrong.pop();
    wrong.push(if key.ends_with('A') { 'B' } else { 'A' });
    pair.client_send(models(&wrong).as_bytes());
    pair.client_send(models(&key).as_bytes());
    pair.gateway
        .replace_keys(chatgate_core::KeyTable::default());
    pair.client_send(models(&key).as_bytes());
    let statuses: Vec<u16> = responses(&pair).iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 200, 401, 200, 401]);
}

#[test]
fn request_rate_limit_with_retry_after() {
    let limits = Limits {
        requests_per_minute: 2,
        tokens_per_minute: 100_000,
    };
    let mut pair = Pair::new(|_| {}, SimOptions::default(), limits);
    for _ in 0..3 {
        send(&mut pair, &body(""));
    }
    let rs = responses(&pair);
    assert_eq!((rs[0].status, rs[1].status), (200, 200));
    assert_eq!(
        error_of(&rs[2]),
        (
            429,
            "rate_limit_error".into(),
            "rate_limit_exceeded".into(),
            Value::Null
        )
    );
    assert_eq!(rs[2].header("retry-after"), Some("30"));
    assert_eq!(rs[2].header("x-ratelimit-remaining-requests"), Some("0"));
    assert_eq!(pair.sim.journal().len(), 2);
    // After the advertised wait it succeeds.
    pair.advance(Duration::from_secs(30));
    pair.received.clear();
    send(&mut pair, &body(""));
    assert_eq!(one(&pair).status, 200);
}

#[test]
fn token_rate_limit_with_retry_after() {
    let limits = Limits {
        requests_per_minute: 100,
        tokens_per_minute: 600,
    };
    let mut pair = Pair::new(|_| {}, SimOptions::default(), limits);
    send(&mut pair, &body(r#""max_tokens":500"#));
    assert_eq!(one(&pair).status, 200);
    pair.received.clear();
    // The first request used ~60 tokens of its 500+ reservation; this one
    // reserves more than what is left.
    send(&mut pair, &body(r#""max_tokens":590"#));
    let r = one(&pair);
    assert_eq!(r.status, 429);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tokens")
    );
    let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait));
    pair.advance(Duration::from_secs(wait));
    pair.received.clear();
    send(&mut pair, &body(r#""max_tokens":590"#));
    assert_eq!(one(&pair).status, 200);
}

#[test]
fn provider_rejections_become_502() {
    for (fault, stream) in [
        ("reject,status=400,message=context too long", false),
        ("reject,status=500", true),
        ("reject,status=400", true),
    ] {
        let mut pair = Pair::with_defaults();
        let extra = format!(
            r#""x_sim":{{{}}}"#,
            fault
                .split(',')
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap_or(("fault", kv));
                    format!(r#""{k}":"{v}""#)
                })
                .collect::<Vec<_>>()
                .join(",")
        );
        let b = if stream {
            stream_body(&extra)
        } else {
            body(&extra)
        };
        send(&mut pair, &b);
        let r = one(&pair);
        let (status, kind, code, _) = error_of(&r);
        assert_eq!(
            (status, kind.as_str(), code.as_str()),
            (502, "upstream_error", "upstream_error"),
            "{fault}"
        );
        let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(
            msg.contains("HTTP 400") || msg.contains("HTTP 500"),
            "{msg}"
        );
        if fault.contains("context") {
            assert!(msg.contains("context too long"), "{msg}");
        }
        assert_eq!(pair.ledger[0].status, 502);
        assert_eq!(
            pair.ledger[0].upstream_status,
            Some(if fault.contains("500") { 500 } else { 400 })
        );
        assert!(!pair.client_closed, "the client connection survives");
    }
}

#[test]
fn provider_429_keeps_its_retry_after() {
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &body(r#""x_sim":{"fault":"reject","status":429,"retry_after":7}"#),
    );
    let r = one(&pair);
    assert_eq!(r.status, 502);
    assert_eq!(r.header("retry-after"), Some("7"));
}

#[test]
fn provider_without_done_gets_one_appended() {
    let mut pair = Pair::with_defaults();
    send(&mut pair, &stream_body(r#""x_sim":{"fault":"omit_done"}"#));
    let r = one(&pair);
    let data = sse_data(&r.body);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(data.iter().filter(|d| *d == "[DONE]").count(), 1);
    assert!(!sse_data(&upstream_sse(&pair)).contains(&"[DONE]".to_string()));
    let rec = &pair.ledger[0];
    assert!(rec.complete);
    assert!(rec.completion_tokens > 0);
}

#[test]
fn provider_reset_mid_stream_is_incomplete() {
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"reset","after":4}"#),
    );
    let r = one(&pair);
    assert_eq!(r.status, 200);
    let data = sse_data(&r.body);
    assert_eq!(data.len(), 5);
    assert_eq!(data[4], "[DONE]");
    assert!(
        chunks(&r)
            .iter()
            .all(|c| c["choices"][0]["finish_reason"].is_null())
    );
    let rec = &pair.ledger[0];
    assert!(!rec.complete);
    assert_eq!(rec.finish_reason, None);
    assert_eq!(rec.error.as_deref(), Some("upstream_reset"));
    assert_eq!((rec.prompt_tokens, rec.completion_tokens), (0, 0));
}

#[test]
fn reset_after_usage_meters_the_last_reported_usage() {
    let mut pair = Pair::with_defaults();
    // Reset right before [DONE]: finish and usage were already sent.
    let mut probe = Pair::with_defaults();
    send(&mut probe, &stream_body(""));
    let events = sse_data(&one(&probe).body).len();
    send(
        &mut pair,
        &stream_body(&format!(
            r#""x_sim":{{"fault":"reset","after":{}}}"#,
            events - 1
        )),
    );
    let rec = &pair.ledger[0];
    assert!(rec.complete, "finish_reason arrived");
    assert_eq!(rec.completion_tokens, probe.ledger[0].completion_tokens);
    assert_eq!(
        sse_data(&one(&pair).body).last().map(String::as_str),
        Some("[DONE]")
    );
}

#[test]
fn client_disconnect_aborts_the_provider_at_every_phase() {
    // While a non-streamed answer is awaited (a slow provider, and one that
    // never sends its head), before the first event of a stream, and
    // mid-stream. (While connecting: `client_disconnect_while_connecting_
    // never_reaches_the_provider`.)
    let cases: [(&str, Option<Duration>); 4] = [
        (
            r#""x_sim":{"ttft_ms":5000}"#,
            Some(Duration::from_millis(10)),
        ),
        (r#""x_sim":{"fault":"stall_headers"}"#, None),
        (
            r#""stream":true,"x_sim":{"ttft_ms":5000}"#,
            Some(Duration::from_millis(10)),
        ),
        (
            r#""stream":true,"x_sim":{"token_ms":100}"#,
            Some(Duration::from_millis(350)),
        ),
    ];
    for (extra, wait) in cases {
        let mut pair = Pair::with_defaults();
        send(&mut pair, &body(extra));
        if let Some(w) = wait {
            pair.advance(w);
        }
        pair.client_close();
        let j = pair.sim.journal();
        assert_eq!(j[0].outcome, ExchangeEnd::Aborted, "{extra}");
        let rec = &pair.ledger[0];
        assert!(rec.client_disconnected);
        assert!(pair.client_closed);
        if extra.contains("token_ms") {
            assert_eq!(rec.status, 200);
            assert!(!rec.complete);
        } else {
            assert_eq!(rec.status, 499);
        }
    }
    // While the body is still arriving, before the provider is asked.
    let mut pair = Pair::with_defaults();
    pair.connect_failures.clear();
    let req = Pair::chat_request(&pair.key.clone(), &body(""));
    let conn_only = &req[..req.len() - 5];
    pair.client_send(conn_only);
    pair.client_close();
    assert_eq!(pair.ledger[0].status, 499);
    assert!(pair.sim.journal().is_empty());
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
fn keep_alive_reuses_the_provider_connection_and_pipelining_keeps_order() {
    let mut pair = Pair::with_defaults();
    let key = pair.key.clone();
    let mut two = Pair::chat_request(&key, &body(r#""user":"first""#));
    two.extend_from_slice(&Pair::chat_request(
        &key,
        &stream_body(r#""user":"second""#),
    ));
    two.extend_from_slice(
        format!("GET /v1/models HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\n\r\n")
            .as_bytes(),
    );
    pair.client_send(&two);
    let rs = responses(&pair);
    assert_eq!(rs.len(), 3);
    assert_eq!(rs[0].header("content-type"), Some("application/json"));
    assert_eq!(
        rs[1].header("content-type"),
        Some("text/event-stream; charset=utf-8")
    );
    assert_eq!(rs[2].json()["object"], "list");
    assert_eq!((pair.upstream_opened, pair.upstream_reused), (1, 1));
    let j = pair.sim.journal();
    assert!(j[0].body.contains("first") && j[1].body.contains("second"));
}

#[test]
fn chunked_request_body_and_expect_continue() {
    let mut pair = Pair::with_defaults();
    let b = body("");
    let (a, c) = b.split_at(10);
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {}\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n",
        pair.key
    );
    pair.client_send(req.as_bytes());
    assert_eq!(pair.received, b"HTTP/1.1 100 Continue\r\n\r\n");
    pair.client_send(
        format!(
            "{:x}\r\n{a}\r\n{:x};ext=1\r\n{c}\r\n0\r\nTrailer: x\r\n\r\n",
            a.len(),
            c.len()
        )
        .as_bytes(),
    );
    assert_eq!(one(&pair).status, 200);
    assert_eq!(pair.sim.journal()[0].body, b);

    // Not admissible: the final answer at once, no 100.
    let mut pair = Pair::with_defaults();
    pair.client_send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n");
    let r = one(&pair);
    assert_eq!(r.status, 401);
    assert!(!String::from_utf8_lossy(&pair.received).contains("100 Continue"));
    assert!(
        pair.client_closed,
        "the unread body means the connection closes"
    );
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

#[test]
fn smuggling_and_malformed_requests_close_the_connection() {
    for raw in [
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
        "GET /v1/models HTTP/1.1\nHost: gw\n\n",
        "GET /v1/models HTTP/1.1\r\nHost: gw\r\nX: a\r\n  folded\r\n\r\n",
        "GET /v1/models HTTP/1.1\r\nHost: g\0w\r\n\r\n",
        "\x16\x03\x01\x02\x00\x01\x00\x01\x7f\x03\x03\r\n\r\n",
    ] {
        let mut pair = Pair::with_defaults();
        pair.client_send(raw.as_bytes());
        let r = one(&pair);
        assert_eq!(r.status, 400, "{raw:?}");
        assert_eq!(r.header("connection"), Some("close"));
        assert!(pair.client_closed, "{raw:?}");
    }
    let mut pair = Pair::with_defaults();
    let mut big = String::from("GET /v1/models HTTP/1.1\r\nHost: gw\r\n");
    big.push_str(&format!("X-Big: {}\r\n\r\n", "a".repeat(70_000)));
    pair.client_send(big.as_bytes());
    assert_eq!(one(&pair).status, 431);
}

/// A provider that keeps a finished stream open with `: keep-alive`
/// comments after its usage chunk: the client has its whole answer, so the
/// stream ends with `[DONE]` 2 s after the usage chunk (not after the
/// 30-second tail timeout), metered complete and without an error; the
/// provider connection is closed, not pooled.
#[test]
fn keep_alive_comments_after_the_usage_chunk_end_the_stream_within_2_s() {
    let mut pair = Pair::with_defaults();
    send(&mut pair, &stream_body(""));
    let whole = sse_data(&one(&pair).body);
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"keepalive_after_usage"}"#),
    );
    pair.advance(Duration::from_millis(1900));
    assert!(pair.ledger.is_empty(), "not over before 2 s");
    assert!(String::from_utf8_lossy(&pair.received).contains(": keep-alive"));
    pair.advance(Duration::from_millis(200));
    let r = one(&pair);
    assert_eq!(sse_data(&r.body), whole, "the same events, then [DONE]");
    let rec = &pair.ledger[0];
    assert!(rec.complete);
    assert_eq!(rec.finish_reason.as_deref(), Some("stop"));
    assert_eq!(rec.error, None);
    assert_eq!(pair.sim.journal()[0].outcome, ExchangeEnd::Aborted);
    assert_eq!(pair.upstream_closed, 1);
}

#[test]
fn timeouts_on_the_client_side() {
    // Slowloris: a head that never completes gets 408 and the connection closes.
    let mut pair = Pair::with_defaults();
    pair.client_send(b"GET /v1/models HTTP/1.1\r\nHo");
    pair.advance(Duration::from_secs(14));
    assert!(pair.received.is_empty());
    pair.advance(Duration::from_secs(2));
    assert_eq!(one(&pair).status, 408);
    assert!(pair.client_closed);
    // An idle keep-alive connection closes quietly.
    let mut pair = Pair::with_defaults();
    pair.advance(Duration::from_secs(76));
    assert!(pair.client_closed && pair.received.is_empty());
    // A stalled body.
    let mut pair = Pair::with_defaults();
    let req = Pair::chat_request(&pair.key.clone(), &body(""));
    pair.client_send(&req[..req.len() - 3]);
    pair.advance(Duration::from_secs(61));
    assert_eq!(one(&pair).status, 408);
    assert_eq!(pair.ledger[0].status, 408);
}

#[test]
fn provider_stalls_and_garbage() {
    // No head within the first-byte timeout: 504.
    let mut pair = Pair::new(
        |c| c.timeouts.upstream_first_byte = Duration::from_secs(5),
        SimOptions::default(),
        Limits::default(),
    );
    send(&mut pair, &body(r#""x_sim":{"fault":"stall_headers"}"#));
    pair.advance(Duration::from_secs(6));
    let r = one(&pair);
    assert_eq!(
        error_of(&r),
        (
            504,
            "upstream_error".into(),
            "upstream_timeout".into(),
            Value::Null
        )
    );
    assert_eq!(pair.sim.journal()[0].outcome, ExchangeEnd::Aborted);

    // A stream that stalls mid-way: [DONE] after the idle timeout, incomplete.
    let mut pair = Pair::new(
        |c| c.timeouts.upstream_idle = Duration::from_secs(3),
        SimOptions::default(),
        Limits::default(),
    );
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"stall","after":3}"#),
    );
    pair.advance(Duration::from_secs(4));
    let r = one(&pair);
    let data = sse_data(&r.body);
    assert_eq!((data.len(), data[3].as_str()), (4, "[DONE]"));
    assert!(!pair.ledger[0].complete);

    // Heartbeats after finish_reason that never end: cut after the tail timeout.
    let mut pair = Pair::new(
        |c| c.timeouts.stream_tail = Duration::from_secs(2),
        SimOptions::default(),
        Limits::default(),
    );
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"heartbeat_after_finish"}"#),
    );
    pair.advance(Duration::from_secs(3));
    let r = one(&pair);
    assert!(String::from_utf8_lossy(&r.body).contains(": heartbeat"));
    assert_eq!(sse_data(&r.body).last().map(String::as_str), Some("[DONE]"));
    assert!(pair.ledger[0].complete);
    assert_eq!(pair.sim.journal()[0].outcome, ExchangeEnd::Aborted);

    // Garbage instead of HTTP.
    let mut pair = Pair::with_defaults();
    send(&mut pair, &body(r#""x_sim":{"fault":"garbage"}"#));
    let r = one(&pair);
    assert_eq!(r.status, 502);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("invalid HTTP")
    );
}

#[test]
fn broken_streams() {
    // Chunked framing broken mid-stream.
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"bad_chunk","after":2}"#),
    );
    let r = one(&pair);
    assert_eq!(sse_data(&r.body).len(), 3);
    assert!(!pair.ledger[0].complete);
    // An event over the cap.
    let mut pair = Pair::new(
        |c| c.max_sse_event = 64 * 1024,
        SimOptions::default(),
        Limits::default(),
    );
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"huge_event","after":2,"bytes":100000}"#),
    );
    let r = one(&pair);
    assert_eq!(sse_data(&r.body).len(), 3);
    assert!(!pair.ledger[0].complete);
    // Data after [DONE] is ignored.
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"data_after_done"}"#),
    );
    let data = sse_data(&one(&pair).body);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    assert!(!data.iter().any(|d| d.contains("late")));
    // An error event before anything was sent: a JSON 502.
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"error_event","after":0}"#),
    );
    let r = one(&pair);
    assert_eq!(r.status, 502);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("mid-stream")
    );
    // An error event later: forwarded as-is, stream incomplete.
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"error_event","after":2}"#),
    );
    let r = one(&pair);
    assert!(sse_data(&r.body)[2].contains("\"error\""));
    assert!(!pair.ledger[0].complete);
    assert_eq!(
        pair.ledger[0].error.as_deref(),
        Some("upstream_error_event")
    );
    // Head, then the connection closes: no first chunk, so a JSON 502.
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"close_after_headers"}"#),
    );
    assert_eq!(one(&pair).status, 502);
    // JSON where a stream was asked for.
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"json_for_stream"}"#),
    );
    let r = one(&pair);
    assert_eq!(r.status, 502);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Content-Type")
    );
}

#[test]
fn connect_failures_and_stale_pooled_connections() {
    let mut pair = Pair::with_defaults();
    pair.connect_failures
        .push_back(UpstreamFailure::Connect("connection refused".into()));
    send(&mut pair, &body(""));
    let r = one(&pair);
    assert_eq!(r.status, 502);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("connection refused")
    );
    pair.connect_failures.push_back(UpstreamFailure::Tls(
        "certificate not valid for name".into(),
    ));
    pair.received.clear();
    send(&mut pair, &body(""));
    assert!(
        one(&pair).json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("certificate")
    );
}

#[test]
fn stale_pooled_connection_is_retried_once_on_a_new_one() {
    let mut pair = Pair::with_defaults();
    send(&mut pair, &body(""));
    pair.close_idle_upstreams();
    pair.received.clear();
    send(&mut pair, &body(r#""user":"second""#));
    assert_eq!(one(&pair).status, 200);
    assert_eq!((pair.upstream_opened, pair.upstream_reused), (2, 1));
    assert_eq!(
        pair.sim.journal().len(),
        2,
        "the failed attempt never reached the provider"
    );
    // A failure to connect at all is answered, not retried.
    pair.received.clear();
    pair.connect_failures
        .push_back(UpstreamFailure::Broken("reset".into()));
    send(&mut pair, &body(""));
    assert_eq!(one(&pair).status, 502);
}

#[test]
fn content_type_must_be_json_when_given() {
    let mut pair = Pair::with_defaults();
    let b = body("");
    let key = pair.key.clone();
    let raw = |ct: &str| {
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\n{ct}Content-Length: {}\r\n\r\n{b}",
            b.len()
        )
    };
    pair.client_send(raw("").as_bytes());
    pair.client_send(raw("Content-Type: application/json; charset=utf-8\r\n").as_bytes());
    let rs = responses(&pair);
    assert_eq!((rs[0].status, rs[1].status), (200, 200));
    pair.received.clear();
    pair.client_send(raw("Content-Type: text/plain\r\n").as_bytes());
    let r = one(&pair);
    assert_eq!(error_of(&r).2, "unsupported_content_type");
    assert!(pair.client_closed, "the unread body closes the connection");
}

#[test]
fn head_requests_get_heads_without_bodies() {
    let mut pair = Pair::with_defaults();
    let key = pair.key.clone();
    pair.client_send(
        format!("HEAD /v1/models HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\n\r\n")
            .as_bytes(),
    );
    pair.client_send(b"HEAD /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n\r\n");
    pair.client_send(b"HEAD /nope HTTP/1.1\r\nHost: gw\r\n\r\n");
    pair.client_send(
        format!("GET /v1/models HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\n\r\n")
            .as_bytes(),
    );
    // Parse as a HEAD-aware client would: the first three have no body.
    let text = String::from_utf8_lossy(&pair.received).into_owned();
    let heads: Vec<&str> = text.split("\r\n\r\n").collect();
    assert!(
        heads[0].starts_with("HTTP/1.1 200 OK") && heads[0].contains("Content-Length: 105"),
        "{}",
        heads[0]
    );
    assert!(
        heads[1].starts_with("HTTP/1.1 405") && heads[1].contains("Allow: POST"),
        "{}",
        heads[1]
    );
    assert!(heads[2].starts_with("HTTP/1.1 404"), "{}", heads[2]);
    assert!(heads[3].starts_with("HTTP/1.1 200 OK"), "{}", heads[3]);
    assert!(heads[4].starts_with("{\"object\":\"list\""), "{}", heads[4]);
    assert!(!pair.client_closed);
}

#[test]
fn http10_client_stream_ends_with_close() {
    let mut pair = Pair::with_defaults();
    let b = stream_body("");
    let req = format!(
        "POST /v1/chat/completions HTTP/1.0\r\nAuthorization: Bearer {}\r\nContent-Length: {}\r\n\r\n{b}",
        pair.key,
        b.len()
    );
    pair.client_send(req.as_bytes());
    let text = String::from_utf8_lossy(&pair.received).into_owned();
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"));
    assert!(!text.contains("Transfer-Encoding"));
    assert!(text.trim_end().ends_with("data: [DONE]"));
    assert!(pair.client_closed);
}

#[test]
fn a_client_that_stops_reading_is_cut_and_the_provider_aborted() {
    let mut pair = Pair::new(
        |c| c.timeouts.client_send = Duration::from_secs(5),
        SimOptions::default(),
        Limits::default(),
    );
    pair.client_stops_reading = true;
    send(&mut pair, &stream_body(r#""x_sim":{"token_ms":1000}"#));
    pair.advance(Duration::from_secs(10));
    assert!(pair.client_closed);
    assert!(pair.ledger[0].client_disconnected);
    assert_eq!(pair.sim.journal()[0].outcome, ExchangeEnd::Aborted);
}

#[test]
fn a_slow_stream_is_not_mistaken_for_a_client_that_stopped_reading() {
    // Events far apart (longer than the send timeout), and reads that carry
    // no complete event: nothing waits for the client, so no send deadline.
    let mut pair = Pair::new(
        |c| c.timeouts.client_send = Duration::from_secs(2),
        SimOptions::default(),
        Limits::default(),
    );
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"token_ms":3000,"reasoning_tokens":3,"answer_tokens":2}"#),
    );
    pair.advance(Duration::from_secs(30));
    let r = one(&pair);
    assert_eq!(sse_data(&r.body).last().map(String::as_str), Some("[DONE]"));
    assert!(!pair.ledger[0].client_disconnected);
    assert!(pair.ledger[0].complete);
}

#[test]
fn the_drain_timeout_cuts_and_meters_what_is_still_waiting() {
    // A stream still running when the drain timeout passes: [DONE], metered.
    let mut pair = Pair::new(
        |c| c.timeouts.drain = Duration::from_secs(2),
        SimOptions::default(),
        Limits::default(),
    );
    send(&mut pair, &stream_body(r#""x_sim":{"token_ms":1000}"#));
    pair.advance(Duration::from_millis(1500));
    pair.shutdown();
    pair.advance(Duration::from_secs(3));
    let r = one(&pair);
    let data = sse_data(&r.body);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    assert!(data.len() < 10, "cut early: {data:?}");
    assert!(pair.client_closed);
    let rec = &pair.ledger[0];
    assert!(!rec.complete);
    assert_eq!(rec.error.as_deref(), Some("shutdown"));
    assert_eq!(pair.sim.journal()[0].outcome, ExchangeEnd::Aborted);
    // A non-streamed request still waiting: 503, metered.
    let mut pair = Pair::new(
        |c| c.timeouts.drain = Duration::from_secs(2),
        SimOptions::default(),
        Limits::default(),
    );
    send(&mut pair, &body(r#""x_sim":{"fault":"stall_headers"}"#));
    pair.shutdown();
    pair.advance(Duration::from_secs(3));
    let r = one(&pair);
    assert_eq!(r.status, 503);
    assert!(pair.client_closed);
    assert_eq!(pair.ledger[0].status, 503);
}

#[test]
fn shutdown_closes_idle_and_finishes_busy_connections() {
    let mut pair = Pair::with_defaults();
    pair.gateway.begin_drain();
    send(&mut pair, &stream_body(r#""x_sim":{"token_ms":10}"#));
    pair.advance(Duration::from_secs(5));
    let r = one(&pair);
    assert_eq!(r.header("connection"), Some("close"));
    assert_eq!(sse_data(&r.body).last().map(String::as_str), Some("[DONE]"));
    assert!(pair.client_closed);
    assert!(pair.ledger[0].complete);
}

#[test]
fn provider_key_is_sent_and_required() {
    use chatgate_core::Secret;
    let sim = SimOptions {
        api_key: Some("provider-secret".into()),
        ..SimOptions::default()
    };
    let mut pair = Pair::new(
        |c| c.endpoints[0].target.api_key = Some(Secret::new("provider-secret")),
        sim.clone(),
        Limits::default(),
    );
    send(&mut pair, &body(""));
    assert_eq!(one(&pair).status, 200);
    let mut pair = Pair::new(|_| {}, sim, Limits::default());
    send(&mut pair, &body(""));
    let r = one(&pair);
    assert_eq!(r.status, 502);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("HTTP 401")
    );
}

fn shared(fail_closed: bool, rpm: u64) -> Pair {
    Pair::new(
        |c| c.shared_limits = Some(chatgate_core::SharedLimits { fail_closed }),
        SimOptions::default(),
        Limits {
            requests_per_minute: rpm,
            tokens_per_minute: 1_000_000,
        },
    )
}

#[test]
fn shared_limits_admit_and_settle_through_the_store() {
    let mut pair = shared(false, 2);
    for _ in 0..3 {
        send(&mut pair, &body(""));
    }
    let statuses: Vec<u16> = responses(&pair).iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 200, 429]);
    // Both admissions were settled in the store with what was metered; the
    // process's own limiter was not used.
    assert_eq!(pair.shared_settled, 2);
    let now = chatgate_core::Instant::ZERO;
    let limits = Limits {
        requests_per_minute: 2,
        tokens_per_minute: 1_000_000,
    };
    assert_eq!(
        pair.shared
            .status("test-key", limits, now)
            .remaining_requests,
        0
    );
    assert_eq!(
        pair.gateway
            .limiter()
            .status("test-key", limits, now)
            .remaining_requests,
        2
    );
    let used: u64 = pair
        .ledger
        .iter()
        .map(|r| r.prompt_tokens + r.completion_tokens)
        .sum();
    let left = pair.shared.status("test-key", limits, now).remaining_tokens;
    assert_eq!(left, 1_000_000 - used);
}

#[test]
fn shared_limits_unreachable_fail_open_or_closed() {
    // fail-open: the local limiter decides, and it is counted.
    let mut pair = shared(false, 1);
    pair.shared_down = true;
    send(&mut pair, &body(""));
    send(&mut pair, &body(""));
    let statuses: Vec<u16> = responses(&pair).iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 429]);
    assert!(
        pair.gateway
            .render_metrics(chatgate_core::Instant::ZERO)
            .contains("chatgate_shared_limits_unavailable_total 2")
    );
    assert_eq!(pair.shared_settled, 0, "settled locally");
    // fail-closed: 503, metered.
    let mut pair = shared(true, 100);
    pair.shared_down = true;
    send(&mut pair, &body(""));
    let r = one(&pair);
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"]["code"], "server_overloaded");
    assert_eq!(pair.ledger[0].status, 503);
    assert!(pair.sim.journal().is_empty());
}

// ----------------------------------------------------------------------
// Buffers, phases the runtime controls, split provider reads, ledger faults

#[test]
fn pipelined_writes_that_straddle_requests_keep_the_input_buffer_bounded() {
    // Each write ends with the first byte of the next request, so the
    // client input is never consumed to its end; the consumed part must
    // still be dropped, or it grows by a request per request.
    let mut pair = Pair::with_defaults();
    let key = pair.key.clone();
    let invalid = format!("{{{}", "x".repeat(1 << 20));
    let req = Pair::chat_request(&key, &invalid);
    let n = 12;
    let mut written = 0;
    for i in 0..=n {
        let mut write = Vec::new();
        if i > 0 {
            write.extend_from_slice(&req[1..]);
        }
        if i < n {
            write.push(req[0]);
        }
        pair.client_send(&write);
        written += write.len();
        let held = pair.connection().unwrap().client_input_capacity();
        assert!(
            held <= 3 * req.len(),
            "after {i} requests ({written} bytes) the input buffer holds {held} bytes"
        );
    }
    let rs = responses(&pair);
    assert_eq!(rs.len(), n);
    assert!(rs.iter().all(|r| error_of(r).2 == "invalid_json"));
    assert!(!pair.client_closed);
}

#[test]
fn many_small_pipelined_requests_in_one_write_are_all_answered() {
    let mut pair = Pair::with_defaults();
    let key = pair.key.clone();
    let one = format!("GET /v1/models HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\n\r\n");
    pair.client_send(one.repeat(2000).as_bytes());
    let rs = responses(&pair);
    assert_eq!(rs.len(), 2000);
    assert!(rs.iter().all(|r| r.status == 200));
}

#[test]
fn connect_timeout_while_connecting_is_a_502() {
    let mut pair = Pair::new(
        |c| c.timeouts.upstream_connect = Duration::from_secs(2),
        SimOptions::default(),
        Limits::default(),
    );
    pair.connect_delay = Some(Duration::from_secs(5));
    send(&mut pair, &body(""));
    pair.advance(Duration::from_millis(1900));
    assert!(pair.received.is_empty(), "still connecting");
    pair.advance(Duration::from_millis(200));
    let r = one(&pair);
    assert_eq!(
        error_of(&r),
        (
            502,
            "upstream_error".into(),
            "upstream_error".into(),
            Value::Null
        )
    );
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("connecting")
    );
    let rec = &pair.ledger[0];
    assert_eq!(
        (rec.status, rec.error.as_deref()),
        (502, Some("upstream_connect"))
    );
    // The attempt was abandoned: it never completes later.
    pair.advance(Duration::from_secs(10));
    assert_eq!(pair.upstream_opened, 0);
    assert!(pair.sim.journal().is_empty());
    assert!(!pair.client_closed);

    // A connection that takes a while but within the timeout is used.
    pair.received.clear();
    pair.connect_delay = Some(Duration::from_secs(1));
    send(&mut pair, &stream_body(""));
    assert!(pair.received.is_empty());
    pair.advance(Duration::from_secs(1));
    assert_eq!(one(&pair).status, 200);
    assert_eq!(pair.upstream_opened, 1);
}

#[test]
fn client_disconnect_while_connecting_never_reaches_the_provider() {
    let mut pair = Pair::with_defaults();
    pair.connect_delay = Some(Duration::from_secs(1));
    send(&mut pair, &stream_body(""));
    pair.advance(Duration::from_millis(500));
    pair.client_close();
    assert!(pair.client_closed);
    let rec = &pair.ledger[0];
    assert_eq!(rec.status, 499);
    assert!(rec.client_disconnected);
    assert_eq!(rec.error, None);
    pair.advance(Duration::from_secs(5));
    assert_eq!(pair.upstream_opened, 0);
    assert!(pair.sim.journal().is_empty());
    assert!(pair.received.is_empty());
}

/// Equal bytes, or a message showing where they part.
fn same_bytes(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    let at = got.iter().zip(want).take_while(|(a, b)| a == b).count();
    let show = |b: &[u8]| {
        String::from_utf8_lossy(&b[at.saturating_sub(40)..b.len().min(at + 80)]).into_owned()
    };
    panic!(
        "{what}: {} bytes against {}, first difference at {at}:\n got: {:?}\nwant: {:?}",
        got.len(),
        want.len(),
        show(got),
        show(want)
    );
}

/// A ledger line without the fields that depend on when it was written.
fn timeless(rec: &LedgerRecord) -> LedgerRecord {
    let mut rec = rec.clone();
    rec.ts = String::new();
    rec.duration_ms = 0;
    rec.ttfb_ms = None;
    rec
}

#[test]
fn split_provider_reads_give_the_same_answer_and_ledger() {
    let cases = [
        body(""),
        body(r#""x_sim":{"fault":"reject","status":400,"message":"too long"}"#),
        stream_body(""),
        stream_body(r#""x_sim":{"framing":"close"}"#),
        stream_body(r#""x_sim":{"usage_every":true}"#),
        stream_body(r#""x_sim":{"fault":"omit_done"}"#),
        stream_body(r#""x_sim":{"fault":"reset","after":4}"#),
        stream_body(r#""x_sim":{"fault":"error_event","after":3}"#),
        stream_body(r#""x_sim":{"fault":"data_after_done"}"#),
        stream_body(r#""x_sim":{"fault":"no_usage","framing":"close"}"#),
        format!(
            r#"{{"model":"{MODEL}","stream":true,"messages":[{{"role":"user","content":"Paris"}}],"tools":[{{"type":"function","function":{{"name":"get_weather"}}}}]}}"#
        ),
    ];
    let mut splits = vec![UpstreamReads::AtMost(1), UpstreamReads::AtMost(7)];
    for seed in 1..=6 {
        splits.push(UpstreamReads::Random { seed, max: 48 });
        splits.push(UpstreamReads::Random { seed, max: 700 });
    }
    for b in &cases {
        let run = |reads: UpstreamReads| {
            let mut pair = Pair::with_defaults();
            pair.upstream_reads = reads;
            send(&mut pair, b);
            // A second request on the same connections: the provider
            // connection must have been left reusable (or not) alike.
            send(&mut pair, b);
            pair
        };
        let whole = run(UpstreamReads::Whole);
        let expected = responses(&whole);
        assert_eq!(expected.len(), 2, "{b}");
        for reads in &splits {
            let split = run(*reads);
            assert_eq!(responses(&split), expected, "{b} read as {reads:?}");
            assert_eq!(
                split.ledger.iter().map(timeless).collect::<Vec<_>>(),
                whole.ledger.iter().map(timeless).collect::<Vec<_>>(),
                "{b} read as {reads:?}"
            );
            if !b.contains("\"stream\":true") {
                // Content-Length answers are the same bytes; streams differ
                // only in where client chunks begin (each read's complete
                // events go out as one chunk).
                same_bytes(&split.received, &whole.received, b);
                same_bytes(&split.upstream_sent, &whole.upstream_sent, b);
            }
            // Streams too: a `[DONE]` read before the end of the chunked
            // body leaves the connection as reusable as one read with it.
            assert_eq!(
                (
                    split.upstream_opened,
                    split.upstream_reused,
                    split.upstream_closed
                ),
                (
                    whole.upstream_opened,
                    whole.upstream_reused,
                    whole.upstream_closed
                ),
                "{b} read as {reads:?}"
            );
        }
    }
    // What the whole reads did: streams that end cleanly reuse their
    // connection; data after `[DONE]` and a close-delimited body do not.
    let pooled = |b: &str| {
        let mut pair = Pair::with_defaults();
        send(&mut pair, b);
        send(&mut pair, b);
        (
            pair.upstream_opened,
            pair.upstream_reused,
            pair.upstream_closed,
        )
    };
    assert_eq!(pooled(&stream_body("")), (1, 1, 0));
    assert_eq!(
        pooled(&stream_body(r#""x_sim":{"fault":"data_after_done"}"#)),
        (2, 0, 2)
    );
    assert_eq!(
        pooled(&stream_body(r#""x_sim":{"framing":"close"}"#)),
        (2, 0, 0)
    );
}

#[test]
fn a_stream_that_ends_without_any_event_is_a_502() {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n";
    let scripts = [
        (
            format!("{head}Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
            false,
        ),
        (format!("{head}Content-Length: 0\r\n\r\n"), false),
        (format!("{head}Connection: close\r\n\r\n"), true),
    ];
    for (answer, close) in scripts {
        for reads in [UpstreamReads::Whole, UpstreamReads::AtMost(1)] {
            let mut pair = Pair::with_defaults();
            pair.upstream_reads = reads;
            pair.provider_script = Some(ProviderScript {
                answer: answer.clone().into_bytes(),
                close,
            });
            send(&mut pair, &stream_body(""));
            let r = one(&pair);
            assert_eq!(
                error_of(&r),
                (
                    502,
                    "upstream_error".into(),
                    "upstream_error".into(),
                    Value::Null
                ),
                "{answer:?}"
            );
            assert!(
                r.json()["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("without any event"),
                "{answer:?}"
            );
            let rec = &pair.ledger[0];
            assert_eq!(rec.status, 502);
            assert_eq!(rec.upstream_status, Some(200));
            assert_eq!(rec.error.as_deref(), Some("upstream_invalid"));
            assert!(!pair.client_closed, "the client connection survives");
        }
    }
}

fn two_keys(pair: &Pair) -> (String, String) {
    use chatgate_core::{KeyTable, entry_toml, key_hash_hex, mint_key};
    let other = mint_key(&[9; 32]);
    let mut toml = String::new();
    for (name, key) in [("test-key", &pair.key), ("other-key", &other)] {
        toml.push_str(&entry_toml(
            name,
            &key_hash_hex(key),
            Some(100),
            Some(1_000_000),
            "2026-11-22T00:00:00.000Z",
        ));
    }
    let table = KeyTable::parse_toml(&toml, Limits::default()).unwrap();
    pair.gateway.replace_keys(table);
    (pair.key.clone(), other)
}

#[test]
fn client_disconnect_while_admitting_gives_the_reservation_back() {
    let limits = Limits {
        requests_per_minute: 100,
        tokens_per_minute: 1_000_000,
    };
    let now = chatgate_core::Instant::ZERO;
    // The first request of a connection.
    let mut pair = shared(false, 100);
    pair.admit_delay = Some(Duration::from_secs(1));
    send(&mut pair, &body(r#""max_tokens":5000"#));
    assert!(pair.received.is_empty(), "waiting for the shared limiter");
    pair.client_close();
    let rec = &pair.ledger[0];
    assert_eq!(rec.status, 499);
    assert!(rec.client_disconnected);
    // The connection stays until the limiter answered, so that what it
    // granted can be given back.
    pair.advance(Duration::from_secs(2));
    assert!(pair.client_closed);
    assert_eq!(pair.shared_settled, 1);
    assert_eq!(
        pair.shared.status("test-key", limits, now).remaining_tokens,
        1_000_000
    );
    assert!(pair.sim.journal().is_empty());
    assert_eq!(pair.ledger.len(), 1);

    // A keep-alive connection whose next request names another key: that
    // key's reservation is given back, not the previous one's.
    let mut pair = shared(false, 100);
    let (first, second) = two_keys(&pair);
    pair.client_send(&Pair::chat_request(&first, &body("")));
    assert_eq!(one(&pair).status, 200);
    let used = pair.ledger[0].prompt_tokens + pair.ledger[0].completion_tokens;
    pair.admit_delay = Some(Duration::from_secs(1));
    pair.client_send(&Pair::chat_request(&second, &body(r#""max_tokens":5000"#)));
    pair.client_close();
    pair.advance(Duration::from_secs(2));
    assert!(pair.client_closed);
    assert_eq!(pair.shared_settled, 2);
    assert_eq!(
        pair.shared
            .status("other-key", limits, now)
            .remaining_tokens,
        1_000_000
    );
    assert_eq!(
        pair.shared.status("test-key", limits, now).remaining_tokens,
        1_000_000 - used
    );
    assert_eq!(pair.ledger[1].key, "other-key");
    assert_eq!(pair.ledger[1].status, 499);
}

/// A chat request head asking `Expect: 100-continue` for a body of `len`.
fn expect_head(key: &str, len: usize) -> Vec<u8> {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\nExpect: 100-continue\r\nContent-Length: {len}\r\n\r\n"
    )
    .into_bytes()
}

#[test]
fn expect_continue_with_an_empty_request_bucket_is_429_at_once() {
    let limits = Limits {
        requests_per_minute: 1,
        tokens_per_minute: 100_000,
    };
    let mut pair = Pair::new(|_| {}, SimOptions::default(), limits);
    send(&mut pair, &body(""));
    assert_eq!(one(&pair).status, 200);
    pair.received.clear();
    pair.client_send(&expect_head(&pair.key, 2_000_000));
    assert!(!String::from_utf8_lossy(&pair.received).contains("100 Continue"));
    let r = one(&pair);
    assert_eq!(
        error_of(&r),
        (
            429,
            "rate_limit_error".into(),
            "rate_limit_exceeded".into(),
            Value::Null
        )
    );
    assert_eq!(r.header("retry-after"), Some("60"));
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("0"));
    assert_eq!(r.header("connection"), Some("close"));
    assert!(pair.client_closed, "the body was not read");
    assert_eq!(pair.ledger[1].status, 429);
    assert_eq!(pair.ledger[1].error.as_deref(), Some("rate_limit_exceeded"));
    assert_eq!(pair.sim.journal().len(), 1);

    // Once the bucket has a request again, 100 Continue as usual.
    let mut pair = Pair::new(|_| {}, SimOptions::default(), limits);
    send(&mut pair, &body(""));
    pair.advance(Duration::from_secs(60));
    pair.received.clear();
    let b = body("");
    pair.client_send(&expect_head(&pair.key, b.len()));
    assert_eq!(pair.received, b"HTTP/1.1 100 Continue\r\n\r\n");
    pair.client_send(b.as_bytes());
    assert_eq!(one(&pair).status, 200);

    // With shared limits the local buckets do not decide: the body is read
    // and the shared limiter refuses it.
    let mut pair = shared(false, 1);
    send(&mut pair, &body(""));
    pair.received.clear();
    pair.client_send(&expect_head(&pair.key, b.len()));
    assert_eq!(pair.received, b"HTTP/1.1 100 Continue\r\n\r\n");
    pair.client_send(b.as_bytes());
    assert_eq!(one(&pair).status, 429);
}

#[test]
fn a_failed_ledger_append_withholds_the_end_of_the_response() {
    // A stream: what was sent before stays sent; the last bytes ([DONE],
    // the final chunk) never go out, and the connection closes.
    let mut pair = Pair::with_defaults();
    pair.ledger_fails = true;
    send(&mut pair, &stream_body(r#""x_sim":{"token_ms":10}"#));
    pair.advance(Duration::from_secs(5));
    assert!(pair.client_closed);
    assert_eq!((pair.ledger.len(), pair.ledger_failed), (0, 1));
    let r = one(&pair);
    assert_eq!(r.status, 200);
    assert!(!r.complete, "no final chunk");
    let data = sse_data(&r.body);
    assert!(!data.is_empty());
    assert!(!data.iter().any(|d| d == "[DONE]"));

    // A non-streamed answer: held whole, so nothing is sent.
    let mut pair = Pair::with_defaults();
    pair.ledger_fails = true;
    send(&mut pair, &body(""));
    assert!(pair.client_closed);
    assert!(pair.received.is_empty());
    assert_eq!(pair.ledger_failed, 1);
    assert_eq!(pair.sim.journal()[0].outcome, ExchangeEnd::Completed);

    // A metered error: the same.
    let mut pair = Pair::with_defaults();
    pair.ledger_fails = true;
    send(&mut pair, &body(r#""temperature":3"#));
    assert!(pair.client_closed);
    assert!(pair.received.is_empty());

    // The next line is appended again: only the affected response is cut.
    let mut pair = Pair::with_defaults();
    send(&mut pair, &body(""));
    pair.ledger_fails = true;
    send(&mut pair, &body(""));
    assert_eq!(responses(&pair).len(), 1);
    assert!(pair.client_closed);
}

#[test]
fn a_stream_without_usage_is_metered_as_reported_and_charged_its_worst_case() {
    let mut pair = Pair::new(
        |_| {},
        SimOptions::default(),
        Limits {
            requests_per_minute: 60,
            tokens_per_minute: 100_000,
        },
    );
    send(
        &mut pair,
        &stream_body(r#""max_tokens":500,"x_sim":{"fault":"no_usage"}"#),
    );
    let r = one(&pair);
    let data = sse_data(&r.body);
    // What the client gets: the provider's events, its finish chunk, no
    // usage chunk (none was reported; none is made up), then [DONE].
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    assert!(chunks(&r).iter().all(|c| c["usage"].is_null()));
    let rec = &pair.ledger[0];
    assert!(rec.complete, "finish_reason arrived");
    assert_eq!(rec.finish_reason.as_deref(), Some("stop"));
    assert_eq!(rec.error, None);
    // The ledger keeps what was reported, and says it was missing.
    assert_eq!(
        (
            rec.prompt_tokens,
            rec.completion_tokens,
            rec.reasoning_tokens,
            rec.cost_nano_usd
        ),
        (0, 0, 0, 0)
    );
    assert!(rec.usage_missing);
    // The budget would have been charged the worst case: the prompt's
    // bound (estimate plus the 64-token allowance) and max_tokens.
    assert!(rec.charged_nano_usd >= 500 * 14_250 + 64 * 2_850, "{rec:?}");
    let line: Value = serde_json::from_slice(&rec.to_line()).unwrap();
    assert_eq!(line["usage_missing"], true);
    // The key's tokens per minute were charged the same worst case, not
    // given back.
    let status =
        pair.gateway
            .limiter()
            .status("test-key", Limits::default(), chatgate_core::Instant::ZERO);
    assert!(
        status.remaining_tokens <= 100_000 - 564,
        "{}",
        status.remaining_tokens
    );
    assert!(
        pair.gateway
            .metrics()
            .render(0)
            .contains("chatgate_usage_missing_total{key=\"test-key\"} 1"),
        "counted"
    );
}

/// A non-streamed answer whose body stops after a few bytes.
fn stalled_body() -> ProviderScript {
    ProviderScript {
        answer: b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"id\":\"chatcmpl-1\",".to_vec(),
        close: false,
    }
}

#[test]
fn a_non_streamed_body_that_stops_arriving_is_a_504() {
    let mut pair = Pair::new(
        |c| c.timeouts.upstream_idle = Duration::from_secs(3),
        SimOptions::default(),
        Limits::default(),
    );
    pair.provider_script = Some(stalled_body());
    send(&mut pair, &body(""));
    pair.advance(Duration::from_millis(2900));
    assert!(pair.received.is_empty());
    pair.advance(Duration::from_millis(200));
    let r = one(&pair);
    assert_eq!(
        error_of(&r),
        (
            504,
            "upstream_error".into(),
            "upstream_timeout".into(),
            Value::Null
        )
    );
    let rec = &pair.ledger[0];
    assert_eq!(
        (rec.status, rec.upstream_status, rec.error.as_deref()),
        (504, Some(200), Some("upstream_timeout"))
    );
    assert_eq!(pair.upstream_closed, 1);
    assert!(!pair.client_closed);
}

#[test]
fn client_disconnect_while_a_non_streamed_body_arrives() {
    let mut pair = Pair::with_defaults();
    pair.provider_script = Some(stalled_body());
    send(&mut pair, &body(""));
    pair.advance(Duration::from_secs(1));
    pair.client_close();
    assert!(pair.client_closed);
    assert_eq!(pair.upstream_closed, 1, "the provider request is aborted");
    let rec = &pair.ledger[0];
    assert_eq!((rec.status, rec.upstream_status), (499, Some(200)));
    assert!(rec.client_disconnected);
    assert!(pair.received.is_empty());
}

#[test]
fn client_disconnect_while_the_ledger_line_is_unacknowledged() {
    // A stream whose last bytes wait for the ledger acknowledgement.
    let mut pair = Pair::with_defaults();
    pair.ledger_held = true;
    send(&mut pair, &stream_body(r#""x_sim":{"token_ms":10}"#));
    pair.advance(Duration::from_secs(5));
    assert_eq!(pair.ledger.len(), 1);
    let before = pair.received.len();
    assert!(!String::from_utf8_lossy(&pair.received).contains("[DONE]"));
    pair.client_close();
    // Closed once the runtime has reported the append, never before.
    assert!(!pair.client_closed);
    pair.ack_ledger();
    assert!(pair.client_closed);
    assert_eq!(pair.received.len(), before, "nothing sent after the close");
    assert_eq!(pair.ledger.len(), 1, "one line per request");
    assert_eq!(pair.sim.journal()[0].outcome, ExchangeEnd::Completed);

    // A non-streamed answer, held whole.
    let mut pair = Pair::with_defaults();
    pair.ledger_held = true;
    send(&mut pair, &body(""));
    pair.client_close();
    pair.ack_ledger();
    assert!(pair.client_closed);
    assert!(pair.received.is_empty());
    assert_eq!(pair.ledger.len(), 1);
    assert_eq!(pair.ledger[0].status, 200);
}

/// A streamed answer as a provider sends it in chunked framing, up to and
/// including the `[DONE]` chunk but without the last chunk (`0\r\n\r\n`).
fn stream_without_last_chunk() -> Vec<u8> {
    let events = [
        r#"data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"4"},"finish_reason":null}]}"#,
        r#"data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        r#"data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#,
        "data: [DONE]",
    ];
    let mut out =
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    for e in events {
        out.extend_from_slice(&chunk(format!("{e}\n\n").as_bytes()));
    }
    out
}

fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

/// A pair whose provider answers every request with
/// [`stream_without_last_chunk`] and then waits.
fn draining_pair(reads: UpstreamReads) -> Pair {
    let mut pair = Pair::with_defaults();
    pair.upstream_reads = reads;
    pair.provider_script = Some(ProviderScript {
        answer: stream_without_last_chunk(),
        close: false,
    });
    pair
}

/// Opened, reused and closed provider connections.
fn pool_counts(pair: &Pair) -> (u32, u32, u32) {
    (
        pair.upstream_opened,
        pair.upstream_reused,
        pair.upstream_closed,
    )
}

/// The client's answer to the scripted stream: complete, metered, ended.
fn assert_streamed_answer(r: &ClientResponse, rec: &LedgerRecord) {
    assert_eq!(r.status, 200);
    assert!(r.complete, "the last chunk went out to the client");
    let data = sse_data(&r.body);
    assert_eq!(data.len(), 4);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    assert_eq!((rec.status, rec.complete), (200, true));
    assert_eq!((rec.prompt_tokens, rec.completion_tokens), (12, 3));
}

#[test]
fn a_last_chunk_that_comes_after_done_returns_the_connection_to_the_pool() {
    let tails: [&[&[u8]]; 3] = [
        &[b"0\r\n\r\n"],
        &[b"0\r", b"\n\r", b"\n"],
        &[b"0\r\nX-Trailer: 1\r\n", b"\r\n"],
    ];
    for tail in tails {
        for reads in [UpstreamReads::Whole, UpstreamReads::AtMost(5)] {
            let mut pair = draining_pair(reads);
            send(&mut pair, &stream_body(""));
            // The client has its whole answer (and the ledger its line) at
            // once; the provider connection is still read for its end.
            assert_streamed_answer(&one(&pair), &pair.ledger[0]);
            assert_eq!(pool_counts(&pair), (1, 0, 0));
            let conn = pair.connection().expect("client connection open");
            assert!(conn.wants_upstream_read());
            assert_eq!(
                conn.poll_timeout(),
                Some(pair.now + Duration::from_secs(1)),
                "the drain deadline comes before the idle timeout"
            );
            pair.advance(Duration::from_millis(500));
            let received = pair.received.len();
            for piece in tail {
                assert!(pair.provider_sends(piece));
            }
            assert_eq!(pair.received.len(), received, "nothing more for the client");
            assert_eq!(pool_counts(&pair), (1, 0, 0), "pooled, not closed");
            assert!(!pair.connection().unwrap().wants_upstream_read());
            // The next request reuses it.
            send(&mut pair, &stream_body(""));
            let rs = responses(&pair);
            assert_eq!(rs.len(), 2, "{tail:?} {reads:?}");
            assert_streamed_answer(&rs[1], &pair.ledger[1]);
            assert_eq!(pool_counts(&pair), (1, 1, 0), "{tail:?} {reads:?}");
            // Its answer drains the same way.
            for piece in tail {
                assert!(pair.provider_sends(piece));
            }
            // Nothing is left to time out but the idle keep-alive.
            pair.advance(Duration::from_secs(2));
            assert_eq!(pool_counts(&pair), (1, 1, 0));
            assert!(!pair.client_closed);
        }
    }
}

#[test]
fn a_last_chunk_that_never_comes_closes_the_connection_after_the_drain_bound() {
    let mut pair = draining_pair(UpstreamReads::Whole);
    send(&mut pair, &stream_body(""));
    assert_streamed_answer(&one(&pair), &pair.ledger[0]);
    let received = pair.received.len();
    pair.advance(Duration::from_millis(999));
    assert_eq!(pool_counts(&pair), (1, 0, 0));
    pair.advance(Duration::from_millis(1));
    assert_eq!(pool_counts(&pair), (1, 0, 1), "closed at the bound");
    assert_eq!(pair.received.len(), received);
    assert!(!pair.client_closed, "the client connection stays open");
    assert!(!pair.connection().unwrap().wants_upstream_read());
    // A last chunk that comes now is not read: the connection is gone.
    assert!(!pair.provider_sends(b"0\r\n\r\n"));
    // The next request opens a new connection.
    send(&mut pair, &stream_body(""));
    let rs = responses(&pair);
    assert_eq!(rs.len(), 2);
    assert_streamed_answer(&rs[1], &pair.ledger[1]);
    assert_eq!(pool_counts(&pair), (2, 0, 1));
}

#[test]
fn data_after_done_closes_the_provider_connection() {
    // In the same read as `[DONE]` (and the last chunk): closed at once.
    for reads in [UpstreamReads::Whole, UpstreamReads::AtMost(3)] {
        let mut pair = Pair::with_defaults();
        pair.upstream_reads = reads;
        send(
            &mut pair,
            &stream_body(r#""x_sim":{"fault":"data_after_done"}"#),
        );
        let data = sse_data(&one(&pair).body);
        assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
        assert!(!data.iter().any(|d| d.contains("late")));
        assert_eq!(pool_counts(&pair), (1, 0, 1), "{reads:?}");
        send(&mut pair, &stream_body(""));
        assert_eq!(responses(&pair).len(), 2);
        assert_eq!(pool_counts(&pair), (2, 0, 1), "{reads:?}");
    }
    // While the connection is drained: an event, a lone body byte, broken
    // framing, or (in the read that ends the body) bytes after its end.
    // None of it reaches the client and the connection is closed.
    let late: [(&[u8], bool); 4] = [
        (
            &chunk(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"late\"}}]}\n\n"),
            true,
        ),
        (b"1\r\n\n\r\n0\r\n\r\n", true),
        (b"zz\r\n", true),
        // Read apart, the end comes first and the connection is pooled, as
        // after any complete response.
        (b"0\r\n\r\nHTTP/1.1 200 OK\r\n", false),
    ];
    for (bytes, however_read) in late {
        let splits: &[UpstreamReads] = if however_read {
            &[UpstreamReads::Whole, UpstreamReads::AtMost(1)]
        } else {
            &[UpstreamReads::Whole]
        };
        for &reads in splits {
            let mut pair = draining_pair(reads);
            send(&mut pair, &stream_body(""));
            let received = pair.received.clone();
            assert!(pair.provider_sends(bytes));
            assert_eq!(pair.received, received, "{bytes:?}");
            assert_streamed_answer(&one(&pair), &pair.ledger[0]);
            assert_eq!(pool_counts(&pair), (1, 0, 1), "{bytes:?} {reads:?}");
            assert!(!pair.client_closed);
            send(&mut pair, &stream_body(""));
            assert_eq!(responses(&pair).len(), 2);
            assert_eq!(pool_counts(&pair), (2, 0, 1), "{bytes:?} {reads:?}");
        }
    }
    // `Content-Length` framing: a body that ends with `[DONE]` is pooled at
    // once; one that announced more bytes holds data after `[DONE]`.
    let body = &stream_without_last_chunk();
    let head_len = HeadScanner::new().scan(body, 65536).unwrap().unwrap();
    let mut events = Vec::new();
    BodyDecoder::new(chatgate_core::http::Framing::Chunked, HttpLimits::default())
        .decode(&body[head_len..], &mut events)
        .unwrap();
    for (extra, counts) in [(0, (1, 1, 0)), (5, (2, 0, 2))] {
        let mut answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\n\r\n",
            events.len() + extra
        )
        .into_bytes();
        answer.extend_from_slice(&events);
        let mut pair = Pair::with_defaults();
        pair.provider_script = Some(ProviderScript {
            answer,
            close: false,
        });
        send(&mut pair, &stream_body(""));
        send(&mut pair, &stream_body(""));
        let rs = responses(&pair);
        assert_eq!(rs.len(), 2);
        assert_streamed_answer(&rs[1], &pair.ledger[1]);
        assert_eq!(pool_counts(&pair), counts, "{extra} more bytes announced");
    }
}

#[test]
fn the_next_request_does_not_wait_for_a_drain() {
    // Sent after the answer, while the last chunk has not come: it gets
    // another provider connection at once.
    let mut pair = draining_pair(UpstreamReads::Whole);
    send(&mut pair, &stream_body(""));
    send(&mut pair, &stream_body(""));
    let rs = responses(&pair);
    assert_eq!(rs.len(), 2);
    assert_streamed_answer(&rs[1], &pair.ledger[1]);
    assert_eq!(pool_counts(&pair), (2, 0, 1));
    // Pipelined in one write with the first.
    let mut pair = draining_pair(UpstreamReads::AtMost(7));
    let mut two = Pair::chat_request(&pair.key, &stream_body(""));
    two.extend_from_slice(&Pair::chat_request(&pair.key, &stream_body("")));
    pair.client_send(&two);
    let rs = responses(&pair);
    assert_eq!(rs.len(), 2);
    assert_streamed_answer(&rs[0], &pair.ledger[0]);
    assert_streamed_answer(&rs[1], &pair.ledger[1]);
    assert_eq!(pool_counts(&pair), (2, 0, 1));
    // A request that needs no provider leaves the drain alone.
    let mut pair = draining_pair(UpstreamReads::Whole);
    send(&mut pair, &stream_body(""));
    let key = pair.key.clone();
    pair.client_send(
        format!("GET /v1/models HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\n\r\n")
            .as_bytes(),
    );
    assert_eq!(responses(&pair)[1].status, 200);
    assert!(pair.provider_sends(b"0\r\n\r\n"));
    send(&mut pair, &stream_body(""));
    assert_eq!(responses(&pair).len(), 3);
    assert_eq!(pool_counts(&pair), (1, 1, 0));
}

#[test]
fn a_drained_connection_closes_with_the_client_or_the_provider() {
    // The client leaves: the drained connection is closed before it.
    let mut pair = draining_pair(UpstreamReads::Whole);
    send(&mut pair, &stream_body(""));
    pair.client_close();
    assert!(pair.client_closed);
    assert_eq!(pool_counts(&pair), (1, 0, 1));
    assert_eq!(pair.ledger.len(), 1, "the answer was metered once");
    assert!(!pair.ledger[0].client_disconnected);
    // The client asked to close after the answer: same.
    let mut pair = draining_pair(UpstreamReads::Whole);
    let req = String::from_utf8(Pair::chat_request(&pair.key, &stream_body("")))
        .unwrap()
        .replacen("Host: gw\r\n", "Host: gw\r\nConnection: close\r\n", 1);
    pair.client_send(req.as_bytes());
    assert_streamed_answer(&one(&pair), &pair.ledger[0]);
    assert!(pair.client_closed);
    assert_eq!(pool_counts(&pair), (1, 0, 1));
    // The provider closes instead of sending the last chunk: nothing for
    // the client, and the next request opens a new connection.
    let mut pair = draining_pair(UpstreamReads::Whole);
    pair.provider_script.as_mut().unwrap().close = true;
    send(&mut pair, &stream_body(""));
    assert_streamed_answer(&one(&pair), &pair.ledger[0]);
    assert!(!pair.client_closed);
    assert!(!pair.connection().unwrap().wants_upstream_read());
    send(&mut pair, &stream_body(""));
    assert_eq!(responses(&pair).len(), 2);
    assert_eq!((pair.upstream_opened, pair.upstream_reused), (2, 0));
    // Shutdown while a drain is pending: the idle client connection closes,
    // and the drained one with it.
    let mut pair = draining_pair(UpstreamReads::Whole);
    send(&mut pair, &stream_body(""));
    pair.shutdown();
    assert!(pair.client_closed);
    assert_eq!(pool_counts(&pair), (1, 0, 1));
}

/// Pieces of what a provider might send after `[DONE]`: the end of the
/// framing, trailers, chunks, and anything at all.
fn after_done_piece() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    prop_oneof![
        Just(b"0".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"X-Trailer: 1".to_vec()),
        Just(b"3;ext=1\r\nabc\r\n".to_vec()),
        Just(b"data: [DONE]\n\n".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..8),
    ]
}

/// What a provider sends after `[DONE]`, in pieces: anything, or the end of
/// the framing (with trailers), cut short or followed by anything.
fn after_done() -> impl proptest::strategy::Strategy<Value = Vec<Vec<u8>>> {
    use proptest::prelude::*;
    let end = (
        0usize..3,
        any::<proptest::sample::Index>(),
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..4),
    )
        .prop_map(|(trailers, cut, whole, noise)| {
            let mut end = b"0\r\n".to_vec();
            for _ in 0..trailers {
                end.extend_from_slice(b"X-Trailer: 1\r\n");
            }
            end.extend_from_slice(b"\r\n");
            if !whole {
                end.truncate(cut.index(end.len()));
            }
            vec![end, noise]
        });
    prop_oneof![proptest::collection::vec(after_done_piece(), 0..10), end]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// Whatever comes while a connection is drained, however it is read:
    /// nothing reaches the client, nothing panics, the connection is pooled
    /// exactly when only the end of the framing came, closed when anything
    /// else came before that end, and the next request is answered.
    #[test]
    fn whatever_comes_while_draining_never_reaches_the_client(
        pieces in after_done(),
        read in 1usize..12,
    ) {
        let sent = pieces.concat();
        // The model: a chunked decoder at a chunk boundary, as the drain's.
        let mut model = BodyDecoder::new(
            chatgate_core::http::Framing::Chunked,
            HttpLimits { max_body: u64::MAX, ..HttpLimits::default() },
        );
        let mut body = Vec::new();
        let decoded = model.decode(&sent, &mut body);
        let mut pair = draining_pair(UpstreamReads::AtMost(read));
        send(&mut pair, &stream_body(""));
        let received = pair.received.clone();
        for piece in &pieces {
            // False once the connection was pooled or closed.
            let _ = pair.provider_sends(piece);
        }
        proptest::prop_assert_eq!(&pair.received, &received);
        let counts = pool_counts(&pair);
        let draining = pair.connection().unwrap().wants_upstream_read();
        match decoded {
            Ok(used) if body.is_empty() && model.is_done() => {
                if used == sent.len() {
                    proptest::prop_assert_eq!(counts, (1, 0, 0));
                    proptest::prop_assert!(!draining);
                } else {
                    // Bytes after the end are seen only in the same read.
                    proptest::prop_assert!(!draining);
                }
            }
            Ok(_) if body.is_empty() => {
                proptest::prop_assert_eq!(counts, (1, 0, 0));
                proptest::prop_assert!(draining);
            }
            _ => {
                proptest::prop_assert_eq!(counts, (1, 0, 1));
                proptest::prop_assert!(!draining);
            }
        }
        pair.advance(Duration::from_secs(1));
        proptest::prop_assert!(!pair.connection().unwrap().wants_upstream_read());
        let pooled = pair.upstream_closed == 0;
        send(&mut pair, &stream_body(""));
        let rs = responses(&pair);
        proptest::prop_assert_eq!(rs.len(), 2);
        assert_streamed_answer(&rs[1], &pair.ledger[1]);
        proptest::prop_assert_eq!(pair.upstream_reused, u32::from(pooled));
    }
}

/// A non-streamed answer goes back to the pool only when nothing of it is
/// left on the provider connection: bytes beyond `Content-Length`, or a
/// provider that said `Connection: close`, mean the connection is closed,
/// so the next request (perhaps another client's) never reads them.
#[test]
fn a_provider_connection_with_bytes_left_over_is_not_pooled() {
    let answer = r#"{"id":"chatcmpl-1","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}"#;
    let head = |extra: &str| {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n{answer}",
            answer.len()
        )
    };
    let cases = [
        // (what the provider sends, may the connection be pooled)
        (head(""), true),
        (head("") + "HTTP/1.1 200 OK\r\n", false),
        (head("Connection: close\r\n"), false),
    ];
    for (script, pooled) in cases {
        let mut pair = Pair::with_defaults();
        pair.provider_script = Some(ProviderScript {
            answer: script.clone().into_bytes(),
            close: false,
        });
        send(&mut pair, &body(""));
        assert_eq!(one(&pair).status, 200, "{script:?}");
        assert_eq!(
            pair.upstream_closed == 0,
            pooled,
            "{script:?}: closed {}",
            pair.upstream_closed
        );
    }
}

/// A pair whose gateway makes up to `attempts` attempts per request.
fn retrying(attempts: usize) -> Pair {
    Pair::new(
        |c| c.upstream_attempts = attempts,
        SimOptions::default(),
        Limits::default(),
    )
}

/// Issue: real providers. One endpoint, a transient failure: the request is
/// sent to it again after a pause, and the client sees only the answer.
#[test]
fn one_endpoint_retries_a_transient_failure_after_a_pause() {
    let mut pair = retrying(3);
    pair.connect_failures
        .push_back(UpstreamFailure::Broken("connection reset by peer".into()));
    pair.connect_failures
        .push_back(UpstreamFailure::Connect("connection refused".into()));
    send(&mut pair, &body(""));
    assert!(responses(&pair).is_empty(), "waiting for the pause");
    pair.advance(Duration::from_millis(240));
    assert!(
        responses(&pair).is_empty(),
        "the first pause is 250 ms or more"
    );
    pair.advance(Duration::from_secs(2));
    let r = one(&pair);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let rec = &pair.ledger[0];
    assert_eq!(
        (rec.attempts, rec.endpoint.as_deref()),
        (3, Some("default"))
    );
    assert!(rec.duration_ms >= 750, "two pauses: {}", rec.duration_ms);
}

#[test]
fn every_retry_failing_gives_one_502_that_says_how_often_it_was_tried() {
    let mut pair = retrying(3);
    send(
        &mut pair,
        &body(r#""x_sim":{"fault":"reject","status":"503","retry_after":"1"}"#),
    );
    pair.advance(Duration::from_secs(5));
    let r = one(&pair);
    assert_eq!(r.status, 502);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(msg.contains("Tried 3 times."), "{msg}");
    let journal = pair.sim.journal();
    assert_eq!(journal.len(), 3);
    // Each attempt has its own provider id, the same request's.
    let ids: Vec<_> = journal
        .iter()
        .map(|j| j.request_id.clone().unwrap())
        .collect();
    assert!(
        ids[0].ends_with("01") && ids[1].ends_with("02") && ids[2].ends_with("03"),
        "{ids:?}"
    );
    assert!(ids.iter().all(|i| i[..34] == ids[0][..34]), "{ids:?}");
    // One request's retries do not eject the endpoint on their own.
    let wall = pair.gateway.wall();
    let status = pair
        .gateway
        .endpoints()
        .status(chatgate_core::Instant::ZERO, wall);
    assert_eq!(
        (status[0].state, status[0].failures_in_a_row),
        ("healthy", 1)
    );
    // Retry-After (1 s) was honoured between attempts.
    assert!(
        pair.ledger[0].duration_ms >= 2000,
        "{}",
        pair.ledger[0].duration_ms
    );
    // A Retry-After above the cap is not waited for.
    let mut pair = retrying(3);
    send(
        &mut pair,
        &body(r#""x_sim":{"fault":"reject","status":"429","retry_after":"30"}"#),
    );
    pair.advance(Duration::from_secs(1));
    let r = one(&pair);
    assert_eq!((r.status, r.header("retry-after")), (502, Some("30")));
    assert_eq!(pair.sim.journal().len(), 1);
}

/// A provider's refusal is not retried by the gateway, nor (told so) by
/// the client's SDK, and keeps the provider's own code.
#[test]
fn a_provider_refusal_says_do_not_retry_and_keeps_the_providers_code() {
    let mut pair = retrying(3);
    send(
        &mut pair,
        &body(r#""x_sim":{"fault":"reject","status":"400","message":"context too long"}"#),
    );
    let r = one(&pair);
    assert_eq!(r.status, 502);
    assert_eq!(r.header("x-should-retry"), Some("false"));
    let e = &r.json()["error"];
    assert_eq!(
        (e["type"].as_str(), e["code"].as_str()),
        (Some("upstream_error"), Some("upstream_error"))
    );
    assert_eq!(e["provider"]["status"], 400);
    assert_eq!(e["provider"]["code"], "invalid_request");
    assert_eq!(e["provider"]["message"], "context too long");
    assert_eq!(pair.sim.journal().len(), 1, "not tried again");
    // A 5xx may be retried by the client.
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &body(r#""x_sim":{"fault":"reject","status":"500"}"#),
    );
    let r = one(&pair);
    assert_eq!((r.status, r.header("x-should-retry")), (502, None));
    assert_eq!(r.json()["error"]["provider"]["status"], 500);
}

/// Comments before the first event (llama.cpp's `: ping` while a request
/// is queued) do not commit the response.
#[test]
fn comments_before_the_first_event_do_not_commit_the_response() {
    // The provider dies after only comments: a JSON 502, not an empty 200.
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"pings","count":"3","die":"true"}"#),
    );
    let r = one(&pair);
    assert_eq!(r.status, 502, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["error"]["code"], "upstream_error");
    // With retries, the next attempt answers in full.
    let mut pair = retrying(2);
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"pings","count":"3","die":"true"}"#),
    );
    pair.advance(Duration::from_secs(1));
    assert_eq!(one(&pair).status, 502, "the same body dies again");
    assert_eq!(pair.sim.journal().len(), 2);
    // Comments then `[DONE]` and nothing else: no answer, a JSON 502.
    let mut pair = Pair::with_defaults();
    pair.provider_script = Some(ProviderScript {
        answer: b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 34\r\n\r\n: ping - 1\n\n: ping - 2\n\ndata: [DONE]\n\n".to_vec(),
        close: false,
    });
    send(&mut pair, &stream_body(""));
    pair.run();
    let r = one(&pair);
    assert_eq!(r.status, 502, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(pair.ledger[0].error.as_deref(), Some("upstream_invalid"));
    // Comments then the answer: the client gets the answer; the comments
    // that came before it are dropped.
    let mut pair = Pair::with_defaults();
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"pings","count":"2"}"#),
    );
    let r = one(&pair);
    assert_eq!(r.status, 200);
    assert!(!String::from_utf8_lossy(&r.body).contains(": ping"));
    assert!(pair.ledger[0].complete);
}

/// `--stream-error-event`: a cut stream ends with an error event before
/// `[DONE]`; off by default (the specification's ending).
#[test]
fn a_cut_stream_gets_an_error_event_only_when_asked() {
    for on in [false, true] {
        let mut pair = Pair::new(
            |c| c.stream_error_event = on,
            SimOptions::default(),
            Limits::default(),
        );
        send(
            &mut pair,
            &stream_body(r#""x_sim":{"fault":"reset","after":"3"}"#),
        );
        let r = one(&pair);
        assert_eq!(r.status, 200);
        let data = sse_data(&r.body);
        assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
        let before = &data[data.len() - 2];
        let v: Value = serde_json::from_str(before).unwrap();
        if on {
            assert_eq!(v["error"]["code"], "upstream_reset", "{before}");
            assert_eq!(v["error"]["type"], "upstream_error");
        } else {
            assert!(v.get("error").is_none(), "{before}");
        }
        assert!(!pair.ledger[0].complete);
        // A complete stream never gets one.
        pair.received.clear();
        send(&mut pair, &stream_body(""));
        pair.run();
        let all = responses(&pair);
        assert!(
            all.last()
                .is_some_and(|r| !String::from_utf8_lossy(&r.body).contains("\"error\""))
        );
    }
    // A provider that sends [DONE] without finish_reason: the event goes
    // before its [DONE].
    let mut pair = Pair::new(
        |c| c.stream_error_event = true,
        SimOptions::default(),
        Limits::default(),
    );
    pair.provider_script = Some(ProviderScript {
        answer: b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 76\r\n\r\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n".to_vec(),
        close: false,
    });
    send(&mut pair, &stream_body(""));
    pair.run();
    let data = sse_data(&one(&pair).body);
    assert_eq!(data.len(), 3, "{data:?}");
    assert!(data[1].contains("upstream_incomplete"), "{data:?}");
    assert_eq!(data[2], "[DONE]");
}

/// The prompt reservation learns what the provider adds to the estimate.
#[test]
fn the_prompt_allowance_is_learned_from_reports() {
    let mut pair = Pair::with_defaults();
    let endpoint = std::sync::Arc::clone(&pair.gateway.endpoints().endpoints()[0]);
    assert_eq!(endpoint.prompt_allowance().parts(), (0, 1000));
    // A chat template the gateway cannot see: 100 tokens on every prompt.
    send(&mut pair, &body(r#""x_sim":{"template_tokens":"100"}"#));
    assert_eq!(one(&pair).status, 200);
    let rec = pair.ledger[0].clone();
    assert_eq!(endpoint.prompt_allowance().parts(), (100, 1000));
    // The next request's reservation covers what was reported.
    let estimate = rec.prompt_tokens - 100;
    assert_eq!(
        pair.gateway.endpoints().prompt_bound(estimate, 64),
        rec.prompt_tokens
    );
}

/// An error event instead of a first event may be the request's fault (a
/// context overflow said that way): it is not sent to the same endpoint
/// again.
#[test]
fn an_error_event_first_is_not_retried_on_the_same_endpoint() {
    let mut pair = retrying(3);
    send(
        &mut pair,
        &stream_body(r#""x_sim":{"fault":"error_event","after":0}"#),
    );
    pair.advance(Duration::from_secs(2));
    let r = one(&pair);
    assert_eq!(r.status, 502);
    assert_eq!(pair.sim.journal().len(), 1);
    assert_eq!(
        pair.ledger[0].error.as_deref(),
        Some("upstream_error_event")
    );
}

/// A stream the client leaves: no worst-case charge from a provider that
/// reports usage at the end; a provider known to leave usage out is
/// charged it.
#[test]
fn a_client_that_leaves_is_charged_the_worst_case_only_by_a_provider_without_usage() {
    for omits in [false, true] {
        let mut pair = Pair::new(
            |_| {},
            SimOptions {
                token_interval: Duration::from_millis(10),
                ..SimOptions::default()
            },
            Limits::default(),
        );
        if omits {
            // A complete answer without usage: the endpoint omits it.
            send(
                &mut pair,
                &stream_body(r#""x_sim":{"fault":"no_usage","token_ms":"0"}"#),
            );
            pair.advance(Duration::from_secs(1));
            assert!(pair.ledger[0].usage_missing);
            pair.received.clear();
        }
        send(
            &mut pair,
            &stream_body(r#""max_tokens":100,"x_sim":{"fault":"no_usage"}"#),
        );
        pair.advance(Duration::from_millis(50));
        pair.client_close();
        let rec = pair.ledger.last().unwrap();
        assert!(rec.client_disconnected, "{rec:?}");
        assert_eq!(rec.usage_missing, omits, "{rec:?}");
        assert_eq!(rec.charged_nano_usd > 0, omits, "{rec:?}");
    }
}
