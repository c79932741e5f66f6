//! TCP streams and listeners on chatgate-smol's reactor.

use std::io::{self, IoSlice, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_lite::{AsyncRead, AsyncWrite};

use crate::reactor::{READ, Source, WRITE, reactor};

/// A connected, non-blocking TCP stream.
pub(crate) struct Tcp {
    stream: TcpStream,
    source: Arc<Source>,
}

impl Tcp {
    fn new(stream: TcpStream, ready: bool) -> io::Result<Tcp> {
        stream.set_nonblocking(true)?;
        let source = reactor().register(stream.as_fd(), ready)?;
        Ok(Tcp { stream, source })
    }

    /// Connects without blocking: the socket is registered while the
    /// handshake runs and is ready once the kernel reports it writable.
    pub(crate) async fn connect(addr: SocketAddr) -> io::Result<Tcp> {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        socket.set_nonblocking(true)?;
        match socket.connect(&addr.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INPROGRESS.raw_os_error()) => {}
            Err(e) => return Err(e),
        }
        let tcp = Tcp::new(socket.into(), false)?;
        std::future::poll_fn(|cx| tcp.source.poll_ready(WRITE, cx)).await;
        match tcp.stream.take_error()? {
            Some(e) => Err(e),
            None => Ok(tcp),
        }
    }

    /// A connected standard stream, on the reactor.
    #[cfg(test)]
    pub(crate) fn adopt(stream: TcpStream) -> io::Result<Tcp> {
        Tcp::new(stream, true)
    }

    pub(crate) fn get_ref(&self) -> &TcpStream {
        &self.stream
    }
}

impl Drop for Tcp {
    fn drop(&mut self) {
        reactor().deregister(&self.source, self.stream.as_fd());
    }
}

impl AsyncRead for Tcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let len = buf.len();
        let stream = &self.stream;
        self.source.poll_io(
            READ,
            cx,
            || (&*stream).read(buf),
            |&n| n > 0 && n < len.min(MAX_RW),
        )
    }
}

impl AsyncWrite for Tcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let stream = &self.stream;
        self.source.poll_io(
            WRITE,
            cx,
            || (&*stream).write(buf),
            |&n| n < buf.len().min(MAX_RW),
        )
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        // The kernel takes at most `IOV_MAX` slices a call: a write shorter
        // than those says the socket is full, not one shorter than all.
        let len = bufs.iter().take(IOV_MAX).map(|b| b.len()).sum::<usize>();
        let stream = &self.stream;
        self.source.poll_io(
            WRITE,
            cx,
            || (&*stream).write_vectored(bufs),
            |&n| n < len.min(MAX_RW),
        )
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Closing is the owner's drop (and `shutdown_write` for a FIN), as with
    /// async-io's streams.
    fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Linux's limit on slices per vectored call.
const IOV_MAX: usize = 1024;

/// Linux's limit on bytes per read or write call (`MAX_RW_COUNT`): a call
/// asked for more returns at most this, which says nothing of the socket.
const MAX_RW: usize = 0x7fff_f000;

/// A listening socket.
pub(crate) struct Listener {
    listener: TcpListener,
    source: Arc<Source>,
}

impl Listener {
    pub(crate) fn new(listener: TcpListener) -> io::Result<Listener> {
        listener.set_nonblocking(true)?;
        let source = reactor().register(listener.as_fd(), true)?;
        Ok(Listener { listener, source })
    }

    pub(crate) async fn accept(&self) -> io::Result<Tcp> {
        let (stream, _) = std::future::poll_fn(|cx| {
            self.source
                .poll_io(READ, cx, || self.listener.accept(), |_| false)
        })
        .await?;
        Tcp::new(stream, true)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        reactor().deregister(&self.source, self.listener.as_fd());
    }
}
