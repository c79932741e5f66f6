//! Telemetry: stderr logs with batched access lines (`logging`) and the
//! OTLP trace exporter (`otlp`).

pub(crate) mod logging;
pub(crate) mod otlp;
