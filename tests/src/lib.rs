//! Support for the end-to-end tests: start the real binaries, talk HTTP to
//! them over real sockets, read their ledgers and the simulator's journal.
//!
//! Every process listens on port 0 and prints the address it got, so tests
//! never race for ports; every process is killed when its handle drops, so
//! a failing test leaves nothing running.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use chatgate_core::LedgerRecord;
use chatgate_testkit::parse_response;
use serde_json::Value;

pub use chatgate_testkit::sse_data;

/// Generates one `#[test]` per runtime for each case: `cases!(a, b)` makes
/// `smol::a`, `tokio::a`, `smol::b`, `tokio::b`, each calling the case
/// function with the binary's name, so one suite covers both runtimes.
#[macro_export]
macro_rules! cases {
    ($($case:ident),* $(,)?) => {
        mod smol {
            $( #[test] fn $case() { super::$case("chatgate-smol") } )*
        }
        mod tokio {
            $( #[test] fn $case() { super::$case("chatgate-tokio") } )*
        }
    };
}

/// The gateway binaries every end-to-end test runs against.
pub const RUNTIMES: &[&str] = &["chatgate-smol", "chatgate-tokio"];

/// How long to wait for anything that should be quick.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// The model id.
pub const MODEL: &str = "reasoning-model-k3";

/// Where the binaries are: `CHATGATE_BIN_DIR`, or the target directory this
/// test binary was built into.
pub fn bin_path(name: &str) -> PathBuf {
    if let Ok(dir) = std::env::var("CHATGATE_BIN_DIR") {
        return Path::new(&dir).join(name);
    }
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> → target/<profile>/<name>; a binary of
    // this crate (target/<profile>/<bin>) is already there.
    let mut dir = exe.parent().expect("target directory");
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir = dir.parent().expect("target directory");
    }
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build the binaries first (cargo build --workspace --bins)",
        path.display()
    );
    path
}

/// A command for one of the binaries, insulated from the environment the
/// tests run in: no `CHATGATE_*` variable reaches it unless the test sets
/// it, so a developer's own settings (a provider key, a listen address, a
/// config file) cannot change a test's outcome. On Linux the child also
/// gets SIGKILL when the thread that started it ends (a test that panics,
/// or a runner killed outright), so no gateway outlives its test.
pub fn child_command(bin: &str) -> Command {
    let mut cmd = Command::new(bin_path(bin));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("CHATGATE_") {
            cmd.env_remove(k);
        }
    }
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: getpid/getppid/prctl are async-signal-safe and the closure
        // allocates nothing, as pre_exec requires.
        let parent = unsafe { libc::getpid() };
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have gone before the prctl took effect.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
    }
    cmd
}

/// A child process, killed when dropped.
pub struct Proc {
    child: Option<Child>,
    /// Lines of stdout after the first.
    pub stdout: mpsc::Receiver<String>,
    /// Where stderr goes.
    pub stderr_path: PathBuf,
}

impl Proc {
    /// Starts `bin args…` with extra environment, stderr to `stderr_path`.
    pub fn spawn(bin: &str, args: &[String], env: &[(String, String)], stderr_path: &Path) -> Proc {
        let stderr = std::fs::File::create(stderr_path).expect("stderr file");
        let mut cmd = child_command(bin);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {bin}: {e}"));
        let out = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Proc {
            child: Some(child),
            stdout: rx,
            stderr_path: stderr_path.to_owned(),
        }
    }

    /// The next stdout line, or a panic with stderr after [`PATIENCE`].
    pub fn line(&mut self) -> String {
        match self.stdout.recv_timeout(PATIENCE) {
            Ok(l) => l,
            Err(_) => panic!("no output; stderr:\n{}", self.stderr()),
        }
    }

