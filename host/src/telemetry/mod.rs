//! Telemetry: stderr logs with batched access lines (`logging`) and the
//! OTLP trace exporter (`exporter`).

pub(crate) mod exporter;
pub(crate) mod logging;
