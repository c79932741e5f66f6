//! What all connections of one gateway process share: configuration, keys,
//! rate limits, request ids, and the count of open connections.

use crate::auth::KeyTable;
use crate::config::GatewayConfig;
use crate::endpoints::EndpointSet;
use crate::limits::RateLimiter;
use crate::metrics::Metrics;
use crate::quota::QuotaBook;
use crate::reasoning::{ReasoningMemory, ReasoningSeal};
use crate::time::WallClock;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Request ids: `req_` + 12 hex digits of a per-process random prefix + a
/// 12-digit counter, so ids are unique in a process and, with overwhelming
/// probability, across processes and restarts.
#[derive(Debug)]
struct RequestIds {
    prefix: u64,
    counter: AtomicU64,
}

impl RequestIds {
    fn next(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        // `req_` and two 12-digit hex numbers, without `core::fmt`.
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut id = *b"req_000000000000000000000000";
        for (half, v) in [(4, self.prefix), (16, n)] {
            for d in 0..12 {
                id[half + 11 - d] = HEX[((v >> (4 * d)) & 0xf) as usize];
            }
        }
        String::from_utf8(id.to_vec()).unwrap_or_default()
    }
}

/// The id a provider is sent as `X-Request-Id` for the `attempt`th attempt
/// (from 1) of the request `id`: a UUID (strict servers accept nothing
/// else there), derived from the gateway's id so the two stay linked
/// without a table: the 24 hex digits of `req_<24 hex>` in order, the
/// version (4) and variant (`8`–`b`) digits of RFC 9562, four digits that
/// repeat a mix of the id, and the attempt in the last two (so a retry is
/// not mistaken by the provider for the attempt it replaces). Ids that are
/// not the gateway's shape are mixed into the same layout.
pub fn provider_request_id(id: &str, attempt: u32) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digits = id.strip_prefix("req_").unwrap_or(id).as_bytes();
    // FNV-1a over the id: fills what the 24 digits leave free.
    let mix = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    // The 30 free digits: the id's 24, four of the mix, the attempt's two.
    let mut h = [0u8; 30];
    if digits.len() == 24 && digits.iter().all(u8::is_ascii_hexdigit) {
        for (d, c) in h.iter_mut().zip(digits) {
            *d = c.to_ascii_lowercase();
        }
    } else {
        for (i, d) in h[..24].iter_mut().enumerate() {
            *d = HEX[((mix.rotate_left(4 * i as u32 + 1) ^ (mix >> 7)) & 0xf) as usize];
        }
    }
    for (k, d) in h[24..28].iter_mut().enumerate() {
        *d = HEX[((mix >> (4 * (k + 1) + 2)) & 0xf) as usize];
    }
    let attempt = attempt.min(0xff) as usize;
    h[28] = HEX[attempt >> 4];
    h[29] = HEX[attempt & 0xf];
    let mut u = Vec::with_capacity(36);
    u.extend_from_slice(&h[..8]);
    u.push(b'-');
    u.extend_from_slice(&h[8..12]);
    u.extend_from_slice(b"-4");
    u.extend_from_slice(&h[12..15]);
    u.push(b'-');
    u.push(HEX[8 | (mix & 3) as usize]);
    u.extend_from_slice(&h[15..18]);
    u.push(b'-');
    u.extend_from_slice(&h[18..30]);
    // Hex digits and dashes: ASCII.
    String::from_utf8(u).unwrap_or_default()
}

