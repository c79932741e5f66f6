//! The simulator's server: accept, then drive each [`SimConnection`].

use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use chatgate_sim::{SimAction, SimConnection, SimServer};
use futures_lite::{AsyncRead, AsyncWrite, AsyncWriteExt, future};

use crate::runtime::wakeup::Wakeup;
use crate::runtime::{Alarm, Runtime, now, with_scratch};

/// Serves simulator connections until `stop` completes (the caller passes
/// [`Runtime::shutdown_signal`], installed before it announces the address,
/// so a SIGTERM/SIGINT right after the line stops the simulator cleanly).
pub(crate) async fn run_sim<R: Runtime>(
    rt: R,
    listener: R::Listener,
    server: Arc<SimServer>,
    stop: impl std::future::Future<Output = ()>,
) {
    let accept = async {
        loop {
            if let Ok(tcp) = rt.accept(&listener).await {
                rt.set_nodelay(&tcp);
                rt.spawn(sim_connection(rt.clone(), Arc::clone(&server), tcp));
            }
        }
    };
    future::or(accept, stop).await;
}

enum Wake {
    Written(std::io::Result<usize>),
    Read(std::io::Result<usize>),
    Timeout,
}

async fn sim_connection<R: Runtime>(rt: R, server: Arc<SimServer>, mut tcp: R::Tcp) {
    let mut sc = SimConnection::new(server);
    let mut alarm = Alarm::<R>::default();
    let (mut g_read, mut g_write, mut g_timer) =
        (Wakeup::default(), Wakeup::default(), Wakeup::default());
    loop {
        if let Some(action) = sc.poll_action() {
            match action {
                SimAction::Close => {
                    let _ = tcp.close().await;
                }
                SimAction::Reset => rt.set_reset_on_close(&tcp),
            }
            return;
        }
        if alarm.set(&rt, sc.poll_timeout()) {
            g_timer.reset();
        }
        let wake = future::poll_fn(|cx| {
            if let Some(tx) = sc.poll_transmit()
                && let Poll::Ready(r) = g_write.poll(cx, |cx| Pin::new(&mut tcp).poll_write(cx, tx))
            {
                return Poll::Ready(Wake::Written(r));
            }
            if let Poll::Ready(r) =
                with_scratch(|buf| g_read.poll(cx, |cx| Pin::new(&mut tcp).poll_read(cx, buf)))
            {
                return Poll::Ready(Wake::Read(r));
            }
            if g_timer
                .poll(cx, |cx| {
                    if alarm.poll(cx) {
                        Poll::Ready(())
                    } else {
                        Poll::Pending
                    }
                })
                .is_ready()
            {
                return Poll::Ready(Wake::Timeout);
            }
            Poll::Pending
        })
        .await;
        let t = now();
        match wake {
            Wake::Written(Ok(n)) if n > 0 => sc.handle_written(n),
            Wake::Written(_) | Wake::Read(Ok(0)) | Wake::Read(Err(_)) => sc.handle_eof(t),
            Wake::Read(Ok(n)) => with_scratch(|buf| sc.handle_data(t, &buf[..n])),
            Wake::Timeout => sc.handle_timeout(t),
        }
    }
}
