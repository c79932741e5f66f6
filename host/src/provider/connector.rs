//! Connections to the provider: resolve, connect, TLS, keep-alive pool.

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use chatgate_core::{Endpoint, EndpointSet, Pool, Target, UpstreamFailure};
use rustls::ClientConfig;
use rustls::pki_types::ServerName;

use crate::error::Error;
use crate::runtime::{Runtime, now, to_std};
use crate::tls::client as tls;
use crate::tls::stream::{MaybeTls, TlsStream};

/// A connection to the provider, plain (`http://`) or TLS (`https://`).
pub(crate) type OutboundStream<T> = MaybeTls<T, rustls::ClientConnection>;

/// Opens provider connections and keeps idle ones for reuse.
///
/// Idle connections are closed when they reach the idle timeout even if no
/// request comes to take them: a reaper task (started with the first
/// release) sleeps until the pool's [`Pool::poll_timeout`], closes what has
/// expired, and waits for the next connection when the pool is empty.
pub(crate) struct Connector<R: Runtime> {
    rt: R,
    target: Target,
    tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
    idle: Arc<Idle<OutboundStream<R::Tcp>>>,
    reaper: AtomicBool,
}

/// The pool, shared with the reaper.
struct Idle<C> {
    pool: Mutex<Pool<C>>,
    /// Notified when a connection is returned (and when the connector goes).
    returned: event_listener::Event,
}

impl<C> Idle<C> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pool<C>> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Closes idle connections as they expire, until the connector is dropped.
async fn reap<R: Runtime, C>(rt: R, idle: Weak<Idle<C>>) {
    loop {
        let Some(shared) = idle.upgrade() else { return };
        // Listen before looking, so a release in between is not missed.
        let returned = shared.returned.listen();
        let next = shared.lock().poll_timeout();
        drop(shared);
        match next {
            None => returned.await,
            Some(at) => {
                drop(returned);
                rt.timer(to_std(at)).await;
                let Some(shared) = idle.upgrade() else { return };
                let mut expired = Vec::new();
                // At least `at`: the front connection goes, whatever the
                // timer's rounding, so this loop always makes progress.
                shared.lock().expire(now().max(at), &mut expired);
                // Dropped outside the lock: closing is the sockets' business.
                drop(shared);
                drop(expired);
            }
        }
    }
}

impl<R: Runtime> Drop for Connector<R> {
    fn drop(&mut self) {
        // Wakes a reaper waiting for a connection, so it sees the end.
        self.idle.returned.notify(usize::MAX);
    }
}