/// State shared by every connection of a gateway process.
pub struct Gateway {
    config: GatewayConfig,
    keys: RwLock<Arc<KeyTable>>,
    limiter: RateLimiter,
    quota: QuotaBook,
    wall: WallClock,
    ids: RequestIds,
    open: AtomicUsize,
    draining: AtomicBool,
    endpoints: RwLock<Arc<EndpointSet>>,
    metrics: Metrics,
    console: crate::console::Console,
    tracer: Option<crate::trace::Tracer>,
    /// The keys that sign and seal reasoning.
    seal: Arc<ReasoningSeal>,
    /// The reasoning served, for the clients that drop it.
    memory: Mutex<ReasoningMemory>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the endpoints: their request prefixes hold the providers' keys.
        f.debug_struct("Gateway")
            .field("config", &self.config)
            .field("keys", &self.keys().len())
            .field("open", &self.open_connections())
            .field("draining", &self.is_draining())
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// A gateway. `wall` converts instants to Unix time; `random` seeds the
    /// request-id prefix (the caller supplies randomness, core has none).
    pub fn new(
        config: GatewayConfig,
        keys: KeyTable,
        wall: WallClock,
        random: u64,
    ) -> Arc<Gateway> {
        let endpoints = EndpointSet::new(config.endpoints.clone(), config.catalog.clone(), None);
        let metrics = Metrics::default();
        metrics.keys_loaded(keys.len());
        // Trace ids from another stream than request ids.
        let tracer = config
            .trace
            .clone()
            .map(|t| crate::trace::Tracer::new(t, random.rotate_left(29) ^ 0x5851_f42d_4c95_7f2d));
        let console = crate::console::Console::named(
            config.console_token.as_ref().map(|t| t.expose()),
            &config.console_token_name,
        )
        .with_sso(config.sso.clone());
        // The deployment's secret; without one (the runtimes always set
        // one), keys derived from the seed.
        let seal = match &config.reasoning.secret {
            Some(s) => ReasoningSeal::new(s.expose().as_bytes()),
            None => ReasoningSeal::new(&random.to_le_bytes()),
        };
        let memory = ReasoningMemory::new(config.reasoning.memory);
        Arc::new(Gateway {
            config,
            keys: RwLock::new(Arc::new(keys)),
            limiter: RateLimiter::new(),
            quota: QuotaBook::new(),
            wall,
            ids: RequestIds {
                prefix: random,
                counter: AtomicU64::new(1),
            },
            open: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
            endpoints: RwLock::new(Arc::new(endpoints)),
            metrics,
            console,
            tracer,
            seal: Arc::new(seal),
            memory: Mutex::new(memory),
        })
    }

    /// The keys that sign thinking blocks and seal reasoning items.
    pub fn reasoning_seal(&self) -> &Arc<ReasoningSeal> {
        &self.seal
    }

    /// The memory of the reasoning served (locked for one use).
    pub fn reasoning_memory(&self) -> std::sync::MutexGuard<'_, ReasoningMemory> {
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The tracer, when tracing is on.
    pub fn tracer(&self) -> Option<&crate::trace::Tracer> {
        self.tracer.as_ref()
    }

    /// The configuration.
    pub fn config(&self) -> &GatewayConfig {
        &self.config
    }

