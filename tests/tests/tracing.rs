//! Traces: what the gateway sends an OTLP collector, read back by a
//! receiver that decodes with the official OpenTelemetry protobuf
//! definitions (`tests/otlp/receiver.py`).

use chatgate_core::trace::{
    SAMPLED, Source, Span, SpanEvent, SpanId, SpanKind, Status, TraceId, Value, encode_export,
    format_traceparent, parse_traceparent,
};
use chatgate_tests::*;
use serde_json::Value as Json;

cases!(
    a_request_continues_the_clients_trace_and_its_spans_match_the_ledger,
    refusals_failures_failover_and_cut_streams_are_marked,
    sampling_keeps_its_ratio_and_a_missing_or_stalled_collector_costs_nothing,
    exports_over_tls_trusting_what_the_provider_is_trusted_with,
    the_last_spans_are_sent_on_shutdown,
);

const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// A chat request with extra header lines; the response.
fn with_headers(gw: &Gw, key: &str, extra: &str, body: &str) -> Response {
    let mut c = Conn::open(gw.addr);
    c.send(
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {key}\r\n\
             Content-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
    c.response()
}

/// A gateway exporting to `receiver`, with more `serve` arguments.
fn traced(bin: &str, upstream: &str, receiver: &str, more: &[&str]) -> Gw {
    let mut args = vec!["--otlp-endpoint".to_owned(), receiver.to_owned()];
    args.extend(more.iter().map(|s| s.to_string()));
    Gw::start(
        bin,
        upstream,
        GwOptions {
            args,
            rpm: Some(1_000_000),
            tpm: Some(1_000_000_000),
            extra_keys: vec![("limited".into(), Some(1), None)],
            ..GwOptions::default()
        },
    )
}

/// Waits until the receiver has `n` spans; them.
fn spans(receiver: &OtlpReceiver, n: usize) -> Vec<Json> {
    let mut got = Vec::new();
    eventually(&format!("{n} spans"), || {
        got = receiver.spans();
        got.len() >= n
    });
    assert_eq!(got.len(), n, "{got:#?}");
    got
}

fn server_span<'a>(spans: &'a [Json], request_id: &str) -> &'a Json {
    spans
        .iter()
        .find(|s| s["kind"] == "server" && s["attributes"]["chatgate.request_id"] == request_id)
        .unwrap_or_else(|| panic!("no server span for {request_id}: {spans:#?}"))
}

fn children<'a>(spans: &'a [Json], parent: &Json) -> Vec<&'a Json> {
    spans
        .iter()
        .filter(|s| s["parent_span_id"] == parent["span_id"] && s["kind"] == "client")
        .collect()
}

