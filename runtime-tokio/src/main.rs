//! chatgate on tokio: the multi-threaded runtime (the current-thread one
//! with `--worker-threads 1`), tokio's sockets (seen
//! through the futures-io compatibility layer, so the shared driver and the
//! one rustls adapter serve both runtimes), tokio timers and signals.
//! Everything else is `chatgate-host` driving `chatgate-core`.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use chatgate_host::Runtime;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;
use tokio_util::compat::{Compat, TokioAsyncReadCompatExt};

/// The tokio runtime, shared by handle.
#[derive(Clone)]
struct Tokio {
    handle: tokio::runtime::Handle,
}

/// The runtime itself: owned here and dropped when `main` returns, outside
/// any task (a runtime's drop waits for blocking work in flight), and
/// reachable from `block_on`, because only `Runtime::block_on` drives a
/// current-thread runtime's sockets and timers (a handle's does not).
static RUNTIME: Mutex<Option<tokio::runtime::Runtime>> = Mutex::new(None);

impl Runtime for Tokio {
    type Tcp = Compat<TcpStream>;
    type Listener = TcpListener;
    type Timer = Pin<Box<Sleep>>;

    /// On the main thread only, once at a time: the runtime stays locked
    /// while it runs.
    fn block_on<F: Future>(&self, f: F) -> F::Output {
        let held = RUNTIME.lock().unwrap_or_else(PoisonError::into_inner);
        match held.as_ref() {
            Some(runtime) => runtime.block_on(f),
            None => {
                drop(held);
                self.handle.block_on(f)
            }
        }
    }

    fn spawn(&self, f: impl Future<Output = ()> + Send + 'static) {
        self.handle.spawn(f);
    }

    async fn unblock<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        match self.handle.spawn_blocking(f).await {
            Ok(v) => v,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }

    fn timer(&self, at: Instant) -> Self::Timer {
        let _guard = self.handle.enter();
        Box::pin(tokio::time::sleep_until(at.into()))
    }

    fn reset_timer(&self, timer: &mut Self::Timer, at: Instant) {
        timer.as_mut().reset(at.into());
    }

    fn listener(&self, l: std::net::TcpListener) -> io::Result<TcpListener> {
        let _guard = self.handle.enter();
        TcpListener::from_std(l)
    }

    async fn accept(&self, l: &TcpListener) -> io::Result<Self::Tcp> {
        l.accept().await.map(|(s, _)| s.compat())
    }

    async fn connect(&self, addr: SocketAddr) -> io::Result<Self::Tcp> {
        TcpStream::connect(addr)
            .await
            .map(TokioAsyncReadCompatExt::compat)
    }

    fn peer_addr(&self, tcp: &Self::Tcp) -> Option<SocketAddr> {
        tcp.get_ref().peer_addr().ok()
    }

    fn set_nodelay(&self, tcp: &Self::Tcp) {
        let _ = tcp.get_ref().set_nodelay(true);
    }

    fn shutdown_write(&self, tcp: &Self::Tcp) {
        let _ = socket2::SockRef::from(tcp.get_ref()).shutdown(std::net::Shutdown::Write);
    }

    fn set_reset_on_close(&self, tcp: &Self::Tcp) {
        let _ = socket2::SockRef::from(tcp.get_ref()).set_linger(Some(Duration::ZERO));
    }

    fn shutdown_signal(&self) -> impl Future<Output = ()> + Send {
        use tokio::signal::unix::{SignalKind, signal};
        // Registered now, not at the first poll: a signal that arrives after
        // this call is never lost to the default action.
        let _guard = self.handle.enter();
        let handlers = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        );
        async move {
            match handlers {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                _ => std::future::pending::<()>().await,
            }
        }
    }
}

fn main() -> ExitCode {
    let code = chatgate_host::main(
        |threads: Option<usize>| {
            // One thread: a `current_thread` runtime, whose one thread (the
            // one that calls `block_on`: the accept loop's) runs every task
            // and drives the sockets and timers itself. No task is handed to
            // another thread, no worker is woken across threads, and the
            // scheduler has no queues to steal from (BENCHMARKS.md, issue
            // 46). More threads: the work-stealing runtime.
            let mut b = match threads {
                Some(1) => tokio::runtime::Builder::new_current_thread(),
                Some(n) => {
                    let mut b = tokio::runtime::Builder::new_multi_thread();
                    b.worker_threads(n);
                    b
                }
                None => tokio::runtime::Builder::new_multi_thread(),
            };
            let runtime = b.enable_all().build()?;
            let handle = runtime.handle().clone();
            *RUNTIME.lock().unwrap_or_else(PoisonError::into_inner) = Some(runtime);
            Ok(Tokio { handle })
        },
        "chatgate-tokio",
    );
    drop(
        RUNTIME
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(),
    );
    code
}

/// mimalloc: per-thread free lists make the dozen or so small allocations
/// of a request cheaper than glibc's malloc (callgrind: about 3k fewer
/// instructions per non-streamed request; see BENCHMARKS.md).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
