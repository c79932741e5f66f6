//! The connection loop: one task per client connection, obeying the core's
//! [`chatgate_core::Connection`] and moving bytes between client, provider and ledger.
//!
//! Each turn: carry out the core's events in order, then wait for whichever
//! comes first — a pending write completes, bytes arrive from either side,
//! the provider connection is ready, the core's deadline passes, or the
//! gateway starts draining — and feed it back. The client's read side is
//! polled whenever the core wants it (which is always while a response is in
//! progress), so a client that leaves is noticed at once and the provider
//! request is dropped with it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use chatgate_core::Gateway;
use chatgate_core::{Accept, Connection, Event, UpstreamFailure};
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, future};

use crate::gate::Gate;
use crate::ledger::Ledger;
use crate::runtime::{Alarm, Runtime, SCRATCH_LEN, now, with_scratch};
use crate::upstream::{Connector, UpstreamStream};

/// How long a closing connection is drained of unread client bytes, so the
/// last response is not destroyed by a reset.
const LINGER: Duration = Duration::from_secs(2);
/// Most bytes drained while lingering.
const LINGER_BYTES: usize = 256 * 1024;

/// What every connection task shares.
pub struct Shared<R: Runtime> {
    /// The runtime.
    pub rt: R,
    /// The gateway state.
    pub gateway: Arc<Gateway>,
    /// Provider connections.
    pub connector: Connector<R>,
    /// The ledger file.
    pub ledger: Ledger,
    /// The shared limiter (Redis), when configured.
    pub shared_limits: Option<crate::redis::SharedLimiter<R>>,
    /// Notified when draining starts.
    pub draining: event_listener::Event,
}

enum Wake {
    Drain,
    Admitted(chatgate_core::SharedAdmission),
    Connected(Result<bool, UpstreamFailure>),
    UpWritten(io::Result<usize>),
    UpFlushed(io::Result<()>),
    ClientWritten(io::Result<usize>),
    UpRead(io::Result<usize>),
    ClientRead(io::Result<usize>),
    Timeout,
}

type AdmitFuture<'a> = Pin<Box<dyn Future<Output = chatgate_core::SharedAdmission> + Send + 'a>>;

type ConnectFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<(UpstreamStream<T>, bool), UpstreamFailure>> + Send + 'a>>;

