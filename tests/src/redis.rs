//! Redis for the tests: a `redis-server` child on a free port, and a
//! blocking client speaking RESP through core's codec.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::wait::PATIENCE;

/// A `redis-server` child process on a free loopback port, without
/// persistence; killed when dropped.
pub struct RedisServer {
    child: Child,
    /// Its address.
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts one (`redis-server` must be installed:
    /// `scripts/install-package.sh redis-server redis-server`).
    pub fn start() -> RedisServer {
        RedisServer::on_a_free_port(&[])
    }

    /// Starts one on `port` (to restart a stopped one at the same address).
    pub fn start_on(port: u16) -> RedisServer {
        RedisServer::launch(port, &[])
            .unwrap_or_else(|| panic!("redis-server could not serve port {port}"))
    }

    /// On a port the kernel just said was free. Tests run in parallel, and
    /// a port released by its probe can be handed to another test's probe
    /// too: then one server cannot bind, and its test would talk to the
    /// other test's server until that one stops (a connection reset
    /// mid-test). A launch that is not the one serving is retried on
    /// another port.
    fn on_a_free_port(extra: &[&str]) -> RedisServer {
        for _ in 0..10 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            if let Some(server) = RedisServer::launch(port, extra) {
                return server;
            }
        }
        panic!("redis-server could not get a port in ten tries");
    }

    /// `redis-server` on `port` with `extra` arguments, once it accepts
    /// connections; `None` (and stopped) if it exited instead, or if what
    /// answers on the port is another process (`INFO`'s `process_id`, when
    /// the server answers it without a password).
    fn launch(port: u16, extra: &[&str]) -> Option<RedisServer> {
        let dir = tempfile::tempdir().expect("temp dir");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
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
        let mut server = RedisServer {
            child,
            addr,
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
        let info = RedisClient::connect(addr).cmd(&[b"INFO", b"server"]);
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

    /// `redis://127.0.0.1:port`
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Starts one on a free port with extra configuration (`requirepass`,
    /// `user` …), as `redis-server` arguments: `["--requirepass", "pw"]`.
    /// Readiness is a `PING` answered (with `-NOAUTH` when a password is
    /// required), not just a connection accepted.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let server = RedisServer::on_a_free_port(extra);
        let mut c = RedisClient::connect(server.addr);
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

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blocking Redis connection speaking RESP through core's `redis_protocol`
/// ([`chatgate_core::parse_redis_reply`], [`chatgate_core::encode_redis_command`]).
pub struct RedisClient {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl RedisClient {
    /// Connects.
    pub fn connect(addr: SocketAddr) -> RedisClient {
        let stream = TcpStream::connect(addr).expect("connect to redis");
        stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
        RedisClient {
            stream,
            buf: Vec::new(),
        }
    }

    /// Sends one command and reads its reply.
    pub fn cmd(&mut self, args: &[&[u8]]) -> chatgate_core::RedisReply {
        use chatgate_core::{RedisReplyLimits, encode_redis_command, parse_redis_reply};
        let mut out = Vec::new();
        encode_redis_command(&mut out, args);
        self.stream.write_all(&out).expect("send to redis");
        let mut b = [0u8; 4096];
        loop {
            if let Some((r, used)) =
                parse_redis_reply(&self.buf, &RedisReplyLimits::default()).expect("RESP")
            {
                self.buf.drain(..used);
                return r;
            }
            let n = self.stream.read(&mut b).expect("read from redis");
            assert!(n > 0, "redis closed the connection");
            self.buf.extend_from_slice(&b[..n]);
        }
    }
}
