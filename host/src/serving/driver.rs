//! The connection loop: one task per client connection, obeying the core's
//! [`chatgate_core::Connection`] and moving bytes between client, provider and ledger.
//!
//! Each turn has four named steps ([`Task`]): carry out the core's events
//! in order, arm the alarm for its next deadline, wait for whichever comes
//! first — a pending write completes, bytes arrive from either side, the
//! provider connection is ready, the deadline passes, or the gateway starts
//! draining (shutting down) — and feed it back. The client's read side is
//! polled whenever the core wants it (which is always while a response is in
//! progress), so a client that leaves is noticed at once and the provider
//! request is dropped with it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use chatgate_core::Gateway;
use chatgate_core::Instant;
use chatgate_core::{Accept, Connection, Event, UpstreamFailure};
use futures_lite::{AsyncRead, AsyncWrite, AsyncWriteExt, future};

use crate::provider::connector::{Connector, Connectors, OutboundStream};
use crate::runtime::wakeup::Wakeup;
use crate::runtime::{Alarm, Runtime, now, with_scratch};
use crate::stores::ledger::Ledger;
use crate::tls::listener::InboundStream;
use crate::tls::stream::MaybeTls;

/// How long a closing connection keeps reading (and dropping) what the
/// client still sends, so the last response is not destroyed by a reset.
const LINGER: Duration = Duration::from_secs(2);
/// Most bytes read and dropped while lingering.
const LINGER_BYTES: usize = 256 * 1024;

/// What every connection task shares.
pub(crate) struct Shared<R: Runtime> {
    /// The runtime.
    pub rt: R,
    /// The gateway state.
    pub gateway: Arc<Gateway>,
    /// Provider connections, a pool per endpoint.
    pub connectors: Connectors<R>,
    /// The ledger file.
    pub ledger: Ledger,
    /// The shared limiter (Redis), when configured.
    pub shared_limits: Option<Arc<crate::stores::redis::SharedLimiter<R>>>,
    /// Where the keys come from and changes to them are recorded (none in
    /// the demo, whose keys live in memory).
    pub keys: Option<crate::reload::keys::KeysSource>,
    /// The shared ledger in PostgreSQL, when configured: the console's
    /// figures of every instance come from it.
    pub ledger_postgres: Option<String>,
    /// Notified when draining starts.
    pub draining: event_listener::Event,
    /// TLS on the public listener, when configured.
    pub tls: Option<Arc<crate::tls::listener::ListenerTls>>,
    /// TLS on the admin listener, when configured.
    pub admin_tls: Option<Arc<crate::tls::listener::ListenerTls>>,
    /// The Responses API's store, when it keeps responses.
    pub responses: Option<Arc<crate::stores::responses::ResponsesStore>>,
    /// The background runs of this process.
    pub runs: crate::serving::runs::Runs,
}

/// What woke a connection's task.
enum Wake {
    Drain,
    Admitted(StoreAnswer),
    Connected(Result<bool, UpstreamFailure>),
    UpWritten(io::Result<usize>),
    UpFlushed(io::Result<()>),
    ClientWritten(io::Result<usize>),
    UpRead(io::Result<usize>),
    ClientRead(io::Result<usize>),
    Timeout,
}

/// What the shared store answered a connection that waits for it.
enum StoreAnswer {
    Admission(chatgate_core::SharedAdmission),
    Recall(Result<Vec<Option<Vec<u8>>>, chatgate_core::StoreError>),
    Responses(Result<chatgate_core::StoreReply, chatgate_core::StoreError>),
    Run(chatgate_core::RunEvents),
    Cancelled,
}

/// The shared store's answer a connection waits for: an admission, or the
/// reasoning memory's values (never both at once).
type AdmitFuture<'a> = Pin<Box<dyn Future<Output = StoreAnswer> + Send + 'a>>;

type ConnectFuture<'a, R> = Pin<
    Box<
        dyn Future<
                Output = Result<
                    (OutboundStream<<R as Runtime>::Tcp>, bool, Arc<Connector<R>>),
                    UpstreamFailure,
                >,
            > + Send
            + 'a,
    >,
>;

