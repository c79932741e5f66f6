//! Spans and their OTLP encoding: an `ExportTraceServiceRequest` in
//! protobuf, as `POST /v1/traces` carries it (opentelemetry-proto v1,
//! `collector/trace/v1`, `trace/v1`, `common/v1`, `resource/v1`).
//!
//! Written by hand rather than generated: the few messages a span needs
//! are a page of field numbers, and the core stays free of a code
//! generator and its runtime. Nested messages are written in place and
//! their length put in front afterwards (a move of the bytes written, at
//! export time, never on a request's path).

use super::context::{SpanId, TraceId};

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string.
    Str(String),
    /// A signed integer.
    Int(i64),
    /// A floating-point number.
    Double(f64),
    /// A boolean.
    Bool(bool),
    /// An array of strings.
    Strs(Vec<String>),
}

/// A named value.
pub type Attribute = (&'static str, Value);

/// A span's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// Serves a remote request (the gateway's span for a client's request).
    Server = 2,
    /// Calls a remote service (an attempt at a provider endpoint).
    Client = 3,
}

/// A span's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Not set (success, or nothing to say).
    Unset,
    /// Failed, with a description.
    Error(String),
}

/// Something that happened at a point in a span.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanEvent {
    /// When, Unix nanoseconds.
    pub time_ns: u64,
    /// What.
    pub name: &'static str,
    /// Its attributes.
    pub attributes: Vec<Attribute>,
}

/// A finished span.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// The trace it belongs to.
    pub trace_id: TraceId,
    /// Its id.
    pub span_id: SpanId,
    /// Its parent, if any.
    pub parent: Option<SpanId>,
    /// Whether the parent came from another process (the client's
    /// `traceparent`).
    pub parent_remote: bool,
    /// The W3C `tracestate` it carries, or empty.
    pub trace_state: String,
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: SpanKind,
    /// Start, Unix nanoseconds.
    pub start_ns: u64,
    /// End, Unix nanoseconds.
    pub end_ns: u64,
    /// Its attributes.
    pub attributes: Vec<Attribute>,
    /// Its events.
    pub events: Vec<SpanEvent>,
    /// Its status.
    pub status: Status,
}

/// Who made the spans: the resource's attributes (`service.name`, …) and
/// the instrumentation scope's name and version.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    /// Resource attributes, in order.
    pub resource: Vec<(String, Value)>,
    /// The instrumentation scope's name.
    pub scope: &'static str,
    /// Its version.
    pub version: &'static str,
}

// Wire types.
const VARINT: u32 = 0;
const I64: u32 = 1;
const LEN: u32 = 2;
const I32: u32 = 5;

/// Encodes one `ExportTraceServiceRequest` holding `spans` from `source`.
pub fn encode_export(source: &Source, spans: &[Span], out: &mut Vec<u8>) {
    // ExportTraceServiceRequest.resource_spans = 1
    message(out, 1, |out| {
        // ResourceSpans.resource = 1
        message(out, 1, |out| {
            for (k, v) in &source.resource {
                // Resource.attributes = 1
                key_value(out, 1, k, v);
            }
        });
        // ResourceSpans.scope_spans = 2
        message(out, 2, |out| {
            // ScopeSpans.scope = 1
            message(out, 1, |out| {
                string(out, 1, source.scope);
                string(out, 2, source.version);
            });
            for s in spans {
                // ScopeSpans.spans = 2
                message(out, 2, |out| span(out, s));
            }
        });
    });
}

fn span(out: &mut Vec<u8>, s: &Span) {
    bytes(out, 1, &s.trace_id.0);
    bytes(out, 2, &s.span_id.0);
    string(out, 3, &s.trace_state);
    if let Some(p) = &s.parent {
        bytes(out, 4, &p.0);
    }
    string(out, 5, &s.name);
    varint_field(out, 6, s.kind as u64);
    fixed64(out, 7, s.start_ns);
    fixed64(out, 8, s.end_ns);
    for (k, v) in &s.attributes {
        key_value(out, 9, k, v);
    }
    for e in &s.events {
        message(out, 11, |out| {
            fixed64(out, 1, e.time_ns);
            string(out, 2, e.name);
            for (k, v) in &e.attributes {
                key_value(out, 3, k, v);
            }
        });
    }
    if let Status::Error(description) = &s.status {
        message(out, 15, |out| {
            string(out, 2, description);
            varint_field(out, 3, 2);
        });
    }
    // Span.flags = 16: sampled (every exported span is), and whether the
    // parent is remote (bit 8: known, bit 9: remote).
    let remote = if s.parent.is_some() && s.parent_remote {
        0x300
    } else {
        0x100
    };
    key(out, 16, I32);
    out.extend_from_slice(&(0x01u32 | remote).to_le_bytes());
}

