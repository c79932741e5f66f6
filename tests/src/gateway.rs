//! The gateway: keys minted with `keys new`, `serve` started as a child in
//! front of an upstream, its ledger and its admin listener's metrics.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use chatgate_core::LedgerRecord;

use crate::http::{Response, request};
use crate::process::{Proc, address_from, run};
use crate::sim::Sim;
use crate::wait::PATIENCE;

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
    /// The listen address [default: `127.0.0.1:0`, a port of its own].
    pub listen: Option<String>,
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
        let line = self.proc.line();
        assert!(
            line.starts_with("chatgate admin listening on "),
            "not the admin line: {line}"
        );
        address_from(&line)
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
        let listen = opts.listen.clone().unwrap_or_else(|| "127.0.0.1:0".into());
        let mut args: Vec<String> = vec!["serve".into(), "--listen".into(), listen];
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

/// The status of one non-streamed chat request with `key` to the gateway
/// at `addr`.
pub fn chat_status(addr: SocketAddr, key: &str) -> u16 {
    request(
        addr,
        "POST",
        "/v1/chat/completions",
        Some(key),
        Some(&crate::chat::body("")),
    )
    .status
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

/// `keys set NAME FLAGS…` on each gateway's keys file (with its own
/// binary), then waits until each has reloaded its keys.
pub fn set_on_each(gws: &[Gw], name: &str, flags: &[&str]) {
    for gw in gws {
        let path = gw.dir.path().join("keys.toml");
        let mut args = vec!["keys", "set", name, "--keys", path.to_str().unwrap()];
        args.extend_from_slice(flags);
        let (code, _, err) = crate::process::run(&gw.bin, &args, &[]);
        assert_eq!(code, 0, "{err}");
    }
    for gw in gws {
        gw.proc
            .stderr_when("the reload", |t| t.contains("keys reloaded"));
    }
}

/// A counter or gauge from the admin listener's `/metrics`.
pub fn metric(admin: SocketAddr, name: &str) -> u64 {
    let text = String::from_utf8(request(admin, "GET", "/metrics", None, None).body).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name}"))
}

/// `serve` with the config file `config` and the keys file `keys`, run to
/// its end (for configurations it refuses): exit code, stdout, stderr.
pub fn serve_refusing(bin: &str, config: &Path, keys: &Path) -> (i32, String, String) {
    run(
        bin,
        &[
            "serve",
            "--config",
            config.to_str().expect("a UTF-8 path"),
            "--keys",
            keys.to_str().expect("a UTF-8 path"),
            "--listen",
            "127.0.0.1:0",
        ],
        &[],
    )
}

/// `demo`, as a newcomer runs it, with its ledger in `dir`: the process,
/// the address it printed on stdout, its banner (stderr) and the key the
/// banner gives.
pub fn start_demo(bin: &str, dir: &Path) -> (Proc, SocketAddr, String, String) {
    // The demo's ledger goes to the temporary directory: the caller's.
    let env = vec![("TMPDIR".to_owned(), dir.to_string_lossy().into_owned())];
    let mut p = Proc::spawn(
        bin,
        &["demo".into(), "--listen".into(), "127.0.0.1:0".into()],
        &env,
        &dir.join("demo.stderr"),
    );
    let line = p.line();
    let addr: SocketAddr = line
        .strip_prefix("chatgate listening on http://")
        .and_then(|l| l.strip_suffix("/v1"))
        .unwrap_or_else(|| panic!("{line}"))
        .parse()
        .unwrap();
    let banner = p.stderr();
    let key = banner
        .lines()
        .find_map(|l| l.strip_prefix("API key:"))
        .unwrap_or_else(|| panic!("no key in {banner}"))
        .trim()
        .to_owned();
    (p, addr, banner, key)
}
