//! chatgate-scaling-bench: what sharing limits through Redis adds to each
//! request, measured side by side in one run.
//!
//! ```text
//! chatgate-scaling-bench [--bin chatgate-smol] [--requests 3000]
//! ```
//!
//! Starts the simulator, a `redis-server`, and two gateways of the same
//! binary — one with its own limiter, one with `--redis` — then sends the
//! same non-streamed requests one at a time over a keep-alive connection
//! to each, alternating, and prints latency percentiles and the difference
//! (the admission round trip to Redis and the settlement that follows).

use std::time::{Duration, Instant};

use chatgate_tests::*;

fn main() {
    let mut bin = "chatgate-smol".to_owned();
    let mut n = 3000usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--bin", Some(v)) => bin = v,
            ("--requests", Some(v)) => n = v.parse().expect("--requests N"),
            _ => {
                eprintln!("usage: chatgate-scaling-bench [--bin NAME] [--requests N]");
                std::process::exit(2);
            }
        }
    }
    let sim = Sim::start(&bin, &[], &[]);
    let redis = RedisServer::start();
    let opts = |args: Vec<String>| GwOptions {
        args,
        rpm: Some(100_000_000),
        tpm: Some(1_000_000_000_000),
        ..GwOptions::default()
    };
    let local = Gw::start(&bin, &sim.url(), opts(vec![]));
    let shared = Gw::start(&bin, &sim.url(), opts(vec!["--redis".into(), redis.url()]));
    let b = body("");
    let mut conns = [Conn::open(local.addr), Conn::open(shared.addr)];
    let keys = [local.key.clone(), shared.key.clone()];
    let mut times: [Vec<Duration>; 2] = [Vec::with_capacity(n), Vec::with_capacity(n)];
    for i in 0..n + 200 {
        for which in 0..2 {
            let req = raw_request("POST", "/v1/chat/completions", Some(&keys[which]), Some(&b));
            let t = Instant::now();
            conns[which].send(&req);
            let r = conns[which].response();
            let d = t.elapsed();
            assert_eq!(r.status, 200);
            // The first 200 of each warm up connections and caches.
            if i >= 200 {
                times[which].push(d);
            }
        }
    }
    let pct = |v: &mut Vec<Duration>, p: f64| {
        v.sort_unstable();
        v[((v.len() as f64 * p).ceil() as usize)
            .saturating_sub(1)
            .min(v.len() - 1)]
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let (mut a, mut s) = (times[0].clone(), times[1].clone());
    let (a50, a99) = (pct(&mut a, 0.50), pct(&mut a, 0.99));
    let (s50, s99) = (pct(&mut s, 0.50), pct(&mut s, 0.99));
    println!("### {bin}: {n} non-streamed requests each, one at a time, keep-alive\n");
    println!("| limiter | p50 | p99 |");
    println!("|---|---|---|");
    println!("| in-process | {:.3} ms | {:.3} ms |", ms(a50), ms(a99));
    println!(
        "| Redis (`--redis`) | {:.3} ms | {:.3} ms |",
        ms(s50),
        ms(s99)
    );
    println!(
        "| added by Redis | {:.3} ms | {:.3} ms |",
        ms(s50.saturating_sub(a50)),
        ms(s99.saturating_sub(a99))
    );
}