/// Serves one client connection until it closes.
pub(crate) async fn serve_connection<R: Runtime>(shared: Arc<Shared<R>>, tcp: R::Tcp) {
    let rt = &shared.rt;
    rt.set_nodelay(&tcp);
    // Counted from here: a handshake holds a connection's place.
    let accepted = Connection::accept(&shared.gateway, now());
    let tls = shared.tls.as_deref();
    let conn = match accepted {
        Accept::Serve(c) => c,
        Accept::Refuse(bytes) => {
            // A second for the handshake and the answer together.
            let deadline = std::time::Instant::now() + Duration::from_secs(1);
            if let Some(client) = open_client(&shared, tcp, tls, deadline).await {
                refuse(rt, client, &bytes, deadline).await;
            }
            return;
        }
    };
    // The handshake within the time a client has to send its head.
    let header = shared.gateway.config().timeouts.client_header;
    let deadline = std::time::Instant::now() + header;
    let Some(client) = open_client(&shared, tcp, tls, deadline).await else {
        return;
    };
    let mut task = Task::new(&shared, conn, client);
    while task.carry_out_events() {
        task.arm_alarm();
        let wake = task.wait().await;
        task.feed(wake);
    }
    let Task { conn, client, .. } = task;
    drop(conn);
    linger_close(rt, client).await;
}

/// Serves a background run's connection, its client the recorder on the
/// other end of `tcp`, until the run ends.
pub(crate) async fn serve_run<R: Runtime>(
    shared: &Arc<Shared<R>>,
    conn: Box<Connection>,
    tcp: R::Tcp,
) {
    shared.rt.set_nodelay(&tcp);
    let mut task = Task::new(shared, conn, MaybeTls::Plain(tcp));
    while task.carry_out_events() {
        task.arm_alarm();
        let wake = task.wait().await;
        task.feed(wake);
    }
}

/// The client's stream: the TCP connection as it is on a plain listener;
/// on a TLS listener, TLS over it once the handshake is done (by
/// `deadline`). Plain HTTP to a TLS listener is answered in plain HTTP,
/// saying to use `https://`; a failed handshake closes the connection.
pub(crate) async fn open_client<R: Runtime>(
    shared: &Shared<R>,
    tcp: R::Tcp,
    tls: Option<&crate::tls::listener::ListenerTls>,
    deadline: std::time::Instant,
) -> Option<InboundStream<R::Tcp>> {
    let Some(tls) = tls else {
        return Some(MaybeTls::Plain(tcp));
    };
    // Boxed: the handshake's state (its first read's buffer) would
    // otherwise be part of every connection's task, TLS or not.
    Box::pin(open_tls(shared, tcp, tls, deadline)).await
}

async fn open_tls<R: Runtime>(
    shared: &Shared<R>,
    tcp: R::Tcp,
    tls: &crate::tls::listener::ListenerTls,
    deadline: std::time::Instant,
) -> Option<InboundStream<R::Tcp>> {
    use crate::tls::listener::{Accepted, accept};
    let rt = &shared.rt;
    let accepted = future::or(async { Some(accept(tcp, tls).await) }, async {
        rt.timer(deadline).await;
        None
    })
    .await;
    match accepted? {
        Accepted::Tls(client) => Some(client),
        Accepted::PlainHttp(tcp) => {
            let answer = Connection::plain_http_on_tls(&shared.gateway, now());
            let client = MaybeTls::Plain(tcp);
            refuse(
                rt,
                client,
                &answer,
                std::time::Instant::now() + Duration::from_secs(1),
            )
            .await;
            None
        }
        Accepted::Failed => None,
    }
}

/// Writes a refusal (until `deadline`) and closes.
async fn refuse<R: Runtime>(
    rt: &R,
    mut client: InboundStream<R::Tcp>,
    bytes: &[u8],
    deadline: std::time::Instant,
) {
    let write = async { client.write_all(bytes).await.is_ok() };
    let _ = future::or(write, async {
        rt.timer(deadline).await;
        false
    })
    .await;
    linger_close(rt, client).await;
}

/// One connection's task: the core's state machine, the sockets and
/// futures it asked for, and one [`Wakeup`] per source of wake-ups (each is
/// polled again only when it woke or changed).
struct Task<'s, R: Runtime> {
    shared: &'s Arc<Shared<R>>,
    conn: Box<Connection>,
    client: InboundStream<R::Tcp>,
    upstream: Option<OutboundStream<R::Tcp>>,
    /// The endpoint connector `upstream` came from (it goes back there).
    upstream_from: Option<Arc<Connector<R>>>,
    connecting: Option<ConnectFuture<'s, R>>,
    admitting: Option<AdmitFuture<'s>>,
    /// Bytes written to the provider and not flushed yet.
    up_dirty: bool,
    /// The time of the last clock reading (see [`Task::wait`]).
    clock: Instant,
    alarm: Alarm<R>,
    drain: event_listener::EventListener,
    drain_seen: bool,
    g_drain: Wakeup,
    g_admit: Wakeup,
    g_connect: Wakeup,
    g_timer: Wakeup,
    g_up_read: Wakeup,
    g_up_write: Wakeup,
    g_client_read: Wakeup,
    g_client_write: Wakeup,
}