    /// The current keys.
    pub fn keys(&self) -> Arc<KeyTable> {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the keys (a reload); in-flight requests keep the entry they
    /// authenticated with.
    pub fn replace_keys(&self, keys: KeyTable) {
        self.limiter
            .retain(|name| keys.entries().iter().any(|e| e.name == name));
        self.metrics.keys_loaded(keys.len());
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(keys);
    }

    /// The process's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The operator's console.
    pub fn console(&self) -> &crate::console::Console {
        &self.console
    }

    /// Samples the gauges the console charts (the runtime calls this about
    /// once a second while the console is on).
    pub fn sample_console(&self, now: crate::time::Instant) {
        let unix_ms = self.wall.unix_ms(now);
        let streams = u32::try_from(self.metrics.streams_open()).unwrap_or(u32::MAX);
        self.console
            .sample(unix_ms, self.requests_in_flight(unix_ms), streams);
    }

    /// Requests admitted and not yet finished, over every key.
    pub fn requests_in_flight(&self, unix_ms: u64) -> u32 {
        self.quota
            .all(unix_ms)
            .iter()
            .map(|(_, s)| s.in_flight)
            .fold(0, u32::saturating_add)
    }

    /// The Prometheus text exposition of the metrics.
    pub fn render_metrics(&self, now: crate::time::Instant) -> String {
        let mut text = self.metrics.render(self.open_connections());
        self.endpoints().render_metrics(&mut text);
        self.render_quota_metrics(&mut text, self.wall.unix_ms(now));
        self.render_trace_metrics(&mut text);
        self.render_memory_metrics(&mut text);
        text
    }

    /// The reasoning memory's entries and bytes.
    fn render_memory_metrics(&self, out: &mut String) {
        use crate::metrics::header;
        use std::fmt::Write as _;
        let (entries, bytes) = {
            let m = self.reasoning_memory();
            (m.entries(), m.bytes())
        };
        header(
            out,
            "chatgate_reasoning_memory_entries",
            "gauge",
            "Tool calls whose reasoning this instance remembers (for clients that drop it).",
        );
        let _ = writeln!(out, "chatgate_reasoning_memory_entries {entries}");
        header(
            out,
            "chatgate_reasoning_memory_bytes",
            "gauge",
            "Bytes of reasoning this instance remembers.",
        );
        let _ = writeln!(out, "chatgate_reasoning_memory_bytes {bytes}");
    }

    /// The tracer's spans: queued, exported, dropped, waiting (zeros
    /// without tracing).
    fn render_trace_metrics(&self, out: &mut String) {
        use crate::metrics::header;
        use std::fmt::Write as _;
        let t = self.tracer.as_ref();
        let get = |f: fn(&crate::trace::Tracer) -> u64| t.map_or(0, f);
        for (name, kind, help, value) in [
            (
                "chatgate_trace_spans_queued_total",
                "counter",
                "Spans of sampled requests put in the export queue.",
                get(crate::trace::Tracer::queued),
            ),
            (
                "chatgate_trace_spans_exported_total",
                "counter",
                "Spans the OTLP collector accepted.",
                get(crate::trace::Tracer::exported_total),
            ),
            (
                "chatgate_trace_spans_dropped_total",
                "counter",
                "Spans dropped: the export queue was full, or the collector refused them or could not be reached in time.",
                get(crate::trace::Tracer::dropped),
            ),
            (
                "chatgate_trace_spans_waiting",
                "gauge",
                "Spans in the export queue now.",
                get(|t| t.waiting() as u64),
            ),
        ] {
            header(out, name, kind, help);
            let _ = writeln!(out, "{name} {value}");
        }
    }

    /// Each key's requests in flight, budget reservations, and (for keys
    /// with a budget) the budget and what was spent in its period, as this
    /// process sees them.
    fn render_quota_metrics(&self, out: &mut String, unix_ms: u64) {
        use crate::catalog::format_usd;
        use crate::metrics::{escape, header};
        use std::fmt::Write as _;
        let book = self.quota.all(unix_ms);
        let keys = self.keys();
        header(
            out,
            "chatgate_in_flight",
            "gauge",
            "Requests open per key, from admission to the response's last byte (this instance).",
        );
        for (k, s) in &book {
            let _ = writeln!(
                out,
                "chatgate_in_flight{{key=\"{}\"}} {}",
                escape(k),
                s.in_flight
            );
        }
        header(
            out,
            "chatgate_budget_reserved_usd",
            "gauge",
            "What a key's requests in flight reserve against its budget (this instance), in US dollars.",
        );
        for (k, s) in &book {
            let _ = writeln!(
                out,
                "chatgate_budget_reserved_usd{{key=\"{}\"}} {}",
                escape(k),
                format_usd(s.reserved)
            );
        }
        header(
            out,
            "chatgate_budget_usd",
            "gauge",
            "A key's budget for its period, in US dollars (keys with a budget).",
        );
        header(
            out,
            "chatgate_budget_spent_usd",
            "gauge",
            "What a key spent in its budget's current period as this instance knows it, in US dollars (keys with a budget).",
        );
        let mut spent_lines = String::new();
        for e in keys.entries() {
            let Some(b) = e.quota.budget else { continue };
            if e.expires.is_some() {
                continue;
            }
            let spent = book
                .iter()
                .find(|(k, _)| *k == e.name)
                .map_or(0, |(_, s)| s.spent_in(b.period));
            let key = escape(&e.name);
            let _ = writeln!(
                out,
                "chatgate_budget_usd{{key=\"{key}\",period=\"{}\"}} {}",
                b.period,
                format_usd(b.limit_nano)
            );
            let _ = writeln!(
                spent_lines,
                "chatgate_budget_spent_usd{{key=\"{key}\",period=\"{}\"}} {}",
                b.period,
                format_usd(spent)
            );
        }
        out.push_str(&spent_lines);
    }

    /// The shared rate limiter.
    pub fn limiter(&self) -> &RateLimiter {
        &self.limiter
    }

    /// Every key's spend, budget reservations and requests in flight in
    /// this process.
    pub fn quota(&self) -> &QuotaBook {
        &self.quota
    }

    /// The wall clock.
    pub fn wall(&self) -> WallClock {
        self.wall
    }

    /// A fresh request id.
    pub fn next_request_id(&self) -> String {
        self.ids.next()
    }

    /// Open client connections.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Counts a new client connection, unless `max_connections` are open
    /// (then it must be refused): whether it may be served.
    pub(crate) fn connection_opened(&self) -> bool {
        let prev = self.open.fetch_add(1, Ordering::AcqRel);
        if prev >= self.config.max_connections {
            self.open.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// A background run's connection opened: counted as a client's, over
    /// the limit too (it was admitted as a request already).
    pub(crate) fn connection_opened_anyway(&self) {
        self.open.fetch_add(1, Ordering::AcqRel);
    }

    /// A client connection closed.
    pub(crate) fn connection_closed(&self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }

    /// Starts a graceful shutdown: no new connections; idle ones close, busy
    /// ones close after their current response.
    pub fn begin_drain(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Shutting down.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// The provider endpoints in force.
    pub fn endpoints(&self) -> Arc<EndpointSet> {
        self.endpoints
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces the pool (a reload; build `next` with the set in force as
    /// its previous, so unchanged endpoints keep their health): new
    /// requests choose among it, requests in flight keep the endpoint they
    /// are on.
    pub fn replace_endpoints(&self, next: EndpointSet) {
        *self.endpoints.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_prefix_and_counter_in_hex() {
        for (prefix, counter) in [
            (0, 0),
            (0xabc, 1),
            (u64::MAX, u64::MAX - 5),
            (0x1234_5678_9abc_def0, 0x0fed_cba9_8765_4321),
        ] {
            let ids = RequestIds {
                prefix,
                counter: AtomicU64::new(counter),
            };
            assert_eq!(
                ids.next(),
                format!(
                    "req_{:012x}{:012x}",
                    prefix & 0xFFFF_FFFF_FFFF,
                    counter & 0xFFFF_FFFF_FFFF
                )
            );
        }
    }

    #[test]
    fn the_provider_key_does_not_print() {
        let mut t = crate::config::Target::parse("https://h/v1").unwrap();
        t.api_key = Some(crate::config::Secret::new("sk-provider-secret"));
        let g = Gateway::new(
            GatewayConfig::new(t),
            KeyTable::default(),
            WallClock::new(0),
            1,
        );
        assert!(!format!("{g:?}").contains("sk-provider-secret"));
    }

    #[test]
    fn provider_ids_are_uuids_linked_to_the_request_id() {
        let a = provider_request_id("req_000000abcdef000000000001", 1);
        let b = provider_request_id("req_000000abcdef000000000002", 1);
        let retry = provider_request_id("req_000000abcdef000000000001", 2);
        assert_ne!(a, b);
        assert_ne!(a, retry, "each attempt its own id");
        assert_eq!(a[..34], retry[..34], "the same request");
        assert!(a.ends_with("01") && retry.ends_with("02"), "{a} {retry}");
        for u in [&a, &b, &retry, &provider_request_id("anything else", 300)] {
            assert_eq!(u.len(), 36, "{u}");
            let parts: Vec<&str> = u.split('-').collect();
            assert_eq!(
                parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
                [8, 4, 4, 4, 12]
            );
            assert!(
                u.bytes()
                    .all(|c| c == b'-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
            );
            assert_eq!(&u[14..15], "4", "version 4: {u}");
            assert!("89ab".contains(&u[19..20]), "RFC 9562 variant: {u}");
        }
        // The request id's digits, in order, are the UUID's first 24.
        let hex: String = a.chars().filter(|c| *c != '-').collect();
        let without = format!("{}{}{}", &hex[..12], &hex[13..16], &hex[17..]);
        assert!(without.starts_with("000000abcdef000000000001"), "{a}");
        assert_eq!(a, provider_request_id("req_000000abcdef000000000001", 1));
    }

    #[test]
    fn request_ids_are_unique() {
        let g = Gateway::new(
            GatewayConfig::new(crate::config::Target::parse("http://h/v1").unwrap()),
            KeyTable::default(),
            WallClock::new(0),
            0xABCDEF,
        );
        let a = g.next_request_id();
        let b = g.next_request_id();
        assert_ne!(a, b);
        assert!(a.starts_with("req_000000abcdef"));
        assert_eq!(a.len(), 28);
    }
}
