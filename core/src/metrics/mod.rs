//! Counters, gauges and histograms of a gateway process, and their rendering
//! in the Prometheus text exposition format (version 0.0.4).
//!
//! Everything is recorded by the connection state machine and the runtime
//! through [`Metrics`] (atomics, and one mutex for what is labelled by key);
//! [`Metrics::render`] formats a consistent-enough snapshot. No I/O here: the
//! admin listener of the runtime serves the text.
//!
//! | file | job |
//! |---|---|
//! | `mod.rs` | what is recorded: [`Metrics`] and each event's figures |
//! | `histogram.rs` | the latency histograms: their buckets, quantiles and series |
//! | `render.rs` | the text exposition of every family, and its helpers (a family's header, a label's escaping) |

mod histogram;
mod render;

pub(crate) use histogram::Histogram;
pub(crate) use render::{escape, header};

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use crate::error::UpstreamFault;
use crate::limits::LimitKind;

/// What one finished request contributes.
#[derive(Debug, Clone, Copy)]
pub struct Finished<'a> {
    /// Key name (`""` when unauthenticated).
    pub key: &'a str,
    /// Status answered (499 for a client that left before a head).
    pub status: u16,
    /// A streamed chat request.
    pub stream: bool,
    /// From the first byte of the request to the end of the response.
    pub total: Duration,
    /// To the first response byte, when one was sent.
    pub ttfb: Option<Duration>,
    /// Time spent waiting on the provider (zero when it was not asked).
    pub provider: Duration,
}

/// Tokens and cost metered for one request.
#[derive(Debug, Clone, Copy, Default)]
pub struct Metered {
    /// Prompt tokens.
    pub prompt: u64,
    /// Completion tokens (reasoning included).
    pub completion: u64,
    /// Reasoning tokens.
    pub reasoning: u64,
    /// Cached prompt tokens.
    pub cached: u64,
    /// Cost, nano-dollars.
    pub cost_nano_usd: u64,
}

#[derive(Debug, Default)]
struct PerKey {
    /// (status, stream) → requests.
    requests: BTreeMap<(u16, bool), u64>,
    tokens: [u64; 4],
    cost_nano_usd: u64,
    /// Requests, tokens and in-flight rejections.
    rate_limited: [u64; 3],
    /// Refused by the budget.
    budget_refused: u64,
    /// Requests that cost more than their budget reservation, and by how
    /// much in all (nano-dollars).
    overshoots: u64,
    overshoot_nano_usd: u64,
    /// Requests that waited in the key's queue, and those that waited in
    /// vain.
    queued: u64,
    queue_timeouts: u64,
    /// Answers the provider gave without reporting usage.
    usage_missing: u64,
}

/// One model's figures (the model that answered).
#[derive(Debug, Default)]
struct PerModel {
    /// Metered requests it answered (or was asked last).
    requests: u64,
    tokens: [u64; 4],
    cost_nano_usd: u64,
}

/// Every figure the admin listener exposes.
#[derive(Debug, Default)]
pub struct Metrics {
    per_key: Mutex<BTreeMap<String, PerKey>>,
    /// By model id (catalogue ids only: never a name a client made up).
    per_model: Mutex<BTreeMap<String, PerModel>>,
    /// Fallbacks taken, by (from, to) model id.
    fallbacks: Mutex<BTreeMap<(String, String), u64>>,
    /// Requests whose reasoning was replayed, by model id and source.
    replays: Mutex<BTreeMap<(String, &'static str), u64>>,
    total: Histogram,
    ttfb: Histogram,
    overhead: Histogram,
    queue_wait: Histogram,
    ledger_write: Histogram,
    ledger_errors: AtomicU64,
    upstream_errors: [AtomicU64; UpstreamFault::ALL.len()],
    streams_open: AtomicI64,
    incomplete_streams: AtomicU64,
    client_disconnects: AtomicU64,
    pool_opened: AtomicU64,
    pool_reused: AtomicU64,
    pool_idle: AtomicU64,
    keys_loaded: AtomicU64,
    key_reloads: AtomicU64,
    key_reload_errors: AtomicU64,
    shared_limits_unavailable: AtomicU64,
    responses_not_kept: AtomicU64,
    first_event_keepalives: AtomicU64,
    /// Continuations of cut streams, by how they ended
    /// ([`ResumeOutcome::ALL`]).
    stream_resumes: [AtomicU64; ResumeOutcome::ALL.len()],
    ledger_shipped: AtomicU64,
    ledger_ship_errors: AtomicU64,
    ledger_reshipped: AtomicU64,
    ledger_set_aside: AtomicU64,
    ledger_repaired: AtomicU64,
    ledger_backlog_bytes: AtomicU64,
    /// Unix milliseconds of the last response head from the provider.
    last_upstream_contact_ms: AtomicU64,
}

impl Metrics {
    /// A request finished (every request, metered or not).
    pub fn finished(&self, f: Finished<'_>) {
        {
            let mut map = self.per_key.lock().unwrap_or_else(|e| e.into_inner());
            *per_key(&mut map, f.key)
                .requests
                .entry((f.status, f.stream))
                .or_default() += 1;
        }
        self.total.observe(f.total);
        if let Some(t) = f.ttfb {
            self.ttfb.observe(t);
        }
        self.overhead.observe(f.total.saturating_sub(f.provider));
    }

