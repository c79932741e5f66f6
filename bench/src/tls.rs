//! TLS on the listeners: what serving TLS itself costs chatgate, beside
//! nginx terminating TLS in the same run (`--only tls`).
//!
//! - The upstream is the lean comparison's static nginx (the fixed
//!   460-byte completion), so the proxies' own cost dominates.
//! - nginx is the lean reference with `listen … ssl`, TLS 1.2 and 1.3, a
//!   shared session cache and session tickets on (`ssl_session_cache
//!   shared:SSL:10m; ssl_session_tickets on;`); chatgate serves the same
//!   certificate and key with `--tls-cert`/`--tls-key` (its session cache
//!   and tickets are always on), one worker thread each.
//! - Three measures, CPU per request from the proxy's utime + stime:
//!   - **kept alive**: wrk over `https://`, 8 connections, many requests
//!     each (the TLS records' cost);
//!   - **full handshake**: every request on a new connection with a new
//!     TLS 1.3 handshake (the client keeps no session), `Connection:
//!     close`, from 4 client threads;
//!   - **resumed**: the same, the client resuming with the ticket it was
//!     given (the fraction resumed is reported).

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::procs::{Child, cpu_ticks, free_port, ticks_per_second, wait_accepting};
use crate::{Contender, Setup, gateway_with, nginx_args, ratio, write_conf};

/// Client threads opening connections in the handshake measures.
const HANDSHAKE_THREADS: usize = 4;

/// A throwaway CA and a certificate for 127.0.0.1 and localhost, written
/// to `dir`; the paths of the certificate, its key, and the CA's DER.
fn certificates(dir: &Path) -> (String, String, Vec<u8>) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().expect("key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "chatgate bench CA");
    let ca_cert = ca.self_signed(&ca_key).expect("CA");
    let key = KeyPair::generate().expect("key");
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .expect("params")
        .signed_by(&key, &ca_cert, &ca_key)
        .expect("leaf");
    let write = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("certificate file");
        p.to_string_lossy().into_owned()
    };
    (
        write("tls-cert.pem", leaf.pem()),
        write("tls-key.pem", key.serialize_pem()),
        ca_cert.der().to_vec(),
    )
}

/// The reference: the lean nginx with TLS on its listener.
fn write_proxy_conf(
    dir: &Path,
    port: u16,
    upstream: SocketAddr,
    cert: &str,
    key: &str,
    fd_limit: u64,
) -> std::path::PathBuf {
    write_conf(
        dir,
        &format!("tls-{port}"),
        &format!(
            "worker_processes 1;\nworker_rlimit_nofile {fd_limit};\nevents {{ worker_connections 4096; }}"
        ),
        &format!(
            "  access_log off;\n  keepalive_requests 100000000;\n  \
             upstream up {{ server {upstream}; keepalive 64; keepalive_requests 100000000; }}\n  \
             server {{\n    listen 127.0.0.1:{port} ssl;\n    ssl_certificate {cert};\n    ssl_certificate_key {key};\n    \
             ssl_protocols TLSv1.2 TLSv1.3;\n    ssl_session_cache shared:SSL:10m;\n    ssl_session_tickets on;\n    \
             location / {{\n      proxy_pass http://up;\n      proxy_http_version 1.1;\n      \
             proxy_set_header Connection \"\";\n      proxy_buffering off;\n    }}\n  }}\n"
        ),
    )
}

/// What one handshake run measured.
struct Handshakes {
    /// Connections that got their answer.
    done: u64,
    /// Of them, how many resumed a session.
    resumed: u64,
    /// Connections that failed.
    failed: u64,
    /// The proxy's CPU per connection, µs.
    cpu_us: Option<f64>,
}

