//! Traces: the W3C context a request arrives with and the gateway passes
//! on, which requests are sampled, and spans in OTLP's protobuf encoding.
//! Pure: ids and times come from the caller; sending is the host's.

mod context;
mod otlp;
mod sampler;

pub use context::{
    SAMPLED, SpanContext, SpanId, TraceId, format_traceparent, parse_traceparent, parse_tracestate,
};
pub use otlp::{Attribute, Source, Span, SpanEvent, SpanKind, Status, Value, encode_export};
pub use sampler::Sampler;
