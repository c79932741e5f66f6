//! What a runtime supplies, and the clock that maps core time to it.
//!
//! `wakeup` is the per-source waker set a connection's task polls through, so
//! a loop polls only what woke.

pub(crate) mod wakeup;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::Context;

use chatgate_core::Instant;
use futures_lite::{AsyncRead, AsyncWrite};

/// The runtime's part: an executor, a reactor for TCP, timers and signals.
/// Everything else the gateway does is written once, against this trait.
pub trait Runtime: Clone + Send + Sync + 'static {
    /// A connected TCP stream.
    type Tcp: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// A listening socket.
    type Listener: Send + Sync + 'static;
    /// A timer that can be moved to another deadline.
    type Timer: Future + Unpin + Send + 'static;

    /// Runs `f` to completion on this runtime, from the main thread.
    fn block_on<F: Future>(&self, f: F) -> F::Output;
    /// Runs `f` in the background.
    fn spawn(&self, f: impl Future<Output = ()> + Send + 'static);
    /// Runs blocking code off the reactor threads.
    fn unblock<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> impl Future<Output = T> + Send;
    /// A timer firing at `at`.
    fn timer(&self, at: std::time::Instant) -> Self::Timer;
    /// Moves a timer to `at`.
    fn reset_timer(&self, timer: &mut Self::Timer, at: std::time::Instant);
    /// Adopts a bound standard listener.
    fn listener(&self, l: std::net::TcpListener) -> io::Result<Self::Listener>;
    /// Accepts the next connection.
    fn accept(&self, l: &Self::Listener) -> impl Future<Output = io::Result<Self::Tcp>> + Send;
    /// Connects to `addr`.
    fn connect(&self, addr: SocketAddr) -> impl Future<Output = io::Result<Self::Tcp>> + Send;
    /// The address `tcp` is connected to, if it can be read.
    fn peer_addr(&self, tcp: &Self::Tcp) -> Option<SocketAddr>;
    /// Sets `TCP_NODELAY` (every write carries a complete message).
    fn set_nodelay(&self, tcp: &Self::Tcp);
    /// Half-closes `tcp`: sends the FIN that tells the peer no more bytes
    /// come, and keeps the read side open. Explicit because the runtimes'
    /// `close` differ: tokio's shuts the write side down, chatgate-smol's
    /// only flushes.
    fn shutdown_write(&self, tcp: &Self::Tcp);
    /// Makes the next close send a TCP reset (`SO_LINGER` 0); the simulator's
    /// `reset` fault.
    fn set_reset_on_close(&self, tcp: &Self::Tcp);
    /// Installs the SIGTERM and SIGINT handlers when called (not when first
    /// polled) and resolves on the first of those signals after the call, so
    /// a caller that announces readiness after calling it never loses a
    /// signal to the default action (termination).
    fn shutdown_signal(&self) -> impl Future<Output = ()> + Send;
}

/// A runtime timer that follows a state machine's `poll_timeout`.
pub(crate) struct Alarm<R: Runtime> {
    timer: Option<R::Timer>,
    armed: Option<std::time::Instant>,
}

impl<R: Runtime> Default for Alarm<R> {
    fn default() -> Self {
        Alarm {
            timer: None,
            armed: None,
        }
    }
}

impl<R: Runtime> Alarm<R> {
    /// Follows `deadline` (core time) lazily: the timer only ever moves
    /// earlier. A later deadline keeps the earlier one armed; when it fires
    /// early, the state machine finds nothing due and the alarm is then set
    /// to the real deadline. Deadlines change at every step of a request, and
    /// moving a timer costs reactor work (and, on some runtimes, system
    /// calls); an early wake-up every few seconds costs nothing. True when
    /// the timer was moved.
    pub(crate) fn set(&mut self, rt: &R, deadline: Option<Instant>) -> bool {
        let Some(at) = deadline.map(to_std) else {
            return false;
        };
        if self.armed.is_some_and(|armed| armed <= at) {
            return false;
        }
        match self.timer.as_mut() {
            Some(t) => rt.reset_timer(t, at),
            None => self.timer = Some(rt.timer(at)),
        }
        self.armed = Some(at);
        true
    }

    /// True once the deadline has passed; the alarm is then disarmed, so the
    /// next [`Alarm::set`] re-arms it even for the same instant.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        if self.armed.is_none() {
            return false;
        }
        let fired = self
            .timer
            .as_mut()
            .is_some_and(|t| Pin::new(t).poll(cx).is_ready());
        if fired {
            self.armed = None;
        }
        fired
    }
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; SCRATCH_LEN]);
}

/// Size of the per-thread read buffer.
const SCRATCH_LEN: usize = 16 * 1024;

/// Runs `f` with this thread's read buffer.
///
/// Connection tasks read into it and hand the bytes to their state machine
/// before they can yield, so one buffer per thread serves every connection
/// and an idle or streaming connection holds no read buffer of its own (at
/// ten thousand open streams that is 320 MiB not spent). Never hold the
/// bytes across an `.await`.
pub(crate) fn with_scratch<T>(f: impl FnOnce(&mut [u8]) -> T) -> T {
    SCRATCH.with(|s| f(&mut s.borrow_mut()))
}

static START: OnceLock<std::time::Instant> = OnceLock::new();

/// Core time (since the process started) for now.
pub(crate) fn now() -> Instant {
    let start = *START.get_or_init(std::time::Instant::now);
    Instant::from_start(start.elapsed())
}

/// The standard instant for a core instant.
pub(crate) fn to_std(t: Instant) -> std::time::Instant {
    *START.get_or_init(std::time::Instant::now) + t.since_start()
}

/// Unix milliseconds at core time zero (read once).
pub(crate) fn unix_ms_at_start() -> u64 {
    let start = *START.get_or_init(std::time::Instant::now);
    let unix_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    unix_now.saturating_sub(start.elapsed().as_millis() as u64)
}

/// Raises the open-files limit (every client and every provider connection
/// is a descriptor; ten thousand streams need twenty thousand): to a
/// million when the process may raise its hard limit (root), else to the
/// hard limit. Returns the limit now in force.
pub(crate) fn raise_fd_limit() -> Option<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let wanted = 1 << 20;
    let current = getrlimit(Resource::Nofile);
    if current.current.is_some_and(|c| c < wanted) {
        let raised = Rlimit {
            current: Some(wanted),
            maximum: Some(wanted.max(current.maximum.unwrap_or(wanted))),
        };
        if setrlimit(Resource::Nofile, raised).is_err() {
            let _ = setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: current.maximum,
                    maximum: current.maximum,
                },
            );
        }
    }
    getrlimit(Resource::Nofile).current
}

/// 64 random bits from the operating system.
pub(crate) fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).expect("the operating system provides randomness");
    u64::from_le_bytes(b)
}

/// 32 random bytes from the operating system.
pub(crate) fn random_32() -> [u8; 32] {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).expect("the operating system provides randomness");
    b
}
