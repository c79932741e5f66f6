//! The trace exporter: takes finished spans from the tracer's queue (core)
//! in batches, encodes them (core) and posts them to the collector over
//! OTLP/HTTP with protobuf, through a pooled keep-alive connection (TLS
//! with the provider's roots and `--upstream-ca`).
//!
//! A batch goes when 512 spans wait or a second has passed. A failed
//! export (no connection, a timeout, 429, 502, 503, 504) is tried again
//! after 0.5 s, then 1 s, 2 s (or the collector's `Retry-After`, up to
//! 30 s), four tries in all; any other answer, or the last failure, drops
//! the batch and counts it. The request path never waits for any of this:
//! it only puts spans in the bounded queue.

use std::sync::Arc;
use std::time::Duration;

use chatgate_core::trace::{Span, Tracer, encode_export};
use chatgate_core::{Gateway, OtlpExport};
use futures_lite::{AsyncWriteExt, future};

use crate::error::Error;
use crate::provider::connector::{Connector, OutboundStream};
use crate::runtime::Runtime;

/// Spans per export, at most.
const BATCH: usize = 512;
/// How often the queue is looked at.
const TICK: Duration = Duration::from_millis(100);
/// A batch smaller than [`BATCH`] waits at most this long.
const BATCH_WAIT: Duration = Duration::from_secs(1);
/// Tries per batch.
const TRIES: u32 = 4;
/// The longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// How an export went.
enum Sent {
    Ok,
    /// Worth another try (after this long, if the collector said).
    Retry(String, Option<Duration>),
    /// Not worth another.
    Refused(String),
}

/// A connection to the collector and what every export carries.
struct Exporter<R: Runtime> {
    rt: R,
    connector: Connector<R>,
    head: String,
    timeout: Duration,
    body: Vec<u8>,
}

impl<R: Runtime> Exporter<R> {
    fn new(rt: R, export: &OtlpExport, extra_ca: Option<&str>) -> Result<Self, Error> {
        let connector = Connector::new(
            rt.clone(),
            export.target.clone(),
            extra_ca,
            2,
            Duration::from_secs(30),
        )?;
        Ok(Exporter {
            rt,
            connector,
            head: request_head(export),
            timeout: export.timeout,
            body: Vec::new(),
        })
    }

    /// Encodes `spans` and posts them, up to `tries` times (waiting 0.5 s,
    /// 1 s, 2 s… or the collector's `Retry-After` between them), each try
    /// within `timeout`; counts them exported or lost. The last failure
    /// ([`Error::Export`]).
    async fn export(
        &mut self,
        tracer: &Tracer,
        spans: &[Span],
        tries: u32,
        timeout: Duration,
    ) -> Result<(), Error> {
        self.body.clear();
        encode_export(&tracer.settings().source, spans, &mut self.body);
        let mut delay = Duration::from_millis(500);
        let mut outcome = String::new();
        for attempt in 1..=tries {
            match send(&self.rt, &self.connector, &self.head, &self.body, timeout).await {
                Sent::Ok => {
                    tracer.exported(spans.len());
                    return Ok(());
                }
                Sent::Refused(why) => {
                    outcome = why;
                    break;
                }
                Sent::Retry(why, after) => {
                    outcome = why;
                    if attempt < tries {
                        let wait = after.unwrap_or(delay).min(MAX_RETRY_AFTER);
                        self.rt.timer(std::time::Instant::now() + wait).await;
                        delay *= 2;
                    }
                }
            }
        }
        tracer.lost(spans.len());
        Err(Error::Export(outcome))
    }
}

/// Runs the exporter for the life of the process.
pub(crate) async fn run<R: Runtime>(
    rt: R,
    gateway: Arc<Gateway>,
    export: OtlpExport,
    extra_ca: Option<String>,
) {
    let mut exporter = match Exporter::new(rt.clone(), &export, extra_ca.as_deref()) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!("traces cannot be exported: {e}");
            return;
        }
    };
    let Some(tracer) = gateway.tracer() else {
        return;
    };
    let mut waited = Duration::ZERO;
    let mut warned_at: Option<std::time::Instant> = None;
    loop {
        rt.timer(std::time::Instant::now() + TICK).await;
        let waiting = tracer.waiting();
        // The batch wait counts from when spans began to wait.
        if waiting == 0 {
            waited = Duration::ZERO;
            continue;
        }
        waited += TICK;
        if waiting < BATCH && waited < BATCH_WAIT {
            continue;
        }
        waited = Duration::ZERO;
        let spans = tracer.take(BATCH);
        let timeout = exporter.timeout;
        if let Err(outcome) = exporter.export(tracer, &spans, TRIES, timeout).await {
            // One warning per minute at most.
            let now = std::time::Instant::now();
            if warned_at.is_none_or(|w| now.duration_since(w) >= Duration::from_secs(60)) {
                warned_at = Some(now);
                tracing::warn!(
                    spans = spans.len(),
                    dropped_total = tracer.dropped(),
                    collector = export.display_url().as_str(),
                    "trace export failed, spans dropped: {outcome}"
                );
            }
        }
    }
}

