//! nginx as a real TLS upstream: the gateway talks HTTPS to an nginx that
//! proxies to the simulator. Checks that answers stream through it, that
//! the gateway verifies the certificate and the host name, and that the
//! gateway keeps its connections to nginx alive.
//!
//! Needs nginx installed (`scripts/install-nginx.sh`).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chatgate_tests::*;
use serde_json::Value;

cases!(
    answers_through_nginx,
    certificate_and_host_name_are_verified,
    connections_to_nginx_are_reused,
);

/// The nginx binary, or a failure that says how to install it.
fn nginx_binary() -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("nginx"))
            .find(|p| p.is_file())
    });
    let found = on_path.or_else(|| {
        let p = PathBuf::from("/usr/sbin/nginx");
        p.is_file().then_some(p)
    });
    found.unwrap_or_else(|| {
        panic!(
            "nginx is not installed (not on PATH, not /usr/sbin/nginx): \
             run scripts/install-nginx.sh (as root) and run the tests again"
        )
    })
}

/// One `server` of the generated configuration: a TLS listener with its
/// certificate, proxying to the upstream.
struct Site {
    certs: Certs,
    port: u16,
}

/// A running nginx (master and workers in their own process group), killed
/// with its workers when dropped.
struct Nginx {
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// The listening port of each site, in order.
    ports: Vec<u16>,
}

impl Nginx {
    /// Starts nginx with one TLS server per certificate set, each proxying
    /// to `backend` and offering the TLS versions `protocols` (nginx's
    /// `ssl_protocols`). Ports are picked free and picked again if nginx
    /// finds one taken by the time it binds.
    fn start(sites: Vec<Certs>, protocols: &str, backend: SocketAddr) -> Nginx {
        let bin = nginx_binary();
        let mut sites: Vec<Site> = sites
            .into_iter()
            .map(|certs| Site { certs, port: 0 })
            .collect();
        let mut last_error = String::new();
        for _attempt in 0..5 {
            for s in &mut sites {
                s.port = free_port();
            }
            let dir = tempfile::tempdir().expect("temp dir");
            write_config(dir.path(), &sites, protocols, backend);
            let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
            let stderr = std::fs::File::create(dir.path().join("stderr.log")).expect("stderr");
            let mut cmd = Command::new(&bin);
            cmd.args(["-p", &p(""), "-c", &p("nginx.conf"), "-g", "daemon off;"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr)
                .process_group(0);
            // SAFETY: prctl(2) is async-signal-safe; it only asks the kernel
            // to kill the nginx master if this test's thread goes away.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            let child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
            let mut nginx = Nginx {
                child: Some(child),
                ports: sites.iter().map(|s| s.port).collect(),
                dir,
            };
            match nginx.wait_ready() {
                Ok(()) => return nginx,
                Err(e) => last_error = e,
            }
            // Dropping `nginx` stops whatever started; a port taken between
            // picking and binding is worth another try, anything else not.
            if !last_error.contains("Address already in use") {
                break;
            }
        }
        panic!("nginx did not start: {last_error}");
    }

    /// Waits until every site accepts connections, or nginx exits.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(format!("exited with {status}: {}", self.logs()));
            }
            if self
                .ports
                .iter()
                .all(|p| TcpStream::connect(("127.0.0.1", *p)).is_ok())
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("not listening after {PATIENCE:?}: {}", self.logs()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// stderr and the error log.
    fn logs(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.dir.path().join(f)).unwrap_or_default();
        format!("{}{}", read("stderr.log"), read("error.log"))
    }

    /// The access log: `$connection $connection_requests ...` per line.
    fn access_log(&self) -> Vec<AccessLine> {
        std::fs::read_to_string(self.dir.path().join("access.log"))
            .unwrap_or_default()
            .lines()
            .map(AccessLine::parse)
            .collect()
    }

    /// The `https://localhost:PORT/v1` of site `i`.
    fn url(&self, i: usize) -> String {
        format!("https://localhost:{}/v1", self.ports[i])
    }

