//! Several gateway instances, both runtimes mixed, sharing one Redis for
//! their rate limits: a key's limits hold across all of them as they would
//! in one process; Redis stopped mid-run gives the configured fallback
//! (fail-open: local limits, counted; fail-closed: 503), and the instances
//! recover when it returns.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use chatgate_tests::*;

/// Three instances (smol, tokio, smol) on one keys file and one Redis.
fn instances(sim: &Sim, redis: &RedisServer, rpm: u64, tpm: u64, extra: &[&str]) -> Vec<Gw> {
    let dir = tempfile::tempdir().unwrap();
    let key = mint(RUNTIMES[0], dir.path(), "shared", Some(rpm), Some(tpm));
    let keys = std::fs::read_to_string(dir.path().join("keys.toml")).unwrap();
    ["chatgate-smol", "chatgate-tokio", "chatgate-smol"]
        .iter()
        .map(|bin| {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("keys.toml"), &keys).unwrap();
            let mut args = vec![
                "--redis".to_owned(),
                redis.url(),
                "--admin-listen".into(),
                "127.0.0.1:0".into(),
            ];
            args.extend(extra.iter().map(|s| (*s).to_owned()));
            Gw::start_with_keys(
                bin,
                &sim.url(),
                GwOptions {
                    args,
                    ..GwOptions::default()
                },
                dir,
                key.clone(),
            )
        })
        .collect()
}

fn admin_of(gw: &mut Gw) -> SocketAddr {
    gw.proc
        .line()
        .trim()
        .trim_start_matches("chatgate admin listening on http://")
        .parse()
        .expect("admin address")
}

fn metric(admin: SocketAddr, name: &str) -> u64 {
    let text = String::from_utf8(request(admin, "GET", "/metrics", None, None).body).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name}"))
}

/// Sends `n` requests round-robin over `addrs`, one at a time; returns the
/// statuses.
fn hammer(addrs: &[SocketAddr], key: &str, body: &str, n: usize) -> Vec<u16> {
    (0..n)
        .map(|i| {
            request(
                addrs[i % addrs.len()],
                "POST",
                "/v1/chat/completions",
                Some(key),
                Some(body),
            )
            .status
        })
        .collect()
}

#[test]
fn request_limit_holds_across_three_instances() {
    let sim = Sim::start(RUNTIMES[0], &[], &[]);
    let redis = RedisServer::start();
    let gws = instances(&sim, &redis, 30, 10_000_000, &[]);
    let addrs: Vec<SocketAddr> = gws.iter().map(|g| g.addr).collect();
    let started = Instant::now();
    let statuses = hammer(&addrs, &gws[0].key, &body(""), 60);
    let elapsed = started.elapsed().as_secs_f64();
    let admitted = statuses.iter().filter(|s| **s == 200).count();
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 429),
        "{statuses:?}"
    );
    // 30 in the bucket, plus what refilled (30 a minute) while the test ran.
    let refill = (elapsed * 30.0 / 60.0).ceil() as usize;
    assert!(
        (30..=30 + refill).contains(&admitted),
        "{admitted} admitted in {elapsed:.1} s"
    );
    // Each instance admitted some: the limit is shared, not split.
    for (i, gw) in gws.iter().enumerate() {
        let ok = gw.ledger().iter().filter(|r| r.status == 200).count();
        assert!(ok > 0, "instance {i} admitted none");
    }
    let total: usize = gws
        .iter()
        .map(|g| g.ledger().iter().filter(|r| r.status == 200).count())
        .sum();
    assert_eq!(total, admitted);
}

