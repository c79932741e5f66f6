//! rustls driven over any futures-io stream, either side: one adapter for
//! every runtime (tokio streams reach it through the futures-io
//! compatibility layer), instead of one wrapper crate per runtime.

use std::io::{self, Read, Write};
use std::ops::DerefMut;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use futures_lite::{AsyncRead, AsyncWrite};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, ConnectionCommon, ServerConnection, SideData};

/// A TLS stream over `S`: a client's (`C` = [`ClientConnection`]) or a
/// server's ([`ServerConnection`]).
pub(crate) struct TlsStream<S, C> {
    io: S,
    conn: C,
}

/// A stream that is TLS or not: the provider's connections
/// ([`ClientConnection`]), and the listeners' ([`ServerConnection`]).
pub(crate) enum MaybeTls<T, C> {
    /// Plain TCP.
    Plain(T),
    /// TLS over it.
    Tls(Box<TlsStream<T, C>>),
}

impl<T, C> MaybeTls<T, C> {
    /// The TCP stream under it.
    pub(crate) fn tcp(&self) -> &T {
        match self {
            MaybeTls::Plain(s) => s,
            MaybeTls::Tls(s) => &s.io,
        }
    }
}

impl<T, C, D> MaybeTls<T, C>
where
    C: DerefMut<Target = ConnectionCommon<D>>,
    D: SideData,
{
    /// Queues TLS's `close_notify`, which the next flush sends: the peer
    /// then knows the stream ended here and was not cut.
    pub(crate) fn close_notify(&mut self) {
        if let MaybeTls::Tls(s) = self {
            s.conn.send_close_notify();
        }
    }
}

impl<T, C, D> AsyncRead for MaybeTls<T, C>
where
    T: AsyncRead + AsyncWrite + Unpin,
    C: DerefMut<Target = ConnectionCommon<D>> + Unpin,
    D: SideData,
{
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MaybeTls::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl<T, C, D> AsyncWrite for MaybeTls<T, C>
where
    T: AsyncRead + AsyncWrite + Unpin,
    C: DerefMut<Target = ConnectionCommon<D>> + Unpin,
    D: SideData,
{
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write(cx, buf),
            MaybeTls::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_flush(cx),
            MaybeTls::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_close(cx),
            MaybeTls::Tls(s) => Pin::new(&mut **s).poll_close(cx),
        }
    }
}

/// `io::Read`/`io::Write` over a futures-io stream, `WouldBlock` for pending.
struct Sync<'a, 'b, S> {
    io: &'a mut S,
    cx: &'a mut Context<'b>,
}

impl<S: AsyncRead + Unpin> Read for Sync<'_, '_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_read(self.cx, buf) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl<S: AsyncWrite + Unpin> Write for Sync<'_, '_, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_write(self.cx, buf) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match Pin::new(&mut *self.io).poll_flush(self.cx) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

fn pending_if_would_block<T>(r: io::Result<T>) -> Poll<io::Result<T>> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
        other => Poll::Ready(other),
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream<S, ClientConnection> {
    /// Performs a client's handshake (certificate and name verified).
    pub(crate) async fn connect(
        io: S,
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
    ) -> io::Result<Self> {
        let conn = ClientConnection::new(config, name)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let mut s = TlsStream { io, conn };
        futures_lite::future::poll_fn(|cx| s.poll_handshake(cx)).await?;
        Ok(s)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream<S, ServerConnection> {
    /// Performs a server's handshake on `io`, whose first bytes, already
    /// read, are `first`.
    pub(crate) async fn accept(
        io: S,
        mut conn: ServerConnection,
        mut first: &[u8],
    ) -> io::Result<Self> {
        let invalid = |e| io::Error::new(io::ErrorKind::InvalidData, e);
        let mut fed = Ok(());
        while fed.is_ok() && !first.is_empty() {
            fed = conn
                .read_tls(&mut first)
                .and_then(|_| conn.process_new_packets().map(drop).map_err(invalid));
        }
        let mut s = TlsStream { io, conn };
        let handshake = match fed {
            Ok(()) => futures_lite::future::poll_fn(|cx| s.poll_handshake(cx)).await,
            Err(e) => Err(e),
        };
        match handshake {
            Ok(()) => Ok(s),
            Err(e) => {
                // The alert that says why (a client certificate missing,
                // no protocol in common) goes out if it can.
                let _ = futures_lite::future::poll_fn(|cx| s.poll_flush_tls(cx)).await;
                Err(e)
            }
        }
    }
}

impl<S, C, D> TlsStream<S, C>
where
    S: AsyncRead + AsyncWrite + Unpin,
    C: DerefMut<Target = ConnectionCommon<D>> + Unpin,
    D: SideData,
{
    fn poll_flush_tls(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.conn.wants_write() {
            ready!(self.poll_write_tls(cx))?;
        }
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            while self.conn.wants_write() {
                ready!(self.poll_write_tls(cx))?;
            }
            if !self.conn.is_handshaking() {
                return Poll::Ready(Ok(()));
            }
            if ready!(self.poll_read_tls(cx))? == 0 {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the peer closed the connection during the TLS handshake",
                )));
            }
        }
    }

    fn poll_read_tls(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let n = ready!(pending_if_would_block(self.conn.read_tls(&mut Sync {
            io: &mut self.io,
            cx
        })))?;
        self.conn
            .process_new_packets()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        Poll::Ready(Ok(n))
    }

    fn poll_write_tls(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        pending_if_would_block(self.conn.write_tls(&mut Sync {
            io: &mut self.io,
            cx,
        }))
    }
}

impl<S, C, D> AsyncRead for TlsStream<S, C>
where
    S: AsyncRead + AsyncWrite + Unpin,
    C: DerefMut<Target = ConnectionCommon<D>> + Unpin,
    D: SideData,
{
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            match this.conn.reader().read(buf) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            // Records to send (a key update answer) go out first, if they can.
            while this.conn.wants_write() {
                match this.poll_write_tls(cx) {
                    Poll::Ready(r) => {
                        r?;
                    }
                    Poll::Pending => break,
                }
            }
            // Zero here means TCP EOF; rustls notes it and the next plaintext
            // read reports a clean close or an unexpected one.
            ready!(this.poll_read_tls(cx))?;
        }
    }
}

impl<S, C, D> AsyncWrite for TlsStream<S, C>
where
    S: AsyncRead + AsyncWrite + Unpin,
    C: DerefMut<Target = ConnectionCommon<D>> + Unpin,
    D: SideData,
{
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        // Earlier records first, so buffered plaintext stays bounded.
        while this.conn.wants_write() {
            ready!(this.poll_write_tls(cx))?;
        }
        let n = this.conn.writer().write(buf)?;
        while this.conn.wants_write() {
            match this.poll_write_tls(cx) {
                Poll::Ready(r) => {
                    r?;
                }
                // Buffered; poll_flush finishes the job.
                Poll::Pending => break,
            }
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        while this.conn.wants_write() {
            ready!(this.poll_write_tls(cx))?;
        }
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.conn.send_close_notify();
        while this.conn.wants_write() {
            ready!(this.poll_write_tls(cx))?;
        }
        Pin::new(&mut this.io).poll_close(cx)
    }
}
