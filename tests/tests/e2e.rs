//! The service specification, section by section, through the real
//! binaries: each case runs against every runtime in `RUNTIMES`.

use chatgate_tests::*;
use serde_json::{Value, json};

cases!(
    models_list,
    non_streamed_answer_and_ledger,
    streamed_answer_order_usage_and_bytes,
    unknown_parameters_and_reasoning_content,
    validation_rules_never_reach_the_provider,
    body_limit_is_exact,
    unimplemented_endpoints_are_unknown_urls,
    authentication,
    rate_limits_with_retry_after,
    provider_errors_become_502,
    provider_without_done,
    keep_alive_comments_after_usage_end_the_stream,
    provider_reset_mid_stream,
    client_disconnects_abort_the_provider,
    tool_call_round_trip,
    length_with_empty_content,
    keep_alive_pipelining_chunked_and_expect,
    errors_that_close_the_connection_close_it_at_once,
    hundred_concurrent_streams,
    tls_upstream,
    provider_key_from_the_environment,
    timeouts_and_connection_limit,
    graceful_shutdown_on_sigterm_with_a_stream_in_flight,
    graceful_shutdown_on_sigint_with_a_stream_in_flight,
    a_signal_right_after_the_listening_line_exits_0,
    idle_provider_connections_close_at_the_pool_idle_timeout,
    the_pool_keeps_at_most_pool_max_idle_connections,
    connect_timeout_covers_a_stalled_tls_handshake,
    partial_events_wait_for_their_end_without_timers,
    tools_content_parts_and_headers_are_checked_before_the_provider,
    demo_serves_streams_answers_and_its_curl_line,
    sigkill_keeps_every_delivered_line,
    command_line,
    logs_never_contain_keys_or_content,
);

fn pair(bin: &str) -> (Sim, Gw) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = Gw::start(bin, &sim.url(), GwOptions::default());
    (sim, gw)
}

fn models_list(bin: &str) {
    let (_sim, gw) = pair(bin);
    let r = request(gw.addr, "GET", "/v1/models", Some(&gw.key), None);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json(),
        json!({"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "chatgate"}]})
    );
    assert!(r.header("x-request-id").unwrap().starts_with("req_"));
    assert_eq!(r.header("x-ratelimit-limit-requests"), Some("60"));
    // Authentication applies to the model list too.
    assert_eq!(
        request(gw.addr, "GET", "/v1/models", None, None).status,
        401
    );
}

fn non_streamed_answer_and_ledger(bin: &str) {
    let (sim, gw) = pair(bin);
    let r = gw.chat(&body(""));
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert!(v["created"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!(v["model"], MODEL);
    let msg = &v["choices"][0]["message"];
    assert_eq!(msg["role"], "assistant");
    assert!(msg["reasoning_content"].as_str().unwrap().len() > 20);
    assert!(
        msg["content"]
            .as_str()
            .unwrap()
            .starts_with("You said: What is two plus two?")
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let u = &v["usage"];
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()
    );
    // Byte for byte what the provider answered.
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        sim.settled(0)["response"].as_str().unwrap()
    );
    let rec = &gw.ledger_len(1)[0];
    let (p, c) = (
        u["prompt_tokens"].as_u64().unwrap(),
        u["completion_tokens"].as_u64().unwrap(),
    );
    assert_eq!((rec.prompt_tokens, rec.completion_tokens), (p, c));
    assert_eq!(
        rec.reasoning_tokens,
        u["completion_tokens_details"]["reasoning_tokens"]
            .as_u64()
            .unwrap()
    );
    assert_eq!(rec.cost_nano_usd, p * 2850 + c * 14250);
    let line = std::fs::read_to_string(gw.dir.path().join("ledger.jsonl")).unwrap();
    let raw: Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    let exact = format!(
        "{}.{:09}",
        rec.cost_nano_usd / 1_000_000_000,
        rec.cost_nano_usd % 1_000_000_000
    );
    assert!(line.contains(&format!("\"cost_usd\":{exact}")), "{line}");
    assert_eq!(raw["key"], "test");
    assert_eq!(raw["model"], MODEL);
    assert_eq!(raw["stream"], false);
    assert_eq!(raw["status"], 200);
    assert_eq!(raw["finish_reason"], "stop");
    assert_eq!(raw["complete"], true);
    assert_eq!(raw["client_disconnected"], false);
    assert_eq!(raw["request_id"].as_str(), r.header("x-request-id"));
    assert!(raw["ts"].as_str().unwrap().ends_with('Z'));
}

fn streamed_answer_order_usage_and_bytes(bin: &str) {
    let (sim, gw) = pair(bin);
    let r = gw.chat(&stream_body(""));
    assert_eq!(r.status, 200);
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("text/event-stream")
    );
    let events = r.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks = r.chunks();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(chunks[0]["choices"][0]["delta"]["reasoning_content"].is_string());
    // Phases: reasoning, content, finish with empty delta, usage, [DONE].
    let mut phase = 0;
    let (mut reasoning, mut content) = (String::new(), String::new());
    for c in &chunks {
        let choices = c["choices"].as_array().unwrap();
        if choices.is_empty() {
            assert_eq!(phase, 2, "usage chunk after the finish chunk");
            assert!(c["usage"]["completion_tokens"].as_u64().unwrap() > 0);
            phase = 3;
        } else if let Some(t) = choices[0]["delta"]["reasoning_content"].as_str() {
            assert_eq!(phase, 0);
            reasoning.push_str(t);
        } else if let Some(t) = choices[0]["delta"]["content"].as_str() {
            assert!(phase <= 1);
            phase = 1;
            content.push_str(t);
        } else {
            assert_eq!(choices[0]["delta"], json!({}));
            assert_eq!(choices[0]["finish_reason"], "stop");
            phase = 2;
        }
    }
    assert_eq!(phase, 3);
    assert!(content.starts_with("You said:") && !reasoning.is_empty());
    // The usage chunk arrived although the client did not ask; the provider
    // was asked for it.
    let entry = sim.settled(0);
    let sent: Value = serde_json::from_str(entry["body"].as_str().unwrap()).unwrap();
    assert_eq!(sent["stream_options"], json!({"include_usage": true}));
    // Every event exactly as the provider sent it.
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        entry["response"].as_str().unwrap()
    );
    let rec = &gw.ledger_len(1)[0];
    assert!(rec.stream && rec.complete);
    assert_eq!(
        rec.completion_tokens,
        chunks.last().unwrap()["usage"]["completion_tokens"]
            .as_u64()
            .unwrap()
    );
}

fn unknown_parameters_and_reasoning_content(bin: &str) {
    let (sim, gw) = pair(bin);
    let b = r#"{"seed":42,"model":"reasoning-model-k3","presence_penalty":0.5,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b","reasoning_content":"old thoughts"},{"role":"user","content":"c"}],"frequency_penalty":1.0,"response_format":{"type":"text"},"parallel_tool_calls":true,"user":"u-1"}"#;
    assert_eq!(gw.chat(b).status, 200);
    assert_eq!(
        sim.settled(0)["body"],
        r#"{"seed":42,"model":"reasoning-model-k3","presence_penalty":0.5,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}],"frequency_penalty":1.0,"response_format":{"type":"text"},"parallel_tool_calls":true,"user":"u-1"}"#
    );
}

