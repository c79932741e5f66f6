//! Traces: the W3C context a request arrives with and the gateway passes
//! on, which requests are sampled, the spans a request makes, the bounded
//! queue they wait in, and their OTLP protobuf encoding. Pure: times come
//! from the caller; sending is the host's.

mod context;
mod otlp;
mod sampler;
mod tracer;

pub use context::{
    SAMPLED, SpanContext, SpanId, TraceId, format_traceparent, parse_traceparent, parse_tracestate,
};
pub use otlp::{Attribute, Source, Span, SpanEvent, SpanKind, Status, Value, encode_export};
pub use sampler::Sampler;
pub use tracer::{QUEUE_SPANS, TraceSettings, Tracer};
