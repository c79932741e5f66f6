//! What all connections of one gateway process share: configuration, keys,
//! rate limits, request ids, and the count of open connections.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::auth::KeyTable;
use crate::catalog::Catalog;
use crate::http::HttpLimits;
use crate::limits::{Limits, RateLimiter};
use crate::metrics::Metrics;
use crate::time::WallClock;

/// A secret string (the provider's API key): never printed by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }

    /// The secret itself, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Where the provider is: `{scheme}://{host}:{port}{base_path}/chat/completions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTarget {
    /// `https`.
    pub tls: bool,
    /// Host name or IP literal (no brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Path prefix including the version, e.g. `/v1` (no trailing slash).
    pub base_path: String,
    /// The provider's API key, sent as `Authorization: Bearer …`.
    pub api_key: Option<Secret>,
}

impl UpstreamTarget {
    /// Parses a base URL such as `https://api.provider.example/v1`.
    pub fn parse(url: &str) -> Result<UpstreamTarget, String> {
        let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(format!(
                "upstream URL '{url}' must start with http:// or https://"
            ));
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(
                "upstream URL must not carry credentials; use CHATGATE_UPSTREAM_API_KEY".into(),
            );
        }
        if path.contains('?') || path.contains('#') {
            return Err(format!(
                "upstream URL '{url}' must not have a query or fragment"
            ));
        }
        let default_port = if tls { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("bad IPv6 address in '{url}'"))?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| format!("bad port in '{url}'"))?,
                None if after.is_empty() => default_port,
                None => return Err(format!("bad authority in '{url}'")),
            };
            (h.to_owned(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (
                    h.to_owned(),
                    p.parse().map_err(|_| format!("bad port in '{url}'"))?,
                ),
                None => (authority.to_owned(), default_port),
            }
        };
        if host.is_empty() {
            return Err(format!("upstream URL '{url}' has no host"));
        }
        Ok(UpstreamTarget {
            tls,
            host,
            port,
            base_path: path.trim_end_matches('/').to_owned(),
            api_key: None,
        })
    }

    /// The `Host` header value.
    pub fn host_header(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == if self.tls { 443 } else { 80 } {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// `scheme://host[:port]/base`, without secrets.
    pub fn display_url(&self) -> String {
        format!(
            "{}://{}{}",
            if self.tls { "https" } else { "http" },
            self.host_header(),
            self.base_path
        )
    }
}

/// Every timeout the gateway applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Idle keep-alive connection, waiting for a request's first byte.
    pub client_idle: Duration,
    /// From a request's first byte to the end of its head (slowloris).
    pub client_header: Duration,
    /// Longest pause while receiving a request body.
    pub client_body: Duration,
    /// Longest time a client may leave sent data unread.
    pub client_send: Duration,
    /// Connecting to the provider (TCP and TLS).
    pub upstream_connect: Duration,
    /// From sending the request to the provider's response head.
    pub upstream_first_byte: Duration,
    /// Longest pause in the provider's response body or stream.
    pub upstream_idle: Duration,
    /// After `finish_reason`, how long the provider may take to end the stream.
    pub stream_tail: Duration,
    /// On shutdown, how long in-flight requests may take to finish.
    pub drain: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            client_idle: Duration::from_secs(75),
            client_header: Duration::from_secs(15),
            client_body: Duration::from_secs(60),
            client_send: Duration::from_secs(60),
            upstream_connect: Duration::from_secs(10),
            upstream_first_byte: Duration::from_secs(600),
            upstream_idle: Duration::from_secs(300),
            stream_tail: Duration::from_secs(30),
            drain: Duration::from_secs(30),
        }
    }
}

/// The gateway's configuration (everything but keys).
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// The provider.
    pub upstream: UpstreamTarget,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// Limits on client requests (head 64 KiB, 64 headers, body 2 MiB).
    pub http: HttpLimits,
    /// Largest SSE event accepted from the provider.
    pub max_sse_event: usize,
    /// Largest non-streamed response accepted from the provider.
    pub max_upstream_body: u64,
    /// Limits of keys that set none.
    pub default_limits: Limits,
    /// Most open client connections; more get 503.
    pub max_connections: usize,
    /// The models.
    pub catalog: Catalog,
    /// Limits shared through a remote store (Redis), if configured.
    pub shared_limits: Option<SharedLimits>,
}