impl<R: Runtime> Connector<R> {
    /// A connector for `target`; `extra_ca` is a PEM file of CAs to trust.
    /// It fails only to set up TLS ([`Error::Tls`]).
    pub(crate) fn new(
        rt: R,
        target: Target,
        extra_ca: Option<&str>,
        max_idle: usize,
        idle_timeout: Duration,
    ) -> Result<Self, Error> {
        let tls = if target.tls {
            Some((
                tls::client_config(extra_ca)?,
                tls::server_name(&target.host)?,
            ))
        } else {
            None
        };
        Ok(Connector {
            rt,
            target,
            tls,
            idle: Arc::new(Idle {
                pool: Mutex::new(Pool::new(max_idle, idle_timeout)),
                returned: event_listener::Event::new(),
            }),
            reaper: AtomicBool::new(false),
        })
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, Pool<OutboundStream<R::Tcp>>> {
        self.idle.lock()
    }

    /// An idle pooled connection, if one is fresh enough.
    pub(crate) fn take_idle(&self) -> Option<OutboundStream<R::Tcp>> {
        let mut expired = Vec::new();
        let candidate = self.pool().take(now(), &mut expired);
        drop(expired);
        candidate
    }

    /// A connection: an idle pooled one that still looks alive (unless
    /// `fresh`), or a new one. The flag says whether it was reused.
    pub(crate) async fn connect(
        &self,
        fresh: bool,
    ) -> Result<(OutboundStream<R::Tcp>, bool), UpstreamFailure> {
        if !fresh {
            // No liveness probe: a pooled connection the provider closed is
            // noticed when it answers nothing, and core retries that request
            // once on a new connection (it had received no byte of it).
            let mut expired = Vec::new();
            let candidate = self.pool().take(now(), &mut expired);
            drop(expired);
            if let Some(s) = candidate {
                return Ok((s, true));
            }
        }
        let s = self.open().await?;
        self.pool().note_opened();
        Ok((s, false))
    }

    /// A new connection that is not the pool's (not counted in its
    /// figures, never returned to it): for a probe.
    pub(crate) async fn open_unpooled(&self) -> Result<OutboundStream<R::Tcp>, UpstreamFailure> {
        self.open().await
    }

    async fn open(&self) -> Result<OutboundStream<R::Tcp>, UpstreamFailure> {
        let (host, port) = (self.target.host.clone(), self.target.port);
        let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => self
                .rt
                .unblock(move || {
                    (host.as_str(), port)
                        .to_socket_addrs()
                        .map(Iterator::collect)
                })
                .await
                .map_err(|e| UpstreamFailure::Resolve(format!("{}: {e}", self.target.host)))?,
        };
        let mut last = None;
        let mut tcp = None;
        for addr in addrs {
            match self.rt.connect(addr).await {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last = Some(format!("{addr}: {e}")),
            }
        }
        let tcp = tcp.ok_or_else(|| {
            UpstreamFailure::Connect(
                last.unwrap_or_else(|| format!("{} resolved to no address", self.target.host)),
            )
        })?;
        self.rt.set_nodelay(&tcp);
        match &self.tls {
            None => Ok(OutboundStream::Plain(tcp)),
            Some((config, name)) => TlsStream::connect(tcp, Arc::clone(config), name.clone())
                .await
                .map(|s| OutboundStream::Tls(Box::new(s)))
                .map_err(|e| UpstreamFailure::Tls(e.to_string())),
        }
    }

    /// Returns a connection whose response is complete to the pool.
    pub(crate) fn release(&self, s: OutboundStream<R::Tcp>) {
        let evicted = self.pool().put(s, now());
        drop(evicted);
        if !self.reaper.swap(true, Ordering::Relaxed) {
            self.rt
                .spawn(reap(self.rt.clone(), Arc::downgrade(&self.idle)));
        }
        self.idle.returned.notify(1);
    }

    /// Pooled idle connections, reused and opened so far.
    pub(crate) fn stats(&self) -> (usize, u64, u64) {
        let p = self.pool();
        let (reused, opened) = p.stats();
        (p.idle_len(), reused, opened)
    }
}

/// One [`Connector`] (and so one keep-alive pool) per provider endpoint,
/// made when an endpoint first appears and dropped when a reload removes
/// it (requests still on it keep theirs until they end).
pub(crate) struct Connectors<R: Runtime> {
    rt: R,
    max_idle: usize,
    idle_timeout: Duration,
    /// By endpoint id: a pool has a few endpoints, so a scan beats hashing.
    by_id: Mutex<Vec<(u64, Arc<Connector<R>>)>>,
}

impl<R: Runtime> Connectors<R> {
    /// Connectors for `endpoints`; an endpoint whose TLS cannot be set up
    /// (an unreadable CA file, a host that is no TLS name) is refused.
    pub(crate) fn new(
        rt: R,
        endpoints: &EndpointSet,
        max_idle: usize,
        idle_timeout: Duration,
    ) -> Result<Self, Error> {
        let c = Connectors {
            rt,
            max_idle,
            idle_timeout,
            by_id: Mutex::new(Vec::new()),
        };
        c.prepare(endpoints)?;
        Ok(c)
    }