impl<'s, R: Runtime> Task<'s, R> {
    fn new(
        shared: &'s Arc<Shared<R>>,
        mut conn: Box<Connection>,
        client: InboundStream<R::Tcp>,
    ) -> Self {
        let drain = shared.draining.listen();
        let drain_seen = shared.gateway.is_draining();
        if drain_seen {
            conn.handle_shutdown(now());
        }
        Task {
            shared,
            conn,
            client,
            upstream: None,
            upstream_from: None,
            connecting: None,
            admitting: None,
            up_dirty: false,
            clock: now(),
            alarm: Alarm::default(),
            drain,
            drain_seen,
            g_drain: Wakeup::default(),
            g_admit: Wakeup::default(),
            g_connect: Wakeup::default(),
            g_timer: Wakeup::default(),
            g_up_read: Wakeup::default(),
            g_up_write: Wakeup::default(),
            g_client_read: Wakeup::default(),
            g_client_write: Wakeup::default(),
        }
    }

    /// Step 1: does what the core asked, in order. False once it asked to
    /// close the client connection.
    fn carry_out_events(&mut self) -> bool {
        let shared = self.shared;
        while let Some(event) = self.conn.poll_event() {
            match event {
                Event::ConnectUpstream { endpoint, fresh } => {
                    let connector = match shared.connectors.get(&endpoint) {
                        Ok(c) => c,
                        Err(failure) => {
                            self.conn.handle_upstream_failure(self.clock, failure);
                            continue;
                        }
                    };
                    // The usual case, a pooled connection, needs no future.
                    if let Some(s) = (!fresh).then(|| connector.take_idle()).flatten() {
                        self.connected(s, connector, true);
                        continue;
                    }
                    self.connecting = Some(Box::pin(async move {
                        let (s, reused) = connector.connect(true).await?;
                        Ok((s, reused, connector))
                    }));
                    self.g_connect.reset();
                }
                Event::ReleaseUpstream => {
                    if let (Some(s), Some(c)) = (self.upstream.take(), self.upstream_from.take()) {
                        c.release(s);
                    }
                    self.up_dirty = false;
                }
                Event::CloseUpstream => {
                    self.upstream = None;
                    self.upstream_from = None;
                    self.connecting = None;
                    self.up_dirty = false;
                }
                Event::Ledger(record) => {
                    let line = record.to_line();
                    let started = now();
                    let ok = shared.ledger.append(&line);
                    // The time after the write is the core's "now" too.
                    self.clock = now();
                    let took = self.clock.saturating_duration_since(started);
                    shared.gateway.metrics().ledger_write(took, ok);
                    crate::telemetry::logging::access(&record);
                    self.conn.handle_ledger_written(self.clock, ok);
                }
                Event::Admit(ask) => {
                    let shared = Arc::clone(shared);
                    self.admitting = Some(Box::pin(async move {
                        StoreAnswer::Admission(match &shared.shared_limits {
                            Some(l) => l.admit(&ask).await,
                            None => chatgate_core::SharedAdmission::Unavailable(
                                chatgate_core::StoreError::NotConfigured,
                            ),
                        })
                    }));
                    self.g_admit.reset();
                }
                Event::Recall(recall) => {
                    let shared = Arc::clone(shared);
                    self.admitting = Some(Box::pin(async move {
                        StoreAnswer::Recall(match &shared.shared_limits {
                            Some(l) => l.recall(&recall.keys).await,
                            None => Err(chatgate_core::StoreError::NotConfigured),
                        })
                    }));
                    self.g_admit.reset();
                }
                Event::Responses(ask) => {
                    let shared = Arc::clone(shared);
                    // A write asked while another is pending (a run
                    // cancelled as it was being kept in progress) goes
                    // after it, never beside it: the last written wins.
                    let before = self.admitting.take();
                    self.admitting = Some(Box::pin(async move {
                        if let Some(before) = before {
                            before.await;
                        }
                        StoreAnswer::Responses(match shared.responses.clone() {
                            Some(store) => store.answer(&shared.rt, &shared.gateway, *ask).await,
                            None => Err(chatgate_core::StoreError::NotConfigured),
                        })
                    }));
                    self.g_admit.reset();
                }
                Event::Background(run) => crate::serving::runs::Runs::start(shared, run),
                Event::Follow(follow) => {
                    let shared = Arc::clone(shared);
                    self.admitting = Some(Box::pin(async move {
                        StoreAnswer::Run(shared.runs.next(&follow).await)
                    }));
                    self.g_admit.reset();
                }
                Event::Cancel(follow) => {
                    let shared = Arc::clone(shared);
                    self.admitting = Some(Box::pin(async move {
                        shared.runs.cancel(&follow).await;
                        StoreAnswer::Cancelled
                    }));
                    self.g_admit.reset();
                }
                Event::Remember(remember) => {
                    let shared = Arc::clone(shared);
                    shared.rt.clone().spawn(async move {
                        if let Some(l) = &shared.shared_limits
                            && let Err(e) = l.remember(&remember).await {
                                tracing::warn!(error = %e, "the shared reasoning memory could not be written");
                            }
                    });
                }
                Event::Settle(settlement) => {
                    let shared = Arc::clone(shared);
                    shared.rt.clone().spawn(async move {
                        let outcome = match &shared.shared_limits {
                            Some(l) => l.settle(&settlement).await,
                            None => Err(chatgate_core::StoreError::NotConfigured),
                        };
                        settlement.finish(&shared.gateway, now(), outcome);
                    });
                }
                Event::CloseClient => return false,
            }
        }
        true
    }