/// Rate limits decided by a store shared by several gateway instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedLimits {
    /// When the store cannot be reached: refuse with 503 (`true`), or fall
    /// back to this process's own limiter, logged and counted (`false`).
    pub fail_closed: bool,
}

impl GatewayConfig {
    /// Defaults around an upstream.
    pub fn new(upstream: UpstreamTarget) -> Self {
        GatewayConfig {
            upstream,
            timeouts: Timeouts::default(),
            http: HttpLimits::default(),
            max_sse_event: 1 << 20,
            max_upstream_body: 64 << 20,
            default_limits: Limits::default(),
            max_connections: 10_000,
            catalog: Catalog::default(),
            shared_limits: None,
        }
    }
}

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

/// State shared by every connection of a gateway process.
pub struct Gateway {
    config: GatewayConfig,
    keys: RwLock<Arc<KeyTable>>,
    limiter: RateLimiter,
    wall: WallClock,
    ids: RequestIds,
    open: AtomicUsize,
    draining: AtomicBool,
    upstream_prefix: Vec<u8>,
    metrics: Metrics,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the upstream prefix: it holds the provider's key.
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
        let upstream_prefix = upstream_prefix(&config.upstream);
        let metrics = Metrics::default();
        metrics.keys_loaded(keys.len());
        Arc::new(Gateway {
            config,
            keys: RwLock::new(Arc::new(keys)),
            limiter: RateLimiter::new(),
            wall,
            ids: RequestIds {
                prefix: random,
                counter: AtomicU64::new(1),
            },
            open: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
            upstream_prefix,
            metrics,
        })
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

    /// The Prometheus text exposition of the metrics.
    pub fn render_metrics(&self) -> String {
        self.metrics.render(self.open_connections())
    }

    /// The shared rate limiter.
    pub fn limiter(&self) -> &RateLimiter {
        &self.limiter
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

    /// The fixed start of every upstream request head (request line, Host,
    /// Authorization, Content-Type, User-Agent).
    pub(crate) fn upstream_prefix(&self) -> &[u8] {
        &self.upstream_prefix
    }
}

fn upstream_prefix(t: &UpstreamTarget) -> Vec<u8> {
    use crate::http::write::header;
    let mut p = Vec::with_capacity(256);
    p.extend_from_slice(b"POST ");
    p.extend_from_slice(t.base_path.as_bytes());
    p.extend_from_slice(b"/chat/completions HTTP/1.1\r\n");
    header(&mut p, "Host", &t.host_header());
    if let Some(key) = &t.api_key {
        header(&mut p, "Authorization", &format!("Bearer {}", key.expose()));
    }
    header(&mut p, "Content-Type", "application/json");
    header(
        &mut p,
        "User-Agent",
        concat!("chatgate/", env!("CARGO_PKG_VERSION")),
    );
    p
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
    fn parses_upstream_urls() {
        let t = UpstreamTarget::parse("https://api.provider.example/v1").unwrap();
        assert_eq!(
            (t.tls, t.host.as_str(), t.port, t.base_path.as_str()),
            (true, "api.provider.example", 443, "/v1")
        );
        assert_eq!(t.host_header(), "api.provider.example");
        let t = UpstreamTarget::parse("http://127.0.0.1:8080/v1/").unwrap();
        assert_eq!((t.tls, t.port, t.base_path.as_str()), (false, 8080, "/v1"));
        assert_eq!(t.host_header(), "127.0.0.1:8080");
        let t = UpstreamTarget::parse("http://[::1]:9/x").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 9));
        assert_eq!(t.host_header(), "[::1]:9");
        for bad in [
            "ftp://x",
            "http://",
            "http://u:p@h/v1",
            "http://h:port/v1",
            "http://h/v1?x",
        ] {
            assert!(UpstreamTarget::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn secrets_do_not_print() {
        let mut t = UpstreamTarget::parse("https://h/v1").unwrap();
        t.api_key = Some(Secret::new("sk-provider-secret"));
        assert!(!format!("{t:?}").contains("sk-provider-secret"));
        assert!(!t.display_url().contains("secret"));
        let g = Gateway::new(
            GatewayConfig::new(t),
            KeyTable::default(),
            WallClock::new(0),
            1,
        );
        assert!(!format!("{g:?}").contains("sk-provider-secret"));
    }

    #[test]
    fn request_ids_are_unique() {
        let g = Gateway::new(
            GatewayConfig::new(UpstreamTarget::parse("http://h/v1").unwrap()),
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
