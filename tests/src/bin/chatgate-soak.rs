//! chatgate-soak: a mixed load at a fixed rate through one gateway binary,
//! then a reconciliation of its ledger against what happened.
//!
//! ```text
//! chatgate-soak [--bin chatgate-smol] [--seconds 600] [--rate 40] [--warmup 60]
//! ```
//!
//! Requests are started on a fixed schedule (open loop) whatever earlier ones
//! are doing. In every twenty: eight non-streamed and eight streamed answers
//! (which must succeed), one client that leaves mid-stream, one provider that
//! resets mid-stream, one provider error (500) and one provider that answers
//! garbage (each with its defined answer). At the end it checks: every
//! request that should have succeeded did; the ledger has exactly one line
//! per request; the tokens in the ledger equal the tokens the simulator
//! reported (`GET /_sim/stats`); the gateway's resident memory after warm-up
//! stayed flat. It prints a summary table and exits non-zero on any
//! violation.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use chatgate_core::LedgerRecord;
use chatgate_tests::*;

struct Opts {
    bin: String,
    seconds: u64,
    rate: u64,
    warmup: u64,
}

fn parse_args() -> Opts {
    let mut o = Opts {
        bin: "chatgate-smol".into(),
        seconds: 600,
        rate: 40,
        warmup: 60,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("{a} needs a value")))
        };
        let number = |v: String| {
            v.parse()
                .unwrap_or_else(|_| usage(&format!("{v}: not a number")))
        };
        match a.as_str() {
            "--bin" => o.bin = value(),
            "--seconds" => o.seconds = number(value()),
            "--rate" => o.rate = number(value()).max(1),
            "--warmup" => o.warmup = number(value()),
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if o.warmup >= o.seconds {
        usage("--warmup must be shorter than --seconds");
    }
    o
}

fn usage(msg: &str) -> ! {
    if !msg.is_empty() {
        eprintln!("chatgate-soak: {msg}");
    }
    eprintln!(
        "usage: chatgate-soak [--bin chatgate-smol|chatgate-tokio] [--seconds N] [--rate PER_SECOND] [--warmup SECONDS]"
    );
    std::process::exit(2)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Answer,
    Stream,
    ClientLeaves,
    ProviderResets,
    ProviderErrors,
    ProviderGarbage,
}

impl Kind {
    fn of(i: u64) -> Kind {
        match i % 20 {
            0..=7 => Kind::Answer,
            8..=15 => Kind::Stream,
            16 => Kind::ClientLeaves,
            17 => Kind::ProviderResets,
            18 => Kind::ProviderErrors,
            _ => Kind::ProviderGarbage,
        }
    }

