//! Child processes and what the kernel says about them.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A child process in a process group of its own, stopped with everything
/// it started when dropped.
pub(crate) struct Child {
    child: std::process::Child,
}

impl Child {
    /// Starts `program args…`, stdout piped, stderr to `stderr`.
    pub(crate) fn spawn(
        program: &Path,
        args: &[String],
        env: &[(&str, &str)],
        stderr: &Path,
    ) -> Child {
        let err = std::fs::File::create(stderr).expect("stderr file");
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err)
            // Its own group, so that nginx's workers go with their master.
            .process_group(0);
        // Out of the terminal's group, a Ctrl-C no longer reaches it: it gets
        // SIGTERM when the harness's thread that started it ends instead.
        // SAFETY: prctl(2) is async-signal-safe and touches no memory of ours.
        unsafe {
            cmd.pre_exec(|| {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::TERM,
                ))
                .map_err(std::io::Error::from)
            });
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        Child { child }
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the line saying where it listens (`... http://ADDR/v1`,
    /// or `https://`).
    pub(crate) fn listening_address(&mut self) -> SocketAddr {
        let out = self.child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        BufReader::new(out)
            .read_line(&mut line)
            .expect("read stdout");
        let url = line
            .split_whitespace()
            .last()
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        url.trim_start_matches("http://")
            .trim_start_matches("https://")
            .trim_end_matches("/v1")
            .parse()
            .unwrap_or_else(|_| panic!("no address in {line:?}"))
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // SIGTERM first (nginx's fast shutdown stops its workers; chatgate
        // drains), then SIGKILL for the whole group: a killed nginx master
        // would leave its workers running, still holding the port.
        let group = rustix::process::Pid::from_child(&self.child);
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        let _ = self.child.wait();
    }
}

/// utime + stime of the processes, in clock ticks.
pub(crate) fn cpu_ticks(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .map(|stat| {
            // Fields after the command name (which may contain spaces).
            let rest = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
                + f.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
        })
        .sum()
}

/// Clock ticks per second.
pub(crate) fn ticks_per_second() -> u64 {
    rustix::param::clock_ticks_per_second()
}

/// Resident memory of the processes, KiB.
pub(crate) fn rss_kib(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .filter_map(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse::<u64>().ok())
        })
        .sum()
}

/// The processes whose `/proc/PID/stat` field `field` (counted after the
/// state: 1 is the parent, 2 the process group) is `value`.
fn pids_where(field: usize, value: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    let rest = &s[s.rfind(')')? + 2..];
                    rest.split_whitespace().nth(field)?.parse::<u32>().ok()
                })
                == Some(value)
        })
        .collect()
}

/// Every process of the process group `group`.
pub(crate) fn group_pids(group: u32) -> Vec<u32> {
    pids_where(2, group)
}

/// The worker processes of an nginx master, once `expected` of them run.
pub(crate) fn nginx_workers(master: u32, expected: usize) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let workers = pids_where(1, master);
        if workers.len() >= expected || Instant::now() > deadline {
            return workers;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until something accepts connections at `addr`; returns how long.
pub(crate) fn wait_accepting(addr: SocketAddr, since: Instant) -> Duration {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if TcpStream::connect(addr).is_ok() {
            return since.elapsed();
        }
        assert!(Instant::now() < deadline, "nothing listens on {addr}");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// A free TCP port on loopback (bound, then released).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Raises this process's open-files limit as far as it may.
pub(crate) fn raise_fd_limit() -> u64 {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let l = getrlimit(Resource::Nofile);
    let _ = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: l.maximum,
            maximum: l.maximum,
        },
    );
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}
