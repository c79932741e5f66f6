//! The binaries and their processes: which gateway binaries the suite runs
//! (one test per runtime), where they are, a command insulated from the
//! developer's environment, a running child killed on drop, one run to
//! completion.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::wait::PATIENCE;

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

/// The address in the line a process prints when it listens (its last
/// word: `host:port`, `http://host:port` or `http://host:port/v1`, or
/// the same with `https://`).
pub fn address_from(line: &str) -> SocketAddr {
    let url = line.split_whitespace().last().expect("an address");
    let hostport = url
        .trim_start_matches("http://")
        .trim_start_matches("https://")
        .trim_end_matches("/v1");
    hostport
        .parse()
        .unwrap_or_else(|_| panic!("not an address: {line}"))
}