    /// A provider connection is ready: the core hears it now.
    fn connected(&mut self, s: OutboundStream<R::Tcp>, connector: Arc<Connector<R>>, reused: bool) {
        self.upstream = Some(s);
        self.upstream_from = Some(connector);
        self.ready_upstream();
        self.conn.handle_upstream_connected(self.clock, reused);
    }

    /// Fresh or pooled, nothing comes on a provider connection before the
    /// request is sent (a pooled one's last answer was read to its end).
    fn ready_upstream(&mut self) {
        self.g_up_read.reset();
        self.g_up_write.reset();
    }

    /// Step 2: the timer follows the core's next deadline.
    fn arm_alarm(&mut self) {
        if self.alarm.set(&self.shared.rt, self.conn.poll_timeout()) {
            self.g_timer.reset();
        }
    }

    /// Step 3: waits for the first of the sources to be ready. The clock
    /// is read again only if the task had to wait: a source ready at once
    /// is seen at the time of the last reading, a few microseconds of this
    /// task's own work ago (nginx updates its time once per turn of its
    /// event loop the same way). Reading the clock is not free: in a
    /// virtual machine it is tens of nanoseconds, and a request has a
    /// dozen wake-ups.
    async fn wait(&mut self) -> Wake {
        let want_client = self.conn.wants_client_read();
        let want_up = self.conn.wants_upstream_read();
        let mut waited = false;
        let wake = future::poll_fn(|cx| {
            let p = self.poll_wake(cx, want_client, want_up);
            waited |= p.is_pending();
            p
        })
        .await;
        // A timer is always judged by a fresh reading: one that expired
        // during this task's own work is ready at once, and a stale time
        // before its deadline would re-arm it for the same instant, again
        // and again.
        if waited || matches!(wake, Wake::Timeout) {
            self.clock = now();
        }
        wake
    }

