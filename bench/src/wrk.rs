//! wrk, the closed-loop load generator: a run against a target, its
//! figures read from wrk's summary, and a run measured with the CPU the
//! target's processes spent.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use crate::Contender;
use crate::procs::{cpu_ticks, ticks_per_second};

pub(crate) struct WrkResult {
    pub(crate) requests: u64,
    pub(crate) rps: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) bad: u64,
}

/// wrk with `threads` threads and `conns` connections for `secs`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn wrk(
    wrk: &Path,
    addr: SocketAddr,
    lua: &Path,
    body: &Path,
    key: &str,
    conns: u32,
    secs: u64,
    threads: u32,
) -> WrkResult {
    wrk_path(
        wrk,
        addr,
        "/v1/chat/completions",
        lua,
        body,
        key,
        conns,
        secs,
        threads,
    )
}

/// [`wrk`] against another path of the gateway.
#[allow(clippy::too_many_arguments)]
pub(crate) fn wrk_path(
    wrk: &Path,
    addr: SocketAddr,
    path: &str,
    lua: &Path,
    body: &Path,
    key: &str,
    conns: u32,
    secs: u64,
    threads: u32,
) -> WrkResult {
    wrk_url(
        wrk,
        &format!("http://{addr}{path}"),
        lua,
        body,
        key,
        conns,
        secs,
        threads,
    )
}

/// wrk against a whole URL (`https://` too).
#[allow(clippy::too_many_arguments)]
pub(crate) fn wrk_url(
    wrk: &Path,
    url: &str,
    lua: &Path,
    body: &Path,
    key: &str,
    conns: u32,
    secs: u64,
    threads: u32,
) -> WrkResult {
    let out = Command::new(wrk)
        .args([
            format!("-t{threads}").as_str(),
            &format!("-c{conns}"),
            &format!("-d{secs}s"),
            "--latency",
            "-s",
        ])
        .arg(lua)
        .arg(url)
        .env("KEY", key)
        .env("BODY", body)
        .output()
        .expect("run wrk");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let find = |prefix: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .map(str::trim)
    };
    let requests = text
        .lines()
        .find(|l| l.contains(" requests in "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let rps = find("Requests/sec:")
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0.0);
    let pct = |p: &str| {
        find(p)
            .and_then(|l| l.split_whitespace().nth(1))
            .map_or(0.0, wrk_ms)
    };
    let bad = find("Non-2xx")
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    WrkResult {
        requests,
        rps,
        p50_ms: pct("50%"),
        p99_ms: pct("99%"),
        bad,
    }
}

/// A wrk run against `t` (see [`wrk`]), with the CPU time its processes
/// spent per request, in µs (`None` for a target without processes).
#[allow(clippy::too_many_arguments)]
pub(crate) fn measured(
    wrk_bin: &Path,
    t: &Contender,
    lua: &Path,
    body: &Path,
    key: &str,
    conns: u32,
    secs: u64,
    threads: u32,
) -> (WrkResult, Option<f64>) {
    let url = format!("http://{}/v1/chat/completions", t.addr);
    measured_url(wrk_bin, t, &url, lua, body, key, conns, secs, threads)
}

/// [`measured`] against a whole URL (`https://` too).
#[allow(clippy::too_many_arguments)]
pub(crate) fn measured_url(
    wrk_bin: &Path,
    t: &Contender,
    url: &str,
    lua: &Path,
    body: &Path,
    key: &str,
    conns: u32,
    secs: u64,
    threads: u32,
) -> (WrkResult, Option<f64>) {
    let before = cpu_ticks(&t.pids);
    let r = wrk_url(wrk_bin, url, lua, body, key, conns, secs, threads);
    let cpu = cpu_ticks(&t.pids) - before;
    let per_req = (!t.pids.is_empty() && r.requests > 0)
        .then(|| cpu as f64 / ticks_per_second() as f64 * 1e6 / r.requests as f64);
    (r, per_req)
}

/// `538.00us`, `1.22ms`, `2.00s`, `1.00m` in milliseconds.
fn wrk_ms(v: &str) -> f64 {
    let (num, unit) = v.split_at(v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len()));
    let n: f64 = num.parse().unwrap_or(0.0);
    match unit {
        "us" => n / 1000.0,
        "ms" => n,
        "s" => n * 1000.0,
        "m" => n * 60_000.0,
        _ => n,
    }
}
