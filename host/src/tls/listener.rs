//! TLS on the listeners (`--tls-cert`/`--tls-key`, `--admin-tls-cert`/
//! `--admin-tls-key`, `--admin-client-ca`): the server configuration each
//! listener's handshakes use, read from its files at start and again when
//! they change (the watcher, SIGHUP), and the first look at a connection
//! that tells a TLS handshake from plain HTTP.
//!
//! A configuration is swapped whole, so a new certificate, key or client CA
//! applies to the next handshake, and connections already open keep the
//! one they began with. Files that do not load (unreadable, no
//! certificate, a key that is not the certificate's) are refused at start
//! with one line, and at a reload leave the configuration in force as it
//! is. The session cache and the ticket keys outlive a reload, so clients
//! resume their sessions across it.

use std::sync::{Arc, Mutex, RwLock};

use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use rustls::server::WebPkiClientVerifier;
use rustls::server::{ProducesTickets, ServerSessionMemoryCache, StoresServerSessions};
use rustls::{RootCertStore, ServerConfig, ServerConnection};

use crate::error::Error;
use crate::reload::{Stamp, stamp};
use crate::tls::stream::{MaybeTls, TlsStream};

/// A client connection on a listener: plain, or TLS over it.
pub(crate) type InboundStream<T> = MaybeTls<T, ServerConnection>;

/// Sessions a listener remembers for resumption by id (TLS 1.2), beside
/// the tickets (TLS 1.2 and 1.3), which it does not need to remember.
const SESSION_CACHE: usize = 4096;

/// A listener's TLS: its files and the configuration they gave.
pub(crate) struct ListenerTls {
    /// `public listener` or `admin listener`, for the log.
    what: &'static str,
    files: chatgate_core::ListenerTls,
    config: RwLock<Arc<ServerConfig>>,
    /// The files' stamps when they were last read.
    stamps: Mutex<Vec<Option<Stamp>>>,
    tickets: Arc<dyn ProducesTickets>,
    sessions: Arc<dyn StoresServerSessions>,
}

impl ListenerTls {
    /// Reads `files` for the listener named `what`; an error names the
    /// file and what is wrong with it.
    pub(crate) fn open(
        what: &'static str,
        files: chatgate_core::ListenerTls,
    ) -> Result<Arc<ListenerTls>, Error> {
        let stamps = stamps(&files);
        let tickets = rustls::crypto::ring::Ticketer::new()
            .map_err(|e| Error::Tls(format!("{what}: no session ticket keys: {e}")))?;
        let sessions: Arc<dyn StoresServerSessions> = ServerSessionMemoryCache::new(SESSION_CACHE);
        let config = build(what, &files, &tickets, &sessions)?;
        Ok(Arc::new(ListenerTls {
            what,
            files,
            config: RwLock::new(Arc::new(config)),
            stamps: Mutex::new(stamps),
            tickets,
            sessions,
        }))
    }