    /// Everything the process wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// stderr once `ready` holds for it, or a panic after [`PATIENCE`]
    /// (access lines are written in batches, up to 100 ms late).
    pub fn stderr_when(&self, what: &str, ready: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let text = self.stderr();
            if ready(&text) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "stderr never had {what}:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    /// Sends a signal.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid has no memory-safety concerns.
        unsafe {
            libc::kill(self.pid(), sig);
        }
    }

    /// Waits for the process to exit.
    pub fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        let child = self.child.as_mut()?;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs a command to completion: (status, stdout, stderr).
pub fn run(bin: &str, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = child_command(bin);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run binary");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn address_from(line: &str) -> SocketAddr {
    let url = line.split_whitespace().last().expect("an address");
    let hostport = url.trim_start_matches("http://").trim_end_matches("/v1");
    hostport
        .parse()
        .unwrap_or_else(|_| panic!("not an address: {line}"))
}

/// A running simulator.
pub struct Sim {
    /// The process.
    pub proc: Proc,
    /// Its address.
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Sim {
    /// Starts `bin sim --listen 127.0.0.1:0 args…`.
    pub fn start(bin: &str, args: &[&str], env: &[(&str, &str)]) -> Sim {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut all = vec!["sim".to_owned(), "--listen".into(), "127.0.0.1:0".into()];
        all.extend(args.iter().map(|s| s.to_string()));
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut proc = Proc::spawn(bin, &all, &env, &dir.path().join("sim.stderr"));
        let addr = address_from(&proc.line());
        Sim {
            proc,
            addr,
            _dir: dir,
        }
    }

    /// `http://addr/v1`
    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The journal: one object per chat request received.
    pub fn journal(&self) -> Vec<Value> {
        let r = request(self.addr, "GET", "/_sim/journal", None, None);
        assert_eq!(r.status, 200);
        serde_json::from_slice::<Vec<Value>>(&r.body).expect("journal JSON")
    }

    /// Sets the fault for every request that chooses none
    /// (`POST /_sim/fault`), e.g. `{"fault":"reject","status":503}`.
    pub fn set_fault(&self, fault: &str) {
        let r = request(self.addr, "POST", "/_sim/fault", None, Some(fault));
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    }

    /// Clears the fault set with [`Sim::set_fault`].
    pub fn clear_fault(&self) {
        assert_eq!(
            request(self.addr, "DELETE", "/_sim/fault", None, None).status,
            200
        );
    }

    /// Waits until the journal entry `i` has left `in_progress`.
    pub fn settled(&self, i: usize) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let j = self.journal();
            if let Some(e) = j.get(i) {
                if e["outcome"] != "in_progress" {
                    return e.clone();
                }
            }
            assert!(
                Instant::now() < deadline,
                "journal entry {i} did not settle: {j:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// How to start a gateway.
#[derive(Default, Clone)]
pub struct GwOptions {
    /// Extra arguments to `serve`.
    pub args: Vec<String>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// Limits of the test key (`--rpm`, `--tpm`).
    pub rpm: Option<u64>,
    /// Tokens per minute of the test key.
    pub tpm: Option<u64>,
    /// More keys to mint into the same keys file: (name, rpm, tpm).
    pub extra_keys: Vec<(String, Option<u64>, Option<u64>)>,
}

/// A running gateway with a minted key.
pub struct Gw {
    /// The process.
    pub proc: Proc,
    /// Its address.
    pub addr: SocketAddr,
    /// A valid key (named `test`).
    pub key: String,
    /// Every key by name (`test` and the extra ones).
    pub keys: std::collections::HashMap<String, String>,
    /// Its working directory (keys file, ledger).
    pub dir: tempfile::TempDir,
    /// The binary.
    pub bin: String,
}

impl Gw {
    /// Mints the keys with `keys new` and starts `serve` in front of `upstream`.
    pub fn start(bin: &str, upstream: &str, opts: GwOptions) -> Gw {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut keys = std::collections::HashMap::new();
        let mut wanted = vec![("test".to_owned(), opts.rpm, opts.tpm)];
        wanted.extend(opts.extra_keys.iter().cloned());
        for (name, rpm, tpm) in wanted {
            keys.insert(name.clone(), mint(bin, dir.path(), &name, rpm, tpm));
        }
        let key = keys["test"].clone();
        let mut gw = Gw::start_with_keys(bin, upstream, opts, dir, key);
        gw.keys = keys;
        gw
    }

    /// The admin listener's address, from the line `serve` prints for it
    /// (started with `--admin-listen`).
    pub fn admin_addr(&mut self) -> SocketAddr {
        self.proc
            .line()
            .trim()
            .trim_start_matches("chatgate admin listening on http://")
            .parse()
            .expect("admin address")
    }

    /// Starts `serve` with the keys file already in `dir`.
    pub fn start_with_keys(
        bin: &str,
        upstream: &str,
        opts: GwOptions,
        dir: tempfile::TempDir,
        key: String,
    ) -> Gw {
        let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
        let mut args: Vec<String> = vec!["serve".into(), "--listen".into(), "127.0.0.1:0".into()];
        // An empty upstream: the pool comes from a config file in `opts`.
        if !upstream.is_empty() {
            args.extend(["--upstream".into(), upstream.into()]);
        }
        args.extend([
            "--keys".into(),
            p("keys.toml"),
            "--ledger".into(),
            p("ledger.jsonl"),
        ]);
        args.extend(opts.args.iter().cloned());
        let mut proc = Proc::spawn(bin, &args, &opts.env, &dir.path().join("gateway.stderr"));
        let addr = address_from(&proc.line());
        let keys = [("test".to_owned(), key.clone())].into_iter().collect();
        Gw {
            proc,
            addr,
            key,
            keys,
            dir,
            bin: bin.to_owned(),
        }
    }

    /// The ledger's records.
    pub fn ledger(&self) -> Vec<LedgerRecord> {
        let text =
            std::fs::read_to_string(self.dir.path().join("ledger.jsonl")).unwrap_or_default();
        text.lines()
            .map(|l| {
                LedgerRecord::from_line(l.as_bytes())
                    .unwrap_or_else(|e| panic!("bad ledger line {l}: {e}"))
            })
            .collect()
    }

    /// Waits until the ledger has `n` lines and returns them.
    pub fn ledger_len(&self, n: usize) -> Vec<LedgerRecord> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let l = self.ledger();
            if l.len() >= n {
                return l;
            }
            assert!(
                Instant::now() < deadline,
                "ledger has {} lines, expected {n}",
                l.len()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A chat request with this gateway's key.
    pub fn chat(&self, body: &str) -> Response {
        request(
            self.addr,
            "POST",
            "/v1/chat/completions",
            Some(&self.key),
            Some(body),
        )
    }
}

/// Mints a key named `name` into `dir/keys.toml` with `bin keys new`.
pub fn mint(bin: &str, dir: &Path, name: &str, rpm: Option<u64>, tpm: Option<u64>) -> String {
    let keys = dir.join("keys.toml").to_string_lossy().into_owned();
    let mut args = vec!["keys", "new", "--keys", &keys, "--name", name];
    let (rpm, tpm) = (rpm.map(|n| n.to_string()), tpm.map(|n| n.to_string()));
    if let Some(r) = &rpm {
        args.extend(["--rpm", r]);
    }
    if let Some(t) = &tpm {
        args.extend(["--tpm", t]);
    }
    let (code, out, err) = run(bin, &args, &[]);
    assert_eq!(code, 0, "keys new failed: {err}");
    out.lines()
        .next()
        .expect("the key on the first line")
        .to_owned()
}

/// A response as a client sees it.
pub use chatgate_testkit::ClientResponse as Response;

/// What the tests read from responses beyond status, headers and body.
pub trait ResponseExt {
    /// `(status, error.type, error.code, error.param)`.
    fn error(&self) -> (u16, String, String, Value);
    /// SSE `data:` payloads.
    fn events(&self) -> Vec<String>;
    /// Parsed chunks (not `[DONE]`).
    fn chunks(&self) -> Vec<Value>;
}

impl ResponseExt for Response {
    fn error(&self) -> (u16, String, String, Value) {
        let v = self.json();
        (
            self.status,
            v["error"]["type"].as_str().unwrap_or("").to_owned(),
            v["error"]["code"].as_str().unwrap_or("").to_owned(),
            v["error"]["param"].clone(),
        )
    }

    fn events(&self) -> Vec<String> {
        sse_data(&self.body)
    }

    fn chunks(&self) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e != "[DONE]")
            .map(|e| serde_json::from_str(&e).expect("chunk JSON"))
            .collect()
    }
}

/// One complete response from the start of `buf`, and the bytes it used.
pub fn parse_one(buf: &[u8], eof: bool) -> Option<(Response, usize)> {
    match parse_response(buf, eof) {
        Ok(Some((r, used))) if r.complete => Some((r, used)),
        _ => None,
    }
}

/// A client connection.
pub struct Conn {
    /// The socket.
    pub stream: TcpStream,
    buf: Vec<u8>,
    eof: bool,
}

impl Conn {
    /// Connects.
    pub fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
        Conn {
            stream,
            buf: Vec::new(),
            eof: false,
        }
    }

    /// Sends bytes.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// Reads one more piece; false at EOF.
    pub fn read_more(&mut self) -> bool {
        let mut b = [0u8; 65536];
        match self.stream.read(&mut b) {
            Ok(0) | Err(_) => {
                self.eof = true;
                false
            }
            Ok(n) => {
                self.buf.extend_from_slice(&b[..n]);
                true
            }
        }
    }

    /// Reads until one whole response arrived.
    pub fn response(&mut self) -> Response {
        loop {
            if let Some((r, used)) = parse_one(&self.buf, self.eof) {
                self.buf.drain(..used);
                return r;
            }
            if self.eof {
                panic!(
                    "connection closed mid-response: {:?}",
                    String::from_utf8_lossy(&self.buf)
                );
            }
            self.read_more();
        }
    }

    /// Bytes received and not yet parsed.
    pub fn pending(&self) -> &[u8] {
        &self.buf
    }

    /// Reads until `needle` appears in the received bytes.
    pub fn read_until(&mut self, needle: &str) {
        while !String::from_utf8_lossy(&self.buf).contains(needle) {
            assert!(
                self.read_more(),
                "closed before {needle:?}: {:?}",
                String::from_utf8_lossy(&self.buf)
            );
        }
    }

    /// True once the peer closed.
    pub fn closed(&mut self) -> bool {
        while !self.eof {
            if !self.read_more() {
                break;
            }
        }
        self.eof
    }
}

/// A raw request's bytes.
pub fn raw_request(method: &str, path: &str, key: Option<&str>, body: Option<&str>) -> Vec<u8> {
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: test\r\n");
    if let Some(k) = key {
        r.push_str(&format!("Authorization: Bearer {k}\r\n"));
    }
    if let Some(b) = body {
        r.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        ));
    } else {
        r.push_str("\r\n");
    }
    r.into_bytes()
}

