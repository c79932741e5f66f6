//! chatgate on smol: async-executor on every core, turning its own
//! edge-triggered reactor (`reactor`, on `polling`) when out of tasks;
//! async-signal for SIGTERM/SIGINT. Everything else is `chatgate-host`
//! driving `chatgate-core`.

mod net;
mod reactor;
mod worker;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::net::TcpListener;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_executor::Executor;
use chatgate_host::Runtime;
use futures_lite::{StreamExt, future};
use net::{Listener, Tcp};
use reactor::Timer;

/// The smol runtime: one shared executor run by a thread per core, or by
/// the main thread alone.
#[derive(Clone)]
struct Smol {
    ex: Arc<Executor<'static>>,
    /// One thread: the main thread runs the tasks while it runs `block_on`.
    on_main: bool,
}

impl Smol {
    /// The executor run by `threads` threads (`None`: one per core). With
    /// one, that is the main thread, the one that runs the accept loop (as
    /// tokio's current-thread runtime): a new connection's task is not
    /// handed to another thread, and no thread waits for another.
    fn new(threads: Option<usize>) -> io::Result<Smol> {
        let ex = Arc::new(Executor::new());
        let threads =
            threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        if threads == 1 {
            return Ok(Smol { ex, on_main: true });
        }
        for i in 0..threads {
            let ex = Arc::clone(&ex);
            std::thread::Builder::new()
                .name(format!("chatgate-{i}"))
                .spawn(move || worker::run(&ex))
                .map_err(|e| io::Error::other(format!("cannot start executor thread {i}: {e}")))?;
        }
        Ok(Smol { ex, on_main: false })
    }
}

impl Runtime for Smol {
    type Tcp = Tcp;
    type Listener = Listener;
    type Timer = Timer;

    /// With executor threads, the main thread (the accept loop) waits
    /// without turning the reactor: only the executor threads do, when
    /// they run out of tasks, so a woken connection task runs on the
    /// thread that saw its socket ready instead of being handed over with a
    /// futex and an eventfd write (BENCHMARKS.md, *Issue 32*). With one
    /// thread, the main thread is the executor's and turns the reactor.
    fn block_on<F: Future>(&self, f: F) -> F::Output {
        if self.on_main {
            worker::block_on(self.ex.run(f))
        } else {
            future::block_on(f)
        }
    }

    fn spawn(&self, f: impl Future<Output = ()> + Send + 'static) {
        self.ex.spawn(f).detach();
    }

    fn unblock<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> impl Future<Output = T> + Send {
        blocking::unblock(f)
    }

    fn timer(&self, at: Instant) -> Timer {
        Timer::at(at)
    }

    fn reset_timer(&self, timer: &mut Timer, at: Instant) {
        timer.set_at(at);
    }

    fn listener(&self, l: TcpListener) -> io::Result<Listener> {
        Listener::new(l)
    }

    async fn accept(&self, l: &Listener) -> io::Result<Tcp> {
        l.accept().await
    }

    fn connect(&self, addr: SocketAddr) -> impl Future<Output = io::Result<Tcp>> + Send {
        Tcp::connect(addr)
    }

    fn peer_addr(&self, tcp: &Tcp) -> Option<SocketAddr> {
        tcp.get_ref().peer_addr().ok()
    }

    fn set_nodelay(&self, tcp: &Tcp) {
        let _ = tcp.get_ref().set_nodelay(true);
    }

    fn shutdown_write(&self, tcp: &Self::Tcp) {
        let _ = tcp.get_ref().shutdown(std::net::Shutdown::Write);
    }

    fn set_reset_on_close(&self, tcp: &Tcp) {
        let _ = socket2::SockRef::from(tcp.get_ref()).set_linger(Some(Duration::ZERO));
    }

    fn shutdown_signal(&self) -> impl Future<Output = ()> + Send {
        // Registered now, not at the first poll: a signal that arrives after
        // this call is never lost to the default action.
        let signals =
            async_signal::Signals::new([async_signal::Signal::Term, async_signal::Signal::Int]);
        async move {
            match signals {
                Ok(mut signals) => {
                    signals.next().await;
                }
                Err(_) => future::pending::<()>().await,
            }
        }
    }
}

fn main() -> ExitCode {
    chatgate_host::main(Smol::new, "chatgate-smol")
}

/// mimalloc: per-thread free lists make the dozen or so small allocations
/// of a request cheaper than glibc's malloc (callgrind: about 3k fewer
/// instructions per non-streamed request; see BENCHMARKS.md).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
