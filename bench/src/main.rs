//! chatgate-bench: chatgate against nginx as a plain proxy, in one run.
//!
//! ```text
//! chatgate-bench [--quick] [--seconds N] [--bin-dir DIR] [--out FILE] [--only NAME]
//! ```
//!
//! Starts the simulator at full speed, nginx (`proxy_pass`, upstream
//! keep-alive, `proxy_buffering off`) and both chatgate binaries in front
//! of it, then measures every workload against every target — direct to the
//! simulator (the floor), nginx (the reference), chatgate-smol,
//! chatgate-tokio — and prints each figure absolute and as a ratio to
//! nginx's from the same run. The primary figure is CPU time consumed by
//! the proxy process(es) per request (utime + stime from /proc), which holds
//! on a shared, noisy machine.
//!
//! | file | job |
//! |---|---|
//! | `main.rs` | the options, the setup (simulator, nginx, both gateways), the run and its report |
//! | `classic.rs` | the first workloads against every target: closed loop, open loop, timed and held streams, start-up |
//! | `wrk.rs` | wrk runs against a target, read and measured with the target's CPU |
//! | `client.rs` | the load generator's own HTTP/1.1 client (open loop, timed and held streams) |
//! | `long.rs` | many long streams: thousands open at once, a token at a time, memory per stream and CPU per event against nginx |
//! | `peers.rs` | Portkey's gateway and LiteLLM's proxy, installed by `bench/install-peers.sh`, as rows of the lean comparison |
//! | `lean.rs` | the lean comparison: a static upstream, nginx without an access log |
//! | `endpoints.rs` | three endpoints against one, and the failover delay |
//! | `procs.rs` | child processes and what the kernel says about them |
//! | `quota.rs` | what a budget and an in-flight cap cost, in-process and through Redis |
//! | `redis_ha.rs` | shared limits through Redis behind Sentinel and in a cluster, against one Redis server |
//! | `traces.rs` | what tracing costs, with the collector up, down or stalling |
//! | `apis.rs` | a client API's stream against the same stream through chat completions: the table the two below print |
//! | `responses.rs` | a stream through the Responses API against the same stream through chat completions |
//! | `chain.rs` | kept responses: a conversation chained by `previous_response_id` against the same turns sent whole, embedded store and PostgreSQL |
//! | `messages.rs` | a stream through the Messages API against the same stream through chat completions |
//! | `gemini.rs` | a stream through the Gemini API against the same stream through chat completions |
//! | `tls.rs` | TLS on the listener against nginx terminating TLS: kept-alive requests, full handshakes and resumed ones |
//! | `affinity.rs` | prompt-cache affinity: how often a conversation's turns reach the endpoint that cached its previous turn, with a conversation key and without |

mod affinity;
mod apis;
mod chain;
mod classic;
mod client;
mod endpoints;
mod gemini;
mod lean;
mod long;
mod messages;
mod peers;
mod procs;
mod quota;
mod redis_ha;
mod responses;
mod tls;
mod traces;
mod wrk;

use classic::{
    report_closed_loop, report_held_streams, report_open_loop, report_startup, report_timed_streams,
};
use wrk::{measured, measured_url, wrk, wrk_path, wrk_url};

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use procs::{Child, cpu_ticks, free_port, nginx_workers, ticks_per_second, wait_accepting};

const NONSTREAM: &str = r#"{"model":"reasoning-model-k3","messages":[{"role":"system","content":"You are a helpful assistant. Answer briefly."},{"role":"user","content":"What is the capital of France, and why is it the capital?"}],"max_tokens":512,"x_sim":{"reasoning_tokens":20,"answer_tokens":10}}"#;
/// 60 reasoning + 37 answer deltas, finish, usage, `[DONE]`: 100 events.
const STREAM: &str = r#"{"model":"reasoning-model-k3","stream":true,"messages":[{"role":"system","content":"You are a helpful assistant. Answer briefly."},{"role":"user","content":"What is the capital of France, and why is it the capital?"}],"x_sim":{"reasoning_tokens":60,"answer_tokens":37}}"#;
/// The same, timed: first token after 100 ms, then one every 5 ms.
const TIMED: &str = r#"{"model":"reasoning-model-k3","stream":true,"messages":[{"role":"user","content":"Explain the tides."}],"x_sim":{"reasoning_tokens":60,"answer_tokens":37,"ttft_ms":100,"token_ms":5}}"#;
const TIMED_TOKEN: Duration = Duration::from_millis(5);
/// A slow stream: a token a second for ten minutes.
const SLOW: &str = r#"{"model":"reasoning-model-k3","stream":true,"messages":[{"role":"user","content":"Think slowly."}],"x_sim":{"reasoning_tokens":600,"answer_tokens":1,"token_ms":1000}}"#;