/// One request on a new connection.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<&str>,
) -> Response {
    let mut c = Conn::open(addr);
    c.send(&raw_request(method, path, key, body));
    c.response()
}

/// A chat request body with one user message and extra members.
pub fn body(extra: &str) -> String {
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!(",{extra}")
    };
    format!(
        r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"What is two plus two?"}}]{extra}}}"#
    )
}

/// The same, streamed.
pub fn stream_body(extra: &str) -> String {
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!(",{extra}")
    };
    body(&format!(r#""stream":true{extra}"#))
}

/// Waits until `f` holds.
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

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
    Certs {
        ca_pem: ca_cert.pem(),
        cert_pem: leaf_cert.pem(),
        key_pem: leaf_key.serialize_pem(),
    }
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

/// Raises this process's open-files limit to its hard limit; returns the
/// limit now in force.
pub fn raise_fd_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) != 0 {
            return 1024;
        }
        l.rlim_cur = l.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut l);
        l.rlim_cur
    }
}

/// Resident memory of a process, KiB (from `/proc/<pid>/status`).
pub fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

impl Gw {
    /// Waits for the ledger line of `request_id` and returns it.
    pub fn ledger_line(&self, request_id: &str) -> LedgerRecord {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(r) = self
                .ledger()
                .into_iter()
                .find(|r| r.request_id == request_id)
            {
                return r;
            }
            assert!(Instant::now() < deadline, "no ledger line for {request_id}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// True while the process runs.
    pub fn alive(&mut self) -> bool {
        self.proc.wait_exit(Duration::ZERO).is_none()
    }

    /// True while the process runs (without reaping it; `&self`): it
    /// exists and is not a zombie.
    pub fn alive_pid(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.proc.pid()))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            })
            .unwrap_or(false)
    }
}

