//! Several gateway instances, both runtimes mixed, sharing one Redis for
//! their rate limits: a key's limits hold across all of them as they would
//! in one process; Redis stopped mid-run gives the configured fallback
//! (fail-open: local limits, counted; fail-closed: 503), and the instances
//! recover when it returns.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use chatgate_tests::*;

/// Three instances (smol, tokio, smol) on one keys file and one Redis,
/// configured by SCALING.md's block for one server.
fn instances(sim: &Sim, redis: &RedisServer, rpm: u64, tpm: u64, extra: &[&str]) -> Vec<Gw> {
    let toml = scaling_block(
        "# Shared limits through one Redis server.",
        "redis",
        &redis.url(),
    );
    // Kept for the gateways' lifetime: the file is read at start and
    // watched.
    let dir = Box::leak(Box::new(tempfile::tempdir().unwrap()));
    let path = dir.path().join("chatgate.toml");
    std::fs::write(&path, toml).unwrap();
    let mut args = vec![
        "--config".to_owned(),
        path.to_str().unwrap().to_owned(),
        "--admin-listen".into(),
        "127.0.0.1:0".into(),
        // The simulator adds no chat template: a reservation is exactly
        // what a request uses.
        "--prompt-overhead-tokens".into(),
        "0".into(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let each = ["chatgate-smol", "chatgate-tokio", "chatgate-smol"].map(|bin| (bin, args.clone()));
    gateways_sharing_a_key(sim, "shared", rpm, tpm, &each)
}

/// A Redis slowed down by a loaded machine must not let the fallback (local
/// limits) decide any admission of the bursts.
const PATIENT: &[&str] = &["--redis-timeout", "10s"];

/// One answer of a burst: (instance, status, error message).
type Answer = (usize, u16, String);

/// Client threads per instance in a burst.
const THREADS: usize = 4;

/// A burst: `THREADS` client threads per address, each sending
/// `per_thread` requests one after another on new connections, all
/// starting together. Returns each answer's (address index, status, error
/// message) and the time from before the first request left to after the
/// last answer came: an upper bound on the span between the first and the
/// last admission.
fn burst(
    addrs: &[SocketAddr],
    key: &str,
    body: &str,
    per_thread: usize,
) -> (Vec<Answer>, Duration) {
    let start = std::sync::Arc::new(std::sync::Barrier::new(addrs.len() * THREADS + 1));
    let threads: Vec<_> = (0..addrs.len() * THREADS)
        .map(|t| {
            let (addr, i) = (addrs[t % addrs.len()], t % addrs.len());
            let (key, body, start) = (
                key.to_owned(),
                body.to_owned(),
                std::sync::Arc::clone(&start),
            );
            std::thread::spawn(move || {
                start.wait();
                (0..per_thread)
                    .map(|_| {
                        let r = request(
                            addr,
                            "POST",
                            "/v1/chat/completions",
                            Some(&key),
                            Some(&body),
                        );
                        let message = r.json()["error"]["message"]
                            .as_str()
                            .unwrap_or("")
                            .to_owned();
                        (i, r.status, message)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let started = Instant::now();
    start.wait();
    let answers = threads
        .into_iter()
        .flat_map(|t| t.join().expect("client thread"))
        .collect();
    (answers, started.elapsed())
}

/// Whole units a bucket of `per_minute` refills in `elapsed` (the limiter
/// refills continuously, `per_minute` units of 1/60,000 per millisecond).
fn refilled(per_minute: u64, elapsed: Duration) -> u64 {
    elapsed.as_millis() as u64 * per_minute / 60_000
}

/// A key with `--rpm 30`, hammered concurrently through three instances
/// (smol, tokio, smol; four clients each, 72 requests): the bucket holds 30
/// and refills one request every 2 s, so in its first minute a burst
/// admits exactly 30 plus what refilled while it ran: exactly 30 when the
/// burst takes less than 2 s (it takes a fraction of a second).
#[test]
fn request_limit_holds_across_three_instances() {
    let sim = Sim::start(RUNTIMES[0], &[], &[]);
    let redis = RedisServer::start();
    let gws = instances(&sim, &redis, 30, 10_000_000, PATIENT);
    let addrs: Vec<SocketAddr> = gws.iter().map(|g| g.addr).collect();
    let (answers, elapsed) = burst(&addrs, &gws[0].key, &body(""), 6);
    assert_eq!(answers.len(), 72);
    assert!(
        answers.iter().all(|(_, s, _)| *s == 200 || *s == 429),
        "{answers:?}"
    );
    let admitted = answers.iter().filter(|(_, s, _)| *s == 200).count() as u64;
    let per_instance: Vec<usize> = (0..3)
        .map(|i| {
            answers
                .iter()
                .filter(|(a, s, _)| *a == i && *s == 200)
                .count()
        })
        .collect();
    let refill = refilled(30, elapsed);
    println!(
        "{admitted} admitted ({per_instance:?} by instance) in {elapsed:?}; at most {refill} refilled"
    );
    assert!(
        (30..=30 + refill).contains(&admitted),
        "{admitted} admitted in {elapsed:?} (30 plus at most {refill} refilled)"
    );
    // One shared bucket, not one per instance (each instance got 24
    // requests: with its own bucket of 30 it would have admitted them all).
    // Each instance's ledger holds its own answers.
    for (i, gw) in gws.iter().enumerate() {
        let ledger = gw.ledger();
        assert_eq!(
            ledger.iter().filter(|r| r.status == 200).count(),
            per_instance[i]
        );
        assert_eq!(ledger.len(), 24, "instance {i}");
    }
}

/// The token limit through three instances: every request reserves what it
/// then uses (its prompt estimate plus `max_tokens`, all generated), so a
/// burst admits the bucket's size divided by that, plus the refill, in any
/// order: one process alone and three sharing Redis admit the same.
#[test]
fn token_limit_holds_across_instances_as_in_one_process() {
    let b = body(r#""max_tokens":100,"x_sim":{"reasoning_tokens":50,"answer_tokens":50}"#);
    let tpm = 1200;
    let sim = Sim::start(RUNTIMES[0], &[], &[]);
    let check = |what: &str,
                 answers: &[Answer],
                 elapsed: Duration,
                 ledgers: Vec<chatgate_core::LedgerRecord>| {
        let admitted = answers.iter().filter(|(_, s, _)| *s == 200).count() as u64;
        assert_eq!(answers.len(), ledgers.len());
        // Each admitted request used exactly what it reserved.
        let used: Vec<u64> = ledgers
            .iter()
            .filter(|r| r.status == 200)
            .map(|r| r.prompt_tokens + r.completion_tokens)
            .collect();
        assert!(used.iter().all(|u| *u == used[0]), "{used:?}");
        let each = used[0];
        let (least, most) = (tpm / each, (tpm + refilled(tpm, elapsed)) / each);
        println!(
            "{what}: {admitted} admitted in {elapsed:?}, {each} tokens each, expected {least}..={most}"
        );
        assert!(
            (least..=most).contains(&admitted),
            "{what}: {admitted} admitted in {elapsed:?}, expected {least}..={most}"
        );
        // The others were refused for tokens.
        let refusals: Vec<&str> = answers
            .iter()
            .filter(|(_, s, _)| *s != 200)
            .map(|(_, s, m)| {
                assert_eq!(*s, 429);
                m.as_str()
            })
            .collect();
        assert!(
            refusals.iter().all(|m| m.contains("for tokens per minute")),
            "{refusals:?}"
        );
        admitted
    };
    // One process on its own, the same burst.
    let single = Gw::start(
        RUNTIMES[1],
        &sim.url(),
        GwOptions {
            rpm: Some(1000),
            tpm: Some(tpm),
            args: vec!["--prompt-overhead-tokens".into(), "0".into()],
            ..GwOptions::default()
        },
    );
    let (alone, elapsed) = burst(&[single.addr; 3], &single.key, &b, 3);
    let expected = check("one process", &alone, elapsed, single.ledger());
    // Three instances sharing Redis.
    let redis = RedisServer::start();
    let gws = instances(&sim, &redis, 1000, tpm, PATIENT);
    let addrs: Vec<SocketAddr> = gws.iter().map(|g| g.addr).collect();
    let (shared, elapsed) = burst(&addrs, &gws[0].key, &b, 3);
    let admitted = check(
        "three instances",
        &shared,
        elapsed,
        gws.iter().flat_map(|g| g.ledger()).collect(),
    );
    assert!(
        admitted.abs_diff(expected) <= 1,
        "shared {admitted}, one process {expected}"
    );
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
    let open_admin = open[1].admin_addr();
    let closed_admin = closed[0].admin_addr();
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
    match c.cmd(&[b"EXISTS", b"chatgate:limits:{shared}"]) {
        chatgate_core::RedisReply::Integer(n) => assert_eq!(n, 1),
        other => panic!("{other:?}"),
    }
}