    /// The configuration the next handshake uses.
    pub(crate) fn config(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.config.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Whether one of the files changed since it was last read.
    pub(crate) fn changed(&self) -> bool {
        *self.stamps.lock().unwrap_or_else(|e| e.into_inner()) != stamps(&self.files)
    }

    /// Reads the files again (`why`: SIGHUP, or a file changed): the new
    /// configuration applies to the next handshake; files that do not load
    /// leave the one in force, and the log says why.
    pub(crate) fn reload(&self, why: &str) {
        *self.stamps.lock().unwrap_or_else(|e| e.into_inner()) = stamps(&self.files);
        match build(self.what, &self.files, &self.tickets, &self.sessions) {
            Ok(config) => {
                *self.config.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
                tracing::info!(
                    listener = self.what,
                    certificate = %self.files.cert,
                    "TLS certificate reloaded ({why})"
                );
            }
            Err(e) => tracing::error!(
                "{e}; the {} keeps the certificate it has ({why})",
                self.what
            ),
        }
    }
}

fn stamps(files: &chatgate_core::ListenerTls) -> Vec<Option<Stamp>> {
    [
        Some(&files.cert),
        Some(&files.key),
        files.client_ca.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(|p| stamp(p))
    .collect()
}

/// The server configuration of `files`: TLS 1.3 and 1.2, HTTP/1.1 by ALPN,
/// the listener's session cache and ticket keys, client certificates
/// required when a client CA is given.
fn build(
    what: &str,
    files: &chatgate_core::ListenerTls,
    tickets: &Arc<dyn ProducesTickets>,
    sessions: &Arc<dyn StoresServerSessions>,
) -> Result<ServerConfig, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates(what, "certificate (tls_cert)", &files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| {
        Error::Tls(format!(
            "{what}: cannot read the private key '{}': {e}",
            files.key
        ))
    })?;
    let versions = [&rustls::version::TLS13, &rustls::version::TLS12];
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&versions)
        .map_err(|e| Error::Tls(format!("{what}: {e}")))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for c in certificates(what, "client CA (admin_client_ca)", path)? {
                roots
                    .add(c)
                    .map_err(|e| Error::Tls(format!("{what}: the client CA file '{path}': {e}")))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                Arc::clone(&provider) as Arc<CryptoProvider>,
            )
            .build()
            .map_err(|e| Error::Tls(format!("{what}: the client CA file '{path}': {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        let why = match e {
            rustls::Error::InconsistentKeys(_) => {
                "the private key is not the certificate's".to_owned()
            }
            other => other.to_string(),
        };
        Error::Tls(format!(
            "{what}: the certificate '{}' and the key '{}' do not go together: {why}",
            files.cert, files.key
        ))
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.ticketer = Arc::clone(tickets);
    config.session_storage = Arc::clone(sessions);
    Ok(config)
}

/// The certificates of the PEM file at `path`: at least one.
fn certificates(
    what: &str,
    which: &str,
    path: &str,
) -> Result<Vec<CertificateDer<'static>>, Error> {
    let bad = |e: &dyn std::fmt::Display| {
        Error::Tls(format!("{what}: cannot read the {which} '{path}': {e}"))
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(&e))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad(&e))?;
    if certs.is_empty() {
        return Err(bad(&"the file holds no PEM certificate"));
    }
    Ok(certs)
}

/// What the first bytes of a connection to a TLS listener were.
pub(crate) enum Accepted<T> {
    /// A TLS handshake, completed.
    Tls(InboundStream<T>),
    /// Plain HTTP: the caller answers it in plain HTTP, and closes.
    PlainHttp(T),
    /// The peer closed before its handshake ended, or the handshake
    /// failed (a client certificate missing or not trusted, no protocol in
    /// common, bytes that are not TLS): the alert that says why was sent
    /// if it could be, and the connection is closed.
    Failed,
}

/// Reads the first bytes of `tcp` and, if they begin a TLS handshake,
/// completes it with `tls`'s configuration in force. The caller bounds the
/// time it takes.
pub(crate) async fn accept<T>(mut tcp: T, tls: &ListenerTls) -> Accepted<T>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let mut first = [0u8; 2048];
    let n = match tcp.read(&mut first).await {
        Ok(0) | Err(_) => return Accepted::Failed,
        Ok(n) => n,
    };
    if first[0] != chatgate_core::http::TLS_HANDSHAKE {
        return Accepted::PlainHttp(tcp);
    }
    let conn = match ServerConnection::new(tls.config()) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(listener = tls.what, error = %e, "TLS connection refused");
            return Accepted::Failed;
        }
    };
    match TlsStream::accept(tcp, conn, &first[..n]).await {
        Ok(s) => Accepted::Tls(MaybeTls::Tls(Box::new(s))),
        Err(e) => {
            tracing::debug!(listener = tls.what, error = %e, "TLS handshake failed");
            Accepted::Failed
        }
    }
}