    /// Polls each source whose wakeup lets it through, in a fixed order:
    /// drain, admission, connect, writes, reads, the timer.
    fn poll_wake(&mut self, cx: &mut Context<'_>, want_client: bool, want_up: bool) -> Poll<Wake> {
        if !self.drain_seen
            && self
                .g_drain
                .poll(cx, |cx| Pin::new(&mut self.drain).poll(cx))
                .is_ready()
        {
            return Poll::Ready(Wake::Drain);
        }
        if let Some(a) = self.admitting.as_mut()
            && let Poll::Ready(v) = self.g_admit.poll(cx, |cx| a.as_mut().poll(cx))
        {
            return Poll::Ready(Wake::Admitted(v));
        }
        if let Some(c) = self.connecting.as_mut()
            && let Poll::Ready(r) = self.g_connect.poll(cx, |cx| c.as_mut().poll(cx))
        {
            let (upstream, from) = (&mut self.upstream, &mut self.upstream_from);
            return Poll::Ready(Wake::Connected(r.map(|(s, reused, connector)| {
                *upstream = Some(s);
                *from = Some(connector);
                reused
            })));
        }
        if let Some(up) = self.upstream.as_mut() {
            if let Some(tx) = self.conn.poll_upstream_transmit() {
                if let Poll::Ready(r) = self
                    .g_up_write
                    .poll(cx, |cx| Pin::new(&mut *up).poll_write(cx, tx))
                {
                    return Poll::Ready(Wake::UpWritten(r));
                }
            } else if self.up_dirty
                && let Poll::Ready(r) = self
                    .g_up_write
                    .poll(cx, |cx| Pin::new(&mut *up).poll_flush(cx))
            {
                return Poll::Ready(Wake::UpFlushed(r));
            }
        }
        if let Some(tx) = self.conn.poll_client_transmit() {
            let client = &mut self.client;
            if let Poll::Ready(r) = self
                .g_client_write
                .poll(cx, |cx| Pin::new(client).poll_write(cx, tx))
            {
                return Poll::Ready(Wake::ClientWritten(r));
            }
        }
        if want_up
            && let Some(up) = self.upstream.as_mut()
            && let Poll::Ready(r) = with_scratch(|buf| {
                self.g_up_read
                    .poll(cx, |cx| Pin::new(up).poll_read(cx, buf))
            })
        {
            return Poll::Ready(Wake::UpRead(r));
        }
        let client = &mut self.client;
        if want_client
            && let Poll::Ready(r) = with_scratch(|buf| {
                self.g_client_read
                    .poll(cx, |cx| Pin::new(client).poll_read(cx, buf))
            })
        {
            return Poll::Ready(Wake::ClientRead(r));
        }
        let alarm = &mut self.alarm;
        let fired = self.g_timer.poll(cx, |cx| {
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
    }

    /// Step 4: feeds what happened to the core.
    fn feed(&mut self, wake: Wake) {
        let t = self.clock;
        let conn = &mut self.conn;
        match wake {
            Wake::Drain => {
                self.drain_seen = true;
                conn.handle_shutdown(t);
            }
            Wake::Admitted(StoreAnswer::Admission(v)) => {
                self.admitting = None;
                conn.handle_admission(t, v);
            }
            Wake::Admitted(StoreAnswer::Recall(found)) => {
                self.admitting = None;
                conn.handle_recall(t, found);
            }
            Wake::Admitted(StoreAnswer::Responses(reply)) => {
                self.admitting = None;
                conn.handle_responses(t, reply);
            }
            Wake::Admitted(StoreAnswer::Run(events)) => {
                self.admitting = None;
                conn.handle_run_events(t, events);
            }
            Wake::Admitted(StoreAnswer::Cancelled) => {
                self.admitting = None;
                conn.handle_cancelled(t);
            }
            Wake::Connected(Ok(reused)) => {
                self.connecting = None;
                self.ready_upstream();
                self.conn.handle_upstream_connected(t, reused);
            }
            Wake::Connected(Err(failure)) => {
                self.connecting = None;
                conn.handle_upstream_failure(t, failure);
            }
            Wake::UpWritten(Ok(n)) if n > 0 => {
                self.up_dirty = true;
                conn.handle_upstream_written(t, n);
            }
            Wake::UpFlushed(Ok(())) => self.up_dirty = false,
            Wake::UpWritten(r) => {
                self.upstream = None;
                conn.handle_upstream_failure(t, broken(r.err()));
            }
            Wake::UpFlushed(Err(e)) => {
                self.upstream = None;
                conn.handle_upstream_failure(t, broken(Some(e)));
            }
            Wake::ClientWritten(Ok(n)) if n > 0 => conn.handle_client_written(t, n),
            Wake::ClientWritten(_) => conn.handle_client_eof(t),
            Wake::UpRead(Ok(0)) => {
                self.upstream = None;
                conn.handle_upstream_eof(t);
            }
            // The bytes are still in this thread's scratch buffer: nothing
            // has yielded since the read.
            Wake::UpRead(Ok(n)) => {
                with_scratch(|buf| conn.handle_upstream_data(t, &buf[..n]));
            }
            Wake::UpRead(Err(e)) => {
                self.upstream = None;
                conn.handle_upstream_failure(t, broken(Some(e)));
            }
            Wake::ClientRead(Ok(0)) | Wake::ClientRead(Err(_)) => conn.handle_client_eof(t),
            Wake::ClientRead(Ok(n)) => {
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
///
/// The dropped bytes go to the thread's read buffer: a buffer of its own
/// here would be part of every connection task's state, lingering or not
/// (it was 4 KiB of the 5 KiB each open stream's task took).
pub(crate) async fn linger_close<R: Runtime>(rt: &R, mut stream: InboundStream<R::Tcp>) {
    let discard = async {
        stream.close_notify();
        let _ = stream.flush().await;
        rt.shutdown_write(stream.tcp());
        let mut total = 0;
        while total < LINGER_BYTES {
            let read =
                future::poll_fn(|cx| with_scratch(|buf| Pin::new(&mut stream).poll_read(cx, buf)));
            match read.await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    future::or(discard, async {
        rt.timer(std::time::Instant::now() + LINGER).await;
    })
    .await;
}
