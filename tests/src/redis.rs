//! Redis for the tests: a `redis-server` child on a free port, and a
//! blocking client speaking RESP through core's codec.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::wait::PATIENCE;

/// A `redis-server` child process on a free loopback port, without
/// persistence; killed when dropped.
pub struct RedisServer {
    child: Child,
    /// Its address.
    pub addr: SocketAddr,
    /// Its `--requirepass`, if started with one.
    pub password: Option<String>,
    /// Its certificates, when it speaks TLS only.
    pub tls: Option<Arc<RedisTls>>,
    _dir: tempfile::TempDir,
}

/// Certificates for Redis servers that speak TLS only (`--port 0
/// --tls-port P`): a throwaway CA and a leaf naming `127.0.0.1` (an IP
/// SAN: Sentinels and `CLUSTER SLOTS` announce addresses) and
/// `localhost`, in files the servers read; the same leaf for every server
/// of a set (as client certificate of replication and the cluster bus
/// too).
pub struct RedisTls {
    dir: tempfile::TempDir,
    /// The CA, PEM.
    pub ca_pem: String,
    config: Arc<rustls::ClientConfig>,
}

impl RedisTls {
    /// New certificates, written to a directory of their own.
    pub fn new() -> Arc<RedisTls> {
        let certs = crate::certs(&["127.0.0.1", "localhost"]);
        let dir = tempfile::tempdir().expect("temp dir");
        for (name, text) in [
            ("ca.pem", &certs.ca_pem),
            ("redis.crt", &certs.cert_pem),
            ("redis.key", &certs.key_pem),
        ] {
            std::fs::write(dir.path().join(name), text).expect("write a certificate");
        }
        let mut roots = rustls::RootCertStore::empty();
        use rustls::pki_types::pem::PemObject;
        roots
            .add(
                rustls::pki_types::CertificateDer::from_pem_slice(certs.ca_pem.as_bytes())
                    .expect("CA"),
            )
            .expect("CA");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        Arc::new(RedisTls {
            dir,
            ca_pem: certs.ca_pem,
            config: Arc::new(config),
        })
    }

    /// The CA file (for `--upstream-ca`, `redis-cli --cacert`).
    pub fn ca_file(&self) -> String {
        self.dir.path().join("ca.pem").display().to_string()
    }

    fn file(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// `redis-server` arguments serving TLS only on `port`.
    fn server_args(&self, port: u16) -> Vec<String> {
        [
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--tls-cert-file",
            &self.file("redis.crt"),
            "--tls-key-file",
            &self.file("redis.key"),
            "--tls-ca-cert-file",
            &self.file("ca.pem"),
            "--tls-auth-clients",
            "no",
            "--tls-replication",
            "yes",
        ]
        .map(str::to_owned)
        .to_vec()
    }

    /// The same, as lines of a configuration file (a Sentinel's).
    fn config_lines(&self, port: u16) -> String {
        self.server_args(port)
            .chunks(2)
            .map(|kv| format!("{} {}\n", kv[0].trim_start_matches("--"), kv[1]))
            .collect()
    }
}

impl RedisServer {
    /// Starts one (`redis-server` must be installed:
    /// `scripts/install-package.sh redis-server redis-server`).
    pub fn start() -> RedisServer {
        RedisServer::on_a_free_port(&[], None)
    }

    /// Starts one on `port` (to restart a stopped one at the same address).
    pub fn start_on(port: u16) -> RedisServer {
        RedisServer::launch(port, &[], None)
            .unwrap_or_else(|| panic!("redis-server could not serve port {port}"))
    }

    /// On a port the kernel just said was free. Tests run in parallel, and
    /// a port released by its probe can be handed to another test's probe
    /// too: then one server cannot bind, and its test would talk to the
    /// other test's server until that one stops (a connection reset
    /// mid-test). A launch that is not the one serving is retried on
    /// another port.
    fn on_a_free_port(extra: &[&str], tls: Option<&Arc<RedisTls>>) -> RedisServer {
        for _ in 0..10 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            if let Some(server) = RedisServer::launch(port, extra, tls) {
                return server;
            }
        }
        panic!("redis-server could not get a port in ten tries");
    }

