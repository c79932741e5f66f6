//! chatgate-usage-bench: how long `usage` takes over a large ledger, and
//! how much memory it needs, with its totals checked against an
//! independent sum.
//!
//! ```text
//! chatgate-usage-bench [--bin chatgate-smol] [--mb 1024] [--dir DIR]
//! ```
//!
//! Writes a ledger of about `--mb` megabytes (10^6 bytes) into a temporary
//! directory (under `--dir` if given): lines as the gateway writes them,
//! for 40 keys over twelve months, with varied tokens, costs, statuses and
//! streams. While writing it sums every column itself. Then it runs
//! `BIN usage --ledger FILE --by month --format csv` once, times it, reads
//! the child's peak resident memory from `wait4(2)`, and compares the
//! report's TOTAL row with its own sums, to the token and the nano-dollar.
//! The file has just been written, so it is read from the page cache when
//! memory allows (the figure is the report's own work, not the disk's).

use std::io::{BufWriter, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

use chatgate_core::LedgerRecord;
use chatgate_tests::{Noise, bin_path};

/// Column sums, computed while writing.
#[derive(Default, Debug, PartialEq, Eq)]
struct Totals {
    requests: u64,
    prompt: u64,
    completion: u64,
    reasoning: u64,
    cached: u64,
    incomplete: u64,
    cost_nano: u128,
}

fn main() {
    let mut bin = "chatgate-smol".to_owned();
    let mut mb = 1024u64;
    let mut dir: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--bin", Some(v)) => bin = v,
            ("--mb", Some(v)) => mb = v.parse().expect("--mb N"),
            ("--dir", Some(v)) => dir = Some(v),
            _ => {
                eprintln!("usage: chatgate-usage-bench [--bin NAME] [--mb N] [--dir DIR]");
                std::process::exit(2);
            }
        }
    }
    let tmp = match &dir {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir(),
    }
    .expect("a temporary directory");
    let path = tmp.path().join("ledger.jsonl");

    let started = Instant::now();
    let (bytes, want) = write_ledger(&path, mb * 1_000_000);
    println!(
        "ledger: {} lines, {:.2} GB, written in {:.1} s ({})",
        want.requests,
        bytes as f64 / 1e9,
        started.elapsed().as_secs_f64(),
        path.display()
    );

    let out_path = tmp.path().join("report.csv");
    let out = std::fs::File::create(&out_path).expect("report file");
    let started = Instant::now();
    // Reaped by wait4(2) below, which also gives its peak memory.
    #[allow(clippy::zombie_processes)]
    let child = Command::new(bin_path(&bin))
        .args(["usage", "--ledger"])
        .arg(&path)
        .args(["--by", "month", "--format", "csv"])
        .stdin(Stdio::null())
        .stdout(out)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {bin}: {e}"));
    let (status, peak_kib) = wait_with_rusage(child.id() as i32);
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(status, 0, "{bin} usage failed");
    let report = std::fs::read_to_string(&out_path).expect("report");
    let got = totals_of(&report);
    println!(
        "{bin} usage --by month --format csv: {seconds:.2} s, peak RSS {:.1} MiB, {:.0} MB/s",
        peak_kib as f64 / 1024.0,
        bytes as f64 / 1e6 / seconds
    );
    println!(
        "TOTAL: {} requests, cost {} USD",
        got.requests,
        usd(got.cost_nano)
    );
    if got == want {
        println!("the report's totals equal the independent sums, to the nano-dollar");
    } else {
        eprintln!("MISMATCH: report {got:?}, independent sums {want:?}");
        std::process::exit(1);
    }
}