/// A small deterministic generator for hostile inputs (xorshift64*), so a
/// failing input can be reproduced from its seed.
pub struct Noise(u64);

impl Noise {
    /// Seeded (0 is replaced by a fixed odd constant).
    pub fn new(seed: u64) -> Noise {
        Noise(seed.max(1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// One request on a new connection that may fail: `None` unless a whole
/// response arrived (for load and crash tests, where failures are counted).
pub fn try_exchange(addr: SocketAddr, raw: &[u8]) -> Option<Response> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(PATIENCE)).ok()?;
    s.write_all(raw).ok()?;
    let mut buf = Vec::new();
    let mut b = [0u8; 16384];
    loop {
        if let Some((r, _)) = parse_one(&buf, false) {
            return Some(r);
        }
        match s.read(&mut b) {
            Ok(0) => return parse_one(&buf, true).map(|(r, _)| r),
            Ok(n) => buf.extend_from_slice(&b[..n]),
            Err(_) => return None,
        }
    }
}

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

/// A PostgreSQL server (the distribution's binaries, `pg_config --bindir`)
/// in a temporary directory on a free loopback port, trust authentication,
/// user `postgres`; stopped when dropped. Run as the `postgres` system user
/// when the tests run as root (PostgreSQL refuses root).
pub struct PgServer {
    child: Option<Child>,
    dir: tempfile::TempDir,
    bin: PathBuf,
    /// Its port.
    pub port: u16,
}

impl PgServer {
    /// Creates a cluster and starts it (`postgresql` must be installed:
    /// `scripts/install-package.sh postgresql pg_config`).
    pub fn start() -> PgServer {
        let out = Command::new("pg_config")
            .arg("--bindir")
            .output()
            .expect("pg_config is missing: run scripts/install-package.sh postgresql pg_config");
        let bin = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let dir = tempfile::tempdir().expect("temp dir");
        if is_root() {
            let ok = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "cannot give the data directory to the postgres user");
        }
        let status = as_postgres(&bin.join("initdb"))
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "-D",
            ])
            .arg(dir.path().join("data"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("initdb");
        assert!(status.success(), "initdb failed");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut pg = PgServer {
            child: None,
            dir,
            bin,
            port,
        };
        pg.restart();
        pg
    }

    /// Starts the server again after [`PgServer::stop`].
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let child = as_postgres(&self.bin.join("postgres"))
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(self.dir.path())
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            // Fewer connections than initdb picks on a roomy machine, about
            // what it picks in a small container: a gateway that opens one
            // per request fails here, not only there.
            .args(["-c", "max_connections=20"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("postgres");
        self.child = Some(child);
        let deadline = Instant::now() + PATIENCE;
        while postgres::Client::connect(&self.url(), postgres::NoTls).is_err() {
            assert!(Instant::now() < deadline, "postgres did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server at once (immediate shutdown).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SIGQUIT: PostgreSQL's immediate shutdown.
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGQUIT);
            }
            let _ = c.wait();
        }
    }

    /// `postgres://postgres@127.0.0.1:port/postgres`
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// A client.
    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.url(), postgres::NoTls).expect("connect to postgres")
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn as_postgres(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--",
        ])
        .arg(program);
        c
    } else {
        Command::new(program)
    }
}