    fn map(&self) -> std::sync::MutexGuard<'_, Vec<(u64, Arc<Connector<R>>)>> {
        self.by_id.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn find(&self, id: u64) -> Option<Arc<Connector<R>>> {
        self.map()
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, c)| Arc::clone(c))
    }

    /// Makes connectors for the endpoints of `set` that have none, and
    /// drops those of endpoints no longer in it. Nothing changes when one
    /// of them cannot be made.
    pub(crate) fn prepare(&self, set: &EndpointSet) -> Result<(), Error> {
        let mut fresh = Vec::new();
        for e in set.endpoints() {
            if self.find(e.id()).is_some() {
                continue;
            }
            let connector = self
                .make(e)
                .map_err(|err| Error::Tls(format!("provider endpoint '{}': {err}", e.name())))?;
            fresh.push((e.id(), connector));
        }
        let mut map = self.map();
        map.extend(fresh);
        map.retain(|(id, _)| set.endpoints().iter().any(|e| e.id() == *id));
        Ok(())
    }

    /// The connector of `endpoint` (made now if a reload raced ahead).
    pub(crate) fn get(&self, endpoint: &Endpoint) -> Result<Arc<Connector<R>>, UpstreamFailure> {
        if let Some(c) = self.find(endpoint.id()) {
            return Ok(c);
        }
        let c = self
            .make(endpoint)
            .map_err(|e| UpstreamFailure::Tls(e.to_string()))?;
        self.map().push((endpoint.id(), Arc::clone(&c)));
        Ok(c)
    }

    fn make(&self, endpoint: &Endpoint) -> Result<Arc<Connector<R>>, Error> {
        let config = endpoint.config();
        Connector::new(
            self.rt.clone(),
            config.target.clone(),
            config.ca.as_deref(),
            self.max_idle,
            self.idle_timeout,
        )
        .map(Arc::new)
    }

    /// Idle pooled connections over all endpoints.
    pub(crate) fn idle(&self) -> usize {
        self.map().iter().map(|(_, c)| c.stats().0).sum()
    }
}

/// Reads a response head from `s` (after any interim ones): the head, and
/// the bytes read beyond it. For the gateway's own requests (trace
/// exports, probes); the exchange reads provider answers through core.
/// A head that is not HTTP is `InvalidData` (core's `HttpError` inside),
/// a peer that closes first `UnexpectedEof`.
pub(crate) async fn read_response_head<S>(
    s: &mut S,
    limits: &chatgate_core::http::HttpLimits,
) -> io::Result<(chatgate_core::http::ResponseHead, Vec<u8>)>
where
    S: futures_lite::AsyncRead + Unpin,
{
    use chatgate_core::http::{HeadScanner, parse_response_head};
    use futures_lite::AsyncReadExt;
    let invalid = |e| io::Error::new(io::ErrorKind::InvalidData, e);
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let mut scanner = HeadScanner::new();
    loop {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the peer closed the connection before its response head",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(len) = scanner.scan(&buf, limits.max_head).map_err(invalid)? {
            let head = parse_response_head(&buf[..len], limits).map_err(invalid)?;
            if head.is_interim() {
                buf.drain(..len);
                scanner.reset();
                continue;
            }
            let rest = buf.split_off(head.head_len);
            return Ok((head, rest));
        }
    }
}

/// Reads a whole response from `s`: its head, its body (at most
/// `max_body` bytes kept; `None` keeps nothing, for answers whose body
/// does not matter), and whether the connection can carry another
/// request. For the gateway's own requests (trace exports, single
/// sign-on). A body that is not HTTP is `InvalidData`, a peer that closes
/// mid-answer `UnexpectedEof`.
pub(crate) async fn read_response<S>(
    s: &mut S,
    max_body: Option<usize>,
) -> io::Result<(chatgate_core::http::ResponseHead, Vec<u8>, bool)>
where
    S: futures_lite::AsyncRead + Unpin,
{
    use chatgate_core::http::{BodyDecoder, Framing, HttpLimits};
    use futures_lite::AsyncReadExt;
    let limits = HttpLimits::default();
    let mut chunk = [0u8; 4096];
    let (head, mut rest) = read_response_head(s, &limits).await?;
    let mut decoder = BodyDecoder::new(head.framing, limits);
    let (mut body, mut sink) = (Vec::new(), Vec::new());
    loop {
        let used = decoder
            .decode(&rest, &mut sink)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        rest.drain(..used);
        if let Some(max) = max_body {
            if body.len() + sink.len() > max {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("an answer longer than {max} bytes"),
                ));
            }
            body.extend_from_slice(&sink);
        }
        sink.clear();
        if decoder.is_done() {
            break;
        }
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            if head.framing == Framing::UntilClose {
                return Ok((head, body, false));
            }
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the peer closed the connection mid-answer",
            ));
        }
        rest.extend_from_slice(&chunk[..n]);
    }
    let reusable = head.keep_alive && rest.is_empty();
    Ok((head, body, reusable))
}