struct Opts {
    quick: bool,
    seconds: u64,
    bin_dir: PathBuf,
    out: Option<PathBuf>,
    only: Option<String>,
    long: Option<String>,
    api_tokens: Option<(u64, u64)>,
}

struct Contender {
    name: &'static str,
    addr: SocketAddr,
    /// Processes whose CPU and memory are the proxy's (none for direct).
    pids: Vec<u32>,
}

fn main() {
    let opts = parse_args();
    let fd_limit = procs::raise_fd_limit();
    let tools = Tools::find(&opts.bin_dir, needs_wrk(opts.only.as_deref()));
    let dir = work_dir();
    let mut report = String::new();
    let _ = writeln!(report, "{}", machine(&tools));

    let (_sim, sim_addr) = start_sim(&tools, &dir);
    let key = mint_key(&tools.smol, &dir);
    let upstream = format!("http://{sim_addr}/v1");
    let (proxies, targets) = start_proxies(&tools, &dir, sim_addr, &upstream, fd_limit);
    let want = |name: &str| wanted(opts.only.as_deref(), name);
    let lua = write_lua(&dir);
    let nonstream = write_body(&dir, "nonstream.json", NONSTREAM);
    let stream = write_body(&dir, "stream.json", STREAM);
    let setup = Setup {
        tools: &tools,
        dir: &dir,
        sim: sim_addr,
        upstream: &upstream,
        key: &key,
        lua: &lua,
        body: &nonstream,
        secs: opts.seconds,
        fd_limit,
        long: opts.long.as_deref(),
        api_tokens: opts.api_tokens,
    };

    if want("nonstream") || want("stream") {
        warm_up(&setup, &targets);
    }
    let conns: &[u32] = if opts.quick { &[8, 64] } else { &[8, 64, 512] };
    if want("nonstream") {
        let label = "non-streamed";
        report_closed_loop(&mut report, &setup, &targets, label, &nonstream, conns);
    }
    if want("stream") {
        let label = "streamed (100 events, 22 KB)";
        report_closed_loop(&mut report, &setup, &targets, label, &stream, conns);
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let local = tokio::task::LocalSet::new();
    if want("openloop") {
        report_open_loop(&mut report, &setup, &targets, &rt, &local, opts.quick);
    }
    if want("timed") {
        report_timed_streams(&mut report, &setup, &targets, &rt, &local, opts.quick);
    }
    if want("hold") {
        report_held_streams(&mut report, &setup, &targets, &rt, &local, opts.quick);
    }
    if want("startup") {
        report_startup(&mut report, &setup);
    }

    let extra: [(&str, Workload); 12] = [
        ("lean", lean::report),
        ("long", long::report),
        ("endpoints", endpoints::report),
        ("quota", quota::report),
        ("redis_ha", redis_ha::report),
        ("traces", traces::report),
        ("responses", responses::report),
        ("messages", messages::report),
        ("gemini", gemini::report),
        ("affinity", affinity::report),
        ("tls", tls::report),
        ("chain", chain::report),
    ];
    for (name, run) in extra {
        if want(name) {
            run(&mut report, &setup);
        }
    }

    drop(proxies);
    println!("{report}");
    if let Some(out) = &opts.out {
        std::fs::write(out, &report).expect("write the report");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether `--only` (none: every workload) names the workload `name`.
fn wanted(only: Option<&str>, name: &str) -> bool {
    only.is_none_or(|o| o.split(',').any(|w| w == name))
}

/// Whether any workload `--only` chose (none: every one) runs wrk.
fn needs_wrk(only: Option<&str>) -> bool {
    only.is_none_or(|o| {
        o.split(',').any(|w| {
            matches!(
                w,
                "nonstream"
                    | "stream"
                    | "lean"
                    | "endpoints"
                    | "quota"
                    | "redis_ha"
                    | "traces"
                    | "responses"
                    | "messages"
                    | "gemini"
                    | "tls"
            )
        })
    })
}

/// Creates this run's work directory, for configurations, logs and bodies.
fn work_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("chatgate-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("work directory");
    dir
}

/// Starts the simulator at full speed and waits for its address.
fn start_sim(tools: &Tools, dir: &Path) -> (Child, SocketAddr) {
    let mut sim = Child::spawn(
        &tools.smol,
        &args(&["sim", "--listen", "127.0.0.1:0"]),
        &[],
        &dir.join("sim.log"),
    );
    let sim_addr = sim.listening_address();
    (sim, sim_addr)
}

/// Starts nginx (one worker per core) and both gateways in front of the
/// simulator: their processes (stopped when dropped, the gateways first)
/// and the targets, direct, nginx, chatgate-smol and chatgate-tokio.
fn start_proxies(
    tools: &Tools,
    dir: &Path,
    sim_addr: SocketAddr,
    upstream: &str,
    fd_limit: u64,
) -> ([Child; 3], [Contender; 4]) {
    let nginx_port = free_port();
    let nginx_conf = write_nginx_conf(dir, nginx_port, sim_addr, fd_limit, "nginx");
    let nginx = Child::spawn(
        &tools.nginx,
        &nginx_args(dir, &nginx_conf),
        &[],
        &dir.join("nginx.stderr"),
    );
    let nginx_addr: SocketAddr = ([127, 0, 0, 1], nginx_port).into();
    wait_accepting(nginx_addr, Instant::now());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = nginx_workers(nginx.pid(), cores);
    assert_eq!(workers.len(), cores, "nginx runs one worker per core");

    let mut smol = gateway(&tools.smol, dir, upstream, "smol");
    let mut tokio = gateway(&tools.tokio, dir, upstream, "tokio");
    let (smol_addr, tokio_addr) = (smol.listening_address(), tokio.listening_address());
    let targets = [
        Contender {
            name: "direct",
            addr: sim_addr,
            pids: vec![],
        },
        Contender {
            name: "nginx",
            addr: nginx_addr,
            pids: workers,
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
    ([smol, tokio, nginx], targets)
}

/// Writes `dir/name` holding the request body `text`, for wrk.
fn write_body(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("body file");
    p
}

/// A second of non-streamed requests against every target, before the
/// closed-loop tables.
fn warm_up(s: &Setup<'_>, targets: &[Contender]) {
    for t in targets {
        wrk(&s.tools.wrk, t.addr, s.lua, s.body, s.key, 8, 1, 2);
    }
}

/// What the run already has, for the workloads in modules of their own:
/// tools, its directory, the simulator (and its `/v1` URL), the key,
/// wrk's script and the non-streamed body file, seconds per measurement,
/// the open-files limit.
struct Setup<'a> {
    tools: &'a Tools,
    dir: &'a Path,
    sim: SocketAddr,
    upstream: &'a str,
    key: &'a str,
    lua: &'a Path,
    body: &'a Path,
    secs: u64,
    fd_limit: u64,
    /// The many-long-streams rows (`--long`): streams × events a second.
    long: Option<&'a str>,
    /// The translated APIs' stream (`--api-tokens R,A`): reasoning and
    /// answer tokens, in place of the stream workload's 60 and 37.
    api_tokens: Option<(u64, u64)>,
}

/// A workload in a module of its own: appends its tables to the report.
type Workload = fn(&mut String, &Setup<'_>);

/// What [`interleaved_cpu`] measured of one target.
struct Interleaved {
    /// CPU per request (µs) of each process in the target's `pids`.
    cpu: Vec<f64>,
    /// wrk's median latency, milliseconds.
    p50_ms: f64,
    /// wrk's 99th percentile latency, milliseconds.
    p99_ms: f64,
}

/// CPU per request (µs) of each target's processes, non-streamed at 8
/// connections: a second's warm-up each, then two rounds of `secs` with
/// the targets interleaved; per target, the mean over the rounds of each
/// process in `pids` (the first is the target itself, the others what it
/// uses, such as Redis), and of wrk's median and p99 latency.
fn interleaved_cpu(
    tools: &Tools,
    targets: &[(SocketAddr, Vec<u32>)],
    lua: &Path,
    body: &Path,
    key: &str,
    secs: u64,
) -> Vec<Interleaved> {
    const ROUNDS: usize = 2;
    for (addr, _) in targets {
        wrk(&tools.wrk, *addr, lua, body, key, 8, 1, 2);
    }
    let mut out: Vec<Interleaved> = targets
        .iter()
        .map(|(_, p)| Interleaved {
            cpu: vec![0.0; p.len()],
            p50_ms: 0.0,
            p99_ms: 0.0,
        })
        .collect();
    for _ in 0..ROUNDS {
        for (i, (addr, pids)) in targets.iter().enumerate() {
            let before: Vec<u64> = pids.iter().map(|p| cpu_ticks(&[*p])).collect();
            let r = wrk(&tools.wrk, *addr, lua, body, key, 8, secs, 2);
            for (j, p) in pids.iter().enumerate() {
                let cpu = cpu_ticks(&[*p]) - before[j];
                out[i].cpu[j] +=
                    cpu as f64 / ticks_per_second() as f64 * 1e6 / r.requests.max(1) as f64;
            }
            out[i].p50_ms += r.p50_ms;
            out[i].p99_ms += r.p99_ms;
        }
    }
    for m in &mut out {
        for c in &mut m.cpu {
            *c /= ROUNDS as f64;
        }
        m.p50_ms /= ROUNDS as f64;
        m.p99_ms /= ROUNDS as f64;
    }
    out
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn ratio(v: Option<f64>, reference: Option<f64>) -> String {
    match (v, reference) {
        (Some(v), Some(r)) if r.abs() > f64::EPSILON => format!("{:.2}", v / r),
        _ => "—".into(),
    }
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| (*s).to_owned()).collect()
}

fn parse_args() -> Opts {
    let mut opts = Opts {
        quick: false,
        seconds: 10,
        bin_dir: std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_default(),
        out: None,
        only: None,
        long: None,
        api_tokens: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => {
                opts.quick = true;
                opts.seconds = opts.seconds.min(2);
            }
            "--seconds" => {
                opts.seconds = it.next().and_then(|v| v.parse().ok()).expect("--seconds N")
            }
            "--bin-dir" => opts.bin_dir = it.next().map(PathBuf::from).expect("--bin-dir DIR"),
            "--out" => opts.out = it.next().map(PathBuf::from),
            "--only" => opts.only = it.next(),
            "--long" => opts.long = it.next(),
            "--api-tokens" => {
                let v = it.next().unwrap_or_default();
                let parsed = v
                    .split_once(',')
                    .and_then(|(r, a)| Some((r.parse().ok()?, a.parse().ok()?)));
                opts.api_tokens = Some(parsed.expect("--api-tokens R,A (two counts)"));
            }
            "--help" | "-h" => {
                println!(
                    "chatgate-bench [--quick] [--seconds N] [--bin-dir DIR] [--out FILE] [--long 1000x1,8000x1,1000x10] [--api-tokens 60,37] [--only nonstream,stream,openloop,timed,hold,startup,lean,long,endpoints,quota,redis_ha,traces,responses,messages,gemini,affinity,tls,chain]"
                );
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}"),
        }
    }
    opts
}

/// A program on PATH (or in the sbin directories).
fn which(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} is not installed (bench/run.sh installs it)"))
}

struct Tools {
    smol: PathBuf,
    tokio: PathBuf,
    nginx: PathBuf,
    wrk: PathBuf,
}

impl Tools {
    fn find(bin_dir: &Path, needs_wrk: bool) -> Tools {
        let ours = |name: &str| {
            let p = bin_dir.join(name);
            assert!(
                p.is_file(),
                "{} is missing: build with cargo build --release --bins",
                p.display()
            );
            p
        };
        Tools {
            smol: ours("chatgate-smol"),
            tokio: ours("chatgate-tokio"),
            nginx: which("nginx"),
            wrk: if needs_wrk {
                which("wrk")
            } else {
                PathBuf::from("wrk")
            },
        }
    }
}

fn first_line(program: &Path, arg: &str) -> String {
    Command::new(program)
        .arg(arg)
        .output()
        .map(|o| {
            let text = if o.stdout.is_empty() {
                o.stderr
            } else {
                o.stdout
            };
            String::from_utf8_lossy(&text)
                .lines()
                .next()
                .unwrap_or("")
                .to_owned()
        })
        .unwrap_or_default()
}

fn machine(tools: &Tools) -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("?")
        .trim()
        .to_owned();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|k| k.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib / 1024 / 1024);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "Machine: {cores} cores ({model}), {mem} GiB, Linux {}; {}; {}; chatgate {}",
        kernel.trim(),
        first_line(&tools.nginx, "-v"),
        first_line(&tools.wrk, "--version")
            .split(" [")
            .next()
            .unwrap_or("wrk not used"),
        env!("CARGO_PKG_VERSION"),
    )
}