    fn body(self, i: u64) -> String {
        // Varied sizes: 20-60 reasoning tokens, 10-30 answer tokens, a few
        // milliseconds per token, so streams overlap.
        let (r, a) = (20 + i % 41, 10 + i % 21);
        let timing =
            format!(r#""reasoning_tokens":{r},"answer_tokens":{a},"token_ms":3,"ttft_ms":20"#);
        match self {
            Kind::Answer => body(&format!(r#""x_sim":{{{timing}}}"#)),
            Kind::Stream | Kind::ClientLeaves => stream_body(&format!(r#""x_sim":{{{timing}}}"#)),
            Kind::ProviderResets => stream_body(&format!(
                r#""x_sim":{{{timing},"fault":"reset","after":5}}"#
            )),
            Kind::ProviderErrors => body(r#""x_sim":{"fault":"reject","status":500}"#),
            Kind::ProviderGarbage => body(r#""x_sim":{"fault":"garbage"}"#),
        }
    }
}

#[derive(Default)]
struct Tally {
    sent: AtomicU64,
    ok: AtomicU64,
    expected_failures: AtomicU64,
    left: AtomicU64,
    unexpected: Mutex<Vec<String>>,
}

fn run_one(addr: std::net::SocketAddr, key: &str, i: u64, tally: &Tally) {
    let kind = Kind::of(i);
    let raw = raw_request(
        "POST",
        "/v1/chat/completions",
        Some(key),
        Some(&kind.body(i)),
    );
    tally.sent.fetch_add(1, Ordering::Relaxed);
    if kind == Kind::ClientLeaves {
        let mut c = match std::net::TcpStream::connect(addr) {
            Ok(s) => s,
            Err(e) => {
                return tally
                    .unexpected
                    .lock()
                    .unwrap()
                    .push(format!("{i}: connect: {e}"));
            }
        };
        use std::io::{Read, Write};
        let _ = c.set_read_timeout(Some(PATIENCE));
        let _ = c.write_all(&raw);
        let mut buf = Vec::new();
        let mut b = [0u8; 4096];
        while !String::from_utf8_lossy(&buf).contains("reasoning_content") {
            match c.read(&mut b) {
                Ok(0) | Err(_) => {
                    tally
                        .unexpected
                        .lock()
                        .unwrap()
                        .push(format!("{i}: closed before the first event"));
                    return;
                }
                Ok(n) => buf.extend_from_slice(&b[..n]),
            }
        }
        tally.left.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let Some(r) = try_exchange(addr, &raw) else {
        tally
            .unexpected
            .lock()
            .unwrap()
            .push(format!("{i} ({kind:?}): no complete response"));
        return;
    };
    let fine = match kind {
        Kind::Answer => {
            r.status == 200 && r.json()["usage"]["completion_tokens"].as_u64().is_some()
        }
        Kind::Stream => {
            let events = r.events();
            r.status == 200
                && events.last().map(String::as_str) == Some("[DONE]")
                && r.chunks()
                    .iter()
                    .any(|c| c["choices"][0]["finish_reason"] == "stop")
        }
        Kind::ProviderResets => {
            r.status == 200 && r.events().last().map(String::as_str) == Some("[DONE]")
        }
        Kind::ProviderErrors | Kind::ProviderGarbage => r.status == 502,
        Kind::ClientLeaves => unreachable!(),
    };
    if !fine {
        let body = String::from_utf8_lossy(&r.body);
        let shown: String = body.chars().take(200).collect();
        tally
            .unexpected
            .lock()
            .unwrap()
            .push(format!("{i} ({kind:?}): {} {shown}", r.status));
    } else if matches!(kind, Kind::Answer | Kind::Stream) {
        tally.ok.fetch_add(1, Ordering::Relaxed);
    } else {
        tally.expected_failures.fetch_add(1, Ordering::Relaxed);
    }
}

fn main() {
    let o = parse_args();
    raise_fd_limit();
    let (sim, mut gw) = start_gateway(&o.bin);
    let load = run_load(&o, &gw);
    let ledger = settled_ledger(&gw, load.sent);
    let tokens = Tokens::count(&ledger, &sim);
    let memory = Memory::after_warmup(&load.rss, o.warmup);
    let problems = find_problems(&load, &ledger, &tokens, &memory, gw.alive());
    print_summary(&o, &load, &ledger, &tokens, &memory);
    verdict(&problems);
}

/// What the load left: the outcomes, the RSS samples, how long it took.
struct Load {
    tally: Arc<Tally>,
    /// (seconds, KiB)
    rss: Vec<(u64, u64)>,
    elapsed: Duration,
    sent: u64,
}

/// Token totals (prompt, completion, reasoning): the ledger's, the simulator's.
struct Tokens {
    ledger: (u64, u64, u64),
    sim: (u64, u64, u64),
}

/// The gateway's resident memory after warm-up, KiB.
struct Memory {
    first: u64,
    peak: u64,
    last: u64,
}

/// Starts the simulator and a gateway whose limits the load never reaches.
fn start_gateway(bin: &str) -> (Sim, Gw) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            rpm: Some(100_000_000),
            tpm: Some(1_000_000_000_000),
            ..GwOptions::default()
        },
    );
    (sim, gw)
}

/// Runs the schedule through the workers and waits for every request to end.
fn run_load(o: &Opts, gw: &Gw) -> Load {
    let tally = Arc::new(Tally::default());
    let (tx, workers) = start_workers(gw.addr, &gw.key, &tally);
    let start = Instant::now();
    let pid = gw.proc.pid();
    let mut rss = send_on_schedule(o, start, pid, tx);
    for w in workers {
        w.join().expect("worker");
    }
    let elapsed = start.elapsed();
    rss.push((elapsed.as_secs(), rss_kib(pid)));
    let sent = tally.sent.load(Ordering::Relaxed);
    Load {
        tally,
        rss,
        elapsed,
        sent,
    }
}

/// 64 workers running the requests the schedule hands them, until it closes.
fn start_workers(
    addr: std::net::SocketAddr,
    key: &str,
    tally: &Arc<Tally>,
) -> (mpsc::Sender<u64>, Vec<std::thread::JoinHandle<()>>) {
    let (tx, rx) = mpsc::channel::<u64>();
    let rx = Arc::new(Mutex::new(rx));
    let workers = (0..64)
        .map(|_| {
            let (rx, tally, key) = (Arc::clone(&rx), Arc::clone(tally), key.to_owned());
            std::thread::spawn(move || {
                loop {
                    let next = rx.lock().unwrap().recv();
                    match next {
                        Ok(i) => run_one(addr, &key, i, &tally),
                        Err(_) => return,
                    }
                }
            })
        })
        .collect();
    (tx, workers)
}

/// Hands out request numbers at the fixed rate, sampling RSS every 5 s.
fn send_on_schedule(o: &Opts, start: Instant, pid: i32, tx: mpsc::Sender<u64>) -> Vec<(u64, u64)> {
    let interval = Duration::from_secs_f64(1.0 / o.rate as f64);
    let total = o.seconds * o.rate;
    let mut rss = Vec::new(); // (seconds, KiB)
    let mut next_sample = Duration::ZERO;
    for i in 0..total {
        let at = interval * i as u32;
        if let Some(wait) = at.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        if start.elapsed() >= next_sample {
            rss.push((start.elapsed().as_secs(), rss_kib(pid)));
            next_sample += Duration::from_secs(5);
        }
        tx.send(i).expect("workers alive");
    }
    rss
}

/// The ledger once it has a line per request, or as it is after [`PATIENCE`].
fn settled_ledger(gw: &Gw, sent: u64) -> Vec<LedgerRecord> {
    let deadline = Instant::now() + PATIENCE;
    let mut ledger = gw.ledger();
    while (ledger.len() as u64) < sent && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        ledger = gw.ledger();
    }
    ledger
}

/// The sum of one figure over the ledger.
fn sum(ledger: &[LedgerRecord], f: fn(&LedgerRecord) -> u64) -> u64 {
    ledger.iter().map(f).sum::<u64>()
}

impl Tokens {
    /// The ledger's totals, and the simulator's (`GET /_sim/stats`).
    fn count(ledger: &[LedgerRecord], sim: &Sim) -> Tokens {
        let stats = {
            let r = request(sim.addr, "GET", "/_sim/stats", None, None);
            r.json()
        };
        Tokens {
            ledger: (
                sum(ledger, |r| r.prompt_tokens),
                sum(ledger, |r| r.completion_tokens),
                sum(ledger, |r| r.reasoning_tokens),
            ),
            sim: (
                stats["prompt_tokens"].as_u64().unwrap_or(0),
                stats["completion_tokens"].as_u64().unwrap_or(0),
                stats["reasoning_tokens"].as_u64().unwrap_or(0),
            ),
        }
    }
}

impl Memory {
    /// The first, highest and last RSS samples taken after `warmup` seconds.
    fn after_warmup(rss: &[(u64, u64)], warmup: u64) -> Memory {
        let after: Vec<u64> = rss
            .iter()
            .filter(|(t, _)| *t >= warmup)
            .map(|(_, k)| *k)
            .collect();
        Memory {
            first: after.first().copied().unwrap_or(0),
            peak: after.iter().copied().max().unwrap_or(0),
            last: after.last().copied().unwrap_or(0),
        }
    }
}

/// The violations: outcomes, ledger lines and ids, tokens, memory, an exit.
fn find_problems(
    load: &Load,
    ledger: &[LedgerRecord],
    tokens: &Tokens,
    memory: &Memory,
    alive: bool,
) -> Vec<String> {
    let sent = load.sent;
    let mut problems: Vec<String> = load.tally.unexpected.lock().unwrap().clone();
    if ledger.len() as u64 != sent {
        problems.push(format!("{} ledger lines for {sent} requests", ledger.len()));
    }
    let mut ids: Vec<&str> = ledger.iter().map(|r| r.request_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.len() != ledger.len() {
        problems.push("duplicate request ids in the ledger".into());
    }
    let ((lp, lc, lr), (sp, sc, sr)) = (tokens.ledger, tokens.sim);
    if (lp, lc, lr) != (sp, sc, sr) {
        problems.push(format!(
            "tokens: ledger prompt/completion/reasoning {lp}/{lc}/{lr}, simulator reported {sp}/{sc}/{sr}"
        ));
    }
    // Memory: after warm-up, the highest sample against the first.
    let Memory { first, peak, .. } = *memory;
    let growth = peak.saturating_sub(first);
    if growth > (first / 5).max(8 * 1024) {
        problems.push(format!(
            "RSS grew after warm-up: {first} KiB -> peak {peak} KiB"
        ));
    }
    if !alive {
        problems.push("the gateway exited".into());
    }
    problems
}

/// Prints the summary table.
fn print_summary(o: &Opts, load: &Load, ledger: &[LedgerRecord], tokens: &Tokens, memory: &Memory) {
    let (sent, tally) = (load.sent, &load.tally);
    let ((lp, lc, lr), (sp, sc, sr)) = (tokens.ledger, tokens.sim);
    let Memory { first, peak, last } = *memory;
    let incomplete = ledger.iter().filter(|r| r.stream && !r.complete).count();
    let disconnected = ledger.iter().filter(|r| r.client_disconnected).count();
    let cost: u64 = sum(ledger, |r| r.cost_nano_usd);
    println!(
        "### Soak: {} for {:.0} s at {} requests/s",
        o.bin,
        load.elapsed.as_secs_f64(),
        o.rate
    );
    println!();
    println!("| figure | value |");
    println!("|---|---|");
    println!("| requests sent | {sent} |");
    println!(
        "| answered as expected (200) | {} |",
        tally.ok.load(Ordering::Relaxed)
    );
    println!(
        "| provider faults answered as defined (502 / cut stream) | {} |",
        tally.expected_failures.load(Ordering::Relaxed)
    );
    println!(
        "| clients that left mid-stream | {} |",
        tally.left.load(Ordering::Relaxed)
    );
    println!(
        "| unexpected outcomes | {} |",
        tally.unexpected.lock().unwrap().len()
    );
    println!("| ledger lines | {} |", ledger.len());
    println!("| ledger: incomplete streams / client disconnects | {incomplete} / {disconnected} |");
    println!("| tokens in the ledger (prompt / completion / reasoning) | {lp} / {lc} / {lr} |");
    println!("| tokens the simulator reported | {sp} / {sc} / {sr} |");
    println!(
        "| cost in the ledger | {}.{:09} USD |",
        cost / 1_000_000_000,
        cost % 1_000_000_000
    );
    println!(
        "| RSS after warm-up ({} s): first / peak / last | {first} / {peak} / {last} KiB |",
        o.warmup
    );
    println!(
        "| records lost | {} |",
        sent.saturating_sub(ledger.len() as u64)
    );
    println!();
}

/// Prints "soak passed", or the first twenty problems and exits with 1.
fn verdict(problems: &[String]) {
    if problems.is_empty() {
        println!("soak passed");
    } else {
        for p in problems.iter().take(20) {
            println!("PROBLEM: {p}");
        }
        std::process::exit(1);
    }
}