/// For `secs`, each of [`HANDSHAKE_THREADS`] threads opens a connection,
/// does its handshake (resuming when `resume`), sends one request with
/// `Connection: close` and reads the answer to the end, again and again.
fn handshakes(t: &Contender, ca_der: &[u8], request: &[u8], resume: bool, secs: u64) -> Handshakes {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca_der.to_vec().into()).expect("CA");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    if !resume {
        config.resumption = rustls::client::Resumption::disabled();
    }
    let config = Arc::new(config);
    let stop = Arc::new(AtomicBool::new(false));
    let (done, resumed, failed) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let before = cpu_ticks(&t.pids);
    let threads: Vec<_> = (0..HANDSHAKE_THREADS)
        .map(|_| {
            let (config, stop, request) =
                (Arc::clone(&config), Arc::clone(&stop), request.to_vec());
            let (done, resumed, failed) =
                (Arc::clone(&done), Arc::clone(&resumed), Arc::clone(&failed));
            let addr = t.addr;
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match one_connection(addr, &config, &request) {
                        Ok(was_resumed) => {
                            done.fetch_add(1, Ordering::Relaxed);
                            if was_resumed {
                                resumed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(_) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::Relaxed);
    for th in threads {
        let _ = th.join();
    }
    let cpu = cpu_ticks(&t.pids) - before;
    let done = done.load(Ordering::Relaxed);
    Handshakes {
        done,
        resumed: resumed.load(Ordering::Relaxed),
        failed: failed.load(Ordering::Relaxed),
        cpu_us: (done > 0).then(|| cpu as f64 / ticks_per_second() as f64 * 1e6 / done as f64),
    }
}

/// One connection: handshake, one request, its answer to the close.
/// Whether the session was resumed.
fn one_connection(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
    request: &[u8],
) -> Result<bool, String> {
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let conn =
        rustls::ClientConnection::new(Arc::clone(config), name).map_err(|e| e.to_string())?;
    let sock = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    let _ = sock.set_nodelay(true);
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut tls = rustls::StreamOwned::new(conn, sock);
    tls.write_all(request).map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    match tls.read_to_end(&mut answer) {
        Ok(_) => {}
        // A peer that closes without close_notify after a complete answer.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
        Err(e) => return Err(e.to_string()),
    }
    if !answer.starts_with(b"HTTP/1.1 200") {
        return Err(String::from_utf8_lossy(&answer[..answer.len().min(80)]).into_owned());
    }
    Ok(tls.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed))
}

/// Appends the TLS tables to `report`.
pub(crate) fn report(report: &mut String, s: &Setup<'_>) {
    let Setup {
        tools,
        dir,
        key,
        lua,
        secs,
        fd_limit,
        ..
    } = *s;
    let (cert, cert_key, ca_der) = certificates(dir);
    let (completion_port, stream_port) = (free_port(), free_port());
    let up_conf = crate::lean::write_upstream_conf(dir, completion_port, stream_port);
    let _upstream = Child::spawn(
        &tools.nginx,
        &nginx_args(dir, &up_conf),
        &[],
        &dir.join("tls-up.stderr"),
    );
    let up: SocketAddr = ([127, 0, 0, 1], completion_port).into();
    wait_accepting(up, Instant::now());
    let proxy_port = free_port();
    let conf = write_proxy_conf(dir, proxy_port, up, &cert, &cert_key, fd_limit);
    let nginx = Child::spawn(
        &tools.nginx,
        &nginx_args(dir, &conf),
        &[],
        &dir.join(format!("tls-{proxy_port}.stderr")),
    );
    let nginx_addr: SocketAddr = ([127, 0, 0, 1], proxy_port).into();
    wait_accepting(nginx_addr, Instant::now());
    let worker = crate::procs::nginx_workers(nginx.pid(), 1);
    let upstream = format!("http://{up}/v1");
    let tls_gateway = |bin: &Path, name: &str| {
        let mut g = gateway_with(
            bin,
            dir,
            &[
                "--upstream",
                &upstream,
                "--log-level",
                "warn",
                "--worker-threads",
                "1",
                "--tls-cert",
                &cert,
                "--tls-key",
                &cert_key,
            ],
            &format!("tls-{name}"),
        );
        let addr = g.listening_address();
        (g, addr)
    };
    let (smol, smol_addr) = tls_gateway(&tools.smol, "smol");
    let (tokio, tokio_addr) = tls_gateway(&tools.tokio, "tokio");
    let targets = [
        Contender {
            name: "nginx (lean, TLS)",
            addr: nginx_addr,
            pids: worker,
        },
        Contender {
            name: "chatgate-smol",
            addr: smol_addr,
            pids: vec![smol.pid()],
        },
        Contender {
            name: "chatgate-tokio",
            addr: tokio_addr,
            pids: vec![tokio.pid()],
        },
    ];
    let body_path = dir.join("tls-nonstream.json");
    std::fs::write(&body_path, crate::NONSTREAM).expect("body file");

    let _ = writeln!(
        report,
        "\n### TLS on the listener: kept-alive requests, 8 connections, static upstream (wrk -t1 over https, 2 s warm-up, {secs} s)\n"
    );
    let _ = writeln!(
        report,
        "| target | requests/s | proxy CPU per request | × nginx | p50 | p99 |"
    );
    let _ = writeln!(report, "|---|---|---|---|---|---|");
    let mut rows = Vec::new();
    for t in &targets {
        let url = format!("https://localhost:{}/v1/chat/completions", t.addr.port());
        crate::wrk_url(&tools.wrk, &url, lua, &body_path, key, 8, 2, 1);
        let (r, per) = crate::measured_url(&tools.wrk, t, &url, lua, &body_path, key, 8, secs, 1);
        rows.push((t.name, r, per));
    }
    let nginx_cpu = rows[0].2;
    for (name, r, per) in &rows {
        let _ = writeln!(
            report,
            "| {name} | {:.0} | {} | {} | {:.2} ms | {:.2} ms |{}",
            r.rps,
            per.map_or("—".into(), |v| format!("{v:.1} µs")),
            ratio(*per, nginx_cpu),
            r.p50_ms,
            r.p99_ms,
            if r.bad > 0 {
                format!(" ({} failed)", r.bad)
            } else {
                String::new()
            },
        );
    }

    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
        crate::NONSTREAM.len(),
        crate::NONSTREAM
    );
    for resume in [false, true] {
        let what = if resume {
            "resumed (the client presents its ticket)"
        } else {
            "full TLS 1.3 handshake"
        };
        let _ = writeln!(
            report,
            "\n### TLS on the listener: a new connection per request, {what} ({HANDSHAKE_THREADS} client threads, {secs} s)\n"
        );
        let _ = writeln!(
            report,
            "| target | connections/s | resumed | proxy CPU per connection | × nginx |"
        );
        let _ = writeln!(report, "|---|---|---|---|---|");
        let mut rows = Vec::new();
        for t in &targets {
            // Warm-up: the session caches and the upstream pools.
            let _ = handshakes(t, &ca_der, request.as_bytes(), resume, 1);
            let h = handshakes(t, &ca_der, request.as_bytes(), resume, secs);
            rows.push((t.name, h));
        }
        let nginx_cpu = rows[0].1.cpu_us;
        for (name, h) in &rows {
            let _ = writeln!(
                report,
                "| {name} | {:.0} | {:.0} % | {} | {} |{}",
                h.done as f64 / secs as f64,
                if h.done > 0 {
                    h.resumed as f64 * 100.0 / h.done as f64
                } else {
                    0.0
                },
                h.cpu_us.map_or("—".into(), |v| format!("{v:.1} µs")),
                ratio(h.cpu_us, nginx_cpu),
                if h.failed > 0 {
                    format!(" ({} failed)", h.failed)
                } else {
                    String::new()
                },
            );
        }
    }
    drop((smol, tokio, nginx));
}