/// At shutdown, after the drain: what is still queued, sent once (no
/// retries) within `within`; what cannot be sent in time is dropped and
/// counted.
pub(crate) async fn flush<R: Runtime>(
    rt: R,
    gateway: Arc<Gateway>,
    export: OtlpExport,
    extra_ca: Option<String>,
    within: Duration,
) {
    let Some(tracer) = gateway.tracer() else {
        return;
    };
    if tracer.waiting() == 0 {
        return;
    }
    let Ok(mut exporter) = Exporter::new(rt, &export, extra_ca.as_deref()) else {
        tracer.lost(tracer.waiting());
        return;
    };
    let deadline = std::time::Instant::now() + within;
    loop {
        let spans = tracer.take(BATCH);
        if spans.is_empty() {
            return;
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let timeout = left.min(exporter.timeout);
        if let Err(why) = exporter.export(tracer, &spans, 1, timeout).await {
            let rest = tracer.take(usize::MAX).len();
            tracer.lost(rest);
            tracing::warn!(
                spans = spans.len() + rest,
                "traces not flushed at shutdown: {why}"
            );
            return;
        }
    }
}

/// The request head, the same for every export but its length.
fn request_head(export: &OtlpExport) -> String {
    let mut h = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-protobuf\r\nUser-Agent: chatgate/{}\r\n",
        export.target.base_path,
        export.target.host_header(),
        env!("CARGO_PKG_VERSION")
    );
    for (k, v) in &export.headers {
        h.push_str(k);
        h.push_str(": ");
        h.push_str(v.expose());
        h.push_str("\r\n");
    }
    h
}

/// One export, within `timeout`.
async fn send<R: Runtime>(
    rt: &R,
    connector: &Connector<R>,
    head: &str,
    body: &[u8],
    timeout: Duration,
) -> Sent {
    let work = async {
        let (mut s, _) = connector
            .connect(false)
            .await
            .map_err(|e| Sent::Retry(format!("cannot connect: {e}"), None))?;
        let mut out = Vec::with_capacity(head.len() + 32 + body.len());
        out.extend_from_slice(head.as_bytes());
        out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
        out.extend_from_slice(body);
        s.write_all(&out)
            .await
            .map_err(|e| Sent::Retry(format!("cannot send: {e}"), None))?;
        let (status, retry_after, reusable) = read_response(&mut s)
            .await
            .map_err(|e| Sent::Retry(format!("no answer: {e}"), None))?;
        if reusable {
            connector.release(s);
        }
        match status {
            200..=299 => Ok(()),
            429 | 502 | 503 | 504 => Err(Sent::Retry(
                format!("the collector answered {status}"),
                retry_after,
            )),
            other => Err(Sent::Refused(format!("the collector answered {other}"))),
        }
    };
    let limit = async {
        rt.timer(std::time::Instant::now() + timeout).await;
        Err(Sent::Retry(format!("no answer within {timeout:?}"), None))
    };
    match future::or(work, limit).await {
        Ok(()) => Sent::Ok,
        Err(e) => e,
    }
}

/// Reads one response: its status, `Retry-After` (seconds), and whether
/// the connection can carry another export.
async fn read_response<T>(
    s: &mut OutboundStream<T>,
) -> std::io::Result<(u16, Option<Duration>, bool)>
where
    OutboundStream<T>: futures_lite::AsyncRead + Unpin,
{
    let (head, _, reusable) = crate::provider::connector::read_response(s, None).await?;
    let retry_after = head
        .retry_after
        .as_deref()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    Ok((head.status, retry_after, reusable))
}