#[test]
fn token_limit_holds_across_instances_as_in_one_process() {
    // Every request reserves and uses about the same number of tokens.
    let b = body(r#""max_tokens":100,"x_sim":{"reasoning_tokens":50,"answer_tokens":50}"#);
    let sim = Sim::start(RUNTIMES[0], &[], &[]);
    // One process on its own: how many of 30 back-to-back requests pass.
    let single = Gw::start(
        RUNTIMES[0],
        &sim.url(),
        GwOptions {
            rpm: Some(1000),
            tpm: Some(1200),
            ..GwOptions::default()
        },
    );
    let alone = hammer(&[single.addr], &single.key, &b, 30);
    let expected = alone.iter().filter(|s| **s == 200).count();
    assert!((5..30).contains(&expected), "{alone:?}");
    // Three instances sharing Redis: the same (the refill over the few
    // seconds the runs take may let one more through).
    let redis = RedisServer::start();
    let gws = instances(&sim, &redis, 1000, 1200, &[]);
    let addrs: Vec<SocketAddr> = gws.iter().map(|g| g.addr).collect();
    let shared = hammer(&addrs, &gws[0].key, &b, 30);
    let admitted = shared.iter().filter(|s| **s == 200).count();
    assert!(
        admitted.abs_diff(expected) <= 1,
        "shared admitted {admitted}, one process {expected}"
    );
    let refused_for_tokens = gws
        .iter()
        .flat_map(|g| g.ledger())
        .filter(|r| r.status == 429)
        .count();
    assert_eq!(refused_for_tokens, 30 - admitted);
}

#[test]
fn redis_down_falls_back_and_recovers() {
    let sim = Sim::start(RUNTIMES[0], &[], &[]);
    let redis = RedisServer::start();
    let port = redis.addr.port();
    let mut open = instances(
        &sim,
        &redis,
        1000,
        10_000_000,
        &["--redis-timeout", "500ms"],
    );
    let mut closed = instances(
        &sim,
        &redis,
        1000,
        10_000_000,
        &[
            "--redis-fallback",
            "fail-closed",
            "--redis-timeout",
            "500ms",
        ],
    );
    let open_admin = admin_of(&mut open[1]);
    let closed_admin = admin_of(&mut closed[0]);
    assert_eq!(open[1].chat(&body("")).status, 200);
    assert_eq!(closed[0].chat(&body("")).status, 200);
    assert_eq!(
        metric(open_admin, "chatgate_shared_limits_unavailable_total"),
        0
    );
    drop(redis);
    // fail-open: served on local limits, counted and logged.
    for gw in &open {
        assert_eq!(gw.chat(&body("")).status, 200);
        assert_eq!(gw.chat(&stream_body("")).status, 200);
    }
    assert_eq!(
        metric(open_admin, "chatgate_shared_limits_unavailable_total"),
        2
    );
    assert!(
        open[1]
            .proc
            .stderr()
            .contains("shared rate limiter unreachable")
    );
    // fail-closed: 503, metered.
    for gw in &closed {
        let r = gw.chat(&body(""));
        assert_eq!(r.status, 503);
        assert_eq!(r.json()["error"]["code"], "server_overloaded");
    }
    assert_eq!(
        metric(closed_admin, "chatgate_shared_limits_unavailable_total"),
        1
    );
    assert!(closed[0].ledger().iter().any(|r| r.status == 503));
    // Redis returns (empty: the script is loaded again on NOSCRIPT).
    let _redis = RedisServer::start_on(port);
    let deadline = Instant::now() + PATIENCE;
    while closed[0].chat(&body("")).status != 200 {
        assert!(
            Instant::now() < deadline,
            "fail-closed instance did not recover"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let before = metric(open_admin, "chatgate_shared_limits_unavailable_total");
    assert_eq!(open[1].chat(&body("")).status, 200);
    assert_eq!(
        metric(open_admin, "chatgate_shared_limits_unavailable_total"),
        before,
        "admitted through Redis again"
    );
    // And the keys live in Redis again.
    let mut c = RedisClient::connect(_redis.addr);
    match c.cmd(&[b"EXISTS", b"chatgate:limits:shared"]) {
        chatgate_core::resp::Reply::Integer(n) => assert_eq!(n, 1),
        other => panic!("{other:?}"),
    }
}
