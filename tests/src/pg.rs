//! PostgreSQL for the tests: a throwaway cluster on a free port, started,
//! stopped and restarted; a streaming replica of it, promoted after the
//! primary is shut down or killed.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::wait::PATIENCE;

/// A PostgreSQL server (the distribution's binaries, `pg_config --bindir`)
/// in a temporary directory on a free loopback port, trust authentication,
/// user `postgres`; stopped when dropped. Run as the `postgres` system user
/// when the tests run as root (PostgreSQL refuses root).
pub struct PgServer {
    child: Option<Child>,
    dir: tempfile::TempDir,
    bin: PathBuf,
    /// Settings given on the command line (`-c k=v`).
    settings: Vec<String>,
    /// Its port.
    pub port: u16,
}

impl PgServer {
    /// Creates a cluster and starts it (`postgresql` must be installed:
    /// `scripts/install-package.sh postgresql pg_config`).
    pub fn start() -> PgServer {
        let (bin, dir) = init();
        // initdb's trust authentication covers replication connections
        // from 127.0.0.1 too (`host replication all 127.0.0.1/32 trust`),
        // which `replica` needs; `wal_level` is `replica` by default.
        let mut pg = PgServer {
            child: None,
            dir,
            bin,
            settings: Vec::new(),
            port: free_port(),
        };
        pg.restart();
        pg
    }

    /// A server with `ssl = on`: `certs`' leaf as its certificate, its CA
    /// as the CA client certificates must chain to (`ssl_ca_file`), and
    /// `hba` as its `pg_hba.conf` (after `local all all trust`, which the
    /// tests' own client uses, over the Unix socket).
    pub fn start_tls(certs: &crate::Certs, hba: &str) -> PgServer {
        let (bin, dir) = init();
        let data = dir.path().join("data");
        for (name, text) in [
            ("server.crt", certs.cert_pem.as_str()),
            ("server.key", certs.key_pem.as_str()),
            ("ca.crt", certs.ca_pem.as_str()),
            ("pg_hba.conf", &format!("local all all trust\n{hba}\n")),
        ] {
            let path = data.join(name);
            std::fs::write(&path, text).expect("write a server file");
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
            if is_root() {
                let ok = Command::new("chown")
                    .arg("postgres:postgres")
                    .arg(&path)
                    .status()
                    .is_ok_and(|s| s.success());
                assert!(ok, "cannot give {name} to the postgres user");
            }
        }
        let mut pg = PgServer {
            child: None,
            dir,
            bin,
            settings: [
                "ssl=on",
                "ssl_cert_file=server.crt",
                "ssl_key_file=server.key",
                "ssl_ca_file=ca.crt",
            ]
            .map(String::from)
            .to_vec(),
            port: free_port(),
        };
        pg.restart();
        pg
    }

    /// A streaming replica of this server, started (a hot standby: it
    /// answers queries, read-only): a base backup taken with
    /// `pg_basebackup -R`, which writes `standby.signal` and the
    /// `primary_conninfo` that points it at this server. Replication is
    /// asynchronous: a commit this server acknowledged may not have
    /// reached it yet.
    pub fn replica(&self) -> PgServer {
        let (bin, dir) = bin_and_dir();
        let out = as_postgres(&self.bin.join("pg_basebackup"))
            .arg("-d")
            .arg(format!("host=127.0.0.1 port={} user=postgres", self.port))
            .arg("-D")
            .arg(dir.path().join("data"))
            .args(["-R", "-X", "stream", "-c", "fast", "--no-sync"])
            // libpq looks for ~/.pgpass: a home the postgres user may read.
            .env("HOME", dir.path())
            .stdout(Stdio::null())
            .output()
            .expect("pg_basebackup");
        assert!(
            out.status.success(),
            "pg_basebackup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut replica = PgServer {
            child: None,
            dir,
            bin,
            settings: Vec::new(),
            port: free_port(),
        };
        replica.restart();
        replica
    }

    /// Promotes a replica to a primary (`pg_ctl promote -w`: returns once
    /// it accepts writes).
    pub fn promote(&self) {
        let out = as_postgres(&self.bin.join("pg_ctl"))
            .args(["promote", "-w", "-t", &PATIENCE.as_secs().to_string(), "-D"])
            .arg(self.dir.path().join("data"))
            .env("HOME", self.dir.path())
            .stdout(Stdio::null())
            .output()
            .expect("pg_ctl promote");
        assert!(
            out.status.success(),
            "pg_ctl promote failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
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
            .args(self.settings.iter().flat_map(|s| ["-c", s.as_str()]))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("postgres");
        self.child = Some(child);
        let deadline = Instant::now() + PATIENCE;
        while postgres::Client::connect(&self.socket(), postgres::NoTls).is_err() {
            assert!(Instant::now() < deadline, "postgres did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server cleanly (fast shutdown: sessions are ended, and a
    /// replica is sent everything up to the shutdown checkpoint before the
    /// server exits).
    pub fn stop_clean(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGINT);
            }
            let _ = c.wait();
        }
    }

    /// Kills the server with SIGKILL, the postmaster and every process it
    /// started at once, as a crash of its machine would: nothing is
    /// flushed or sent to a replica any more.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let pid = c.id() as i32;
            // Stopped first, so that it starts no process while its
            // children are listed.
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(pid, libc::SIGSTOP);
            }
            for child in children(pid) {
                // SAFETY: kill(2) on a process our child started (still its
                // child: stopped, it cannot have reaped it).
                unsafe {
                    libc::kill(child, libc::SIGKILL);
                }
            }
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            let _ = c.wait();
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

    /// `bin usage --budgets --keys KEYS --postgres` on this server's ledger,
    /// as JSON (the command must succeed).
    pub fn budgets(&self, bin: &str, keys: &str) -> serde_json::Value {
        let url = self.url();
        let args = [
            "usage",
            "--budgets",
            "--keys",
            keys,
            "--postgres",
            &url,
            "--format",
            "json",
        ];
        let (code, out, err) = crate::process::run(bin, &args, &[]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    }

    /// The connection string of its Unix socket, user `postgres` (trusted
    /// whatever `pg_hba.conf` says of TCP).
    fn socket(&self) -> String {
        format!(
            "host={} port={} user=postgres dbname=postgres",
            self.dir.path().display(),
            self.port
        )
    }

    /// A client (over the Unix socket).
    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.socket(), postgres::NoTls).expect("connect to postgres")
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A new cluster (`initdb`, trust authentication, user `postgres`) in
/// `data` under a new temporary directory, and the binaries' directory.
fn init() -> (PathBuf, tempfile::TempDir) {
    let (bin, dir) = bin_and_dir();
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
    (bin, dir)
}

/// The server binaries' directory, and a new temporary directory the
/// server's user owns.
fn bin_and_dir() -> (PathBuf, tempfile::TempDir) {
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
    (bin, dir)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The processes whose parent is `pid` (from /proc).
fn children(pid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let child: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // `pid (comm) state ppid …`: comm may hold spaces and parens.
            let ppid: i32 = stat
                .get(stat.rfind(')')? + 1..)?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            (ppid == pid).then_some(child)
        })
        .collect()
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
