//! Traces: what the gateway sends an OTLP collector, read back by a
//! receiver that decodes with the official OpenTelemetry protobuf
//! definitions (`tests/otlp/receiver.py`).

use chatgate_core::trace::{
    SAMPLED, Source, Span, SpanEvent, SpanId, SpanKind, Status, TraceId, Value, encode_export,
    format_traceparent, parse_traceparent,
};
use chatgate_tests::*;

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
