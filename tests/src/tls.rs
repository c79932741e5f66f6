//! TLS for the tests: a test CA and leaf certificate, and a rustls
//! terminator in front of a plain backend.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// Test certificates: a CA and a leaf for `names`, PEM.
pub struct Certs {
    /// The CA certificate.
    pub ca_pem: String,
    /// The leaf certificate.
    pub cert_pem: String,
    /// The leaf's private key.
    pub key_pem: String,
    /// The SHA-256 of the leaf's public key (its SubjectPublicKeyInfo),
    /// base64: what Chromium's `--ignore-certificate-errors-spki-list`
    /// takes to trust this certificate alone.
    pub spki_sha256: String,
}

/// Generates a CA and a leaf certificate for `names`.
pub fn certs(names: &[&str]) -> Certs {
    certs_and_clients(names, &[]).0
}

/// A client certificate and its key, PEM.
pub struct ClientCert {
    /// The certificate (its common name is the one asked for).
    pub cert_pem: String,
    /// Its private key.
    pub key_pem: String,
}

/// Generates a CA, a leaf certificate for `names`, and a client
/// certificate signed by the same CA for each common name of `clients`.
pub fn certs_and_clients(names: &[&str], clients: &[&str]) -> (Certs, Vec<ClientCert>) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().expect("key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "chatgate test CA");
    let ca_cert = ca.self_signed(&ca_key).expect("CA");
    let leaf_key = KeyPair::generate().expect("key");
    let leaf = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .expect("params");
    let leaf_cert = leaf.signed_by(&leaf_key, &ca_cert, &ca_key).expect("leaf");
    let clients = clients
        .iter()
        .map(|cn| {
            let key = KeyPair::generate().expect("key");
            let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
            params.distinguished_name.push(DnType::CommonName, *cn);
            let cert = params.signed_by(&key, &ca_cert, &ca_key).expect("client");
            ClientCert {
                cert_pem: cert.pem(),
                key_pem: key.serialize_pem(),
            }
        })
        .collect();
    (
        Certs {
            ca_pem: ca_cert.pem(),
            cert_pem: leaf_cert.pem(),
            key_pem: leaf_key.serialize_pem(),
            spki_sha256: {
                use base64::Engine as _;
                let digest =
                    ring::digest::digest(&ring::digest::SHA256, &leaf_key.public_key_der());
                base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
            },
        },
        clients,
    )
}

/// A TLS terminator (rustls) in front of `backend`, on a thread; returns
/// its address. Connections are proxied byte for byte.
pub fn tls_proxy(certs: &Certs, backend: SocketAddr) -> SocketAddr {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let cert = CertificateDer::from_pem_slice(certs.cert_pem.as_bytes()).expect("cert");
    let key = PrivateKeyDer::from_pem_slice(certs.key_pem.as_bytes()).expect("key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .expect("server config"),
    );
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for sock in listener.incoming().flatten() {
            let config = Arc::clone(&config);
            std::thread::spawn(move || {
                let Ok(conn) = rustls::ServerConnection::new(config) else {
                    return;
                };
                let Ok(back) = TcpStream::connect(backend) else {
                    return;
                };
                pump(sock, conn, back);
            });
        }
    });
    addr
}

fn pump(mut sock: TcpStream, mut conn: rustls::ServerConnection, mut back: TcpStream) {
    let _ = sock.set_nonblocking(true);
    let _ = back.set_nonblocking(true);
    let mut buf = vec![0u8; 65536];
    let would_block = |e: &std::io::Error| e.kind() == std::io::ErrorKind::WouldBlock;
    loop {
        let mut progress = false;
        match conn.read_tls(&mut sock) {
            Ok(0) => return,
            Ok(_) => {
                if conn.process_new_packets().is_err() {
                    let _ = conn.write_tls(&mut sock);
                    return;
                }
                progress = true;
            }
            Err(e) if would_block(&e) => {}
            Err(_) => return,
        }
        match conn.reader().read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if write_fully(&mut back, &buf[..n]).is_err() {
                    return;
                }
                progress = true;
            }
            Err(e) if would_block(&e) => {}
            Err(_) => return,
        }
        match back.read(&mut buf) {
            Ok(0) => {
                conn.send_close_notify();
                while conn.wants_write() {
                    if conn.write_tls(&mut sock).is_err() {
                        break;
                    }
                }
                return;
            }
            Ok(n) => {
                let _ = conn.writer().write_all(&buf[..n]);
                progress = true;
            }
            Err(e) if would_block(&e) => {}
            Err(_) => return,
        }
        while conn.wants_write() {
            match conn.write_tls(&mut sock) {
                Ok(_) => progress = true,
                Err(e) if would_block(&e) => break,
                Err(_) => return,
            }
        }
        if !progress {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn write_fully(s: &mut TcpStream, mut b: &[u8]) -> std::io::Result<()> {
    while !b.is_empty() {
        match s.write(b) {
            Ok(n) => b = &b[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A TLS client connection (rustls, blocking).
pub type TlsConn = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// Opens a TLS connection to `addr`, verifying the server's certificate
/// against `ca_pem` for `name`, offering HTTP/1.1 (and `h2` first, as
/// browsers and curl do), with `client`'s certificate if given. The
/// handshake is done when this returns; its error is the text rustls gives.
pub fn tls_connect(
    addr: SocketAddr,
    name: &str,
    ca_pem: &str,
    client: Option<&ClientCert>,
) -> Result<TlsConn, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.expect("CA PEM")).expect("CA");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some(c) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(c.cert_pem.as_bytes()).expect("cert")],
                PrivateKeyDer::from_pem_slice(c.key_pem.as_bytes()).expect("key"),
            )
            .expect("client certificate"),
    };
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let name = ServerName::try_from(name.to_owned()).expect("server name");
    let conn = rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
    let sock = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    while tls.conn.is_handshaking() {
        tls.conn
            .complete_io(&mut tls.sock)
            .map_err(|e| e.to_string())?;
    }
    // TLS 1.3: a server that refuses the client's certificate says so
    // after the client's last flight; the first read tells.
    Ok(tls)
}

/// The server's certificate (DER) a TLS connection was given.
pub fn server_certificate(tls: &TlsConn) -> Vec<u8> {
    tls.conn.peer_certificates().expect("a certificate")[0].to_vec()
}

/// The DER of a PEM certificate.
pub fn der_of(pem: &str) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("certificate PEM")
        .to_vec()
}

/// Sends `raw` on `tls` and reads one whole response (`Err`: the
/// connection failed or closed first, with what rustls or the socket said).
pub fn tls_exchange(tls: &mut TlsConn, raw: &[u8]) -> Result<crate::Response, String> {
    tls.write_all(raw).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        let eof = match tls.read(&mut chunk) {
            Ok(0) => true,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                false
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => true,
            Err(e) => return Err(e.to_string()),
        };
        if let Some((r, _)) = crate::http::parse_one(&buf, eof) {
            return Ok(r);
        }
        if eof {
            return Err(format!(
                "closed mid-response: {:?}",
                String::from_utf8_lossy(&buf)
            ));
        }
    }
}