fn mint_key(smol: &Path, dir: &Path) -> String {
    mint_key_with(smol, dir, "1000000000000")
}

/// A key in `dir/keys.toml` with a billion requests and `tpm` tokens per
/// minute.
fn mint_key_with(smol: &Path, dir: &Path, tpm: &str) -> String {
    let keys = dir.join("keys.toml");
    let out = Command::new(smol)
        .args(["keys", "new", "--keys"])
        .arg(&keys)
        .args(["--name", "bench", "--rpm", "1000000000", "--tpm", tpm])
        .output()
        .expect("keys new");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .expect("a key")
        .to_owned()
}

fn gateway(bin: &Path, dir: &Path, upstream: &str, name: &str) -> Child {
    gateway_with(bin, dir, &["--upstream", upstream], name)
}

/// `serve` with these provider settings (`--upstream URL`, or
/// `--config FILE` with `[[upstream]]` tables).
fn gateway_with(bin: &Path, dir: &Path, provider: &[&str], name: &str) -> Child {
    let mut a = vec!["serve".to_owned(), "--listen".into(), "127.0.0.1:0".into()];
    a.extend(provider.iter().map(|s| (*s).to_owned()));
    a.extend([
        "--keys".into(),
        dir.join("keys.toml").to_string_lossy().into_owned(),
        "--ledger".into(),
        dir.join(format!("ledger-{name}.jsonl"))
            .to_string_lossy()
            .into_owned(),
    ]);
    Child::spawn(bin, &a, &[], &dir.join(format!("{name}.log")))
}