fn validation_rules_never_reach_the_provider(bin: &str) {
    let (sim, gw) = pair(bin);
    let m = r#""messages":[{"role":"user","content":"x"}]"#;
    let cases: Vec<(String, u16, &str, Value)> = vec![
        ("{oops".into(), 400, "invalid_json", Value::Null),
        (format!(r#"{{{m}}}"#), 400, "missing_required_parameter", json!("model")),
        (format!(r#"{{"model":"other",{m}}}"#), 404, "model_not_found", json!("model")),
        (r#"{"model":"reasoning-model-k3"}"#.into(), 400, "missing_required_parameter", json!("messages")),
        (r#"{"model":"reasoning-model-k3","messages":[]}"#.into(), 400, "invalid_value", json!("messages")),
        (r#"{"model":"reasoning-model-k3","messages":[{"role":"wizard","content":"x"}]}"#.into(), 400, "invalid_value", json!("messages[0].role")),
        (r#"{"model":"reasoning-model-k3","messages":[{"role":"tool","content":"x"}]}"#.into(), 400, "missing_required_parameter", json!("messages[0].tool_call_id")),
        (r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"ftp://x"}}]}]}"#.into(), 400, "invalid_value", json!("messages[0].content[0].image_url.url")),
        (format!(r#"{{"model":"reasoning-model-k3",{m},"temperature":2.5}}"#), 400, "invalid_value", json!("temperature")),
        (format!(r#"{{"model":"reasoning-model-k3",{m},"top_p":-1}}"#), 400, "invalid_value", json!("top_p")),
        (format!(r#"{{"model":"reasoning-model-k3",{m},"max_tokens":0}}"#), 400, "invalid_value", json!("max_tokens")),
        (format!(r#"{{"model":"reasoning-model-k3",{m},"stop":["a","b","c","d","e"]}}"#), 400, "invalid_value", json!("stop")),
        (format!(r#"{{"model":"reasoning-model-k3",{m},"tool_choice":"maybe"}}"#), 400, "invalid_value", json!("tool_choice")),
        (format!(r#"{{"model":"reasoning-model-k3",{m},"stream":"yes"}}"#), 400, "invalid_type", json!("stream")),
    ];
    for (b, status, code, param) in &cases {
        let r = gw.chat(b);
        let (s, kind, c, p) = r.error();
        assert_eq!((s, c.as_str(), &p), (*status, *code, param), "{b}");
        assert_eq!(kind, "invalid_request_error");
    }
    assert!(sim.journal().is_empty(), "the provider was called");
    assert_eq!(gw.ledger_len(cases.len()).len(), cases.len());
}

fn body_limit_is_exact(bin: &str) {
    let (sim, gw) = pair(bin);
    let limit = 2 * 1024 * 1024;
    let mut b = body(r#""pad":"PAD""#);
    let pad = limit - b.len() + 3;
    b = b.replace("PAD", &"x".repeat(pad));
    assert_eq!(b.len(), limit);
    assert_eq!(gw.chat(&b).status, 200);
    // One byte more is refused as soon as the length is read, without the
    // body: sent alone, the head gets its answer (a client still writing
    // 2 MiB would race the close, and may see a broken pipe instead).
    let mut c = Conn::open(gw.addr);
    c.send(
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            gw.key,
            limit + 1
        )
        .as_bytes(),
    );
    let r = c.response();
    assert_eq!(
        r.error(),
        (
            413,
            "invalid_request_error".into(),
            "request_too_large".into(),
            Value::Null
        )
    );
    assert_eq!(sim.journal().len(), 1);
}

fn unimplemented_endpoints_are_unknown_urls(bin: &str) {
    let (_sim, gw) = pair(bin);
    for path in [
        "/v1/embeddings",
        "/v1/completions",
        "/v1/images/generations",
        "/v1/models/reasoning-model-k3",
        "/v1",
    ] {
        let r = request(gw.addr, "POST", path, Some(&gw.key), Some("{}"));
        assert_eq!(
            r.error(),
            (
                404,
                "invalid_request_error".into(),
                "unknown_url".into(),
                Value::Null
            ),
            "{path}"
        );
    }
    let r = request(
        gw.addr,
        "DELETE",
        "/v1/chat/completions",
        Some(&gw.key),
        None,
    );
    assert_eq!((r.status, r.header("allow")), (405, Some("POST")));
}

fn authentication(bin: &str) {
    let (sim, gw) = pair(bin);
    let other = "sk-cg-0123456789012345678901234567890123456789abc";
    let truncated = &gw.key[..gw.key.len() - 1];
    for key in [None, Some(other), Some("sk-cg-short"), Some(truncated)] {
        let r = request(
            gw.addr,
            "POST",
            "/v1/chat/completions",
            key,
            Some(&body("")),
        );
        assert_eq!(
            r.error(),
            (
                401,
                "authentication_error".into(),
                "invalid_api_key".into(),
                Value::Null
            )
        );
    }
    let mut c = Conn::open(gw.addr);
    c.send(format!("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {}\r\nContent-Length: 2\r\n\r\n{{}}", gw.key).as_bytes());
    assert_eq!(c.response().status, 401);
    assert!(sim.journal().is_empty());
    assert!(
        gw.ledger().is_empty(),
        "unauthenticated requests are not metered"
    );
}

fn rate_limits_with_retry_after(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            rpm: Some(2),
            ..GwOptions::default()
        },
    );
    assert_eq!(gw.chat(&body("")).status, 200);
    assert_eq!(gw.chat(&body("")).status, 200);
    let r = gw.chat(&body(""));
    assert_eq!(
        r.error(),
        (
            429,
            "rate_limit_error".into(),
            "rate_limit_exceeded".into(),
            Value::Null
        )
    );
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=30).contains(&retry), "{retry}");
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("0"));
    assert_eq!(sim.journal().len(), 2);

    let gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            tpm: Some(300),
            ..GwOptions::default()
        },
    );
    let r = gw.chat(&body(r#""max_tokens":250"#));
    assert_eq!(r.status, 200);
    let r = gw.chat(&body(r#""max_tokens":290"#));
    assert_eq!(r.status, 429);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tokens")
    );
    assert!(r.header("retry-after").unwrap().parse::<u64>().unwrap() >= 1);
    assert_eq!(gw.ledger_len(2)[1].status, 429);
}

fn provider_errors_become_502(bin: &str) {
    let (sim, gw) = pair(bin);
    for (extra, status) in [
        (
            r#""x_sim":{"fault":"reject","status":400,"message":"input too long"}"#,
            400,
        ),
        (r#""x_sim":{"fault":"reject","status":500}"#, 500),
    ] {
        for b in [body(extra), stream_body(extra)] {
            let r = gw.chat(&b);
            assert_eq!(
                r.error(),
                (
                    502,
                    "upstream_error".into(),
                    "upstream_error".into(),
                    Value::Null
                )
            );
            let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
            assert!(msg.contains(&format!("HTTP {status}")), "{msg}");
            if status == 400 {
                assert!(msg.contains("input too long"), "{msg}");
            }
        }
    }
    let recs = gw.ledger_len(4);
    assert!(
        recs.iter()
            .all(|r| r.status == 502 && r.upstream_status.is_some())
    );
    // The 400s were asked once (a refusal), the 500s three times each (a
    // transient failure is tried again).
    assert_eq!(sim.journal().len(), 8);
}

fn provider_without_done(bin: &str) {
    let sim = Sim::start(bin, &["--fault", "omit_done"], &[]);
    let gw = Gw::start(bin, &sim.url(), GwOptions::default());
    let r = gw.chat(&stream_body(""));
    let events = r.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(events.iter().filter(|e| *e == "[DONE]").count(), 1);
    assert!(
        !sim.settled(0)["response"]
            .as_str()
            .unwrap()
            .contains("[DONE]")
    );
    assert!(gw.ledger_len(1)[0].complete);
}

/// A provider that keeps sending `: keep-alive` comments after the usage
/// chunk and never `[DONE]`: the client already has its whole answer and
/// usage, so the stream ends with `[DONE]` within 2 s of the usage chunk,
/// metered complete, not after the 30-second `--stream-tail-timeout`. A
/// provider that sent `finish_reason` but no usage yet keeps the longer
/// tail (here 4 s), in case the usage chunk is still coming.
fn keep_alive_comments_after_usage_end_the_stream(bin: &str) {
    let (sim, gw) = pair(bin);
    let whole = gw.chat(&stream_body(""));
    let started = std::time::Instant::now();
    let r = gw.chat(&stream_body(r#""x_sim":{"fault":"keepalive_after_usage"}"#));
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(10),
        "the stream stayed open {took:?} after its usage chunk"
    );
    let events = r.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(events.iter().filter(|e| *e == "[DONE]").count(), 1);
    assert_eq!(
        events.len(),
        whole.events().len(),
        "every event, then [DONE]"
    );
    assert!(events[events.len() - 2].contains(r#""usage":{"prompt_tokens""#));
    let recs = gw.ledger_len(2);
    assert!(recs[1].complete);
    assert_eq!(recs[1].finish_reason.as_deref(), Some("stop"));
    assert_eq!(recs[1].error, None);
    assert_eq!(
        (recs[1].prompt_tokens, recs[1].completion_tokens),
        (recs[0].prompt_tokens, recs[0].completion_tokens)
    );
    assert_eq!(sim.settled(1)["outcome"], "aborted");

    // finish_reason without usage, then comments: the whole tail applies.
    let gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            args: vec!["--stream-tail-timeout".into(), "4s".into()],
            ..GwOptions::default()
        },
    );
    let started = std::time::Instant::now();
    let r = gw.chat(&stream_body(
        r#""x_sim":{"fault":"heartbeat_after_finish"}"#,
    ));
    let took = started.elapsed();
    assert!(
        took >= std::time::Duration::from_secs(4),
        "cut after {took:?}, before the tail timeout"
    );
    assert_eq!(r.events().last().map(String::as_str), Some("[DONE]"));
    let rec = &gw.ledger_len(1)[0];
    assert!(rec.complete);
    assert_eq!(rec.error.as_deref(), Some("upstream_tail_timeout"));
}

fn provider_reset_mid_stream(bin: &str) {
    let (sim, gw) = pair(bin);
    // Reset after the usage chunk but before [DONE]: the usage is metered.
    let full = gw.chat(&stream_body("")).events().len();
    let r = gw.chat(&stream_body(&format!(
        r#""x_sim":{{"fault":"reset","after":{}}}"#,
        full - 1
    )));
    assert_eq!(r.events().last().map(String::as_str), Some("[DONE]"));
    let recs = gw.ledger_len(2);
    assert!(recs[1].complete, "finish_reason arrived before the reset");
    assert_eq!(recs[1].completion_tokens, recs[0].completion_tokens);
    // Reset early: no finish_reason, incomplete, nothing reported.
    let r = gw.chat(&stream_body(r#""x_sim":{"fault":"reset","after":3}"#));
    let events = r.events();
    assert_eq!(events.len(), 4);
    assert_eq!(events[3], "[DONE]");
    assert!(
        r.chunks()
            .iter()
            .all(|c| c["choices"][0]["finish_reason"].is_null())
    );
    let rec = &gw.ledger_len(3)[2];
    assert!(!rec.complete);
    assert_eq!(rec.finish_reason, None);
    assert_eq!(sim.settled(2)["outcome"], "reset");
    // A provider that reports cumulative usage on every chunk, reset before
    // finishing: incomplete, metered with the last usage it reported.
    let r = gw.chat(&stream_body(
        r#""x_sim":{"fault":"reset","after":6,"usage_every":true,"reasoning_tokens":4}"#,
    ));
    let last = r.chunks().last().unwrap()["usage"].clone();
    assert_eq!(last["completion_tokens"], 6);
    let rec = &gw.ledger_len(4)[3];
    assert!(!rec.complete);
    assert_eq!((rec.completion_tokens, rec.reasoning_tokens), (6, 4));
    assert_eq!(rec.cost_nano_usd, rec.prompt_tokens * 2850 + 6 * 14250);
}

fn client_disconnects_abort_the_provider(bin: &str) {
    let (sim, gw) = pair(bin);
    // While the provider has not answered at all.
    let mut c = Conn::open(gw.addr);
    c.send(&raw_request(
        "POST",
        "/v1/chat/completions",
        Some(&gw.key),
        Some(&body(r#""x_sim":{"fault":"stall_headers"}"#)),
    ));
    eventually("the provider got the request", || sim.journal().len() == 1);
    drop(c);
    assert_eq!(sim.settled(0)["outcome"], "aborted");
    // While a non-streamed answer is being prepared.
    let mut c = Conn::open(gw.addr);
    c.send(&raw_request(
        "POST",
        "/v1/chat/completions",
        Some(&gw.key),
        Some(&body(r#""x_sim":{"ttft_ms":60000}"#)),
    ));
    eventually("the provider got the request", || sim.journal().len() == 2);
    drop(c);
    assert_eq!(sim.settled(1)["outcome"], "aborted");
    // Before the first event of a stream.
    let mut c = Conn::open(gw.addr);
    c.send(&raw_request(
        "POST",
        "/v1/chat/completions",
        Some(&gw.key),
        Some(&stream_body(r#""x_sim":{"ttft_ms":60000}"#)),
    ));
    eventually("the provider got the request", || sim.journal().len() == 3);
    drop(c);
    assert_eq!(sim.settled(2)["outcome"], "aborted");
    // Mid-stream.
    let mut c = Conn::open(gw.addr);
    c.send(&raw_request(
        "POST",
        "/v1/chat/completions",
        Some(&gw.key),
        Some(&stream_body(r#""x_sim":{"token_ms":200}"#)),
    ));
    c.read_until("reasoning_content");
    drop(c);
    let e = sim.settled(3);
    assert_eq!(e["outcome"], "aborted");
    assert!(e["events_sent"].as_u64().unwrap() < 10);
    let recs = gw.ledger_len(4);
    assert!(recs.iter().all(|r| r.client_disconnected));
    assert_eq!(
        recs.iter().map(|r| r.status).collect::<Vec<_>>(),
        [499, 499, 499, 200]
    );
    assert!(!recs[3].complete);
}

fn tool_call_round_trip(bin: &str) {
    let (_sim, gw) = pair(bin);
    let tools = r#""tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]"#;
    let first = gw
        .chat(&format!(
            r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"Paris"}}],{tools}}}"#
        ))
        .json();
    assert_eq!(first["choices"][0]["finish_reason"], "tool_calls");
    let call = first["choices"][0]["message"]["tool_calls"][0].clone();
    assert_eq!(call["function"]["name"], "get_weather");
    let id = call["id"].as_str().unwrap();
    let second = gw
        .chat(&format!(
            r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"Paris"}},{{"role":"assistant","content":null,"tool_calls":[{call}]}},{{"role":"tool","tool_call_id":"{id}","content":"sunny, 21C"}}],{tools}}}"#
        ))
        .json();
    assert_eq!(second["choices"][0]["finish_reason"], "stop");
    assert!(
        second["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .contains("sunny, 21C")
    );
}

fn length_with_empty_content(bin: &str) {
    let (_sim, gw) = pair(bin);
    let v = gw.chat(&body(r#""max_tokens":4"#)).json();
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["choices"][0]["message"]["content"], "");
    assert_eq!(v["usage"]["completion_tokens"], 4);
    let r = gw.chat(&stream_body(r#""max_tokens":4"#));
    assert!(r.chunks().iter().all(|c| {
        c["choices"][0]["delta"]["content"]
            .as_str()
            .is_none_or(str::is_empty)
    }));
    assert_eq!(gw.ledger_len(2)[1].finish_reason.as_deref(), Some("length"));
}

/// An error answered with `Connection: close` ends the connection at once:
/// the gateway half-closes right after the response, then reads and drops
/// what the client still sends for a moment (so the response is not lost
/// to a reset). chatgate-smol used to skip the half-close (async-io's
/// `close` only flushes), holding every such connection open for the
/// whole 2-second linger. Each shape runs five times: how such a bug shows
/// can depend on timing. The bound is well under the linger, far above a
/// loaded machine's scheduling delays.
fn errors_that_close_the_connection_close_it_at_once(bin: &str) {
    let (_sim, gw) = pair(bin);
    let post = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {}\r\n",
        gw.key
    );
    let many: String = (0..200).map(|i| format!("X-Field-{i}: v\r\n")).collect();
    let shapes = [
        (
            "Content-Length with Transfer-Encoding",
            400,
            format!("{post}Content-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0123456789"),
        ),
        (
            "a space before a header's colon",
            400,
            format!("{post}Content-Length : 40\r\n\r\n0123456789"),
        ),
        (
            "HTTP/2.0 on the request line",
            505,
            "POST /v1/chat/completions HTTP/2.0\r\nHost: gw\r\nContent-Length: 40\r\n\r\n0123456789"
                .to_owned(),
        ),
        (
            "200 header fields",
            431,
            format!("{post}{many}Content-Length: 40\r\n\r\n0123456789"),
        ),
        (
            "a chunk size of 20 hex digits",
            400,
            format!("{post}Transfer-Encoding: chunked\r\n\r\n10000000000000000000\r\n0123456789"),
        ),
    ];
    for round in 0..5 {
        for (name, status, raw) in &shapes {
            let mut c = Conn::open(gw.addr);
            c.send(raw.as_bytes());
            let r = c.response();
            assert_eq!(r.status, *status, "{name}");
            assert_eq!(r.header("connection"), Some("close"), "{name}");
            let answered = std::time::Instant::now();
            assert!(c.closed(), "{name}: not closed");
            let waited = answered.elapsed();
            assert!(
                waited < std::time::Duration::from_millis(1500),
                "{name} (round {round}): the connection stayed open {waited:?} after its error"
            );
        }
    }
}

fn keep_alive_pipelining_chunked_and_expect(bin: &str) {
    let (sim, gw) = pair(bin);
    let mut c = Conn::open(gw.addr);
    // Pipelined: three requests in one write, answered in order.
    let mut three = raw_request(
        "POST",
        "/v1/chat/completions",
        Some(&gw.key),
        Some(&body(r#""user":"one""#)),
    );
    three.extend(raw_request("GET", "/v1/models", Some(&gw.key), None));
    three.extend(raw_request(
        "POST",
        "/v1/chat/completions",
        Some(&gw.key),
        Some(&stream_body(r#""user":"three""#)),
    ));
    c.send(&three);
    assert_eq!(c.response().json()["object"], "chat.completion");
    assert_eq!(c.response().json()["object"], "list");
    assert_eq!(
        c.response().events().last().map(String::as_str),
        Some("[DONE]")
    );
    // Chunked request body with Expect: 100-continue on the same connection.
    let b = body(r#""user":"four""#);
    let (a, z) = b.split_at(b.len() / 2);
    c.send(format!("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n", gw.key).as_bytes());
    c.read_until("100 Continue");
    c.send(format!("{:x}\r\n{a}\r\n{:x}\r\n{z}\r\n0\r\n\r\n", a.len(), z.len()).as_bytes());
    let r = c.response();
    assert_eq!(r.status, 200);
    let j = sim.journal();
    assert_eq!(j.len(), 3);
    assert_eq!(j[2]["body"], b);
    // Keep-alive towards the provider too: one connection carried all three.
    assert!(
        j.iter().all(|e| e["connection"] == j[0]["connection"]),
        "{j:?}"
    );
    assert_eq!(gw.ledger_len(3).len(), 3);
}

fn hundred_concurrent_streams(bin: &str) {
    let sim = Sim::start(bin, &["--token-ms", "5"], &[]);
    let gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            rpm: Some(10_000),
            tpm: Some(100_000_000),
            ..GwOptions::default()
        },
    );
    let threads: Vec<_> = (0..100)
        .map(|i| {
            let (addr, key) = (gw.addr, gw.key.clone());
            std::thread::spawn(move || {
                let r = request(
                    addr,
                    "POST",
                    "/v1/chat/completions",
                    Some(&key),
                    Some(&stream_body(&format!(r#""user":"u{i}""#))),
                );
                assert_eq!(r.status, 200);
                assert_eq!(r.events().last().map(String::as_str), Some("[DONE]"));
                r.chunks().last().unwrap()["usage"]["completion_tokens"]
                    .as_u64()
                    .unwrap()
            })
        })
        .collect();
    let tokens: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let recs = gw.ledger_len(100);
    assert_eq!(
        recs.iter().map(|r| r.completion_tokens).sum::<u64>(),
        tokens
    );
    assert!(recs.iter().all(|r| r.complete && r.status == 200));
}

fn tls_upstream(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let good = certs(&["localhost"]);
    let proxy = tls_proxy(&good, sim.addr);
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &good.ca_pem).unwrap();
    let url = format!("https://localhost:{}/v1", proxy.port());
    let ca_arg = vec![
        "--upstream-ca".to_owned(),
        ca.to_string_lossy().into_owned(),
    ];
    let gw = Gw::start(
        bin,
        &url,
        GwOptions {
            args: ca_arg,
            ..GwOptions::default()
        },
    );
    assert_eq!(gw.chat(&body("")).status, 200);
    let r = gw.chat(&stream_body(""));
    assert_eq!(r.events().last().map(String::as_str), Some("[DONE]"));
    // Without our CA the certificate does not verify: a clear 502.
    let gw = Gw::start(bin, &url, GwOptions::default());
    let r = gw.chat(&body(""));
    assert_eq!(r.status, 502);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("TLS") && msg.to_lowercase().contains("certificate"),
        "{msg}"
    );
    // A certificate for another name does not verify either, even from a
    // trusted CA.
    let wrong_name = certs(&["other.example"]);
    let ca2 = dir.path().join("ca2.pem");
    std::fs::write(&ca2, &wrong_name.ca_pem).unwrap();
    let proxy2 = tls_proxy(&wrong_name, sim.addr);
    let args = vec![
        "--upstream-ca".to_owned(),
        ca2.to_string_lossy().into_owned(),
    ];
    let gw = Gw::start(
        bin,
        &format!("https://localhost:{}/v1", proxy2.port()),
        GwOptions {
            args,
            ..GwOptions::default()
        },
    );
    let r = gw.chat(&body(""));
    assert_eq!(r.status, 502);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("TLS") && msg.contains("not valid for name"),
        "{msg}"
    );
}

fn provider_key_from_the_environment(bin: &str) {
    let sim = Sim::start(bin, &[], &[("CHATGATE_SIM_API_KEY", "provider-secret-1")]);
    let env = vec![(
        "CHATGATE_UPSTREAM_API_KEY".to_owned(),
        "provider-secret-1".to_owned(),
    )];
    let gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            env,
            ..GwOptions::default()
        },
    );
    assert_eq!(gw.chat(&body("")).status, 200);
    let gw2 = Gw::start(bin, &sim.url(), GwOptions::default());
    let r = gw2.chat(&body(""));
    assert_eq!(r.status, 502);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("HTTP 401")
    );
    assert!(!gw.proc.stderr().contains("provider-secret-1"));
}

fn timeouts_and_connection_limit(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let args = [
        "--client-header-timeout",
        "1s",
        "--upstream-first-byte-timeout",
        "1s",
        "--max-connections",
        "3",
    ]
    .map(String::from)
    .to_vec();
    let gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            args,
            ..GwOptions::default()
        },
    );
    // Slowloris: cut by the header timeout with 408.
    let mut slow = Conn::open(gw.addr);
    slow.send(b"GET /v1/models HTTP/1.1\r\nHo");
    let r = slow.response();
    assert_eq!(r.status, 408);
    assert!(slow.closed());
    // A provider that never answers: 504.
    let r = gw.chat(&body(r#""x_sim":{"fault":"stall_headers"}"#));
    assert_eq!(
        r.error(),
        (
            504,
            "upstream_error".into(),
            "upstream_timeout".into(),
            Value::Null
        )
    );
    // Over the connection limit: 503, and the gateway stays healthy.
    // Each held connection is served once (so it is surely counted: the
    // count is taken when its task first runs, in no fixed order), then
    // stays open, idle.
    // Earlier connections may still be closing: retry until admitted.
    let held: Vec<Conn> = (0..3)
        .map(|_| {
            let mut admitted = None;
            eventually("a connection is admitted", || {
                let mut c = Conn::open(gw.addr);
                c.send(&raw_request("GET", "/v1/models", Some(&gw.key), None));
                let ok = c.response().status == 200;
                admitted = ok.then_some(c);
                ok
            });
            admitted.expect("admitted")
        })
        .collect();
    let r = request(gw.addr, "GET", "/v1/models", Some(&gw.key), None);
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"]["code"], "server_overloaded");
    drop(held);
    eventually("capacity returns", || {
        request(gw.addr, "GET", "/v1/models", Some(&gw.key), None).status == 200
    });
}

fn graceful_shutdown_on_sigterm_with_a_stream_in_flight(bin: &str) {
    graceful_shutdown_with_a_stream_in_flight(bin, libc::SIGTERM);
}

fn graceful_shutdown_on_sigint_with_a_stream_in_flight(bin: &str) {
    graceful_shutdown_with_a_stream_in_flight(bin, libc::SIGINT);
}

fn graceful_shutdown_with_a_stream_in_flight(bin: &str, signal: i32) {
    let (sim, mut gw) = {
        let sim = Sim::start(bin, &["--token-ms", "30"], &[]);
        let gw = Gw::start(bin, &sim.url(), GwOptions::default());
        (sim, gw)
    };
    let mut c = Conn::open(gw.addr);
    c.send(&raw_request(
        "POST",
        "/v1/chat/completions",
        Some(&gw.key),
        Some(&stream_body("")),
    ));
    c.read_until("reasoning_content");
    gw.proc.signal(signal);
    // New connections are refused while the stream finishes.
    eventually("the listener is closed", || {
        std::net::TcpStream::connect(gw.addr).is_err()
    });
    let r = c.response();
    assert_eq!(r.events().last().map(String::as_str), Some("[DONE]"));
    // Its head went out before the signal; the connection closes after it.
    assert!(c.closed());
    let status = gw.proc.wait_exit(PATIENCE).expect("exited");
    assert_eq!(status.code(), Some(0));
    let recs = gw.ledger();
    assert_eq!(recs.len(), 1);
    assert!(recs[0].complete);
    assert_eq!(sim.settled(0)["outcome"], "completed");
}

/// The signal handlers are in place before the "listening" line is
/// printed: a supervisor that stops the gateway as soon as it announced
/// itself gets a clean exit, not death by the signal's default action.
fn a_signal_right_after_the_listening_line_exits_0(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGTERM, libc::SIGINT] {
        let mut gw = Gw::start(bin, &sim.url(), GwOptions::default());
        gw.proc.signal(signal);
        let status = gw.proc.wait_exit(PATIENCE).expect("exited");
        assert_eq!(
            status.code(),
            Some(0),
            "signal {signal}: {status:?}\n{}",
            gw.proc.stderr()
        );
        assert!(gw.proc.stderr().contains("stopped"), "{}", gw.proc.stderr());
    }
    // The simulator too: its handlers are in before its line.
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let mut s = Sim::start(bin, &[], &[]);
        s.proc.signal(signal);
        let status = s.proc.wait_exit(PATIENCE).expect("exited");
        assert_eq!(status.code(), Some(0), "sim, signal {signal}: {status:?}");
    }
}

/// `demo`, as a newcomer runs it: the address on stdout, the key and a
/// ready-to-paste curl line on stderr, answers with reasoning and content,
/// and a clean stop.
fn demo_serves_streams_answers_and_its_curl_line(bin: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (mut p, addr, banner, key) = start_demo(bin, dir.path());
    assert!(
        banner.contains(&format!("Base URL: http://{addr}/v1")),
        "{banner}"
    );
    assert!(key.starts_with("sk-cg-"), "{key}");
    let chat = |b: &str| request(addr, "POST", "/v1/chat/completions", Some(&key), Some(b));
    // The console, on its own port, with the token the banner gives.
    let console: std::net::SocketAddr = banner
        .lines()
        .find_map(|l| l.strip_prefix("Console:"))
        .and_then(|l| l.trim().strip_prefix("http://"))
        .and_then(|l| l.strip_suffix('/'))
        .unwrap_or_else(|| panic!("no console in {banner}"))
        .parse()
        .unwrap();
    let admin_token = banner
        .lines()
        .find_map(|l| l.strip_prefix("Admin token:"))
        .unwrap()
        .trim()
        .to_owned();
    assert_eq!(
        request(console, "GET", "/api/overview", None, None).status,
        401
    );
    let overview = request(console, "GET", "/api/overview", Some(&admin_token), None);
    assert_eq!(overview.status, 200);
    assert_eq!(overview.json()["keys"][0]["name"], "demo");

    // Not streamed: reasoning and answer in the message.
    let r = chat(&body(""));
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    let msg = &r.json()["choices"][0]["message"];
    assert!(!msg["reasoning_content"].as_str().unwrap().is_empty());
    assert!(msg["content"].as_str().unwrap().starts_with("You said:"));

    // Streamed: reasoning deltas, content deltas, the usage chunk, [DONE].
    let r = chat(&stream_body(""));
    assert_eq!(r.status, 200);
    check_demo_stream(&r.events());

    // The printed curl command, pasted into a shell as it is.
    let curl: Vec<&str> = banner
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("curl "))
        .scan(true, |more, l| {
            let take = *more;
            *more = l.ends_with('\\');
            take.then_some(l)
        })
        .collect();
    assert!(curl.len() >= 2, "no curl line in {banner}");
    let has_curl = std::process::Command::new("bash")
        .args(["-c", "command -v curl"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(has_curl, "curl is needed to run the demo's curl line");
    let out = std::process::Command::new("bash")
        .args(["-c", &format!("set -o pipefail; {}", curl.join("\n"))])
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "{}\n{}",
        curl.join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let events: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_owned)
        .collect();
    check_demo_stream(&events);

    // Metered, then a clean stop.
    let ledger = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".jsonl"))
        .expect("the demo's ledger in TMPDIR");
    eventually("three ledger lines", || {
        std::fs::read_to_string(&ledger).is_ok_and(|t| t.lines().count() == 3)
    });
    p.signal(libc::SIGTERM);
    let status = p.wait_exit(PATIENCE).expect("exited");
    assert_eq!(status.code(), Some(0), "{}", p.stderr());
}

fn check_demo_stream(events: &[String]) {
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{events:?}"
    );
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let (mut reasoning, mut content) = (String::new(), String::new());
    for c in &chunks {
        let d = &c["choices"][0]["delta"];
        reasoning.push_str(d["reasoning_content"].as_str().unwrap_or(""));
        content.push_str(d["content"].as_str().unwrap_or(""));
    }
    assert!(!reasoning.is_empty() && content.starts_with("You said:"));
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert!(last["usage"]["completion_tokens"].as_u64().unwrap() > 0);
}

fn sigkill_keeps_every_delivered_line(bin: &str) {
    let (_sim, mut gw) = pair(bin);
    let mut ids = Vec::new();
    for i in 0..20 {
        let r = if i % 2 == 0 {
            gw.chat(&body(""))
        } else {
            gw.chat(&stream_body(""))
        };
        ids.push(r.header("x-request-id").unwrap().to_owned());
    }
    gw.proc.signal(libc::SIGKILL);
    gw.proc.wait_exit(PATIENCE).expect("killed");
    let recs = gw.ledger();
    for id in &ids {
        assert!(recs.iter().any(|r| &r.request_id == id), "{id} lost");
    }
    // A restarted gateway serves at once, appending to the same ledger.
    let dir = std::mem::replace(&mut gw.dir, tempfile::tempdir().unwrap());
    let gw2 = Gw::start_with_keys(bin, &_sim.url(), GwOptions::default(), dir, gw.key.clone());
    assert_eq!(gw2.chat(&body("")).status, 200);
    assert_eq!(gw2.ledger_len(21).len(), 21);
}

fn command_line(bin: &str) {
    for args in [
        vec!["--help"],
        vec!["serve", "--help"],
        vec!["keys", "new", "--help"],
        vec!["demo", "--help"],
        vec!["sim", "--help"],
    ] {
        let (code, out, _) = run(bin, &args, &[]);
        assert_eq!(code, 0, "{args:?}");
        assert!(out.contains("Usage"), "{args:?}: {out}");
    }
    let (_, out, _) = run(bin, &["serve", "--help"], &[]);
    for needle in [
        "--upstream <URL>",
        "CHATGATE_UPSTREAM",
        "--keys <FILE|URL>",
        "--ledger",
        "CHATGATE_UPSTREAM_API_KEY",
        "--config",
    ] {
        assert!(out.contains(needle), "serve --help lacks {needle}");
    }
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.toml");
    let keys_s = keys.to_string_lossy().into_owned();
    // keys new: the key alone on the first line; only its hash in the file, mode 0600.
    let (code, out, err) = run(
        bin,
        &[
            "keys", "new", "--keys", &keys_s, "--name", "alice", "--rpm", "5", "--tpm", "777",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let key = out.lines().next().unwrap();
    assert!(key.starts_with("sk-cg-") && key.len() >= 46, "{key}");
    let text = std::fs::read_to_string(&keys).unwrap();
    assert!(!text.contains(key));
    assert!(
        text.contains("name = \"alice\"")
            && text.contains("requests_per_minute = 5")
            && text.contains("tokens_per_minute = 777")
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&keys).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let (code, _, err) = run(
        bin,
        &["keys", "new", "--keys", &keys_s, "--name", "alice"],
        &[],
    );
    assert_eq!(code, 2);
    assert!(err.contains("a key named 'alice' exists"), "{err}");
    // serve refuses without keys, or without an upstream, saying what to do.
    let empty = dir.path().join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    let (code, _, err) = run(
        bin,
        &[
            "serve",
            "--upstream",
            "http://127.0.0.1:9/v1",
            "--keys",
            &empty.to_string_lossy(),
        ],
        &[],
    );
    assert_eq!(code, 2);
    assert!(err.contains("keys new"), "{err}");
    let (code, _, err) = run(bin, &["serve", "--keys", &keys_s], &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--upstream") && err.contains("CHATGATE_UPSTREAM"),
        "{err}"
    );
    let (code, _, err) = run(
        bin,
        &[
            "serve",
            "--upstream",
            "http://h/v1",
            "--keys",
            &keys_s,
            "--client-idle-timeout",
            "soon",
        ],
        &[],
    );
    assert_eq!(code, 2);
    assert!(err.contains("--client-idle-timeout"), "{err}");
    // Port in use.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap().to_string();
    let (code, _, err) = run(
        bin,
        &[
            "serve",
            "--upstream",
            "http://h/v1",
            "--keys",
            &keys_s,
            "--listen",
            &busy_addr,
            "--ledger",
            &dir.path().join("l").to_string_lossy(),
        ],
        &[],
    );
    assert_eq!(code, 2);
    assert!(err.contains("cannot listen"), "{err}");
    // Precedence: flag > env > file.
    let sim = Sim::start(bin, &[], &[]);
    let cfg = dir.path().join("chatgate.toml");
    std::fs::write(&cfg, format!("upstream = \"http://127.0.0.1:1/v1\"\nkeys = \"{keys_s}\"\ndefault_rpm = 1\nledger = \"{}\"\n", dir.path().join("ledger.jsonl").to_string_lossy())).unwrap();
    let env = vec![
        ("CHATGATE_UPSTREAM".to_owned(), sim.url()),
        (
            "CHATGATE_CONFIG".to_owned(),
            cfg.to_string_lossy().into_owned(),
        ),
        // Each conflicts with a flag given below and would stop the
        // gateway from starting if it won.
        ("CHATGATE_LISTEN".to_owned(), "256.0.0.1:0".to_owned()),
        (
            "CHATGATE_KEYS".to_owned(),
            dir.path()
                .join("missing.toml")
                .to_string_lossy()
                .into_owned(),
        ),
    ];
    let mut p = Proc::spawn(
        bin,
        &[
            "serve".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--keys".into(),
            keys_s.clone(),
        ],
        &env,
        &dir.path().join("err"),
    );
    let line = p.line();
    let addr: std::net::SocketAddr = line
        .trim_start_matches("chatgate listening on http://")
        .trim_end_matches("/v1")
        .parse()
        .unwrap();
    let r = request(
        addr,
        "POST",
        "/v1/chat/completions",
        Some(key),
        Some(&body("")),
    );
    assert_eq!(
        r.status, 200,
        "the environment's upstream wins over the file's"
    );
    assert_eq!(
        r.header("x-ratelimit-limit-requests"),
        Some("5"),
        "the key's own limit wins over the default"
    );
}

fn logs_never_contain_keys_or_content(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let env = vec![(
        "CHATGATE_UPSTREAM_API_KEY".to_owned(),
        "sk-provider-SECRET-xyz".to_owned(),
    )];
    let gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            env,
            args: vec!["--log-level".into(), "trace".into()],
            ..GwOptions::default()
        },
    );
    let secret_text = "purple-elephant-secret-content";
    gw.chat(&format!(
        r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"{secret_text}"}}]}}"#
    ));
    gw.chat(&format!(r#"{{"model":"{MODEL}","stream":true,"messages":[{{"role":"user","content":"{secret_text}"}}]}}"#));
    gw.chat(&format!(r#"{{"model":"{MODEL}","temperature":9,"messages":[{{"role":"user","content":"{secret_text}"}}]}}"#));
    request(
        gw.addr,
        "POST",
        "/v1/chat/completions",
        Some("sk-cg-WRONGWRONGWRONGWRONGWRONGWRONGWRONGWRONG1"),
        Some("{}"),
    );
    gw.ledger_len(3);
    // Four access lines: three metered (from their ledger records, the
    // rejected one with its error code) and the unauthenticated one.
    let logs = gw.proc.stderr_when("four access lines", |t| {
        t.matches("chatgate::access").count() == 4
    });
    assert!(logs.contains("request_id"), "access lines are logged");
    assert!(
        logs.lines().any(|l| l.contains("chatgate::access")
            && l.contains(" status=400 ")
            && l.contains(" error=")),
        "the rejected request's line has its error code:\n{logs}"
    );
    for needle in [
        gw.key.as_str(),
        "sk-provider-SECRET-xyz",
        secret_text,
        "sk-cg-WRONGWRONG",
        "You said",
    ] {
        assert!(!logs.contains(needle), "the log contains {needle}");
    }
    let ledger = std::fs::read_to_string(gw.dir.path().join("ledger.jsonl")).unwrap();
    for needle in [gw.key.as_str(), "sk-provider-SECRET-xyz", secret_text] {
        assert!(!ledger.contains(needle), "the ledger contains {needle}");
    }
    // JSON logs: one object per line, access lines with their fields.
    let gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            args: vec!["--log-format".into(), "json".into()],
            ..GwOptions::default()
        },
    );
    gw.chat(&stream_body(""));
    gw.ledger_len(1);
    let logs = gw
        .proc
        .stderr_when("an access line", |t| t.contains("chatgate::access"));
    let access: Vec<Value> = logs
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .filter(|v| v["target"] == "chatgate::access")
        .collect();
    assert_eq!(access.len(), 1, "{logs}");
    let f = &access[0]["fields"];
    assert_eq!(
        (
            f["status"].as_u64(),
            f["stream"].as_bool(),
            f["key"].as_str()
        ),
        (Some(200), Some(true), Some("test"))
    );
    assert!(
        f["completion_tokens"].as_u64().unwrap() > 0
            && f["ttfb_ms"].is_u64()
            && f["duration_ms"].is_u64()
    );
    let ts = access[0]["timestamp"].as_str().unwrap_or_default();
    assert!(
        ts.len() == 27 && ts.ends_with('Z') && ts.as_bytes()[19] == b'.',
        "timestamp {ts}"
    );
    assert_eq!(access[0]["level"], "INFO");
    assert_eq!(f["message"], "request");
    // A stop writes the access lines still waiting in their batch.
    let mut gw = gw;
    gw.chat(&stream_body(""));
    gw.ledger_len(2);
    gw.proc.signal(libc::SIGTERM);
    assert!(gw.proc.wait_exit(PATIENCE).is_some(), "stopped");
    let logs = gw.proc.stderr();
    assert_eq!(
        logs.matches("\"target\":\"chatgate::access\"").count(),
        2,
        "{logs}"
    );
}

/// Connections the simulator has open now, not counting the one asking.
/// The test's own earlier requests to it may not have been seen closing
/// yet, so this is an upper bound on the gateway's: see [`sim_settles_at`].
fn sim_open_connections(sim: &Sim) -> u64 {
    let stats = request(sim.addr, "GET", "/_sim/stats", None, None).json();
    stats["open_connections"]
        .as_u64()
        .expect("open_connections")
        - 1
}

/// Waits until the simulator has exactly `n` connections open besides the
/// one asking (the gateway's connections never come back once closed).
fn sim_settles_at(sim: &Sim, n: u64, what: &str) {
    eventually(what, || sim_open_connections(sim) == n);
}

fn idle_provider_connections_close_at_the_pool_idle_timeout(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = |timeout: &str| {
        let args = vec!["--pool-idle-timeout".to_owned(), timeout.to_owned()];
        Gw::start(
            bin,
            &sim.url(),
            GwOptions {
                args,
                ..GwOptions::default()
            },
        )
    };
    // A long timeout: the idle connection stays open for reuse.
    let long = gw("60s");
    assert_eq!(long.chat(&body("")).status, 200);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    sim_settles_at(&sim, 1, "the idle connection kept for reuse");
    assert_eq!(long.chat(&body("")).status, 200);
    let j = sim.journal();
    assert_eq!(j[0]["connection"], j[1]["connection"], "reused: {j:?}");
    drop(long);
    sim_settles_at(&sim, 0, "the first gateway's connection gone");
    // A short one: closed when it expires, though no request came to
    // take it.
    let short = gw("1s");
    assert_eq!(short.chat(&body("")).status, 200);
    sim_settles_at(&sim, 0, "the idle connection closed");
    // The next request needs a new connection.
    assert_eq!(short.chat(&body("")).status, 200);
    let j = sim.journal();
    let n = j.len();
    assert_ne!(j[n - 1]["connection"], j[n - 2]["connection"], "{j:?}");
}

fn the_pool_keeps_at_most_pool_max_idle_connections(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let args = ["--pool-max-idle", "1", "--admin-listen", "127.0.0.1:0"]
        .map(String::from)
        .to_vec();
    let mut gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            args,
            ..GwOptions::default()
        },
    );
    let admin = gw.proc.line();
    let admin: std::net::SocketAddr = admin
        .strip_prefix("chatgate admin listening on http://")
        .unwrap_or_else(|| panic!("{admin}"))
        .parse()
        .unwrap();
    // Four requests at once, each on its own provider connection (the
    // provider thinks for a few seconds, so all four overlap).
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let (addr, key) = (gw.addr, gw.key.clone());
            std::thread::spawn(move || {
                let b = body(&format!(r#""user":"u{i}","x_sim":{{"ttft_ms":4000}}"#));
                request(addr, "POST", "/v1/chat/completions", Some(&key), Some(&b)).status
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), 200);
    }
    let j = sim.journal();
    let conns: std::collections::HashSet<String> =
        j.iter().map(|e| e["connection"].to_string()).collect();
    assert_eq!(conns.len(), 4, "the requests overlapped: {j:?}");
    // Three were closed on release; one is kept.
    sim_settles_at(&sim, 1, "one idle connection left");
    let metrics = request(admin, "GET", "/metrics", None, None);
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    assert!(
        text.lines().any(|l| l == "chatgate_upstream_pool_idle 1"),
        "{text}"
    );
    // And it is the one the next request uses.
    assert_eq!(gw.chat(&body("")).status, 200);
    let j = sim.journal();
    assert!(conns.contains(&j[4]["connection"].to_string()), "{j:?}");
    sim_settles_at(&sim, 1, "still one connection");
}

fn connect_timeout_covers_a_stalled_tls_handshake(bin: &str) {
    // Accepts TCP connections (the kernel does, from the backlog) and
    // never says a word: the TLS handshake waits forever.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "https://127.0.0.1:{}/v1",
        silent.local_addr().unwrap().port()
    );
    let args = ["--upstream-connect-timeout", "1s"]
        .map(String::from)
        .to_vec();
    let gw = Gw::start(
        bin,
        &url,
        GwOptions {
            args,
            ..GwOptions::default()
        },
    );
    for b in [body(""), stream_body("")] {
        let started = std::time::Instant::now();
        let r = gw.chat(&b);
        assert_eq!(
            r.error(),
            (
                502,
                "upstream_error".into(),
                "upstream_error".into(),
                Value::Null
            ),
            "{:?}",
            String::from_utf8_lossy(&r.body)
        );
        // Not before the timeout (timers never fire early); the upper
        // bound is the client's own patience.
        assert!(started.elapsed() >= std::time::Duration::from_millis(900));
    }
    let recs = gw.ledger_len(2);
    for rec in &recs {
        assert_eq!(rec.error.as_deref(), Some("upstream_connect"), "{rec:?}");
        assert_eq!((rec.status, rec.upstream_status), (502, None));
    }
    drop(silent);
}

/// What the client has received on a streamed response, checked after
/// every read: the head, then only whole chunks, whose data ends on an
/// event boundary. Returns the data so far, or `None` while the head is
/// incomplete.
fn whole_events_only(raw: &[u8]) -> Option<(Vec<u8>, bool)> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let mut rest = &raw[end..];
    let mut data = Vec::new();
    loop {
        if rest.is_empty() {
            return Some((data, false));
        }
        let line = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .unwrap_or_else(|| panic!("a read ended inside a chunk size: {rest:?}"));
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..line]).unwrap(), 16)
            .expect("chunk size");
        let chunk = &rest[line + 2..];
        assert!(
            chunk.len() >= size + 2,
            "a read ended inside a chunk: {:?}",
            String::from_utf8_lossy(rest)
        );
        if size == 0 {
            return Some((data, true));
        }
        data.extend_from_slice(&chunk[..size]);
        assert!(
            data.ends_with(b"\n\n"),
            "a chunk ended inside an event: {:?}",
            String::from_utf8_lossy(&data)
        );
        rest = &chunk[size + 2..];
    }
}

fn partial_events_wait_for_their_end_without_timers(bin: &str) {
    use std::io::{Read, Write};
    let (sim, gw) = pair(bin);
    // Every event reaches the gateway in two parts 150 ms apart, split in
    // its middle or just before its last byte.
    let b = stream_body(r#""x_sim":{"split_ms":150,"reasoning_tokens":3,"answer_tokens":2}"#);
    let mut s = std::net::TcpStream::connect(gw.addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(&raw_request(
        "POST",
        "/v1/chat/completions",
        Some(&gw.key),
        Some(&b),
    ))
    .unwrap();
    let (mut raw, mut reads) = (Vec::new(), 0);
    let data = loop {
        let mut buf = [0u8; 65536];
        let n = s.read(&mut buf).expect("read");
        assert!(n > 0, "closed early: {:?}", String::from_utf8_lossy(&raw));
        raw.extend_from_slice(&buf[..n]);
        reads += 1;
        // Whatever a read returned ends on an event boundary.
        if let Some((data, true)) = whole_events_only(&raw) {
            break data;
        }
    };
    assert!(raw.starts_with(b"HTTP/1.1 200"));
    assert!(reads > 1);
    let sent = sim.settled(0)["response"].as_str().unwrap().to_owned();
    assert_eq!(String::from_utf8(data).unwrap(), sent);
    assert!(sent.ends_with("data: [DONE]\n\n"));
    assert!(gw.ledger_len(1)[0].complete);
}

fn tools_content_parts_and_headers_are_checked_before_the_provider(bin: &str) {
    let (sim, gw) = pair(bin);
    let m = r#""messages":[{"role":"user","content":"x"}]"#;
    let f = r#""tools":[{"type":"function","function":{"name":"f"}}]"#;
    let with = |extra: &str| format!(r#"{{"model":"{MODEL}",{m},{extra}}}"#);
    let msgs = |messages: &str| format!(r#"{{"model":"{MODEL}","messages":{messages}}}"#);
    let cases: Vec<(String, &str, Value)> = vec![
        // tools
        (with(r#""tools":{}"#), "invalid_type", json!("tools")),
        (
            with(r#""tools":[{"type":"web"}]"#),
            "invalid_value",
            json!("tools[0].type"),
        ),
        (
            with(r#""tools":[{"type":"function"}]"#),
            "missing_required_parameter",
            json!("tools[0].function"),
        ),
        (
            with(r#""tools":[{"type":"function","function":{"name":"a b"}}]"#),
            "invalid_value",
            json!("tools[0].function.name"),
        ),
        (
            with(r#""tools":[{"type":"function","function":{"name":"f","parameters":[]}}]"#),
            "invalid_type",
            json!("tools[0].function.parameters"),
        ),
        // tool_choice, the object form included
        (
            with(r#""tool_choice":"required""#),
            "invalid_value",
            json!("tool_choice"),
        ),
        (
            with(r#""tool_choice":5"#),
            "invalid_type",
            json!("tool_choice"),
        ),
        (
            with(&format!(
                r#"{f},"tool_choice":{{"type":"function","function":{{"name":"g"}}}}"#
            )),
            "invalid_value",
            json!("tool_choice.function.name"),
        ),
        (
            with(&format!(
                r#"{f},"tool_choice":{{"type":"web","function":{{"name":"f"}}}}"#
            )),
            "invalid_value",
            json!("tool_choice.type"),
        ),
        (
            with(&format!(r#"{f},"tool_choice":{{"type":"function"}}"#)),
            "missing_required_parameter",
            json!("tool_choice.function"),
        ),
        // stream_options
        (
            with(r#""stream":true,"stream_options":true"#),
            "invalid_type",
            json!("stream_options"),
        ),
        (
            with(r#""stream":true,"stream_options":{"include_usage":"yes"}"#),
            "invalid_type",
            json!("stream_options.include_usage"),
        ),
        // content parts
        (
            msgs(r#"[{"role":"user","content":[]}]"#),
            "invalid_value",
            json!("messages[0].content"),
        ),
        (
            msgs(r#"[{"role":"user","content":[{"type":"audio"}]}]"#),
            "invalid_value",
            json!("messages[0].content[0].type"),
        ),
        (
            msgs(r#"[{"role":"user","content":[{"type":"text","text":5}]}]"#),
            "invalid_type",
            json!("messages[0].content[0].text"),
        ),
        (
            msgs(
                r#"[{"role":"system","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]"#,
            ),
            "invalid_value",
            json!("messages[0].content[0].type"),
        ),
        (
            msgs(
                r#"[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,@@@"}}]}]"#,
            ),
            "invalid_value",
            json!("messages[0].content[0].image_url.url"),
        ),
        (
            msgs(r#"[{"role":"user","content":null}]"#),
            "invalid_type",
            json!("messages[0].content"),
        ),
        // assistant tool_calls
        (
            msgs(r#"[{"role":"user","content":"x","tool_calls":[]}]"#),
            "invalid_value",
            json!("messages[0].tool_calls"),
        ),
        (
            msgs(r#"[{"role":"assistant","tool_calls":{}}]"#),
            "invalid_type",
            json!("messages[0].tool_calls"),
        ),
        (
            msgs(
                r#"[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"arguments":"{}"}}]}]"#,
            ),
            "missing_required_parameter",
            json!("messages[0].tool_calls[0].function.name"),
        ),
        (
            msgs(r#"[{"role":"assistant"}]"#),
            "missing_required_parameter",
            json!("messages[0].content"),
        ),
        // duplicate keys, at the top and inside a message
        (
            format!(r#"{{"model":"{MODEL}","model":"other",{m}}}"#),
            "invalid_json",
            Value::Null,
        ),
        // (inside a message the refusal names the message)
        (
            msgs(r#"[{"role":"user","role":"system","content":"x"}]"#),
            "invalid_value",
            json!("messages[0]"),
        ),
    ];
    for (b, code, param) in &cases {
        let r = gw.chat(b);
        let (status, kind, c, p) = r.error();
        assert_eq!(
            (status, kind.as_str(), c.as_str(), &p),
            (400, "invalid_request_error", *code, param),
            "{b}"
        );
    }
    // Content-Type other than JSON, with and without a body's worth of
    // parameters.
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "application/jsonl",
    ] {
        let b = body("");
        let mut c = Conn::open(gw.addr);
        c.send(
            format!(
                "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: {ct}\r\nContent-Length: {}\r\n\r\n{b}",
                gw.key,
                b.len()
            )
            .as_bytes(),
        );
        let r = c.response();
        let (status, kind, code, param) = r.error();
        assert_eq!(
            (status, kind.as_str(), code.as_str(), param),
            (
                400,
                "invalid_request_error",
                "unsupported_content_type",
                Value::Null
            ),
            "{ct}"
        );
    }
    assert!(sim.journal().is_empty(), "the provider was called");
    let n = cases.len() + 3;
    assert_eq!(gw.ledger_len(n).len(), n);
    // JSON with parameters, and no Content-Type at all, are accepted.
    for head in ["Content-Type: application/json; charset=utf-8\r\n", ""] {
        let b = body("");
        let mut c = Conn::open(gw.addr);
        c.send(
            format!(
                "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n{head}Content-Length: {}\r\n\r\n{b}",
                gw.key,
                b.len()
            )
            .as_bytes(),
        );
        assert_eq!(c.response().status, 200, "{head}");
    }
    assert_eq!(sim.journal().len(), 2);
}
