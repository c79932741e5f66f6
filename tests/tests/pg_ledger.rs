//! The shared ledger in PostgreSQL (`--ledger-postgres`), through both
//! binaries: every request's row arrives, once; PostgreSQL stopped mid-run
//! loses nothing and duplicates nothing after it returns; rows equal the
//! local ledger and the simulator's tokens; `usage --postgres` reports the
//! same totals as `usage --ledger`.

use std::time::{Duration, Instant};

use chatgate_tests::*;
use serde_json::Value;

/// (rows, distinct ids, tokens, cost); `None` until a gateway has created
/// the table.
fn try_rows(pg: &PgServer) -> Option<(i64, i64, i64, i64)> {
    let mut c = pg.client();
    let r = c
        .query_one(
            "SELECT count(*), count(DISTINCT request_id), coalesce(sum(prompt_tokens + completion_tokens), 0)::bigint, coalesce(sum(cost_nano_usd), 0)::bigint FROM chatgate_ledger",
            &[],
        )
        .ok()?;
    Some((r.get(0), r.get(1), r.get(2), r.get(3)))
}

fn rows(pg: &PgServer) -> (i64, i64, i64, i64) {
    try_rows(pg).expect("the table exists")
}

fn wait_rows(pg: &PgServer, n: i64) -> (i64, i64, i64, i64) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let r = try_rows(pg).unwrap_or_default();
        if r.0 >= n {
            return r;
        }
        assert!(Instant::now() < deadline, "{} rows, expected {n}", r.0);
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn ledger_and_pg_agree(bin: &str) {
    let mut pg = PgServer::start();
    let sim = Sim::start(bin, &[], &[]);
    let gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            args: vec!["--ledger-postgres".into(), pg.url()],
            rpm: Some(100_000),
            tpm: Some(100_000_000),
            ..GwOptions::default()
        },
    );
    for i in 0..20 {
        let b = if i % 2 == 0 {
            body("")
        } else {
            stream_body("")
        };
        assert_eq!(gw.chat(&b).status, 200);
    }
    wait_rows(&pg, 20);
    // PostgreSQL goes away: requests are still served and kept locally.
    pg.stop();
    for i in 0..15 {
        let b = if i % 2 == 0 {
            body("")
        } else {
            stream_body("")
        };
        assert_eq!(gw.chat(&b).status, 200);
    }
    gw.ledger_len(35);
    std::thread::sleep(Duration::from_millis(300));
    pg.restart();
    let (count, distinct, tokens, cost) = wait_rows(&pg, 35);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(rows(&pg).0, 35, "no duplicates arrive later");
    assert_eq!((count, distinct), (35, 35));
    let ledger = gw.ledger();
    let local_tokens: u64 = ledger
        .iter()
        .map(|r| r.prompt_tokens + r.completion_tokens)
        .sum();
    let local_cost: u64 = ledger.iter().map(|r| r.cost_nano_usd).sum();
    assert_eq!((tokens as u64, cost as u64), (local_tokens, local_cost));
    let stats = request(sim.addr, "GET", "/_sim/stats", None, None).json();
    let sim_tokens =
        stats["prompt_tokens"].as_u64().unwrap() + stats["completion_tokens"].as_u64().unwrap();
    assert_eq!(local_tokens, sim_tokens);
    // Reports from either source agree to the nano-dollar.
    let path = gw
        .dir
        .path()
        .join("ledger.jsonl")
        .to_string_lossy()
        .into_owned();
    let (code, from_file, err) = run(bin, &["usage", "--ledger", &path, "--format", "json"], &[]);
    assert_eq!(code, 0, "{err}");
    let (code, from_pg, err) = run(
        bin,
        &["usage", "--postgres", &pg.url(), "--format", "json"],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let (a, b): (Value, Value) = (
        serde_json::from_str(&from_file).unwrap(),
        serde_json::from_str(&from_pg).unwrap(),
    );
    assert_eq!(a, b);
    assert_eq!(a["total"]["requests"], 35);
    // The outage was logged, and the shipper reported it.
    let log = gw.proc.stderr();
    assert!(
        log.contains("shipping to PostgreSQL failed") || log.contains("PostgreSQL unreachable"),
        "{log}"
    );
}

#[test]
fn smol() {
    ledger_and_pg_agree("chatgate-smol");
}

#[test]
fn tokio() {
    ledger_and_pg_agree("chatgate-tokio");
}

/// Three instances, both runtimes, one Redis and one PostgreSQL: every
/// answered request is one row, through an outage of PostgreSQL.
#[test]
fn three_instances_one_ledger() {
    let mut pg = PgServer::start();
    let redis = RedisServer::start();
    let sim = Sim::start(RUNTIMES[0], &[], &[]);
    let dir = tempfile::tempdir().unwrap();
    let key = mint(
        RUNTIMES[0],
        dir.path(),
        "team",
        Some(100_000),
        Some(100_000_000),
    );
    let keys = std::fs::read_to_string(dir.path().join("keys.toml")).unwrap();
    let gws: Vec<Gw> = ["chatgate-smol", "chatgate-tokio", "chatgate-smol"]
        .iter()
        .map(|bin| {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("keys.toml"), &keys).unwrap();
            Gw::start_with_keys(
                bin,
                &sim.url(),
                GwOptions {
                    args: vec![
                        "--ledger-postgres".into(),
                        pg.url(),
                        "--redis".into(),
                        redis.url(),
                    ],
                    ..GwOptions::default()
                },
                dir,
                key.clone(),
            )
        })
        .collect();
    let mut answered = 0;
    for i in 0..60 {
        if i == 20 {
            pg.stop();
        }
        if i == 40 {
            pg.restart();
        }
        let b = if i % 3 == 0 {
            stream_body("")
        } else {
            body("")
        };
        let r = gws[i % 3].chat(&b);
        assert_eq!(r.status, 200);
        answered += 1;
    }
    let (count, distinct, tokens, cost) = wait_rows(&pg, answered);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(rows(&pg).0, answered, "no duplicates arrive later");
    assert_eq!((count, distinct), (answered, answered));
    let local: Vec<_> = gws.iter().flat_map(|g| g.ledger()).collect();
    assert_eq!(local.len() as i64, answered);
    let stats = request(sim.addr, "GET", "/_sim/stats", None, None).json();
    let sim_tokens =
        stats["prompt_tokens"].as_u64().unwrap() + stats["completion_tokens"].as_u64().unwrap();
    assert_eq!(tokens as u64, sim_tokens);
    assert_eq!(
        cost as u64,
        local.iter().map(|r| r.cost_nano_usd).sum::<u64>()
    );
}