fn nginx_args(dir: &Path, conf: &Path) -> Vec<String> {
    vec![
        "-p".into(),
        dir.to_string_lossy().into_owned(),
        "-c".into(),
        conf.to_string_lossy().into_owned(),
        "-g".into(),
        "daemon off;".into(),
    ]
}

/// Writes `dir/{name}.conf`: an nginx that runs as the current user (root
/// needs saying), keeps its pid, error log and temporary files in `dir`,
/// with `main` in the main context (workers, limits, `events`) and `http`
/// in the `http` block.
fn write_conf(dir: &Path, name: &str, main: &str, http: &str) -> PathBuf {
    let d = dir.display();
    let user = if rustix::process::getuid().is_root() {
        "user root root;"
    } else {
        ""
    };
    let conf = format!(
        "{user}\n{main}\npid {d}/{name}.pid;\nerror_log {d}/{name}.error.log warn;\n\
         http {{\n  client_body_temp_path {d}/{name}.body; proxy_temp_path {d}/{name}.proxy;\n  \
         fastcgi_temp_path {d}/{name}.fcgi; uwsgi_temp_path {d}/{name}.uwsgi; scgi_temp_path {d}/{name}.scgi;\n\
         {http}}}\n"
    );
    let path = dir.join(format!("{name}.conf"));
    std::fs::write(&path, conf).expect("nginx config");
    path
}

