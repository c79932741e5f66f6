//! chatgate-scaling-bench: what sharing limits through Redis adds to each
//! request, measured side by side in one run.
//!
//! ```text
//! chatgate-scaling-bench [--bin chatgate-smol] [--requests 3000] [--ledger-records 200000]
//! ```
//!
//! Starts the simulator, a `redis-server`, and two gateways of the same
//! binary — one with its own limiter, one with `--redis` — then sends the
//! same non-streamed requests one at a time over a keep-alive connection
//! to each, alternating, and prints latency percentiles and the difference
//! (the admission round trip to Redis and the settlement that follows).
//! Then it measures the shared ledger's throughput: a gateway started with
//! `--ledger-postgres` on a local ledger already holding that many records
//! (as after an outage) ships them all; records per second from start to
//! the last row.

use std::time::{Duration, Instant};

use chatgate_tests::*;

fn main() {
    let mut bin = "chatgate-smol".to_owned();
    let mut n = 3000usize;
    let mut records = 200_000usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--bin", Some(v)) => bin = v,
            ("--requests", Some(v)) => n = v.parse().expect("--requests N"),
            ("--ledger-records", Some(v)) => records = v.parse().expect("--ledger-records N"),
            _ => {
                eprintln!(
                    "usage: chatgate-scaling-bench [--bin NAME] [--requests N] [--ledger-records N]"
                );
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
    ledger_throughput(&bin, &sim, records);
}

fn ledger_throughput(bin: &str, sim: &Sim, records: usize) {
    use chatgate_core::LedgerRecord;
    use std::io::Write as _;
    let pg = PgServer::start();
    let dir = tempfile::tempdir().unwrap();
    let key = mint(bin, dir.path(), "test", None, None);
    {
        let f = std::fs::File::create(dir.path().join("ledger.jsonl")).unwrap();
        let mut w = std::io::BufWriter::new(f);
        for i in 0..records {
            let mut r = LedgerRecord::new(
                1_795_000_000_000 + i as u64,
                &format!("req_bench{i:016}"),
                "test",
            );
            r.model = MODEL.into();
            r.stream = i % 2 == 0;
            r.status = 200;
            r.prompt_tokens = 20 + (i % 50) as u64;
            r.completion_tokens = 100 + (i % 300) as u64;
            r.cost_nano_usd = r.prompt_tokens * 2850 + r.completion_tokens * 14250;
            r.finish_reason = Some("stop".into());
            r.complete = true;
            w.write_all(&r.to_line()).unwrap();
        }
    }
    let started = Instant::now();
    let _gw = Gw::start_with_keys(
        bin,
        &sim.url(),
        GwOptions {
            args: vec!["--ledger-postgres".into(), pg.url()],
            ..GwOptions::default()
        },
        dir,
        key,
    );
    let mut c = pg.client();
    loop {
        let n: i64 = c
            .query_one("SELECT count(*) FROM chatgate_ledger", &[])
            .map(|r| r.get(0))
            .unwrap_or(0);
        if n as usize >= records {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let secs = started.elapsed().as_secs_f64();
    println!("\n### {bin}: shared ledger throughput\n");
    println!("| records | seconds | records/s |");
    println!("|---|---|---|");
    println!("| {records} | {secs:.2} | {:.0} |", records as f64 / secs);
}
