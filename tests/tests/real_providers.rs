//! What a real model server showed (llama-cpp-python in front of a small
//! model, and a failover torture test), reproduced with the simulator's
//! quirk modes through both binaries: a strict request-id check, streams
//! without usage, comments before the first event, a provider's refusal,
//! transient failures of the one endpoint, an endpoint that recovers while
//! nobody sends it anything, and a chat template the gateway cannot see.
//! The same cases against the real server are `scripts/interop.sh`.

use std::time::{Duration, Instant};

use chatgate_tests::*;
use serde_json::Value;

cases!(
    a_strict_server_accepts_the_id_the_provider_is_sent,
    a_provider_without_usage_is_marked_and_charged_its_worst_case,
    comments_before_the_first_event_are_failed_over_not_committed,
    a_provider_refusal_keeps_its_code_and_says_do_not_retry,
    one_endpoint_is_retried_through_a_transient_failure,
    a_recovered_endpoint_is_readmitted_by_a_probe_without_traffic,
    a_chat_template_does_not_break_the_budget,
    the_simulator_continues_a_final_assistant_message_as_configured,
    a_silent_provider_is_kept_alive_before_its_first_event,
);

/// A gateway in front of `upstream` whose key `test` has a budget of
/// `budget_usd` a day, with `args` added to `serve`.
fn budgeted(bin: &str, upstream: &str, budget_usd: &str, args: &[&str]) -> Gw {
    let dir = tempfile::tempdir().unwrap();
    let key = mint(bin, dir.path(), "test", Some(100_000), Some(10_000_000));
    let file = dir.path().join("keys.toml");
    let (code, _, err) = run(
        bin,
        &[
            "keys",
            "set",
            "test",
            "--keys",
            file.to_str().unwrap(),
            "--budget-usd",
            budget_usd,
            "--budget-period",
            "day",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let opts = GwOptions {
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        ..GwOptions::default()
    };
    Gw::start_with_keys(bin, upstream, opts, dir, key)
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// 1. llama-cpp-python answers a non-UUID `X-Request-Id` with a bodiless
///    400: the provider is sent a UUID, linked to the client's id.
fn a_strict_server_accepts_the_id_the_provider_is_sent(bin: &str) {
    let sim = Sim::start(bin, &["--strict-request-id"], &[]);
    let gw = Gw::start(bin, &sim.url(), GwOptions::default());
    let r = gw.chat(&body(""));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let r = gw.chat(&stream_body(""));
    assert_eq!(r.status, 200);
    let ledger = gw.ledger_len(2);
    let journal = sim.journal();
    for (rec, seen) in ledger.iter().zip(&journal) {
        assert!(rec.request_id.starts_with("req_"), "{}", rec.request_id);
        let sent = seen["request_id"].as_str().expect("an X-Request-Id");
        assert!(is_uuid(sent), "{sent}");
        assert_eq!(rec.provider_request_id.as_deref(), Some(sent));
        assert_eq!(
            sent,
            chatgate_core::provider_request_id(&rec.request_id, rec.attempts),
            "derived from the client's id"
        );
    }
    assert_eq!(
        r.header("x-request-id"),
        Some(ledger[1].request_id.as_str())
    );
}

/// 2. A provider that never reports usage: the ledger says so, a metric
///    counts it, and the budget is charged each request's worst case.
fn a_provider_without_usage_is_marked_and_charged_its_worst_case(bin: &str) {
    let sim = Sim::start(bin, &["--fault", "no_usage"], &[]);
    let mut gw = budgeted(bin, &sim.url(), "0.002", &["--admin-listen", "127.0.0.1:0"]);
    let admin = gw.admin_addr();
    let mut served = 0;
    let mut refused = None;
    for _ in 0..40 {
        let r = gw.chat(&stream_body(r#""max_tokens":16"#));
        match r.status {
            200 => {
                // The stream ends as the provider ended it: its finish
                // chunk, no usage chunk (none was reported), [DONE].
                let events = r.events();
                assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
                assert!(r.chunks().iter().all(|c| c["usage"].is_null()));
                served += 1;
            }
            429 => {
                refused = Some(r);
                break;
            }
            s => panic!("status {s}: {}", String::from_utf8_lossy(&r.body)),
        }
    }
    let refused = refused.expect("the budget ran out");
    assert_eq!(refused.error().2, "insufficient_quota");
    // Before, 15 streams were served on this budget, all free.
    assert!((1..15).contains(&served), "{served} served");
    let ledger = gw.ledger_len(served + 1);
    let mut charged = 0;
    for rec in ledger.iter().filter(|r| r.status == 200) {
        assert!(rec.usage_missing, "{rec:?}");
        assert_eq!((rec.prompt_tokens, rec.cost_nano_usd), (0, 0));
        assert!(rec.charged_nano_usd > 16 * 14_250, "{rec:?}");
        charged += rec.charged_nano_usd;
    }
    assert!(
        charged <= 2_000_000,
        "charged {charged} nano-USD of 2,000,000"
    );
    let line = std::fs::read_to_string(gw.dir.path().join("ledger.jsonl")).unwrap();
    let first: Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    assert_eq!(first["usage_missing"], true);
    let text = String::from_utf8(request(admin, "GET", "/metrics", None, None).body).unwrap();
    assert!(
        text.contains(&format!(
            "chatgate_usage_missing_total{{key=\"test\"}} {served}"
        )),
        "{}",
        text.lines()
            .filter(|l| l.contains("usage_missing"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// 3. A queued request gets `: ping` comments before any data; a provider
///    that then dies must not leave the client an empty 200 stream.
fn comments_before_the_first_event_are_failed_over_not_committed(bin: &str) {
    // One endpoint: every attempt pings and dies: one JSON 502.
    let sim = Sim::start(bin, &[], &[]);
    let gw = Gw::start(bin, &sim.url(), GwOptions::default());
    let r = gw.chat(&stream_body(
        r#""x_sim":{"fault":"pings","count":2,"token_ms":20,"die":true}"#,
    ));
    assert_eq!(r.status, 502, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.error().2, "upstream_error");
    let rec = &gw.ledger_len(1)[0];
    assert_eq!((rec.status, rec.attempts), (502, 3));
    // Two endpoints, the first pinging then dying: 20 streams at once all
    // get the whole answer from the second.
    let dying = Sim::start(bin, &[], &[]);
    dying.set_fault(r#"{"fault":"pings","count":2,"die":true}"#);
    let healthy = Sim::start(bin, &[], &[]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("pool.toml");
    std::fs::write(
        &config,
        format!(
            "[[upstream]]\nname = \"dying\"\nurl = \"{}\"\nweight = 1000\n\n[[upstream]]\nname = \"healthy\"\nurl = \"{}\"\n",
            dying.url(),
            healthy.url()
        ),
    )
    .unwrap();
    let gw = Gw::start(
        bin,
        "",
        GwOptions {
            args: vec!["--config".into(), config.to_string_lossy().into_owned()],
            rpm: Some(100_000),
            ..GwOptions::default()
        },
    );
    let threads: Vec<_> = (0..20)
        .map(|_| {
            let (addr, key) = (gw.addr, gw.key.clone());
            std::thread::spawn(move || {
                request(
                    addr,
                    "POST",
                    "/v1/chat/completions",
                    Some(&key),
                    Some(&stream_body("")),
                )
            })
        })
        .collect();
    for t in threads {
        let r = t.join().unwrap();
        assert_eq!(r.status, 200);
        let chunks = r.chunks();
        assert!(!chunks.is_empty(), "an empty 200 stream");
        assert!(
            chunks
                .iter()
                .any(|c| c["choices"][0]["finish_reason"] == "stop"),
            "incomplete"
        );
        assert!(!String::from_utf8_lossy(&r.body).contains(": ping"));
    }
    for rec in gw.ledger_len(20) {
        assert!(rec.complete, "{rec:?}");
        assert_eq!(rec.endpoint.as_deref(), Some("healthy"), "{rec:?}");
    }
    // A provider that pings while the request queues, then answers: its
    // comments reach the client with its first event, in order, as sent.
    let pinging = Sim::start(bin, &[], &[]);
    let gw = Gw::start(bin, &pinging.url(), GwOptions::default());
    let r = gw.chat(&stream_body(r#""x_sim":{"fault":"pings","count":2}"#));
    assert_eq!(r.status, 200);
    let body = String::from_utf8_lossy(&r.body);
    assert!(
        body.starts_with(
            ": ping - 2026-11-25 00:00:00.000000\n\n: ping - 2026-11-25 00:00:01.000000\n\ndata: "
        ),
        "{body}"
    );
    assert!(gw.ledger_len(1)[0].complete);
}

/// 4. A provider's 400 is a 502 that the SDKs are told not to retry, with
///    the provider's own code, param and message.
fn a_provider_refusal_keeps_its_code_and_says_do_not_retry(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = Gw::start(bin, &sim.url(), GwOptions::default());
    let r = gw.chat(&body(
        r#""x_sim":{"fault":"reject","status":400,"message":"This model's maximum context length is 2048 tokens"}"#,
    ));
    assert_eq!(r.status, 502);
    assert_eq!(r.header("x-should-retry"), Some("false"));
    let e = &r.json()["error"];
    assert_eq!(
        (e["type"].as_str(), e["code"].as_str()),
        (Some("upstream_error"), Some("upstream_error"))
    );
    assert_eq!(e["provider"]["status"], 400);
    assert_eq!(e["provider"]["code"], "invalid_request");
    assert!(
        e["provider"]["message"]
            .as_str()
            .unwrap()
            .contains("context length")
    );
    assert_eq!(sim.journal().len(), 1, "a refusal is not retried");
    // A transient failure is retriable: no such header.
    let r = gw.chat(&body(
        r#""x_sim":{"fault":"reject","status":503,"retry_after":0}"#,
    ));
    assert_eq!((r.status, r.header("x-should-retry")), (502, None));
}

/// 5. One endpoint (most deployments): a transient 500, a reset, or a 429
///    is tried again after a pause instead of reaching the client.
fn one_endpoint_is_retried_through_a_transient_failure(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = Gw::start(bin, &sim.url(), GwOptions::default());
    for fault in [
        r#"{"fault":"reject","status":500,"times":1}"#,
        r#"{"fault":"reset","after":0,"times":2}"#,
        r#"{"fault":"reject","status":429,"retry_after":1,"times":1}"#,
    ] {
        sim.set_fault(fault);
        let started = Instant::now();
        let r = gw.chat(&stream_body(""));
        assert_eq!(
            r.status,
            200,
            "{fault}: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert!(
            r.chunks()
                .iter()
                .any(|c| c["choices"][0]["finish_reason"] == "stop")
        );
        assert!(started.elapsed() >= Duration::from_millis(250), "{fault}");
    }
    let ledger = gw.ledger_len(3);
    for rec in &ledger {
        assert!(rec.attempts >= 2, "{rec:?}");
        assert!(rec.complete);
    }
    // Attempts are bounded: a provider that stays down gives one 502.
    sim.set_fault(r#"{"fault":"reject","status":500}"#);
    let r = gw.chat(&body(""));
    assert_eq!(r.status, 502);
    assert!(r.error().3.is_null());
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Tried 3 times."),
    );
    // And a single attempt when asked for.
    let gw1 = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            args: vec!["--upstream-attempts".into(), "1".into()],
            ..GwOptions::default()
        },
    );
    let before = sim.journal().len();
    assert_eq!(gw1.chat(&body("")).status, 502);
    assert_eq!(sim.journal().len(), before + 1);
}

/// 6. A primary that fails, then recovers while no request comes: the
///    probe readmits it within about an interval.
fn a_recovered_endpoint_is_readmitted_by_a_probe_without_traffic(bin: &str) {
    let primary = Sim::start(bin, &[], &[]);
    let backup = Sim::start(bin, &[], &[]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("pool.toml");
    std::fs::write(
        &config,
        format!(
            "[[upstream]]\nname = \"primary\"\nurl = \"{}\"\nweight = 100\n\n[[upstream]]\nname = \"backup\"\nurl = \"{}\"\n",
            primary.url(),
            backup.url()
        ),
    )
    .unwrap();
    let mut gw = Gw::start(
        bin,
        "",
        GwOptions {
            args: vec![
                "--config".into(),
                config.to_string_lossy().into_owned(),
                "--admin-listen".into(),
                "127.0.0.1:0".into(),
                "--upstream-probe-interval".into(),
                "1s".into(),
            ],
            rpm: Some(100_000),
            ..GwOptions::default()
        },
    );
    let admin = gw.admin_addr();
    let state = |name: &str| -> String {
        let r = request(admin, "GET", "/upstreams", None, None);
        r.json()["upstreams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["name"] == name)
            .map(|u| u["state"].as_str().unwrap().to_owned())
            .unwrap()
    };
    // Down for 3 s: the clients do not notice, the primary is ejected.
    primary.set_fault(r#"{"fault":"reject","status":500,"for_ms":3000}"#);
    let down = Instant::now();
    for _ in 0..4 {
        assert_eq!(gw.chat(&body("")).status, 200);
    }
    assert_eq!(state("primary"), "ejected");
    // No traffic at all from here on: only probes reach the primary.
    let deadline = down + Duration::from_secs(3) + Duration::from_secs(6);
    loop {
        if state("primary") == "healthy" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not readmitted: {}",
            gw.proc.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        down.elapsed() >= Duration::from_secs(3),
        "readmitted while down"
    );
    assert!(gw.proc.stderr().contains("answered a probe"));
    // It serves again.
    let before = primary.journal().len();
    for _ in 0..4 {
        assert_eq!(gw.chat(&body("")).status, 200);
    }
    assert!(primary.journal().len() > before);
}

/// 8. A chat template adds prompt tokens the estimate cannot see: a key
///    whose every request sets max_tokens still never exceeds its budget.
fn a_chat_template_does_not_break_the_budget(bin: &str) {
    let sim = Sim::start(bin, &["--template-tokens", "120"], &[]);
    let mut gw = budgeted(bin, &sim.url(), "0.002", &["--admin-listen", "127.0.0.1:0"]);
    let admin = gw.admin_addr();
    let mut served = 0;
    for _ in 0..60 {
        let r = gw.chat(&body(r#""max_tokens":16"#));
        match r.status {
            200 => served += 1,
            429 => break,
            s => panic!("status {s}"),
        }
    }
    assert!(served >= 2, "{served}");
    let ledger = gw.ledger_len(served + 1);
    let spent: u64 = ledger.iter().map(|r| r.cost_nano_usd).sum();
    assert!(
        spent <= 2_000_000,
        "spent {spent} nano-USD of a 2,000,000 budget"
    );
    // The endpoint learned the template.
    let r = request(admin, "GET", "/upstreams", None, None);
    assert_eq!(r.json()["upstreams"][0]["prompt_extra_tokens"], 120);
}

/// The simulator's `--continuation` modes, through its binary: llama.cpp's
/// server continues a final assistant message with the rest of the answer
/// after the part it sends back (together the whole answer, its reasoning
/// not said again); a server that refuses prefill answers llama.cpp's 400.
fn the_simulator_continues_a_final_assistant_message_as_configured(bin: &str) {
    let ask = |sim: &Sim, part: Option<&str>| {
        let mut body: Value = serde_json::from_str(
            r#"{"model":"m","messages":[{"role":"user","content":"Why is the sky blue?"}]}"#,
        )
        .unwrap();
        if let Some(part) = part {
            let messages = body["messages"].as_array_mut().unwrap();
            messages.push(serde_json::json!({"role": "assistant", "content": part}));
        }
        request(
            sim.addr,
            "POST",
            "/v1/chat/completions",
            None,
            Some(&body.to_string()),
        )
    };
    let continuing = Sim::start(bin, &["--continuation", "final_assistant"], &[]);
    let whole = ask(&continuing, None).json();
    let content = whole["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let part = &content[..content.len() / 2];
    let rest = ask(&continuing, Some(part)).json();
    let message = &rest["choices"][0]["message"];
    // As llama.cpp's server answers: the part it continued, then the rest.
    assert_eq!(message["content"].as_str().unwrap(), content);
    let reasoning = message["reasoning_content"].as_str().unwrap_or("");
    assert_eq!(reasoning, "", "its reasoning is not said again: {rest}");
    let refusing = Sim::start(bin, &["--continuation", "refuse"], &[]);
    let r = ask(&refusing, Some(part));
    assert_eq!(r.status, 400);
    assert!(
        String::from_utf8_lossy(&r.body).contains("Assistant response prefill is incompatible"),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
}

/// `--first-event-keepalive 1s` in front of providers that think for
/// 2.5 s before their first event: the client has the head and a
/// keep-alive before it (chat: a comment; Messages: a `ping` before
/// `message_start`), then the whole answer. A provider that never answers,
/// with another endpoint: the other's answer follows the keep-alives in
/// the same stream. With nothing left to try: an error event and `[DONE]`,
/// metered as a failed 200.
fn a_silent_provider_is_kept_alive_before_its_first_event(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let opts = |extra: &[&str]| GwOptions {
        args: ["--first-event-keepalive", "1s", "--apis", "messages"]
            .iter()
            .chain(extra)
            .map(|a| (*a).to_owned())
            .collect(),
        ..GwOptions::default()
    };
    let gw = Gw::start(bin, &sim.url(), opts(&[]));
    let mut c = Conn::open(gw.addr);
    let slow = stream_body(r#""x_sim":{"ttft_ms":2500}"#);
    c.send(&raw_request(
        "POST",
        "/v1/chat/completions",
        Some(&gw.key),
        Some(&slow),
    ));
    c.read_until(": keep-alive");
    let early = String::from_utf8_lossy(c.pending()).into_owned();
    assert!(early.starts_with("HTTP/1.1 200"), "{early}");
    assert!(
        !early.contains("data:"),
        "the keep-alive came before the first event: {early}"
    );
    let r = c.response();
    let events = r.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    assert!(
        events
            .iter()
            .any(|e| e.contains(r#""finish_reason":"stop""#))
    );
    let rec = &gw.ledger_len(1)[0];
    assert!(rec.complete && rec.status == 200, "{rec:?}");
    // The Messages API: a ping before message_start.
    let messages = r#"{"model":"reasoning-model-k3","max_tokens":400,"stream":true,"messages":[{"role":"user","content":"hi [[sim:ttft_ms=2500]]"}]}"#;
    let mut c = Conn::open(gw.addr);
    c.send(&raw_request(
        "POST",
        "/v1/messages",
        Some(&gw.key),
        Some(messages),
    ));
    let r = c.response();
    let body = String::from_utf8_lossy(&r.body).into_owned();
    let ping = body.find("event: ping").expect("a ping");
    let start = body.find("event: message_start").expect("message_start");
    assert!(
        ping < start && body.contains("event: message_stop"),
        "{body}"
    );

    // One endpoint that never answers, another that does.
    let silent = Sim::start(bin, &[], &[]);
    silent.set_fault(r#"{"fault":"stall_headers"}"#);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("pool.toml");
    std::fs::write(
        &config,
        format!(
            "[[upstream]]\nname = \"silent\"\nurl = \"{}\"\nweight = 1000\n\n[[upstream]]\nname = \"healthy\"\nurl = \"{}\"\n",
            silent.url(),
            sim.url()
        ),
    )
    .unwrap();
    let config = config.to_string_lossy().into_owned();
    let pool = Gw::start(
        bin,
        "",
        opts(&["--config", &config, "--upstream-attempt-timeout", "2s"]),
    );
    let r = pool.chat(&stream_body(""));
    assert_eq!(r.status, 200);
    let body = String::from_utf8_lossy(&r.body).into_owned();
    assert!(body.starts_with(": keep-alive\n\n"), "{body}");
    assert!(body.contains(r#""finish_reason":"stop""#), "{body}");
    let rec = &pool.ledger_len(1)[0];
    assert_eq!(
        (rec.attempts, rec.endpoint.as_deref()),
        (2, Some("healthy"))
    );
    assert!(rec.complete, "{rec:?}");

    // Nowhere else to go: the stream ends with an error event.
    let alone = Gw::start(
        bin,
        &silent.url(),
        opts(&["--upstream-first-byte-timeout", "2s"]),
    );
    let r = alone.chat(&stream_body(""));
    assert_eq!(r.status, 200);
    let events = r.events();
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{events:?}"
    );
    let error = &events[events.len() - 2];
    assert!(error.contains(r#""code":"upstream_timeout""#), "{events:?}");
    let rec = &alone.ledger_len(1)[0];
    assert_eq!(
        (rec.status, rec.complete, rec.error.as_deref()),
        (200, false, Some("upstream_timeout")),
        "{rec:?}"
    );
}