fn key_value(out: &mut Vec<u8>, field: u32, k: &str, v: &Value) {
    message(out, field, |out| {
        string(out, 1, k);
        message(out, 2, |out| any_value(out, v));
    });
}

/// An `AnyValue`: the member of its oneof is written even when it holds
/// the default (false, 0, "").
fn any_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Str(s) => {
            key(out, 1, LEN);
            len_prefixed(out, s.as_bytes());
        }
        Value::Bool(b) => {
            key(out, 2, VARINT);
            varint(out, u64::from(*b));
        }
        Value::Int(i) => {
            key(out, 3, VARINT);
            // int64: two's complement, ten bytes when negative.
            varint(out, *i as u64);
        }
        Value::Double(d) => {
            key(out, 4, I64);
            out.extend_from_slice(&d.to_le_bytes());
        }
        Value::Strs(items) => message(out, 5, |out| {
            for s in items {
                // ArrayValue.values = 1
                message(out, 1, |out| {
                    key(out, 1, LEN);
                    len_prefixed(out, s.as_bytes());
                });
            }
        }),
    }
}

/// A length-delimited field whose content `f` writes: written in place
/// after a one-byte length, which grows (the content moved along) only for
/// content of 128 bytes or more.
fn message(out: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>)) {
    key(out, field, LEN);
    let at = out.len();
    out.push(0);
    f(out);
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
        return;
    }
    let mut prefix = [0u8; 10];
    let mut n = 0;
    let mut v = len as u64;
    while v >= 0x80 {
        prefix[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    prefix[n] = v as u8;
    n += 1;
    let end = out.len();
    out.resize(end + n - 1, 0);
    out.copy_within(at + 1..end, at + n);
    out[at..at + n].copy_from_slice(&prefix[..n]);
}

/// A string field, left out when empty (proto3 implicit presence).
fn string(out: &mut Vec<u8>, field: u32, s: &str) {
    bytes(out, field, s.as_bytes());
}

/// A bytes field, left out when empty.
fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    if !b.is_empty() {
        key(out, field, LEN);
        len_prefixed(out, b);
    }
}

/// A varint field, left out when zero.
fn varint_field(out: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        key(out, field, VARINT);
        varint(out, v);
    }
}

