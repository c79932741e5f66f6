//! PostgreSQL for the tests: a throwaway cluster on a free port, started,
//! stopped and restarted.

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