    /// Tokens and cost metered for `key`.
    pub fn metered(&self, key: &str, m: Metered) {
        if m.prompt == 0 && m.completion == 0 && m.cost_nano_usd == 0 {
            return;
        }
        let mut map = self.per_key.lock().unwrap_or_else(|e| e.into_inner());
        let k = per_key(&mut map, key);
        for (slot, v) in k
            .tokens
            .iter_mut()
            .zip([m.prompt, m.completion, m.reasoning, m.cached])
        {
            *slot += v;
        }
        k.cost_nano_usd += m.cost_nano_usd;
    }

    /// A metered request the model `model` (a catalogue id) answered, or
    /// was asked last.
    pub fn model_metered(&self, model: &str, m: Metered) {
        let mut map = self.per_model.lock().unwrap_or_else(|e| e.into_inner());
        if !map.contains_key(model) {
            map.insert(model.to_owned(), PerModel::default());
        }
        let p = map.get_mut(model).expect("inserted");
        p.requests += 1;
        for (slot, v) in p
            .tokens
            .iter_mut()
            .zip([m.prompt, m.completion, m.reasoning, m.cached])
        {
            *slot += v;
        }
        p.cost_nano_usd += m.cost_nano_usd;
    }

    /// A request the model `from` could not answer went to its fallback
    /// `to`.
    pub fn fallback(&self, from: &str, to: &str) {
        let mut map = self.fallbacks.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry((from.to_owned(), to.to_owned())).or_default() += 1;
    }

    /// A request to `model` (a catalogue id) whose assistant turns got
    /// their reasoning from `sources`: counted once per source.
    pub fn reasoning_replayed(&self, model: &str, sources: crate::reasoning::Sources) {
        if sources.is_empty() {
            return;
        }
        let mut map = self.replays.lock().unwrap_or_else(|e| e.into_inner());
        for s in crate::reasoning::ReplaySource::ALL {
            if sources.has(s) {
                *map.entry((model.to_owned(), s.as_str())).or_default() += 1;
            }
        }
    }

    /// A request refused by `key`'s rate limit.
    pub fn rate_limited(&self, key: &str, kind: LimitKind) {
        let mut map = self.per_key.lock().unwrap_or_else(|e| e.into_inner());
        let i = match kind {
            LimitKind::Requests => 0,
            LimitKind::Tokens => 1,
        };
        per_key(&mut map, key).rate_limited[i] += 1;
    }

    /// A request refused because `key` had its in-flight cap open.
    pub fn in_flight_refused(&self, key: &str) {
        let mut map = self.per_key.lock().unwrap_or_else(|e| e.into_inner());
        per_key(&mut map, key).rate_limited[2] += 1;
    }

    /// A request refused by `key`'s budget.
    pub fn budget_refused(&self, key: &str) {
        let mut map = self.per_key.lock().unwrap_or_else(|e| e.into_inner());
        per_key(&mut map, key).budget_refused += 1;
    }

    /// A request of `key` cost `nano` more than its budget reservation.
    pub fn budget_overshoot(&self, key: &str, nano: u64) {
        let mut map = self.per_key.lock().unwrap_or_else(|e| e.into_inner());
        let k = per_key(&mut map, key);
        k.overshoots += 1;
        k.overshoot_nano_usd += nano;
    }

    /// The provider answered a request of `key` without reporting usage.
    pub fn usage_missing(&self, key: &str) {
        let mut map = self.per_key.lock().unwrap_or_else(|e| e.into_inner());
        per_key(&mut map, key).usage_missing += 1;
    }