    /// `redis-server` on `port` with `extra` arguments, once it accepts
    /// connections; `None` (and stopped) if it exited instead, or if what
    /// answers on the port is another process (`INFO`'s `process_id`, when
    /// the server answers it without a password).
    fn launch(port: u16, extra: &[&str], tls: Option<&Arc<RedisTls>>) -> Option<RedisServer> {
        let dir = tempfile::tempdir().expect("temp dir");
        let listen = match tls {
            Some(t) => t.server_args(port),
            None => vec!["--port".into(), port.to_string()],
        };
        let child = Command::new("redis-server")
            .args(&listen)
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(dir.path())
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "redis-server is missing: run scripts/install-package.sh redis-server redis-server",
            );
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let password = extra
            .iter()
            .position(|a| *a == "--requirepass")
            .and_then(|i| extra.get(i + 1))
            .map(|p| (*p).to_owned());
        let mut server = RedisServer {
            child,
            addr,
            password,
            tls: tls.cloned(),
            _dir: dir,
        };
        let deadline = Instant::now() + PATIENCE;
        while TcpStream::connect(addr).is_err() {
            if !matches!(server.child.try_wait(), Ok(None)) {
                return None;
            }
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        let pid = server.child.id();
        // Another test's server, stopping, may reset the connection: not
        // this one either.
        let info = server
            .try_client_plain()?
            .try_cmd(&[b"INFO", b"server"])
            .ok()?;
        if let chatgate_core::RedisReply::Bulk(Some(text)) = info {
            let text = String::from_utf8_lossy(&text);
            let serving = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("process_id:"))
                .and_then(|v| v.parse::<u32>().ok());
            if serving != Some(pid) {
                return None;
            }
        }
        Some(server)
    }

    /// `redis://127.0.0.1:port` (`rediss://` over TLS)
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// Starts one on a free port with extra configuration (`requirepass`,
    /// `user` …), as `redis-server` arguments: `["--requirepass", "pw"]`.
    /// Readiness is a `PING` answered (with `-NOAUTH` when a password is
    /// required), not just a connection accepted.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        RedisServer::start_with_tls(extra, None)
    }

    /// The same, speaking TLS only when `tls` is given.
    pub fn start_with_tls(extra: &[&str], tls: Option<&Arc<RedisTls>>) -> RedisServer {
        let server = RedisServer::on_a_free_port(extra, tls);
        let mut c = server.plain_client();
        assert!(
            matches!(
                c.cmd(&[b"PING"]),
                chatgate_core::RedisReply::Simple(_) | chatgate_core::RedisReply::Error(_)
            ),
            "redis-server does not answer"
        );
        server
    }
}

impl RedisServer {
    /// Its port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Kills it with SIGKILL (a crash: nothing written after).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A client on it, authenticated.
    pub fn client(&self) -> RedisClient {
        self.plain_client().authenticated(self.password.as_deref())
    }

    /// A client on it (over TLS when it speaks TLS), not authenticated.
    pub fn plain_client(&self) -> RedisClient {
        RedisClient::try_connect_with(self.addr, self.tls.as_deref()).expect("connect to redis")
    }

    /// A client on it without its password, if it is up.
    fn try_client_plain(&self) -> Option<RedisClient> {
        RedisClient::try_connect_with(self.addr, self.tls.as_deref())
    }

    /// A client on it, if it is up.
    pub fn try_client(&self) -> Option<RedisClient> {
        RedisClient::try_connect_with(self.addr, self.tls.as_deref())
            .map(|c| c.authenticated(self.password.as_deref()))
    }

    /// `INFO replication`'s `field`.
    pub fn replication(&self, field: &str) -> Option<String> {
        match self.client().cmd(&[b"INFO", b"replication"]) {
            chatgate_core::RedisReply::Bulk(Some(text)) => {
                String::from_utf8_lossy(&text).lines().find_map(|l| {
                    l.trim()
                        .strip_prefix(&format!("{field}:"))
                        .map(str::to_owned)
                })
            }
            _ => None,
        }
    }
}

/// A primary, one replica and three Sentinels (`redis-sentinel`, from
/// Debian's package) watching it under the name [`SentinelSet::NAME`],
/// with a failover started after two seconds without an answer.
pub struct SentinelSet {
    /// The data servers: the first started as the primary.
    pub servers: Vec<RedisServer>,
    sentinels: Vec<(Child, u16)>,
    password: Option<String>,
    tls: Option<Arc<RedisTls>>,
    _dir: tempfile::TempDir,
}

impl SentinelSet {
    /// The name the Sentinels monitor the primary under.
    pub const NAME: &'static str = "mymaster";

    /// Starts them and waits until the Sentinels know the replica and
    /// each other (a failover can then happen).
    pub fn start() -> SentinelSet {
        SentinelSet::start_with_password(None)
    }

    /// The same, every server (Sentinels included) requiring `password`.
    pub fn start_with_password(password: Option<&str>) -> SentinelSet {
        SentinelSet::launch(password, None)
    }