/// The reference: nginx as a plain proxy, as its documentation recommends
/// for streaming (HTTP/1.1 upstream keep-alive, no response buffering), one
/// worker per core, an access log line per request like chatgate's.
fn write_nginx_conf(dir: &Path, port: u16, sim: SocketAddr, fd_limit: u64, name: &str) -> PathBuf {
    let d = dir.display();
    write_conf(
        dir,
        name,
        &format!(
            "worker_processes auto;\nworker_rlimit_nofile {fd_limit};\nevents {{ worker_connections 20000; }}"
        ),
        &format!(
            "  access_log {d}/{name}.access.log;\n  \
             upstream sim {{ server {sim}; keepalive 1024; }}\n  \
             server {{\n    listen 127.0.0.1:{port};\n    location / {{\n      proxy_pass http://sim;\n      proxy_http_version 1.1;\n      \
             proxy_set_header Connection \"\";\n      proxy_buffering off;\n      proxy_read_timeout 900s;\n    }}\n  }}\n"
        ),
    )
}

fn write_lua(dir: &Path) -> PathBuf {
    let p = dir.join("post.lua");
    std::fs::write(
        &p,
        "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\n\
         wrk.headers[\"Authorization\"] = \"Bearer \" .. os.getenv(\"KEY\")\n\
         local f = io.open(os.getenv(\"BODY\"), \"r\"); wrk.body = f:read(\"*a\"); f:close()\n",
    )
    .expect("lua script");
    p
}