    /// A request of `key` left its queue after `waited`: admitted
    /// (`served`) or not.
    pub fn queue_left(&self, key: &str, waited: Duration, served: bool) {
        self.queue_wait.observe(waited);
        let mut map = self.per_key.lock().unwrap_or_else(|e| e.into_inner());
        let k = per_key(&mut map, key);
        k.queued += 1;
        if !served {
            k.queue_timeouts += 1;
        }
    }

    /// The provider failed in this way.
    pub fn upstream_error(&self, fault: UpstreamFault) {
        if let Some(i) = UpstreamFault::ALL.iter().position(|f| *f == fault) {
            self.upstream_errors[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Streams open now.
    pub fn streams_open(&self) -> u64 {
        self.streams_open.load(Ordering::Relaxed).max(0) as u64
    }

    /// A stream started (`+1`) or ended (`-1`).
    pub fn stream_open(&self, delta: i64) {
        self.streams_open.fetch_add(delta, Ordering::Relaxed);
    }

    /// A stream ended without `finish_reason`.
    pub fn incomplete_stream(&self) {
        self.incomplete_streams.fetch_add(1, Ordering::Relaxed);
    }

    /// A client left before its response was complete.
    pub fn client_disconnect(&self) {
        self.client_disconnects.fetch_add(1, Ordering::Relaxed);
    }

    /// A response head arrived from the provider at `unix_ms`.
    pub fn upstream_contact(&self, unix_ms: u64) {
        self.last_upstream_contact_ms
            .fetch_max(unix_ms, Ordering::Relaxed);
    }

    /// Unix milliseconds of the last response head from the provider (0:
    /// never).
    pub fn last_upstream_contact_ms(&self) -> u64 {
        self.last_upstream_contact_ms.load(Ordering::Relaxed)
    }

    /// A provider connection was opened (`reused == false`) or taken from
    /// the pool.
    pub fn upstream_connection(&self, reused: bool) {
        let c = if reused {
            &self.pool_reused
        } else {
            &self.pool_opened
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Idle connections now in the pool.
    pub fn pool_idle(&self, n: usize) {
        self.pool_idle.store(n as u64, Ordering::Relaxed);
    }

    /// A ledger append took `d` (and failed when `ok` is false).
    pub fn ledger_write(&self, d: Duration, ok: bool) {
        self.ledger_write.observe(d);
        if !ok {
            self.ledger_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Failed ledger appends so far.
    pub fn ledger_errors(&self) -> u64 {
        self.ledger_errors.load(Ordering::Relaxed)
    }

    /// A stream was committed by the first-event keep-alive, before its
    /// provider's first event.
    pub fn first_event_keepalive(&self) {
        self.first_event_keepalives.fetch_add(1, Ordering::Relaxed);
    }

    /// A cut stream's continuation ended so.
    pub fn stream_resume(&self, outcome: ResumeOutcome) {
        self.stream_resumes[outcome as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// A response the Responses API should have kept was answered but not
    /// kept (the store failed, or it was larger than the store keeps).
    pub fn responses_store_failed(&self) {
        self.responses_not_kept.fetch_add(1, Ordering::Relaxed);
    }

    /// The shared limiter could not be reached for an admission.
    pub fn shared_limits_unavailable(&self) {
        self.shared_limits_unavailable
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Ledger rows shipped to PostgreSQL (`n` more).
    pub fn ledger_shipped(&self, n: u64) {
        self.ledger_shipped.fetch_add(n, Ordering::Relaxed);
    }

    /// A failed attempt to reach or write PostgreSQL.
    pub fn ledger_ship_error(&self) {
        self.ledger_ship_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// A ledger row PostgreSQL refused was set aside (the rows after it
    /// shipped).
    pub fn ledger_set_aside(&self) {
        self.ledger_set_aside.fetch_add(1, Ordering::Relaxed);
    }

    /// A ledger row held what PostgreSQL's `text` cannot store (NUL) and
    /// was stored with U+FFFD in its place.
    pub fn ledger_repaired(&self) {
        self.ledger_repaired.fetch_add(1, Ordering::Relaxed);
    }

    /// Ledger lines to ship to PostgreSQL again (`n` more): a reconnection
    /// found their batches missing (a failover lost them).
    pub fn ledger_reshipped(&self, n: u64) {
        self.ledger_reshipped.fetch_add(n, Ordering::Relaxed);
    }

    /// Bytes of the local ledger not yet shipped.
    pub fn ledger_backlog(&self, bytes: u64) {
        self.ledger_backlog_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Keys now in force (after a load or reload).
    pub fn keys_loaded(&self, n: usize) {
        self.keys_loaded.store(n as u64, Ordering::Relaxed);
    }

    /// A keys-file reload succeeded (`ok`) or was refused.
    pub fn key_reload(&self, ok: bool) {
        let c = if ok {
            &self.key_reloads
        } else {
            &self.key_reload_errors
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

fn per_key<'m>(map: &'m mut BTreeMap<String, PerKey>, key: &str) -> &'m mut PerKey {
    if !map.contains_key(key) {
        map.insert(key.to_owned(), PerKey::default());
    }
    map.get_mut(key).expect("inserted")
}

/// How a cut stream's continuation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResumeOutcome {
    /// A continuation finished the answer.
    Continued,
    /// The answer asked again repeated what the client had, and finished it.
    Restarted,
    /// The answer asked again said something else: the stream ended cut.
    Diverged,
    /// No continuation finished it: the stream ended cut.
    Failed,
    /// The client left during the continuation.
    Abandoned,
}

impl ResumeOutcome {
    /// Every outcome, in the order of their series.
    pub const ALL: [ResumeOutcome; 5] = [
        ResumeOutcome::Continued,
        ResumeOutcome::Restarted,
        ResumeOutcome::Diverged,
        ResumeOutcome::Failed,
        ResumeOutcome::Abandoned,
    ];

    /// Its label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ResumeOutcome::Continued => "continued",
            ResumeOutcome::Restarted => "restarted",
            ResumeOutcome::Diverged => "diverged",
            ResumeOutcome::Failed => "failed",
            ResumeOutcome::Abandoned => "abandoned",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_interpolate_within_a_bucket() {
        let h = Histogram::default();
        assert_eq!(h.quantile_ms(0.5), None);
        // 100 observations in (1 ms, 2.5 ms]: the median is halfway.
        for _ in 0..100 {
            h.observe(Duration::from_micros(1500));
        }
        let p50 = h.quantile_ms(0.5).unwrap();
        assert!((p50 - 1.75).abs() < 1e-9, "{p50}");
        assert!((h.quantile_ms(0.99).unwrap() - 2.485).abs() < 1e-9);
        // Past the last bound: its lower bound.
        h.observe(Duration::from_secs(900));
        assert_eq!(h.quantile_ms(1.0), Some(300_000.0));
    }

    #[test]
    fn renders_exact_values() {
        let m = Metrics::default();
        m.finished(Finished {
            key: "alice",
            status: 200,
            stream: true,
            total: Duration::from_millis(300),
            ttfb: Some(Duration::from_millis(100)),
            provider: Duration::from_millis(298),
        });
        m.finished(Finished {
            key: "",
            status: 401,
            stream: false,
            total: Duration::from_micros(200),
            ttfb: Some(Duration::from_micros(200)),
            provider: Duration::ZERO,
        });
        m.metered(
            "alice",
            Metered {
                prompt: 10,
                completion: 20,
                reasoning: 5,
                cached: 0,
                cost_nano_usd: 313_500,
            },
        );
        m.rate_limited("alice", LimitKind::Tokens);
        m.upstream_error(UpstreamFault::Tls);
        let text = m.render(3);
        for line in [
            "chatgate_requests_total{key=\"alice\",status=\"200\",stream=\"true\"} 1",
            "chatgate_requests_total{key=\"\",status=\"401\",stream=\"false\"} 1",
            "chatgate_request_duration_seconds_bucket{le=\"0.25\"} 1",
            "chatgate_request_duration_seconds_bucket{le=\"0.5\"} 2",
            "chatgate_request_duration_seconds_count 2",
            "chatgate_overhead_seconds_bucket{le=\"0.0025\"} 2",
            "chatgate_tokens_total{key=\"alice\",kind=\"reasoning\"} 5",
            "chatgate_cost_usd_total{key=\"alice\"} 0.000313500",
            "chatgate_rate_limited_total{key=\"alice\",limit=\"tokens\"} 1",
            "chatgate_upstream_errors_total{kind=\"tls\"} 1",
            "chatgate_open_connections 3",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}:\n{text}");
        }
        // Every sample line belongs to a declared family.
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let name = l.split(['{', ' ']).next().unwrap();
            let family = name
                .trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count");
            assert!(
                text.contains(&format!("# TYPE {family} "))
                    || text.contains(&format!("# TYPE {name} ")),
                "{l}"
            );
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