    /// The same, every server and Sentinel speaking TLS only (replication
    /// and the Sentinels' connections to the servers included).
    pub fn start_tls() -> SentinelSet {
        SentinelSet::launch(None, Some(RedisTls::new()))
    }

    fn launch(password: Option<&str>, tls: Option<Arc<RedisTls>>) -> SentinelSet {
        let auth: Vec<&str> = match password {
            Some(pw) => vec!["--requirepass", pw, "--masterauth", pw],
            None => vec![],
        };
        // A replica's first sync at once, not after 5 s.
        let mut args = vec!["--repl-diskless-sync-delay", "0"];
        args.extend(&auth);
        let primary = RedisServer::start_with_tls(&args, tls.as_ref());
        let port = primary.port().to_string();
        let mut args = vec!["--replicaof", "127.0.0.1", &port];
        args.extend(&auth);
        let replica = RedisServer::start_with_tls(&args, tls.as_ref());
        crate::wait::eventually("the replica is in sync", || {
            replica.replication("master_link_status").as_deref() == Some("up")
        });
        let dir = tempfile::tempdir().expect("temp dir");
        let mut sentinels = Vec::new();
        for i in 0..3 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            // Sentinel rewrites its file: one each, writable. The primary
            // is down after 4.5 s: longer than the failover tests'
            // `--redis-timeout` (3 s), so their gap is always seen.
            let conf = dir.path().join(format!("sentinel-{i}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "{listen}bind 127.0.0.1\ndir {}\n\
                     sentinel monitor {name} 127.0.0.1 {p} 2\n\
                     sentinel down-after-milliseconds {name} 4500\n\
                     sentinel failover-timeout {name} 5000\n\
                     sentinel parallel-syncs {name} 1\n{auth}",
                    dir.path().display(),
                    listen = match &tls {
                        Some(t) => t.config_lines(port),
                        None => format!("port {port}\n"),
                    },
                    name = Self::NAME,
                    p = primary.port(),
                    auth = password.map_or_else(String::new, |pw| format!(
                        "sentinel auth-pass {} {pw}\nrequirepass {pw}\n",
                        Self::NAME
                    )),
                ),
            )
            .expect("sentinel.conf");
            let child = Command::new("redis-sentinel")
                .arg(&conf)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-sentinel is missing: run scripts/install-package.sh redis-sentinel redis-sentinel");
            sentinels.push((child, port));
        }
        let set = SentinelSet {
            servers: vec![primary, replica],
            sentinels,
            password: password.map(str::to_owned),
            tls,
            _dir: dir,
        };
        for (_, port) in &set.sentinels {
            let addr: SocketAddr = ([127, 0, 0, 1], *port).into();
            crate::wait::eventually("a Sentinel answers", || TcpStream::connect(addr).is_ok());
            crate::wait::eventually("the Sentinels know the replica and each other", || {
                let mut c = set.sentinel(addr);
                let replicas = c.cmd(&[b"SENTINEL", b"replicas", Self::NAME.as_bytes()]);
                let quorum = c.cmd(&[b"SENTINEL", b"ckquorum", Self::NAME.as_bytes()]);
                let others = c.cmd(&[b"SENTINEL", b"sentinels", Self::NAME.as_bytes()]);
                matches!(replicas, chatgate_core::RedisReply::Array(Some(v)) if !v.is_empty())
                    && matches!(quorum, chatgate_core::RedisReply::Simple(_))
                    && matches!(others, chatgate_core::RedisReply::Array(Some(v)) if v.len() == 2)
            });
        }
        set
    }

    /// `HOST:PORT,HOST:PORT,HOST:PORT` for `--redis-sentinels`.
    pub fn sentinels(&self) -> String {
        self.sentinels
            .iter()
            .map(|(_, p)| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The primary's port, as the first Sentinel says.
    pub fn primary_port(&self) -> u16 {
        let addr: SocketAddr = ([127, 0, 0, 1], self.sentinels[0].1).into();
        match self.sentinel(addr).cmd(&[
            b"SENTINEL",
            b"get-master-addr-by-name",
            Self::NAME.as_bytes(),
        ]) {
            chatgate_core::RedisReply::Array(Some(v)) => match &v[1] {
                chatgate_core::RedisReply::Bulk(Some(p)) => {
                    String::from_utf8_lossy(p).parse().expect("a port")
                }
                other => panic!("{other:?}"),
            },
            other => panic!("SENTINEL get-master-addr-by-name: {other:?}"),
        }
    }

    fn sentinel(&self, addr: SocketAddr) -> RedisClient {
        RedisClient::try_connect_with(addr, self.tls.as_deref())
            .expect("connect to a Sentinel")
            .authenticated(self.password.as_deref())
    }

    /// Its certificates, when it speaks TLS.
    pub fn tls(&self) -> Option<&Arc<RedisTls>> {
        self.tls.as_ref()
    }

    /// The data server on `port`.
    pub fn server(&mut self, port: u16) -> &mut RedisServer {
        self.servers
            .iter_mut()
            .find(|s| s.port() == port)
            .expect("a server of the set")
    }
}

impl Drop for SentinelSet {
    fn drop(&mut self) {
        for (c, _) in &mut self.sentinels {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A Redis Cluster of three primaries with a replica each, on six
/// `redis-server`s, made by `redis-cli --cluster create`; a primary's
/// failure is noticed after one second.
pub struct RedisCluster {
    /// The six nodes.
    pub nodes: Vec<RedisServer>,
    tls: Option<Arc<RedisTls>>,
}

impl RedisCluster {
    /// Starts the nodes, creates the cluster and waits until every slot
    /// is served.
    pub fn start() -> RedisCluster {
        RedisCluster::start_with_password(None)
    }

    /// The same, every node requiring `password`.
    pub fn start_with_password(password: Option<&str>) -> RedisCluster {
        RedisCluster::launch(password, None)
    }

    /// The same, every node speaking TLS only, the cluster bus and
    /// replication included (`tls-cluster yes`).
    pub fn start_tls() -> RedisCluster {
        RedisCluster::launch(None, Some(RedisTls::new()))
    }

    fn launch(password: Option<&str>, tls: Option<Arc<RedisTls>>) -> RedisCluster {
        let mut nodes = Vec::new();
        while nodes.len() < 6 {
            // The cluster bus is the port plus 10,000: both must be free.
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            if port > 55_000 || TcpListener::bind(("127.0.0.1", port + 10_000)).is_err() {
                continue;
            }
            // The node's file is in its own directory (`--dir`).
            let mut args = vec![
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                // 4.5 seconds: a loaded machine must not fail a node over
                // by itself, and a failover's gap outlasts the gateways'
                // `--redis-timeout` (3 s in the failover tests), so the
                // fallback they follow in it is always seen.
                "--cluster-node-timeout",
                "4500",
                // A replica's first sync at once, not after 5 s.
                "--repl-diskless-sync-delay",
                "0",
            ];
            if let Some(pw) = password {
                args.extend(["--requirepass", pw, "--masterauth", pw]);
            }
            if tls.is_some() {
                args.extend(["--tls-cluster", "yes"]);
            }
            if let Some(server) = RedisServer::launch(port, &args, tls.as_ref()) {
                nodes.push(server);
            }
        }
        let addrs: Vec<String> = nodes.iter().map(|n| n.addr.to_string()).collect();
        let mut cli = Command::new("redis-cli");
        if let Some(pw) = password {
            cli.args(["--no-auth-warning", "-a", pw]);
        }
        if let Some(t) = &tls {
            cli.args(["--tls", "--cacert", &t.ca_file()]);
        }
        let out = cli
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("redis-cli (from redis-tools) is missing");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = RedisCluster { nodes, tls };
        for n in &cluster.nodes {
            // A replica that never synchronised with its primary refuses
            // to replace it (its data would be too old).
            crate::wait::eventually("every replica is in sync", || {
                n.replication("role").as_deref() == Some("master")
                    || n.replication("master_link_status").as_deref() == Some("up")
            });
            crate::wait::eventually("every node sees the cluster ok", || {
                matches!(n.client().cmd(&[b"CLUSTER", b"INFO"]),
                    chatgate_core::RedisReply::Bulk(Some(t)) if String::from_utf8_lossy(&t).contains("cluster_state:ok"))
            });
        }
        cluster
    }

    /// `HOST:PORT,…` of every node, for `--redis-cluster`.
    pub fn seeds(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.addr.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The port of the primary serving `key` now (asked of a live node).
    pub fn primary_of(&self, key: &str) -> u16 {
        for n in &self.nodes {
            let Some(mut c) = n.try_client() else {
                continue;
            };
            let slot = match c.cmd(&[b"CLUSTER", b"KEYSLOT", key.as_bytes()]) {
                chatgate_core::RedisReply::Integer(s) => s,
                _ => continue,
            };
            if let chatgate_core::RedisReply::Array(Some(ranges)) = c.cmd(&[b"CLUSTER", b"SLOTS"]) {
                for r in ranges {
                    let chatgate_core::RedisReply::Array(Some(p)) = r else {
                        continue;
                    };
                    let (
                        chatgate_core::RedisReply::Integer(a),
                        chatgate_core::RedisReply::Integer(b),
                        chatgate_core::RedisReply::Array(Some(primary)),
                    ) = (&p[0], &p[1], &p[2])
                    else {
                        continue;
                    };
                    if (*a..=*b).contains(&slot)
                        && let chatgate_core::RedisReply::Integer(port) = primary[1]
                    {
                        return port as u16;
                    }
                }
            }
        }
        panic!("no node says which primary serves {key}");
    }

    /// Whether the node on `port` is a primary now.
    pub fn primary_of_port(&self, port: u16) -> bool {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .and_then(|n| n.replication("role"))
            .as_deref()
            == Some("master")
    }

    /// Its certificates, when it speaks TLS.
    pub fn tls(&self) -> Option<&Arc<RedisTls>> {
        self.tls.as_ref()
    }

    /// The node on `port`.
    pub fn node(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|s| s.port() == port)
            .expect("a node of the cluster")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a client reads and writes: a TCP stream, or TLS over one.
trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// A blocking Redis connection speaking RESP through core's `redis_protocol`
/// ([`chatgate_core::parse_redis_reply`], [`chatgate_core::encode_redis_command`]).
pub struct RedisClient {
    stream: Box<dyn Stream>,
    buf: Vec<u8>,
}

impl RedisClient {
    /// Connects, if something listens there.
    pub fn try_connect(addr: SocketAddr) -> Option<RedisClient> {
        RedisClient::try_connect_with(addr, None)
    }

    /// Connects, over TLS with `tls`' CA when given (the server's address
    /// verified against the certificate's IP SAN), if something listens
    /// there.
    pub fn try_connect_with(addr: SocketAddr, tls: Option<&RedisTls>) -> Option<RedisClient> {
        let tcp = TcpStream::connect(addr).ok()?;
        tcp.set_read_timeout(Some(PATIENCE)).ok()?;
        let stream: Box<dyn Stream> = match tls {
            None => Box::new(tcp),
            Some(t) => {
                let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
                let conn = rustls::ClientConnection::new(t.config.clone(), name).ok()?;
                Box::new(rustls::StreamOwned::new(conn, tcp))
            }
        };
        Some(RedisClient {
            stream,
            buf: Vec::new(),
        })
    }

    /// Connects.
    pub fn connect(addr: SocketAddr) -> RedisClient {
        RedisClient::try_connect(addr).expect("connect to redis")
    }

    /// Sends `AUTH` with `password`, if there is one.
    pub fn authenticated(mut self, password: Option<&str>) -> RedisClient {
        if let Some(pw) = password {
            self.cmd(&[b"AUTH", pw.as_bytes()]);
        }
        self
    }

    /// Sends one command and reads its reply.
    pub fn cmd(&mut self, args: &[&[u8]]) -> chatgate_core::RedisReply {
        self.try_cmd(args).expect("talk to redis")
    }

    /// The same, with the connection's failure as an error (what answered
    /// may not be the server asked for).
    pub fn try_cmd(&mut self, args: &[&[u8]]) -> std::io::Result<chatgate_core::RedisReply> {
        use chatgate_core::{RedisReplyLimits, encode_redis_command, parse_redis_reply};
        let mut out = Vec::new();
        encode_redis_command(&mut out, args);
        self.stream.write_all(&out)?;
        let mut b = [0u8; 4096];
        loop {
            let reply = parse_redis_reply(&self.buf, &RedisReplyLimits::default())
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidData))?;
            if let Some((r, used)) = reply {
                self.buf.drain(..used);
                return Ok(r);
            }
            let n = self.stream.read(&mut b)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.extend_from_slice(&b[..n]);
        }
    }
}

/// The ```toml block of SCALING.md whose first line is `first`, with the
/// value of `key` replaced by `value` (the tests' own servers for the
/// documentation's addresses): the configuration the documentation
/// shows, as the tests run it.
pub fn scaling_block(first: &str, key: &str, value: &str) -> String {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../SCALING.md"))
        .expect("SCALING.md");
    let block = doc
        .split("```toml\n")
        .skip(1)
        .filter_map(|b| b.split_once("```").map(|(b, _)| b))
        .find(|b| b.lines().next() == Some(first))
        .unwrap_or_else(|| panic!("SCALING.md has no toml block starting {first:?}"));
    let mut replaced = false;
    let out: Vec<String> = block
        .lines()
        .map(|l| match l.split_once(" = ") {
            Some((k, _)) if k == key => {
                replaced = true;
                format!("{key} = {value:?}")
            }
            _ => l.to_owned(),
        })
        .collect();
    assert!(replaced, "the block {first:?} sets no {key}");
    out.join("\n") + "\n"
}
