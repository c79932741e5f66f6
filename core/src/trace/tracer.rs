//! The gateway's tracer: its settings, the ids it draws, and the bounded
//! queue finished spans wait in for the exporter. A full queue drops the
//! newest spans and counts them: a slow or absent collector never makes a
//! request wait, and never makes the queue grow.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::context::{SpanId, TraceId};
use super::sampler::Sampler;
use super::wire::{Source, Span};

/// Spans waiting for the exporter, at most (about 8 MiB at most of spans of
/// a gateway's size).
pub const QUEUE_SPANS: usize = 8192;

/// What a tracer is set up with.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSettings {
    /// Which requests are recorded.
    pub sampler: Sampler,
    /// The resource and scope spans are sent under.
    pub source: Source,
}

/// The tracer.
#[derive(Debug)]
pub struct Tracer {
    settings: TraceSettings,
    queue: Mutex<VecDeque<Span>>,
    seed: u64,
    drawn: AtomicU64,
    dropped: AtomicU64,
    queued: AtomicU64,
    exported: AtomicU64,
}

impl Tracer {
    /// A tracer whose ids come from `seed` (random at start).
    pub fn new(settings: TraceSettings, seed: u64) -> Tracer {
        Tracer {
            settings,
            queue: Mutex::new(VecDeque::new()),
            seed,
            drawn: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            exported: AtomicU64::new(0),
        }
    }

    /// Its settings.
    pub fn settings(&self) -> &TraceSettings {
        &self.settings
    }

    /// A new trace id.
    pub fn trace_id(&self) -> TraceId {
        TraceId::from_random(self.draw(), self.draw())
    }

    /// A new span id.
    pub fn span_id(&self) -> SpanId {
        SpanId::from_random(self.draw())
    }

    /// The next of a sequence that never repeats within 2^64 draws and is
    /// well mixed in every bit (splitmix64 over a counter).
    fn draw(&self) -> u64 {
        let n = self.drawn.fetch_add(1, Ordering::Relaxed);
        let mut z = self
            .seed
            .wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Queues a request's spans; those that do not fit are dropped and
    /// counted.
    pub fn finish(&self, spans: Vec<Span>) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let room = QUEUE_SPANS.saturating_sub(q.len());
        let n = spans.len();
        q.extend(spans.into_iter().take(room));
        drop(q);
        self.queued.fetch_add(n.min(room) as u64, Ordering::Relaxed);
        if n > room {
            self.dropped.fetch_add((n - room) as u64, Ordering::Relaxed);
        }
    }

    /// Up to `max` queued spans, oldest first.
    pub fn take(&self, max: usize) -> Vec<Span> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let n = q.len().min(max);
        q.drain(..n).collect()
    }

    /// Spans waiting.
    pub fn waiting(&self) -> usize {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Counts spans the exporter gave up on (the collector refused or
    /// could not be reached in time).
    pub fn lost(&self, n: usize) {
        self.dropped.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Counts spans the collector accepted.
    pub fn exported(&self, n: usize) {
        self.exported.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Spans the collector accepted so far.
    pub fn exported_total(&self) -> u64 {
        self.exported.load(Ordering::Relaxed)
    }

    /// Spans dropped so far (queue full, or given up by the exporter).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Spans queued so far.
    pub fn queued(&self) -> u64 {
        self.queued.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::wire::{SpanKind, Status};

    fn tracer() -> Tracer {
        Tracer::new(
            TraceSettings {
                sampler: Sampler::default(),
                source: Source {
                    resource: vec![],
                    scope: "chatgate",
                    version: "0",
                },
            },
            42,
        )
    }

    fn span(t: &Tracer) -> Span {
        Span {
            trace_id: t.trace_id(),
            span_id: t.span_id(),
            parent: None,
            parent_remote: false,
            trace_state: String::new(),
            name: "chat m".into(),
            kind: SpanKind::Server,
            start_ns: 1,
            end_ns: 2,
            attributes: vec![],
            events: vec![],
            status: Status::Unset,
        }
    }

    #[test]
    fn ids_do_not_repeat() {
        let t = tracer();
        let ids: std::collections::HashSet<_> = (0..10_000).map(|_| t.span_id()).collect();
        assert_eq!(ids.len(), 10_000);
        assert_ne!(t.trace_id(), t.trace_id());
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        let t = tracer();
        for _ in 0..QUEUE_SPANS / 2 {
            t.finish(vec![span(&t), span(&t)]);
        }
        assert_eq!((t.waiting(), t.dropped()), (QUEUE_SPANS, 0));
        t.finish(vec![span(&t), span(&t), span(&t)]);
        assert_eq!((t.waiting(), t.dropped()), (QUEUE_SPANS, 3));
        let batch = t.take(512);
        assert_eq!(batch.len(), 512);
        assert_eq!(t.waiting(), QUEUE_SPANS - 512);
        t.lost(512);
        assert_eq!(t.dropped(), 515);
        assert_eq!(t.queued(), QUEUE_SPANS as u64);
    }
}
