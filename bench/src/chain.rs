//! What keeping a conversation costs: ten-turn conversations sent as
//! `previous_response_id` chains (the gateway reads the conversation from
//! its store and keeps each answer) against the same ten turns sent whole
//! with `store: false` (the client carries the conversation, as Codex
//! does), on one gateway, the two interleaved; with the embedded store and
//! with PostgreSQL (a throwaway server on this machine). Per request: the
//! gateway's CPU (every thread's time on CPU, from the scheduler) and the
//! client's latency, mean over the conversations.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::Setup;

/// Turns per conversation.
const TURNS: usize = 10;
/// Conversations per mode and round.
const CONVERSATIONS: usize = 30;

/// Appends the table to `report`.
pub(crate) fn report(report: &mut String, s: &Setup<'_>) {
    let pg = chatgate_tests::PgServer::start();
    let _ = writeln!(
        report,
        "\n### Kept responses: a {TURNS}-turn conversation chained by previous_response_id against the same turns sent whole (store: false), {CONVERSATIONS} conversations each way, two rounds, interleaved\n"
    );
    let _ = writeln!(
        report,
        "| store | binary | CPU per request, whole | chained | ratio | latency per request, whole | chained |"
    );
    let _ = writeln!(report, "|---|---|---|---|---|---|---|");
    let file = s.dir.join("chain-responses.redb");
    let stores = [
        ("embedded", file.to_string_lossy().into_owned()),
        ("PostgreSQL", pg.url()),
    ];
    for (store, at) in &stores {
        for (name, bin) in [
            ("chatgate-smol", &s.tools.smol),
            ("chatgate-tokio", &s.tools.tokio),
        ] {
            let _ = std::fs::remove_file(&file);
            let mut gw = crate::gateway_with(
                bin,
                s.dir,
                &[
                    "--upstream",
                    s.upstream,
                    "--apis",
                    "chat,responses",
                    "--responses-store",
                    at,
                ],
                &format!("{name}-chain"),
            );
            let (addr, pid) = (gw.listening_address(), gw.pid());
            // Warm: one conversation each way.
            conversation(addr, s.key, true);
            conversation(addr, s.key, false);
            let mut cpu = [Duration::ZERO; 2];
            let mut latency = [Duration::ZERO; 2];
            for _ in 0..2 {
                for (i, chained) in [false, true].into_iter().enumerate() {
                    let before = cpu_time(pid);
                    for _ in 0..CONVERSATIONS {
                        latency[i] += conversation(addr, s.key, chained);
                    }
                    cpu[i] += cpu_time(pid) - before;
                }
            }
            let requests = (2 * CONVERSATIONS * TURNS) as u32;
            let per = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(requests);
            let _ = writeln!(
                report,
                "| {store} | {name} | {:.0} µs | {:.0} µs | {:.2} | {:.0} µs | {:.0} µs |",
                per(cpu[0]),
                per(cpu[1]),
                per(cpu[1]) / per(cpu[0]),
                per(latency[0]),
                per(latency[1]),
            );
            drop(gw);
        }
    }
}

/// One conversation on one connection; the time spent waiting for its
/// answers.
fn conversation(addr: SocketAddr, key: &str, chained: bool) -> Duration {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_nodelay(true).expect("nodelay");
    let mut previous: Option<String> = None;
    let mut items: Vec<Value> = Vec::new();
    let mut waited = Duration::ZERO;
    for turn in 0..TURNS {
        let said = format!("Turn {turn}: {}", "tell me more about the sky. ".repeat(8));
        let body = if chained {
            let mut b = json!({"model": "reasoning-model-k3", "input": said});
            if let Some(id) = &previous {
                b["previous_response_id"] = json!(id);
            }
            b
        } else {
            items.push(json!({"role": "user", "content": said}));
            json!({"model": "reasoning-model-k3", "input": items, "store": false})
        };
        let body = body.to_string();
        let request = format!(
            "POST /v1/responses HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {key}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let started = Instant::now();
        s.write_all(request.as_bytes()).expect("send");
        let answer = crate::client::read_answer(&mut s);
        waited += started.elapsed();
        let answer: Value = serde_json::from_slice(&answer).expect("a response object");
        previous = answer["id"].as_str().map(str::to_owned);
        if !chained {
            items.extend(answer["output"].as_array().cloned().unwrap_or_default());
        }
    }
    waited
}

/// Every thread of `pid`'s time on CPU so far (the scheduler's count, in
/// nanoseconds: finer than the clock ticks of `/proc/PID/stat`).
fn cpu_time(pid: u32) -> Duration {
    let mut total = 0u64;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for task in tasks.flatten() {
            let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
            total += stat
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Duration::from_nanos(total)
}
