//! Traces: the W3C context a request arrives with and the gateway passes
//! on, which requests are sampled, the spans a request makes, the bounded
//! queue they wait in, and their OTLP protobuf encoding. Pure: times come
//! from the caller; sending is the host's.
//!
//! | file | job |
//! |---|---|
//! | `context.rs` | W3C `traceparent` and `tracestate`, read and written |
//! | `sampler.rs` | the OTEL samplers (ratio by trace id, parent-based) |
//! | `tracer.rs` | trace and span ids, and the bounded queue of finished spans |
//! | `wire.rs` | spans encoded as an OTLP `ExportTraceServiceRequest` (protobuf by hand) |

mod context;
mod sampler;
mod tracer;
mod wire;

pub use context::{
    SAMPLED, SpanContext, SpanId, TraceId, client_context, format_traceparent, parse_traceparent,
    parse_tracestate,
};
pub use sampler::Sampler;
pub use tracer::{QUEUE_SPANS, TraceSettings, Tracer};
pub use wire::{Attribute, Source, Span, SpanEvent, SpanKind, Status, Value, encode_export};
