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
