//! Listening, accepting, and the shutdown sequence.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_lite::future;

use crate::error::Error;
use crate::runtime::Runtime;
use crate::serving::driver::{Shared, serve_connection};

/// Binds a listening socket (non-blocking, ready for any runtime).
pub(crate) fn bind(addr: &str) -> Result<std::net::TcpListener, Error> {
    bind_shared(addr, false)
}

/// [`bind`], and with `reuse_port` the port shared with the other
/// processes that bind it so (`SO_REUSEPORT`, same user): the kernel
/// spreads new connections over their listeners by the connection's
/// addresses, and a process that stops listening leaves the port to the
/// others (`reuse_port`, docs/decisions.md).
pub(crate) fn bind_shared(addr: &str, reuse_port: bool) -> Result<std::net::TcpListener, Error> {
    let refused = |source| Error::Net {
        what: format!("cannot listen on {addr}"),
        source,
    };
    let l = if reuse_port {
        shared_port(addr).map_err(refused)?
    } else {
        std::net::TcpListener::bind(addr).map_err(refused)?
    };
    l.set_nonblocking(true).map_err(refused)?;
    Ok(l)
}

/// Pending connections a shared-port listener holds (the kernel caps it at
/// `net.core.somaxconn`).
const SHARED_BACKLOG: i32 = 4096;

/// A listener with `SO_REUSEPORT` (and `SO_REUSEADDR`, as the standard
/// library sets), on the first of `addr`'s addresses that binds.
fn shared_port(addr: &str) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    use std::net::ToSocketAddrs;
    let mut last = None;
    for a in addr.to_socket_addrs()? {
        let bound = Socket::new(Domain::for_address(a), Type::STREAM, None).and_then(|s| {
            s.set_reuse_address(true)?;
            s.set_reuse_port(true)?;
            s.bind(&a.into())?;
            s.listen(SHARED_BACKLOG)?;
            Ok(s)
        });
        match bound {
            Ok(s) => return Ok(s.into()),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the address resolves to nothing",
        )
    }))
}

/// Accepts connections until `stop` resolves (the runtime's
/// [`Runtime::shutdown_signal`], installed before readiness is announced),
/// then drains: no new connections, idle ones closed, in-flight requests
/// finished within the drain timeout, the ledger synced.
pub(crate) async fn run_gateway<R: Runtime>(
    shared: Arc<Shared<R>>,
    listener: R::Listener,
    stop: impl Future<Output = ()>,
) {
    let rt = shared.rt.clone();
    let accept = {
        let shared = Arc::clone(&shared);
        let rt = rt.clone();
        async move {
            loop {
                match rt.accept(&listener).await {
                    Ok(tcp) => rt.spawn(isolated(serve_connection(Arc::clone(&shared), tcp))),
                    Err(e) => {
                        // Out of descriptors or similar: back off briefly.
                        tracing::warn!(error = %e, "accept failed");
                        rt.timer(std::time::Instant::now() + Duration::from_millis(50))
                            .await;
                    }
                }
            }
        }
    };
    future::or(accept, stop).await;
    drain(&shared).await;
}

/// Runs one connection so that a panic in it — a bug, which no input is
/// meant to reach, but "never panic on peer input" is a promise tested by
/// fuzzing, not proven — ends that connection only: the socket is dropped,
/// the connection count goes down (the core's `Drop`), the panic is logged,
/// and the gateway serves on. Shared state survives it: every lock in core
/// and host ignores poisoning. Without this, a panic would end an executor
/// thread on smol.
///
/// A plain future, not an `async fn`: an `async fn` that moves its argument
/// into a local keeps room for both in its state, which doubled the memory
/// each open connection's task takes (measured: 5 KiB more per held stream).
fn isolated<F: Future<Output = ()>>(connection: F) -> Isolated<F> {
    Isolated(Box::pin(connection))
}

/// The connection's future, boxed so it can be polled pinned without
/// `unsafe`, and stored once.
struct Isolated<F>(Pin<Box<F>>);

impl<F: Future<Output = ()>> Future for Isolated<F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let connection = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| connection.poll(cx))) {
            Ok(poll) => poll,
            Err(_) => {
                // Never polled again: the task ends and drops it.
                tracing::error!("a connection ended on an internal error; the gateway serves on");
                Poll::Ready(())
            }
        }
    }
}

/// After the drain timeout, time for the cut requests' answers to be written.
const CUT_GRACE: Duration = Duration::from_secs(2);

async fn drain<R: Runtime>(shared: &Shared<R>) {
    let timeout = shared.gateway.config().timeouts.drain;
    tracing::info!(
        open_connections = shared.gateway.open_connections(),
        drain_timeout_s = timeout.as_secs(),
        "shutting down: draining"
    );
    shared.gateway.begin_drain();
    shared.draining.notify(usize::MAX);
    // At the drain timeout each connection cuts what it still waits for
    // (metered: streams end with [DONE], others get 503); a short grace lets
    // those answers and their ledger lines go out before the process exits.
    let deadline = std::time::Instant::now() + timeout + CUT_GRACE;
    while shared.gateway.open_connections() > 0 && std::time::Instant::now() < deadline {
        shared
            .rt
            .timer(std::time::Instant::now() + Duration::from_millis(20))
            .await;
    }
    let left = shared.gateway.open_connections();
    if left > 0 {
        tracing::warn!(connections = left, "drain timeout: closing the rest");
    }
    shared.ledger.sync();
    let (lines, errors) = shared.ledger.counts();
    tracing::info!(ledger_lines = lines, ledger_errors = errors, "stopped");
}

#[cfg(test)]
mod tests {
    use super::isolated;
    use std::task::Poll;

    #[test]
    fn a_panicking_connection_ends_alone() {
        // The panic hook still prints; the caller goes on.
        futures_lite::future::block_on(isolated(async { panic!("a bug") }));
        // A connection that panics after waiting once.
        let mut first = true;
        futures_lite::future::block_on(isolated(futures_lite::future::poll_fn(|cx| {
            if std::mem::take(&mut first) {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            panic!("a bug after a wait")
        })));
        let mut ran = false;
        futures_lite::future::block_on(isolated(async { ran = true }));
        assert!(ran);
    }
}