/// Serves one client connection until it closes.
pub async fn serve_connection<R: Runtime>(shared: Arc<Shared<R>>, mut client: R::Tcp) {
    let rt = &shared.rt;
    rt.set_nodelay(&client);
    let mut conn = match Connection::accept(&shared.gateway, now()) {
        Accept::Serve(c) => c,
        Accept::Refuse(bytes) => {
            let write = async { client.write_all(&bytes).await.is_ok() };
            let _ = future::or(write, async {
                rt.timer(std::time::Instant::now() + Duration::from_secs(1))
                    .await;
                false
            })
            .await;
            linger_close(rt, client).await;
            return;
        }
    };
    let mut drain = shared.draining.listen();
    let mut drain_seen = shared.gateway.is_draining();
    if drain_seen {
        conn.handle_shutdown(now());
    }
    let mut upstream: Option<UpstreamStream<R::Tcp>> = None;
    let mut connecting: Option<ConnectFuture<'_, R::Tcp>> = None;
    let mut admitting: Option<AdmitFuture<'_>> = None;
    let mut g_admit = Gate::default();
    let mut up_dirty = false;
    let mut alarm = Alarm::<R>::default();
    // One gate per source: each is polled again only when it woke or changed.
    let (mut g_drain, mut g_connect, mut g_timer) =
        (Gate::default(), Gate::default(), Gate::default());
    let (mut g_up_read, mut g_up_write) = (Gate::default(), Gate::default());
    let (mut g_client_read, mut g_client_write) = (Gate::default(), Gate::default());
    // A read shorter than the buffer emptied the socket: the next read
    // waits for readiness first (see `Runtime::poll_readable`).
    let (mut client_drained, mut up_drained) = (false, false);

    loop {
        while let Some(event) = conn.poll_event() {
            match event {
                Event::ConnectUpstream { fresh } => {
                    connecting = Some(Box::pin(shared.connector.connect(fresh)));
                    g_connect.reset();
                }
                Event::ReleaseUpstream => {
                    if let Some(s) = upstream.take() {
                        shared.connector.release(s);
                    }
                    up_dirty = false;
                }
                Event::CloseUpstream => {
                    upstream = None;
                    connecting = None;
                    up_dirty = false;
                }
                Event::Ledger(record) => {
                    let started = std::time::Instant::now();
                    let ok = shared.ledger.append(&record.to_line());
                    shared.gateway.metrics().ledger_write(started.elapsed(), ok);
                    crate::logging::access(&record);
                    conn.handle_ledger_written(now(), ok);
                }
                Event::Admit(ask) => {
                    let shared = Arc::clone(&shared);
                    admitting = Some(Box::pin(async move {
                        match &shared.shared_limits {
                            Some(l) => l.admit(&ask.key, ask.limits, ask.tokens).await,
                            None => Err("no shared limiter configured".into()),
                        }
                    }));
                    g_admit.reset();
                }
                Event::Settle(settlement) => {
                    let shared = Arc::clone(&shared);
                    rt.spawn(async move {
                        let outcome = match &shared.shared_limits {
                            Some(l) => l.settle(&settlement).await,
                            None => Err("no shared limiter configured".into()),
                        };
                        settlement.finish(&shared.gateway, now(), outcome);
                    });
                }
                Event::CloseClient => {
                    drop(conn);
                    linger_close(rt, client).await;
                    return;
                }
            }
        }

        if alarm.set(rt, conn.poll_timeout()) {
            g_timer.reset();
        }
        let want_client = conn.wants_client_read();
        let want_up = conn.wants_upstream_read();

        let wake = future::poll_fn(|cx| {
            if !drain_seen
                && g_drain
                    .poll(cx, |cx| Pin::new(&mut drain).poll(cx))
                    .is_ready()
            {
                return Poll::Ready(Wake::Drain);
            }
            if let Some(a) = admitting.as_mut() {
                if let Poll::Ready(v) = g_admit.poll(cx, |cx| a.as_mut().poll(cx)) {
                    return Poll::Ready(Wake::Admitted(v));
                }
            }
            if let Some(c) = connecting.as_mut() {
                if let Poll::Ready(r) = g_connect.poll(cx, |cx| c.as_mut().poll(cx)) {
                    return Poll::Ready(Wake::Connected(r.map(|(s, reused)| {
                        upstream = Some(s);
                        reused
                    })));
                }
            }
            if let Some(up) = upstream.as_mut() {
                if let Some(tx) = conn.poll_upstream_transmit() {
                    if let Poll::Ready(r) =
                        g_up_write.poll(cx, |cx| Pin::new(&mut *up).poll_write(cx, tx))
                    {
                        return Poll::Ready(Wake::UpWritten(r));
                    }
                } else if up_dirty {
                    if let Poll::Ready(r) =
                        g_up_write.poll(cx, |cx| Pin::new(&mut *up).poll_flush(cx))
                    {
                        return Poll::Ready(Wake::UpFlushed(r));
                    }
                }
            }
            if let Some(tx) = conn.poll_client_transmit() {
                if let Poll::Ready(r) =
                    g_client_write.poll(cx, |cx| Pin::new(&mut client).poll_write(cx, tx))
                {
                    return Poll::Ready(Wake::ClientWritten(r));
                }
            }
            if want_up {
                if let Some(up) = upstream.as_mut() {
                    if let Poll::Ready(r) = with_scratch(|buf| {
                        g_up_read.poll(cx, |cx| {
                            if up_drained {
                                if let Some(tcp) = up.plain() {
                                    std::task::ready!(rt.poll_readable(tcp, cx))?;
                                }
                                up_drained = false;
                            }
                            Pin::new(up).poll_read(cx, buf)
                        })
                    }) {
                        return Poll::Ready(Wake::UpRead(r));
                    }
                }
            }
            if want_client {
                if let Poll::Ready(r) = with_scratch(|buf| {
                    g_client_read.poll(cx, |cx| {
                        if client_drained {
                            std::task::ready!(rt.poll_readable(&client, cx))?;
                            client_drained = false;
                        }
                        Pin::new(&mut client).poll_read(cx, buf)
                    })
                }) {
                    return Poll::Ready(Wake::ClientRead(r));
                }
            }
            let fired = g_timer.poll(cx, |cx| {
                if alarm.poll(cx) {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            });
            if fired.is_ready() {
                return Poll::Ready(Wake::Timeout);
            }
            Poll::Pending
        })
        .await;

        let t = now();
        match wake {
            Wake::Drain => {
                drain_seen = true;
                conn.handle_shutdown(t);
            }
            Wake::Admitted(v) => {
                admitting = None;
                conn.handle_admission(t, v);
            }
            Wake::Connected(Ok(reused)) => {
                connecting = None;
                // Fresh or pooled, nothing comes before the request is sent
                // (a pooled connection's last answer was read to its end).
                up_drained = true;
                g_up_read.reset();
                g_up_write.reset();
                conn.handle_upstream_connected(t, reused);
            }
            Wake::Connected(Err(failure)) => {
                connecting = None;
                conn.handle_upstream_failure(t, failure);
            }
            Wake::UpWritten(Ok(n)) if n > 0 => {
                up_dirty = true;
                conn.handle_upstream_written(t, n);
            }
            Wake::UpFlushed(Ok(())) => up_dirty = false,
            Wake::UpWritten(r) => {
                upstream = None;
                conn.handle_upstream_failure(t, broken(r.err()));
            }
            Wake::UpFlushed(Err(e)) => {
                upstream = None;
                conn.handle_upstream_failure(t, broken(Some(e)));
            }
            Wake::ClientWritten(Ok(n)) if n > 0 => conn.handle_client_written(t, n),
            Wake::ClientWritten(_) => conn.handle_client_eof(t),
            Wake::UpRead(Ok(0)) => {
                upstream = None;
                conn.handle_upstream_eof(t);
            }
            // The bytes are still in this thread's scratch buffer: nothing
            // has yielded since the read.
            Wake::UpRead(Ok(n)) => {
                up_drained = n < SCRATCH_LEN;
                with_scratch(|buf| conn.handle_upstream_data(t, &buf[..n]));
            }
            Wake::UpRead(Err(e)) => {
                upstream = None;
                conn.handle_upstream_failure(t, broken(Some(e)));
            }
            Wake::ClientRead(Ok(0)) | Wake::ClientRead(Err(_)) => conn.handle_client_eof(t),
            Wake::ClientRead(Ok(n)) => {
                client_drained = n < SCRATCH_LEN;
                with_scratch(|buf| conn.handle_client_data(t, &buf[..n]));
            }
            Wake::Timeout => conn.handle_timeout(t),
        }
    }
}

fn broken(e: Option<io::Error>) -> UpstreamFailure {
    UpstreamFailure::Broken(e.map_or_else(
        || "the connection closed while writing".into(),
        |e| e.to_string(),
    ))
}

/// Half-closes (the peer sees the end at once), then reads and drops what
/// the client still sends for a moment, so a client that had more bytes in
/// flight sees the response instead of a reset.
pub async fn linger_close<R: Runtime>(rt: &R, mut stream: R::Tcp) {
    let drain = async {
        let _ = stream.flush().await;
        rt.shutdown_write(&stream);
        let mut buf = [0u8; 4096];
        let mut total = 0;
        while total < LINGER_BYTES {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    future::or(drain, async {
        rt.timer(std::time::Instant::now() + LINGER).await;
    })
    .await;
}