    /// Where the PEM of site `i`'s CA is.
    fn ca_path(&self, i: usize) -> String {
        self.dir
            .path()
            .join(format!("ca{i}.pem"))
            .to_string_lossy()
            .into_owned()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let group = child.id() as i32;
        // SIGTERM is nginx's fast shutdown: the master stops its workers and
        // exits. Whatever is left of the group after that gets SIGKILL.
        // SAFETY: kill(2) on the process group this guard created.
        unsafe {
            libc::kill(-group, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // SAFETY: as above; a group that is gone already gives ESRCH.
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// One access log line.
#[derive(Debug, Clone)]
struct AccessLine {
    connection: u64,
    requests: u64,
    rest: String,
}

impl AccessLine {
    fn parse(line: &str) -> AccessLine {
        let mut f = line.splitn(3, ' ');
        let mut num = || {
            f.next()
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("bad access log line: {line}"))
        };
        let (connection, requests) = (num(), num());
        AccessLine {
            connection,
            requests,
            rest: f.next().unwrap_or("").to_owned(),
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn write_config(dir: &Path, sites: &[Site], protocols: &str, backend: SocketAddr) {
    let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let mut servers = String::new();
    for (i, s) in sites.iter().enumerate() {
        std::fs::write(dir.join(format!("cert{i}.pem")), &s.certs.cert_pem).unwrap();
        std::fs::write(dir.join(format!("key{i}.pem")), &s.certs.key_pem).unwrap();
        std::fs::write(dir.join(format!("ca{i}.pem")), &s.certs.ca_pem).unwrap();
        servers.push_str(&format!(
            r#"
    server {{
        listen 127.0.0.1:{port} ssl;
        server_name localhost;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols {protocols};
        keepalive_timeout 60s;
        keepalive_requests 1000;
        location / {{
            proxy_pass http://simulator;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 60s;
        }}
    }}
"#,
            port = s.port,
            cert = p(&format!("cert{i}.pem")),
            key = p(&format!("key{i}.pem")),
        ));
    }
    // As root, nginx would switch its workers to `nobody`, who cannot enter
    // this private temp directory; keep them as the user running the tests.
    // SAFETY: geteuid(2) cannot fail.
    let user = if unsafe { libc::geteuid() } == 0 {
        "user root root;"
    } else {
        ""
    };
    let conf = format!(
        r#"{user}
worker_processes 1;
pid {pid};
error_log {error_log} info;
events {{ worker_connections 256; }}
http {{
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    log_format connections '$connection $connection_requests $server_port $ssl_protocol '
                           '"$request" $status $body_bytes_sent $request_time';
    access_log {access_log} connections;
    upstream simulator {{
        server {backend};
        keepalive 8;
    }}
{servers}}}
"#,
        pid = p("nginx.pid"),
        error_log = p("error.log"),
        tmp = dir.to_string_lossy(),
        access_log = p("access.log"),
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
}

/// A gateway in front of `upstream`, trusting `ca` if given.
fn gateway(bin: &str, upstream: &str, ca: Option<String>) -> Gw {
    let args = ca.map_or_else(Vec::new, |ca| vec!["--upstream-ca".to_owned(), ca]);
    Gw::start(
        bin,
        upstream,
        GwOptions {
            args,
            ..GwOptions::default()
        },
    )
}

fn answers_through_nginx(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let nginx = Nginx::start(vec![certs(&["localhost"])], "TLSv1.3", sim.addr);
    let gw = gateway(bin, &nginx.url(0), Some(nginx.ca_path(0)));

    let r = gw.chat(&body(""));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert!(
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .starts_with("You said: What is two plus two?")
    );
    assert!(v["choices"][0]["message"]["reasoning_content"].is_string());
    // Byte for byte what the simulator sent, through nginx.
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        sim.settled(0)["response"].as_str().unwrap()
    );

    // Streamed, paced by the simulator: the first event reaches the client
    // long before the last one was produced (nothing buffers the stream).
    let paced = stream_body(
        r#""x_sim":{"ttft_ms":0,"token_ms":25,"reasoning_tokens":12,"answer_tokens":12}"#,
    );
    let start = Instant::now();
    let mut c = Conn::open(gw.addr);
    c.send(&raw_request(
        "POST",
        "/v1/chat/completions",
        Some(&gw.key),
        Some(&paced),
    ));
    c.read_until("data: ");
    let first = start.elapsed();
    let r = c.response();
    let total = start.elapsed();
    assert_eq!(r.status, 200);
    assert!(
        total >= Duration::from_millis(500) && first * 3 < total,
        "first event after {first:?}, whole stream {total:?}"
    );
    let events = r.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks = r.chunks();
    let usage = chunks.last().unwrap();
    assert!(usage["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    let entry = sim.settled(1);
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        entry["response"].as_str().unwrap()
    );
    assert_eq!(entry["outcome"], "completed");
    let recs = gw.ledger_len(2);
    assert!(recs.iter().all(|r| r.status == 200 && r.complete));

    // nginx saw both over TLS 1.3.
    eventually("two access log lines", || nginx.access_log().len() >= 2);
    let log = nginx.access_log();
    assert!(
        log.iter().all(|l| l.rest.contains(" TLSv1.3 ")
            && l.rest
                .contains("\"POST /v1/chat/completions HTTP/1.1\" 200")),
        "{log:?}"
    );
}

fn certificate_and_host_name_are_verified(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    // Site 0: a certificate for localhost; site 1: one for another name,
    // from another CA.
    let nginx = Nginx::start(
        vec![certs(&["localhost"]), certs(&["other.example"])],
        "TLSv1.2 TLSv1.3",
        sim.addr,
    );

    // Trusting only the webpki roots: the certificate does not verify.
    let gw = gateway(bin, &nginx.url(0), None);
    for b in [body(""), stream_body("")] {
        let r = gw.chat(&b);
        let (status, kind, code, _) = r.error();
        assert_eq!(
            (status, kind.as_str(), code.as_str()),
            (502, "upstream_error", "upstream_error")
        );
        let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(
            msg.contains("TLS") && msg.contains("certificate") && msg.contains("UnknownIssuer"),
            "{msg}"
        );
    }

    // Trusting the CA that signed a certificate for another name: the name
    // does not match.
    let gw = gateway(bin, &nginx.url(1), Some(nginx.ca_path(1)));
    let r = gw.chat(&body(""));
    assert_eq!(r.status, 502);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("TLS") && msg.contains("certificate") && msg.contains("not valid for name"),
        "{msg}"
    );
    assert!(msg.contains("localhost"), "{msg}");

    // Trusting another CA of the same name (every test CA is called
    // "chatgate test CA") for the right host name: the signature does not
    // verify.
    let gw = gateway(bin, &nginx.url(0), Some(nginx.ca_path(1)));
    let r = gw.chat(&body(""));
    assert_eq!(r.status, 502);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("TLS") && msg.contains("certificate") && msg.contains("BadSignature"),
        "{msg}"
    );

    // None of these reached the simulator; every failure was metered.
    assert!(sim.journal().is_empty());
    assert!(gw.ledger_len(1).iter().all(|r| r.status == 502));
    // Handshakes failed before any HTTP request: nginx logged none.
    assert!(nginx.access_log().is_empty(), "{:?}", nginx.access_log());

    // And with the right CA the same nginx answers.
    let gw = gateway(bin, &nginx.url(0), Some(nginx.ca_path(0)));
    assert_eq!(gw.chat(&body("")).status, 200);
}

fn connections_to_nginx_are_reused(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    // TLS 1.2 here (nginx 1.22's default set has no TLS 1.3), 1.3 above.
    let nginx = Nginx::start(vec![certs(&["localhost"])], "TLSv1.2", sim.addr);
    let mut gw = Gw::start(
        bin,
        &nginx.url(0),
        GwOptions {
            args: [
                "--upstream-ca",
                &nginx.ca_path(0),
                "--admin-listen",
                "127.0.0.1:0",
            ]
            .map(str::to_owned)
            .to_vec(),
            ..GwOptions::default()
        },
    );
    let admin = gw.admin_addr();

    // Several sequential requests on one client connection, streamed and not.
    let mut c = Conn::open(gw.addr);
    let n = 6;
    for i in 0..n {
        if i > 0 {
            // A stream's last event can reach the client before nginx's
            // chunked terminator reaches the gateway; the connection goes
            // back to the pool only then. Reuse is what is tested here, not
            // that race: wait for the connection to be idle again.
            eventually("the connection back in the pool", || {
                metric(admin, "chatgate_upstream_pool_idle") == 1
            });
        }
        let b = if i % 2 == 0 {
            body("")
        } else {
            stream_body("")
        };
        c.send(&raw_request(
            "POST",
            "/v1/chat/completions",
            Some(&gw.key),
            Some(&b),
        ));
        let r = c.response();
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        if i % 2 == 1 {
            assert_eq!(r.events().last().map(String::as_str), Some("[DONE]"));
        }
    }
    eventually("an access log line per request", || {
        nginx.access_log().len() >= n
    });
    let log = nginx.access_log();
    assert_eq!(log.len(), n, "{log:?}");
    // One TLS connection from the gateway to nginx, its request counter
    // going 1, 2, 3, ...
    let first = log[0].connection;
    assert!(log.iter().all(|l| l.connection == first), "{log:?}");
    assert!(log.iter().all(|l| l.rest.contains(" TLSv1.2 ")), "{log:?}");
    let counts: Vec<u64> = log.iter().map(|l| l.requests).collect();
    assert_eq!(counts, (1..=n as u64).collect::<Vec<_>>(), "{log:?}");
    // nginx in turn kept one connection to the simulator (upstream keepalive).
    let journal = sim.journal();
    assert_eq!(journal.len(), n);
    let conns: Vec<&Value> = journal.iter().map(|e| &e["connection"]).collect();
    assert!(conns.iter().all(|c| *c == conns[0]), "{conns:?}");
}