impl RedisServer {
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

/// Gateways `(binary, extra serve arguments)` sharing one keys file with
/// one key named `name` (`rpm` requests and `tpm` tokens a minute), each
/// in its own directory.
pub fn gateways_sharing_a_key(
    sim: &Sim,
    name: &str,
    rpm: u64,
    tpm: u64,
    each: &[(&str, Vec<String>)],
) -> Vec<Gw> {
    let dir = tempfile::tempdir().unwrap();
    let key = mint(each[0].0, dir.path(), name, Some(rpm), Some(tpm));
    let keys = std::fs::read_to_string(dir.path().join("keys.toml")).unwrap();
    each.iter()
        .map(|(bin, args)| {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("keys.toml"), &keys).unwrap();
            Gw::start_with_keys(
                bin,
                &sim.url(),
                GwOptions {
                    args: args.clone(),
                    ..GwOptions::default()
                },
                dir,
                key.clone(),
            )
        })
        .collect()
}

/// A counter or gauge from the admin listener's `/metrics`.
pub fn metric(admin: SocketAddr, name: &str) -> u64 {
    let text = String::from_utf8(request(admin, "GET", "/metrics", None, None).body).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name}"))
}

/// An OTLP/HTTP trace receiver (`tests/otlp/receiver.py`) that decodes
/// every export with the official OpenTelemetry protobuf definitions (the
/// test venv from `clients/install.sh`), keeping the spans as JSON.
pub struct OtlpReceiver {
    /// The process.
    pub proc: Proc,
    /// Its address.
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl OtlpReceiver {
    /// Starts it on a free port.
    pub fn start() -> OtlpReceiver {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("repository root")
            .to_owned();
        let python = root.join(".cache/clients/venv/bin/python");
        assert!(
            python.exists(),
            "the test venv is missing: run clients/install.sh (it installs opentelemetry-proto)"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let script = root.join("tests/otlp/receiver.py");
        let mut proc = Proc::spawn(
            python.to_str().expect("a UTF-8 path"),
            &[script.to_string_lossy().into_owned()],
            &[("PYTHONDONTWRITEBYTECODE".into(), "1".into())],
            &dir.path().join("receiver.stderr"),
        );
        let addr = address_from(&proc.line());
        OtlpReceiver {
            proc,
            addr,
            _dir: dir,
        }
    }

    /// The base URL (`OTEL_EXPORTER_OTLP_ENDPOINT`'s form).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Value> {
        match request(self.addr, "GET", "/spans", None, None).json() {
            Value::Array(spans) => spans,
            other => panic!("not a list of spans: {other}"),
        }
    }

    /// Counts of exports, spans and undecodable bodies, and the last
    /// exports' headers.
    pub fn stats(&self) -> Value {
        request(self.addr, "GET", "/stats", None, None).json()
    }

    /// `ok`, `fail` (answer every export with `status`) or `stall` (never
    /// answer).
    pub fn set_mode(&self, mode: &str, status: u16) {
        let body = format!(r#"{{"mode":"{mode}","status":{status}}}"#);
        let r = request(self.addr, "POST", "/mode", None, Some(&body));
        assert_eq!(r.status, 200);
    }

    /// Posts `body` as an export (`application/x-protobuf`); the status.
    pub fn post(&self, body: &[u8]) -> u16 {
        let mut c = Conn::open(self.addr);
        let head = format!(
            "POST /v1/traces HTTP/1.1\r\nHost: test\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        c.send(head.as_bytes());
        c.send(body);
        c.response().status
    }
}
