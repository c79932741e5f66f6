//! TLS to the provider: rustls driven over any futures-io stream.
//!
//! One adapter for every runtime (tokio streams reach it through the
//! futures-io compatibility layer), instead of one wrapper crate per
//! runtime. Certificates are verified against the webpki roots plus any
//! extra CA given with `--upstream-ca`; the host name is verified too.

use std::io::{self, Read, Write};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use futures_lite::{AsyncRead, AsyncWrite};
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

use crate::error::Error;

/// The client configuration: webpki roots, plus the certificates of the PEM
/// file at `extra_ca`, HTTP/1.1 by ALPN.
pub(crate) fn client_config(extra_ca: Option<&str>) -> Result<Arc<ClientConfig>, Error> {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = extra_ca {
        let bad_ca =
            |e: &dyn std::fmt::Display| Error::Tls(format!("upstream CA file '{path}': {e}"));
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| bad_ca(&e))?
            .collect::<Result<_, _>>()
            .map_err(|e| bad_ca(&e))?;
        if certs.is_empty() {
            return Err(Error::Tls(format!(
                "upstream CA file '{path}' holds no certificate"
            )));
        }
        for c in certs {
            roots.add(c).map_err(|e| bad_ca(&e))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The server name to verify for `host`.
pub(crate) fn server_name(host: &str) -> Result<ServerName<'static>, Error> {
    ServerName::try_from(host.to_owned())
        .map_err(|e| Error::Tls(format!("'{host}' is not a valid TLS server name: {e}")))
}

/// A TLS client stream over `S`.
pub(crate) struct TlsStream<S> {
    io: S,
    conn: ClientConnection,
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

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream<S> {
    /// Performs the handshake (certificate and name verified).
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
                    "the provider closed the connection during the TLS handshake",
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

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsStream<S> {
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

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsStream<S> {
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