/// Writes lines until `target` bytes; returns the bytes and the sums.
fn write_ledger(path: &std::path::Path, target: u64) -> (u64, Totals) {
    let f = std::fs::File::create(path).expect("ledger file");
    let mut w = BufWriter::with_capacity(1 << 20, f);
    let mut noise = Noise::new(7);
    let mut t = Totals::default();
    let keys: Vec<String> = (0..40).map(|i| format!("team-{i:02}")).collect();
    // 2026-01-01T00:00:00Z, then about twelve months.
    let start_ms = 1_767_225_600_000u64;
    let span_ms = 365 * 86_400_000u64;
    let (mut bytes, mut n) = (0u64, 0u64);
    while bytes < target {
        n += 1;
        let r = noise.next_u64();
        let at = start_ms + (n * 13_171) % span_ms;
        let id = format!("req_5f3a9c1d2e4b{n:012x}");
        let key = &keys[(r % 40) as usize];
        let mut rec = LedgerRecord::new(at, &id, key);
        rec.model = "reasoning-model-k3".into();
        rec.stream = r & 1 == 0;
        rec.duration_ms = 200 + (r >> 8) % 60_000;
        match (r >> 20) % 50 {
            0 => {
                rec.status = 429;
                rec.error = Some("rate_limit_exceeded".into());
            }
            1 => {
                rec.status = 502;
                rec.error = Some("upstream_error".into());
                rec.upstream_status = Some(500);
            }
            _ => {
                rec.status = 200;
                rec.upstream_status = Some(200);
                rec.prompt_tokens = 20 + (r >> 24) % 6_000;
                rec.cached_tokens = rec.prompt_tokens / 128 * 64 * ((r >> 40) & 1);
                rec.reasoning_tokens = (r >> 32) % 4_000;
                rec.completion_tokens = rec.reasoning_tokens + 1 + (r >> 44) % 1_500;
                rec.cost_nano_usd = rec.prompt_tokens * 1_250 + rec.completion_tokens * 10_000;
                rec.cost_usd = rec.cost_nano_usd;
                // One stream in 40 ends early (the provider reset it).
                rec.complete = !(rec.stream && (r >> 50).is_multiple_of(40));
                rec.finish_reason = rec.complete.then(|| "stop".to_owned());
                rec.ttfb_ms = Some(100 + (r >> 12) % 5_000);
            }
        }
        t.requests += 1;
        t.prompt += rec.prompt_tokens;
        t.completion += rec.completion_tokens;
        t.reasoning += rec.reasoning_tokens;
        t.cached += rec.cached_tokens;
        t.incomplete += u64::from(rec.stream && rec.status == 200 && !rec.complete);
        t.cost_nano += u128::from(rec.cost_nano_usd);
        let line = rec.to_line();
        bytes += line.len() as u64;
        w.write_all(&line).expect("write the ledger");
    }
    w.flush().expect("write the ledger");
    (bytes, t)
}

/// Waits for `pid`: its exit status and peak resident memory (KiB).
fn wait_with_rusage(pid: i32) -> (i32, u64) {
    let mut status = 0;
    // SAFETY: rusage is plain data, filled by the kernel.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child, with valid pointers.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    (code, ru.ru_maxrss as u64)
}

/// The TOTAL row of the CSV report.
fn totals_of(csv: &str) -> Totals {
    let row = csv
        .lines()
        .find(|l| l.starts_with("TOTAL,"))
        .unwrap_or_else(|| panic!("no TOTAL row in:\n{csv}"));
    let f: Vec<&str> = row.split(',').collect();
    let num = |i: usize| -> u64 { f[i].parse().unwrap_or_else(|_| panic!("{row}")) };
    let (whole, frac) = f[8].split_once('.').unwrap_or((f[8], "0"));
    let frac = format!("{frac:0<9}");
    Totals {
        requests: num(2),
        prompt: num(3),
        completion: num(4),
        reasoning: num(5),
        cached: num(6),
        incomplete: num(7),
        cost_nano: whole.parse::<u128>().unwrap() * 1_000_000_000 + frac.parse::<u128>().unwrap(),
    }
}

fn usd(nanos: u128) -> String {
    format!("{}.{:09}", nanos / 1_000_000_000, nanos % 1_000_000_000)
}
