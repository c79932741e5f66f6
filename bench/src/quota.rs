//! What a budget and an in-flight cap cost: CPU per request of a key with
//! both set against the same key without, in-process and with the limits
//! shared through Redis (where a budget rides in the same script call as
//! the rate limits: one round trip at admission, one at settlement). The
//! budget and the cap are large enough never to refuse; the redis-server's
//! own CPU per request is reported beside the gateway's.

use std::fmt::Write as _;

use crate::procs::{Child, free_port};
use crate::{Setup, args, gateway_with, interleaved_cpu};

/// The limits every key gets from the command line: the largest budget a
/// key may have, and a cap above the load's 8 connections.
pub(crate) const QUOTA: &[&str] = &[
    "--default-budget-usd",
    "1000000",
    "--default-max-in-flight",
    "64",
];

/// Appends the table to `report`.
pub(crate) fn report(report: &mut String, s: &Setup<'_>) {
    let Setup {
        tools,
        dir,
        upstream,
        lua,
        body,
        secs,
        ..
    } = *s;
    // A key of its own: shared limits must stay within what the script
    // computes exactly (75 billion per minute).
    let dir = dir.join("quota");
    std::fs::create_dir_all(&dir).expect("quota directory");
    let key = crate::mint_key_with(&tools.smol, &dir, "50000000000");
    let redis_bin = crate::which("redis-server");
    let redis_port = free_port();
    let redis = Child::spawn(
        &redis_bin,
        &args(&[
            "--port",
            &redis_port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            &dir.to_string_lossy(),
        ]),
        &[],
        &dir.join("redis.log"),
    );
    crate::procs::wait_accepting(
        ([127, 0, 0, 1], redis_port).into(),
        std::time::Instant::now(),
    );
    let redis_url = format!("redis://127.0.0.1:{redis_port}");
    let _ = writeln!(
        report,
        "\n### A budget and an in-flight cap: non-streamed, 8 connections, {secs} s each (two rounds, interleaved)\n"
    );
    let _ = writeln!(
        report,
        "| binary | limits | CPU per request, none | with a budget and a cap | ratio | redis-server per request, none / with |"
    );
    let _ = writeln!(report, "|---|---|---|---|---|---|");
    for (name, bin) in [
        ("chatgate-smol", &tools.smol),
        ("chatgate-tokio", &tools.tokio),
    ] {
        for shared in [false, true] {
            let mut base = vec!["--upstream", upstream];
            if shared {
                base.extend(["--redis", &redis_url]);
            }
            let with: Vec<&str> = base.iter().chain(QUOTA).copied().collect();
            let label = if shared { "redis" } else { "in-process" };
            let mut plain = gateway_with(bin, &dir, &base, &format!("{name}-{label}-none"));
            let mut quota = gateway_with(bin, &dir, &with, &format!("{name}-{label}-quota"));
            let pids = |g: &mut Child| {
                let mut p = vec![g.pid()];
                if shared {
                    p.push(redis.pid());
                }
                (g.listening_address(), p)
            };
            let targets = [pids(&mut plain), pids(&mut quota)];
            let per = interleaved_cpu(tools, &targets, lua, body, &key, secs);
            let (a, b) = (per[0].cpu[0], per[1].cpu[0]);
            let redis_cpu = if shared {
                format!("{:.1} µs / {:.1} µs", per[0].cpu[1], per[1].cpu[1])
            } else {
                "—".to_owned()
            };
            let _ = writeln!(
                report,
                "| {name} | {label} | {a:.1} µs | {b:.1} µs | {:.2} | {redis_cpu} |",
                b / a
            );
        }
    }
}