fn a_request_continues_the_clients_trace_and_its_spans_match_the_ledger(bin: &str) {
    let receiver = OtlpReceiver::start();
    let sim = Sim::start(bin, &[], &[]);
    let gw = traced(
        bin,
        &sim.url(),
        &receiver.url(),
        &["--otlp-headers", "x-team=a%20b,x-other=1"],
    );
    let extra = format!("traceparent: {TP}\r\ntracestate: rojo=00f067aa0ba902b7\r\n");
    let r = with_headers(
        &gw,
        &gw.key,
        &extra,
        &body(r#""max_tokens":20,"temperature":0.7,"top_p":null"#),
    );
    assert_eq!(r.status, 200);
    let r = with_headers(&gw, &gw.key, &extra, &stream_body(""));
    assert_eq!(r.status, 200);
    // A garbage traceparent is ignored: a new trace, the request served.
    let r = with_headers(&gw, &gw.key, "traceparent: 00-zz-garbage\r\n", &body(""));
    assert_eq!(r.status, 200);
    let ledger = gw.ledger_len(3);
    let spans = spans(&receiver, 6);
    // The configured headers went with every export.
    let stats = receiver.stats();
    let sent = &stats["headers"][0];
    assert_eq!(sent["x-team"], "a b", "{stats}");
    assert_eq!(sent["x-other"], "1");
    assert_eq!(sent["content-type"], "application/x-protobuf");
    let journal = sim.journal();
    for (i, line) in ledger.iter().enumerate() {
        let s = server_span(&spans, &line.request_id);
        let a = &s["attributes"];
        assert_eq!(s["name"], "chat reasoning-model-k3");
        assert_eq!(s["resource"]["service.name"], "chatgate");
        assert_eq!(a["gen_ai.operation.name"], "chat");
        assert_eq!(a["gen_ai.request.model"], "reasoning-model-k3");
        assert_eq!(a["gen_ai.usage.input_tokens"], line.prompt_tokens);
        assert_eq!(a["gen_ai.usage.output_tokens"], line.completion_tokens);
        assert_eq!(
            a["gen_ai.usage.reasoning.output_tokens"],
            line.reasoning_tokens
        );
        assert_eq!(
            a["gen_ai.usage.cache_read.input_tokens"],
            line.cached_tokens
        );
        assert_eq!(a["chatgate.cost_nano_usd"], line.cost_nano_usd);
        assert_eq!(a["chatgate.key"], "test");
        assert_eq!(a["gen_ai.request.stream"], line.stream);
        assert_eq!(a["http.response.status_code"], 200);
        assert_eq!(
            a["gen_ai.response.finish_reasons"],
            serde_json::json!([line.finish_reason.clone().unwrap()])
        );
        assert_eq!(s["status"]["code"], "unset");
        assert_eq!(s["events"][0]["name"], "first_byte");
        if i == 0 {
            assert_eq!(a["gen_ai.request.temperature"], 0.7);
            assert_eq!(a["gen_ai.request.max_tokens"], 20);
            assert!(
                a.get("gen_ai.request.top_p").is_none(),
                "null is not a value"
            );
        }
        // What the provider's answer says it is.
        assert_eq!(a["gen_ai.response.model"], "reasoning-model-k3");
        assert!(
            a["gen_ai.response.id"]
                .as_str()
                .is_some_and(|id| id.starts_with("chatcmpl-")),
            "{a:#}"
        );
        // No key, no content anywhere.
        let text = s.to_string();
        assert!(
            !text.contains(&gw.key) && !text.contains("messages"),
            "{text}"
        );
        let kids = children(&spans, s);
        assert_eq!(kids.len(), 1, "one attempt");
        let c = kids[0];
        assert_eq!(c["trace_id"], s["trace_id"]);
        assert_eq!(c["attributes"]["chatgate.endpoint"], "default");
        assert_eq!(c["attributes"]["server.address"], "127.0.0.1");
        assert_eq!(c["attributes"]["server.port"], sim.addr.port());
        // Who was asked, and the model as it was sent.
        assert_eq!(c["attributes"]["gen_ai.provider.name"], "openai");
        assert_eq!(a["gen_ai.provider.name"], "openai");
        assert_eq!(
            c["attributes"]["gen_ai.request.model"],
            "reasoning-model-k3"
        );
        // The provider was sent the attempt's context.
        let sent = journal
            .iter()
            .find(|j| {
                j["request_id"]
                    == chatgate_core::provider_request_id(&line.request_id, line.attempts).as_str()
            })
            .expect("the provider's journal entry");
        let expected = format!(
            "00-{}-{}-01",
            s["trace_id"].as_str().unwrap(),
            c["span_id"].as_str().unwrap()
        );
        assert_eq!(sent["traceparent"], expected.as_str());
        if i < 2 {
            assert_eq!(s["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
            assert_eq!(s["parent_span_id"], "00f067aa0ba902b7");
            assert_eq!(s["trace_state"], "rojo=00f067aa0ba902b7");
            assert_eq!(s["flags"], 0x301);
        } else {
            assert_ne!(s["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
            assert_eq!(s["parent_span_id"], "");
        }
        // The access line carries the trace id.
        let trace = s["trace_id"].as_str().unwrap().to_owned();
        gw.proc.stderr_when("the access line", |t| {
            t.contains(&format!("trace_id={trace}"))
        });
    }
}

fn refusals_failures_failover_and_cut_streams_are_marked(bin: &str) {
    let receiver = OtlpReceiver::start();
    let sim = Sim::start(bin, &[], &[]);
    // Two endpoints: the first refuses connections, the second is the
    // simulator; weights send the first attempt to the dead one.
    let dir = tempfile::tempdir().unwrap();
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let config = dir.path().join("pool.toml");
    std::fs::write(
        &config,
        format!(
            "[[upstream]]\nname = \"dead\"\nurl = \"http://{dead}/v1\"\nweight = 1000\n\
             [[upstream]]\nname = \"sim\"\nurl = \"{}\"\nweight = 1\n",
            sim.url()
        ),
    )
    .unwrap();
    let pooled = traced(
        bin,
        "",
        &receiver.url(),
        &["--config", config.to_str().unwrap()],
    );
    assert_eq!(pooled.chat(&body("")).status, 200);
    let failover = spans(&receiver, 3);
    drop(pooled);
    let gw = traced(bin, &sim.url(), &receiver.url(), &[]);
    assert_eq!(with_headers(&gw, "sk-cg-nope", "", &body("")).status, 401);
    let limited = gw.keys["limited"].clone();
    assert_eq!(with_headers(&gw, &limited, "", &body("")).status, 200);
    assert_eq!(with_headers(&gw, &limited, "", &body("")).status, 429);
    let reject = body(r#""x_sim":{"fault":"reject","status":400}"#);
    assert_eq!(gw.chat(&reject).status, 502);
    let cut = stream_body(r#""x_sim":{"fault":"reset","after":3}"#);
    assert_eq!(gw.chat(&cut).status, 200);
    // Five server spans, and a client span for each of the three that
    // reached the provider.
    let spans = spans(&receiver, 3 + 5 + 3);
    let servers: Vec<&Json> = spans[3..]
        .iter()
        .filter(|s| s["kind"] == "server")
        .collect();
    assert_eq!(servers.len(), 5, "{spans:#?}");
    let status = |code: u16| -> &Json {
        servers
            .iter()
            .find(|s| s["attributes"]["http.response.status_code"] == code)
            .unwrap_or_else(|| panic!("no {code} span: {servers:#?}"))
    };
    // Failover: the dead endpoint's attempt failed, the second served.
    let first = failover
        .iter()
        .find(|s| s["kind"] == "server")
        .expect("the failover's server span");
    assert_eq!(first["status"]["code"], "unset");
    let kids = children(&failover, first);
    assert_eq!(kids.len(), 2, "{kids:#?}");
    assert_eq!(kids[0]["attributes"]["chatgate.endpoint"], "dead");
    assert_eq!(kids[0]["status"]["code"], "error");
    assert_eq!(kids[0]["status"]["message"], "upstream_connect");
    assert_eq!(kids[1]["attributes"]["chatgate.endpoint"], "sim");
    assert_eq!(kids[1]["status"]["code"], "unset");
    assert_eq!(first["attributes"]["chatgate.attempts"], 2);
    for (code, error) in [(401, "invalid_api_key"), (429, "rate_limit_exceeded")] {
        let s = status(code);
        assert_eq!(s["status"]["code"], "error", "{s:#}");
        assert_eq!(s["status"]["message"], error);
        assert_eq!(s["attributes"]["error.type"], error);
        assert!(children(&spans, s).is_empty());
    }
    let bad = status(502);
    assert_eq!(bad["status"]["code"], "error");
    let kids = children(&spans, bad);
    assert_eq!(kids.len(), 1, "a 400 from the provider is not retried");
    assert_eq!(kids[0]["status"]["code"], "error");
    assert_eq!(kids[0]["attributes"]["http.response.status_code"], 400);
    let incomplete = servers
        .iter()
        .find(|s| s["attributes"]["chatgate.incomplete_stream"] == true)
        .expect("the cut stream's span");
    assert_eq!(incomplete["status"]["code"], "error");
    assert_eq!(incomplete["attributes"]["chatgate.complete"], false);
}

fn sampling_keeps_its_ratio_and_a_missing_or_stalled_collector_costs_nothing(bin: &str) {
    let receiver = OtlpReceiver::start();
    let sim = Sim::start(bin, &[], &[]);
    let mut gw = traced(
        bin,
        &sim.url(),
        &receiver.url(),
        &[
            "--traces-sampler",
            "traceidratio",
            "--traces-sampler-arg",
            "0.25",
            "--admin-listen",
            "127.0.0.1:0",
        ],
    );
    let admin = gw.admin_addr();
    let n = 2000;
    let mut c = Conn::open(gw.addr);
    let raw = raw_request(
        "POST",
        "/v1/chat/completions",
        Some(&gw.key),
        Some(&body("")),
    );
    for _ in 0..n {
        c.send(&raw);
        assert_eq!(c.response().status, 200);
    }
    eventually("every sampled span exported", || {
        metric(admin, "chatgate_trace_spans_waiting") == 0
            && metric(admin, "chatgate_trace_spans_exported_total")
                == metric(admin, "chatgate_trace_spans_queued_total")
    });
    let servers = receiver
        .spans()
        .into_iter()
        .filter(|s| s["kind"] == "server")
        .count();
    // 25 % of 2,000 is 500; a binomial's standard deviation here is 19.
    assert!((400..=600).contains(&servers), "{servers} of {n} sampled");
    assert_eq!(metric(admin, "chatgate_trace_spans_dropped_total"), 0);
    drop(gw);
    // No collector at all, then one that never answers: requests are
    // served, the spans are dropped and counted.
    let nobody = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    for (url, stall) in [(format!("http://{nobody}"), false), (receiver.url(), true)] {
        if stall {
            receiver.set_mode("stall", 0);
        }
        let mut gw = traced(
            bin,
            &sim.url(),
            &url,
            &["--otlp-timeout", "300ms", "--admin-listen", "127.0.0.1:0"],
        );
        let admin = gw.admin_addr();
        for _ in 0..20 {
            assert_eq!(gw.chat(&body("")).status, 200);
        }
        eventually("the spans dropped and counted", || {
            metric(admin, "chatgate_trace_spans_dropped_total") == 40
        });
        assert_eq!(metric(admin, "chatgate_trace_spans_exported_total"), 0);
        gw.proc.stderr_when("the warning", |t| {
            t.contains("trace export failed, spans dropped")
        });
    }
}

/// The core's encoding, field by field, as the official definitions read
/// it: ids, parent, kind, times, every attribute type, events, status and
/// flags, and the resource and scope around them.
#[test]
fn the_core_encoding_decodes_with_the_official_definitions() {
    let receiver = OtlpReceiver::start();
    let parent = parse_traceparent(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        .expect("a valid traceparent");
    assert_eq!(parent.flags, SAMPLED);
    let server = Span {
        trace_id: parent.trace_id,
        span_id: SpanId::from_random(0x1122_3344_5566_7788),
        parent: Some(parent.span_id),
        parent_remote: true,
        trace_state: "rojo=00f067aa0ba902b7".into(),
        name: "chat reasoning-model-k3".into(),
        kind: SpanKind::Server,
        start_ns: 1_795_000_000_000_000_000,
        end_ns: 1_795_000_000_250_000_000,
        attributes: vec![
            ("gen_ai.operation.name", Value::Str("chat".into())),
            ("gen_ai.usage.input_tokens", Value::Int(37)),
            ("gen_ai.usage.cache_read.input_tokens", Value::Int(0)),
            ("gen_ai.request.stream", Value::Bool(false)),
            ("gen_ai.request.temperature", Value::Double(0.25)),
            (
                "gen_ai.response.finish_reasons",
                Value::Strs(vec!["stop".into(), "length".into()]),
            ),
            ("chatgate.cost_nano_usd", Value::Int(532_950)),
        ],
        events: vec![SpanEvent {
            time_ns: 1_795_000_000_100_000_000,
            name: "gen_ai.first_byte",
            attributes: vec![("chatgate.ttfb_ms", Value::Int(100))],
        }],
        status: Status::Unset,
    };
    let attempt = Span {
        span_id: SpanId::from_random(0x99),
        parent: Some(server.span_id),
        parent_remote: false,
        trace_state: String::new(),
        name: "chat reasoning-model-k3".into(),
        kind: SpanKind::Client,
        attributes: vec![("server.port", Value::Int(-1))],
        events: vec![],
        status: Status::Error("upstream_error".into()),
        ..server.clone()
    };
    let source = Source {
        resource: vec![("service.name".into(), Value::Str("chatgate-test".into()))],
        scope: "chatgate",
        version: "0.1.0",
    };
    let mut body = Vec::new();
    encode_export(&source, &[server.clone(), attempt.clone()], &mut body);
    assert_eq!(receiver.post(&body), 200);
    let spans = receiver.spans();
    assert_eq!(spans.len(), 2, "{spans:?}");
    let (s, a) = (&spans[0], &spans[1]);
    assert_eq!(s["resource"]["service.name"], "chatgate-test");
    assert_eq!(s["scope"]["name"], "chatgate");
    assert_eq!(s["scope"]["version"], "0.1.0");
    assert_eq!(s["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(s["span_id"], "1122334455667788");
    assert_eq!(s["parent_span_id"], "00f067aa0ba902b7");
    assert_eq!(s["trace_state"], "rojo=00f067aa0ba902b7");
    assert_eq!(s["flags"], 0x301, "sampled, with a remote parent");
    assert_eq!(s["kind"], "server");
    assert_eq!(s["name"], "chat reasoning-model-k3");
    assert_eq!(s["start_ns"], server.start_ns);
    assert_eq!(s["end_ns"], server.end_ns);
    let attrs = &s["attributes"];
    assert_eq!(attrs["gen_ai.operation.name"], "chat");
    assert_eq!(attrs["gen_ai.usage.input_tokens"], 37);
    assert_eq!(attrs["gen_ai.usage.cache_read.input_tokens"], 0);
    assert_eq!(attrs["gen_ai.request.stream"], false);
    assert_eq!(attrs["gen_ai.request.temperature"], 0.25);
    assert_eq!(
        attrs["gen_ai.response.finish_reasons"],
        serde_json::json!(["stop", "length"])
    );
    assert_eq!(attrs["chatgate.cost_nano_usd"], 532_950);
    assert_eq!(s["events"][0]["name"], "gen_ai.first_byte");
    assert_eq!(s["events"][0]["time_ns"], 1_795_000_000_100_000_000u64);
    assert_eq!(s["events"][0]["attributes"]["chatgate.ttfb_ms"], 100);
    assert_eq!(s["status"]["code"], "unset");
    assert_eq!(a["kind"], "client");
    assert_eq!(a["parent_span_id"], "1122334455667788");
    assert_eq!(a["flags"], 0x101, "sampled, with a local parent");
    assert_eq!(a["trace_state"], "");
    assert_eq!(a["attributes"]["server.port"], -1);
    assert_eq!(a["status"]["code"], "error");
    assert_eq!(a["status"]["message"], "upstream_error");
    // The traceparent a provider would be sent for the attempt.
    let sent = format_traceparent(&TraceId(parent.trace_id.0), &attempt.span_id, true);
    assert_eq!(
        sent,
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000099-01"
    );
    // A body that is not an export is refused and counted.
    assert_eq!(receiver.post(b"\xff\xff\xff"), 400);
    assert_eq!(receiver.stats()["bad"], 1);
    assert_eq!(receiver.stats()["exports"], 1);
}

fn exports_over_tls_trusting_what_the_provider_is_trusted_with(bin: &str) {
    let receiver = OtlpReceiver::start();
    let sim = Sim::start(bin, &[], &[]);
    let good = certs(&["localhost"]);
    let proxy = tls_proxy(&good, receiver.addr);
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &good.ca_pem).unwrap();
    let url = format!("https://localhost:{}", proxy.port());
    let gw = traced(
        bin,
        &sim.url(),
        &url,
        &["--upstream-ca", ca.to_str().unwrap()],
    );
    assert_eq!(gw.chat(&body("")).status, 200);
    let got = spans(&receiver, 2);
    assert!(got.iter().any(|s| s["kind"] == "server"), "{got:#?}");
}

fn the_last_spans_are_sent_on_shutdown(bin: &str) {
    let receiver = OtlpReceiver::start();
    let sim = Sim::start(bin, &[], &[]);
    let mut gw = traced(bin, &sim.url(), &receiver.url(), &[]);
    for _ in 0..3 {
        assert_eq!(gw.chat(&body("")).status, 200);
    }
    // Within the exporter's one-second linger: only the flush at exit can
    // send them (later, the exporter would have: the test still holds).
    gw.proc.signal(libc::SIGTERM);
    gw.proc.wait_exit(PATIENCE).expect("exits on SIGTERM");
    let got = receiver.spans();
    assert_eq!(got.len(), 6, "{got:#?}");
}
