//! The cost of several endpoints: CPU per request with three endpoints against
//! one (the same simulator behind each, the same run, runs interleaved),
//! and the failover delay — how much later a request's first byte comes
//! when its first endpoint fails (refuses the connection, or answers 503)
//! and the next one serves it.

use std::fmt::Write as _;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::procs::{Child, free_port};
use crate::{NONSTREAM, Setup, args, gateway, interleaved_cpu, ms};

/// Rounds of the failover measurement (a fresh gateway each: its first
/// request goes to the first endpoint).
const ROUNDS: usize = 15;

/// Appends the endpoint tables to `report`.
pub(crate) fn report(report: &mut String, s: &Setup<'_>) {
    let Setup {
        tools,
        dir,
        sim,
        key,
        lua,
        body,
        secs,
        ..
    } = *s;
    let upstream = format!("http://{sim}/v1");
    let three = write_endpoints(dir, "three", &[&upstream, &upstream, &upstream]);
    let _ = writeln!(
        report,
        "\n### Three endpoints against one: non-streamed, 8 connections, {secs} s each (two rounds, interleaved)\n"
    );
    let _ = writeln!(
        report,
        "| binary | CPU per request, 1 endpoint | CPU per request, 3 endpoints | 3 / 1 |"
    );
    let _ = writeln!(report, "|---|---|---|---|");
    for (name, bin) in [
        ("chatgate-smol", &tools.smol),
        ("chatgate-tokio", &tools.tokio),
    ] {
        let mut one = gateway(bin, dir, &upstream, &format!("pool-one-{name}"));
        let mut several = gateway_with_endpoints(bin, dir, &three, &format!("pool-three-{name}"));
        let targets = [
            (one.listening_address(), vec![one.pid()]),
            (several.listening_address(), vec![several.pid()]),
        ];
        let per = interleaved_cpu(tools, &targets, lua, body, key, secs);
        let (a, b) = (per[0].cpu[0], per[1].cpu[0]);
        let _ = writeln!(report, "| {name} | {a:.1} µs | {b:.1} µs | {:.2} |", b / a);
    }

    // A second simulator answering 503 to everything.
    let mut failing = Child::spawn(
        &tools.smol,
        &args(&[
            "sim",
            "--listen",
            "127.0.0.1:0",
            "--fault",
            "reject",
            "--fault-status",
            "503",
        ]),
        &[],
        &dir.join("sim-503.log"),
    );
    let failing = format!("http://{}/v1", failing.listening_address());
    let refused = format!("http://127.0.0.1:{}/v1", free_port());
    let _ = writeln!(
        report,
        "\n### Failover delay: a fresh gateway's first non-streamed request, median of {ROUNDS}\n"
    );
    let _ = writeln!(
        report,
        "| binary | one endpoint | first endpoint refuses | first endpoint answers 503 | failover delay (refused / 503) |"
    );
    let _ = writeln!(report, "|---|---|---|---|---|");
    for (name, bin) in [
        ("chatgate-smol", &tools.smol),
        ("chatgate-tokio", &tools.tokio),
    ] {
        let sets = [
            write_endpoints(dir, &format!("direct-{name}"), &[&upstream]),
            write_endpoints(dir, &format!("refused-{name}"), &[&refused, &upstream]),
            write_endpoints(dir, &format!("failing-{name}"), &[&failing, &upstream]),
        ];
        let mut times = [Vec::new(), Vec::new(), Vec::new()];
        for round in 0..ROUNDS {
            for (i, pool) in sets.iter().enumerate() {
                let mut g =
                    gateway_with_endpoints(bin, dir, pool, &format!("failover-{name}-{i}-{round}"));
                let addr = g.listening_address();
                times[i].push(first_request(addr, key));
            }
        }
        let med: Vec<Duration> = times
            .iter_mut()
            .map(|t| {
                t.sort_unstable();
                t[t.len() / 2]
            })
            .collect();
        let delay = |i: usize| ms(med[i].saturating_sub(med[0]));
        let _ = writeln!(
            report,
            "| {name} | {} | {} | {} | {} / {} |",
            ms(med[0]),
            ms(med[1]),
            ms(med[2]),
            delay(1),
            delay(2)
        );
    }
}

/// A config file with one `[[upstream]]` table per URL.
fn write_endpoints(dir: &Path, name: &str, urls: &[&str]) -> std::path::PathBuf {
    let mut text = String::new();
    for (i, url) in urls.iter().enumerate() {
        let _ = writeln!(text, "[[upstream]]\nname = \"e{i}\"\nurl = \"{url}\"");
    }
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("pool config");
    path
}

/// `serve` with the endpoints of `config`.
fn gateway_with_endpoints(bin: &Path, dir: &Path, config: &Path, name: &str) -> Child {
    let config = config.to_string_lossy();
    crate::gateway_with(bin, dir, &["--config", &config], name)
}

/// One non-streamed request on a new connection: the time to its whole
/// answer (which the gateway sends at once, when the provider's is whole).
fn first_request(addr: SocketAddr, key: &str) -> Duration {
    let request = crate::client::chat_request(key, NONSTREAM);
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(&request).expect("send");
    crate::client::read_answer(&mut s);
    started.elapsed()
}