/// A fixed64 field, left out when zero.
fn fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        key(out, field, I64);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn len_prefixed(out: &mut Vec<u8>, b: &[u8]) {
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn key(out: &mut Vec<u8>, field: u32, wire: u32) {
    varint(out, u64::from(field << 3 | wire));
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal protobuf reader for the tests: (field, wire, payload)
    /// triples of one message level.
    fn fields(mut b: &[u8]) -> Vec<(u32, u32, Vec<u8>)> {
        fn read_varint(b: &mut &[u8]) -> u64 {
            let (mut v, mut shift) = (0u64, 0);
            loop {
                let byte = b[0];
                *b = &b[1..];
                v |= u64::from(byte & 0x7f) << shift;
                if byte < 0x80 {
                    return v;
                }
                shift += 7;
            }
        }
        let mut out = Vec::new();
        while !b.is_empty() {
            let k = read_varint(&mut b);
            let (field, wire) = ((k >> 3) as u32, (k & 7) as u32);
            let payload = match wire {
                0 => read_varint(&mut b).to_le_bytes().to_vec(),
                1 => {
                    let (p, rest) = b.split_at(8);
                    b = rest;
                    p.to_vec()
                }
                2 => {
                    let n = read_varint(&mut b) as usize;
                    let (p, rest) = b.split_at(n);
                    b = rest;
                    p.to_vec()
                }
                5 => {
                    let (p, rest) = b.split_at(4);
                    b = rest;
                    p.to_vec()
                }
                w => panic!("wire type {w}"),
            };
            out.push((field, wire, payload));
        }
        out
    }

    fn one(b: &[u8], field: u32) -> Vec<u8> {
        let all: Vec<_> = fields(b).into_iter().filter(|f| f.0 == field).collect();
        assert_eq!(all.len(), 1, "field {field}");
        all[0].2.clone()
    }

    fn sample_span() -> Span {
        Span {
            trace_id: TraceId([7; 16]),
            span_id: SpanId([9; 8]),
            parent: Some(SpanId([3; 8])),
            parent_remote: true,
            trace_state: "rojo=1".into(),
            name: "chat reasoning-model-k3".into(),
            kind: SpanKind::Server,
            start_ns: 1_000,
            end_ns: 2_000,
            attributes: vec![
                (
                    "gen_ai.request.model",
                    Value::Str("reasoning-model-k3".into()),
                ),
                ("gen_ai.usage.input_tokens", Value::Int(0)),
                ("gen_ai.request.stream", Value::Bool(false)),
                ("gen_ai.request.temperature", Value::Double(0.5)),
                (
                    "gen_ai.response.finish_reasons",
                    Value::Strs(vec!["stop".into()]),
                ),
                ("negative", Value::Int(-1)),
            ],
            events: vec![SpanEvent {
                time_ns: 1_500,
                name: "gen_ai.first_chunk",
                attributes: vec![],
            }],
            status: Status::Error("rate_limit_exceeded".into()),
        }
    }

    #[test]
    fn encodes_the_export_request_field_by_field() {
        let source = Source {
            resource: vec![("service.name".into(), Value::Str("chatgate".into()))],
            scope: "chatgate",
            version: "0.1.0",
        };
        let mut out = Vec::new();
        encode_export(&source, &[sample_span(), sample_span()], &mut out);
        let rs = one(&out, 1);
        let resource = one(&rs, 1);
        let kv = one(&resource, 1);
        assert_eq!(one(&kv, 1), b"service.name");
        assert_eq!(one(&one(&kv, 2), 1), b"chatgate");
        let ss = one(&rs, 2);
        let scope = one(&ss, 1);
        assert_eq!(
            (one(&scope, 1), one(&scope, 2)),
            (b"chatgate".to_vec(), b"0.1.0".to_vec())
        );
        let spans: Vec<_> = fields(&ss).into_iter().filter(|f| f.0 == 2).collect();
        assert_eq!(spans.len(), 2);
        let s = &spans[0].2;
        assert_eq!(one(s, 1), [7; 16]);
        assert_eq!(one(s, 2), [9; 8]);
        assert_eq!(one(s, 3), b"rojo=1");
        assert_eq!(one(s, 4), [3; 8]);
        assert_eq!(one(s, 5), b"chat reasoning-model-k3");
        assert_eq!(one(s, 6)[0], 2);
        assert_eq!(one(s, 7), 1_000u64.to_le_bytes());
        assert_eq!(one(s, 8), 2_000u64.to_le_bytes());
        assert_eq!(one(s, 16), 0x301u32.to_le_bytes());
        let attrs: Vec<_> = fields(s).into_iter().filter(|f| f.0 == 9).collect();
        assert_eq!(attrs.len(), 6);
        // A zero and a false are still written inside their AnyValue.
        let zero = one(&attrs[1].2, 2);
        assert_eq!(fields(&zero), vec![(3, 0, 0u64.to_le_bytes().to_vec())]);
        let f = one(&attrs[2].2, 2);
        assert_eq!(fields(&f), vec![(2, 0, 0u64.to_le_bytes().to_vec())]);
        assert_eq!(one(&one(&attrs[3].2, 2), 4), 0.5f64.to_le_bytes());
        let array = one(&one(&attrs[4].2, 2), 5);
        assert_eq!(one(&one(&array, 1), 1), b"stop");
        assert_eq!(one(&one(&attrs[5].2, 2), 3), u64::MAX.to_le_bytes());
        let event = one(s, 11);
        assert_eq!(one(&event, 1), 1_500u64.to_le_bytes());
        assert_eq!(one(&event, 2), b"gen_ai.first_chunk");
        let status = one(s, 15);
        assert_eq!(one(&status, 2), b"rate_limit_exceeded");
        assert_eq!(one(&status, 3)[0], 2);
    }

    #[test]
    fn a_root_span_has_no_parent_and_a_local_flag() {
        let mut s = sample_span();
        s.parent = None;
        s.trace_state.clear();
        s.status = Status::Unset;
        let mut out = Vec::new();
        span(&mut out, &s);
        let f = fields(&out);
        assert!(!f.iter().any(|(n, ..)| matches!(n, 3 | 4 | 15)), "{f:?}");
        assert_eq!(one(&out, 16), 0x101u32.to_le_bytes());
    }

    #[test]
    fn long_messages_get_multi_byte_lengths() {
        for n in [127, 128, 300, 20_000] {
            let mut s = sample_span();
            s.name = "x".repeat(n);
            let mut out = Vec::new();
            message(&mut out, 2, |out| span(out, &s));
            let inner = one(&out, 2);
            assert_eq!(one(&inner, 5).len(), n);
            assert_eq!(
                one(&inner, 16),
                0x301u32.to_le_bytes(),
                "the last field intact"
            );
        }
    }
}
