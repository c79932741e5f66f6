//! The shared limiter's Redis behind a password (`requirepass`, an ACL
//! user) and behind TLS (`rediss://`, verified against `--upstream-ca`):
//! limits are shared and enforced through it; a wrong password or a
//! certificate from an unknown CA gives the configured fallback, logged
//! with the reason; the password is never logged, not even at the most verbose log level.
//! And limits the Redis script cannot compute exactly are refused.

use std::net::SocketAddr;
use std::time::Instant;

use chatgate_core::RedisReply;
use chatgate_tests::*;

cases!(
    password_and_acl_user_share_limits,
    wrong_password_applies_the_fallback,
    rediss_shares_limits_and_verifies_the_certificate,
    limits_above_the_exact_range_are_refused,
);

/// `requirepass` (the default user's password).
const PASSWORD: &str = "Pw-default-7f3a91c2";
/// An ACL user and its password.
const USER: &str = "gatekeeper";
const USER_PASSWORD: &str = "Pw-acl-user-4be07d55";
/// A password the server does not know.
const WRONG: &str = "Pw-wrong-0c9e6b14";

/// A Redis that requires a password, with one more ACL user.
fn redis_with_passwords() -> RedisServer {
    let acl = format!(">{USER_PASSWORD}");
    RedisServer::start_with(&[
        "--requirepass",
        PASSWORD,
        "--user",
        USER,
        "on",
        &acl,
        "~*",
        "&*",
        "+@all",
    ])
}

/// Gateways of `bin` on one keys file (key `shared`, `rpm` requests per
/// minute), each with `--log-level trace` (everything logged), an admin listener and its own
/// extra arguments (the Redis URL among them).
fn instances(bin: &str, sim: &Sim, rpm: u64, each: &[Vec<String>]) -> Vec<(Gw, SocketAddr)> {
    let each: Vec<(&str, Vec<String>)> = each
        .iter()
        .map(|extra| {
            let mut a = args(&["--log-level", "trace", "--admin-listen", "127.0.0.1:0"]);
            a.extend(extra.iter().cloned());
            (bin, a)
        })
        .collect();
    gateways_sharing_a_key(sim, "shared", rpm, 10_000_000, &each)
        .into_iter()
        .map(|mut gw| {
            let admin = gw.admin_addr();
            (gw, admin)
        })
        .collect()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn unavailable(admin: SocketAddr) -> u64 {
    metric(admin, "chatgate_shared_limits_unavailable_total")
}

/// Sends `n` requests in turn through the gateways (round robin) and
/// checks that one bucket of `rpm` held across them: the first `rpm` are
/// admitted, and in all at most `rpm` plus what refilled while they ran (a
/// loaded machine may take long enough for one more).
fn check_shared_bucket(gws: &[(Gw, SocketAddr)], rpm: u64, n: usize) {
    let started = Instant::now();
    let statuses: Vec<u16> = (0..n)
        .map(|i| gws[i % gws.len()].0.chat(&body("")).status)
        .collect();
    let refill = started.elapsed().as_millis() as u64 * rpm / 60_000;
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 429),
        "{statuses:?}"
    );
    assert!(
        statuses[..rpm as usize].iter().all(|s| *s == 200),
        "{statuses:?}"
    );
    let admitted = statuses.iter().filter(|s| **s == 200).count() as u64;
    assert!(
        (rpm..=rpm + refill).contains(&admitted),
        "{admitted} admitted of {statuses:?}, expected {rpm} plus at most {refill} refilled"
    );
    // Every answer went through Redis: no fallback.
    for (gw, admin) in gws {
        assert_eq!(unavailable(*admin), 0, "{}", gw.proc.stderr());
    }
}

/// No log line of `gw` holds any of the passwords; the start-up line shows
/// the Redis URL with its password masked.
fn assert_no_password_logged(gw: &Gw) {
    let log = gw.proc.stderr();
    for secret in [PASSWORD, USER_PASSWORD, WRONG] {
        assert!(!log.contains(secret), "password in the log:\n{log}");
    }
    assert!(log.contains("***@"), "{log}");
}

fn password_and_acl_user_share_limits(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let redis = redis_with_passwords();
    let default_user = format!("redis://:{PASSWORD}@{}", redis.addr);
    let acl_user = format!("redis://{USER}:{USER_PASSWORD}@{}", redis.addr);
    let gws = instances(
        bin,
        &sim,
        3,
        &[
            args(&["--redis", &default_user, "--redis-timeout", "10s"]),
            args(&["--redis", &acl_user, "--redis-timeout", "10s"]),
        ],
    );
    check_shared_bucket(&gws, 3, 6);
    for (gw, _) in &gws {
        assert_no_password_logged(gw);
    }
    // The bucket is in Redis, behind the password.
    let mut c = RedisClient::connect(redis.addr);
    assert!(matches!(
        c.cmd(&[b"EXISTS", b"chatgate:limits:{shared}"]),
        RedisReply::Error(e) if e.starts_with("NOAUTH")
    ));
    assert_eq!(
        c.cmd(&[b"AUTH", USER.as_bytes(), USER_PASSWORD.as_bytes()]),
        RedisReply::Simple("OK".into())
    );
    assert_eq!(
        c.cmd(&[b"EXISTS", b"chatgate:limits:{shared}"]),
        RedisReply::Integer(1)
    );
}

fn wrong_password_applies_the_fallback(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let redis = redis_with_passwords();
    let wrong = format!("redis://:{WRONG}@{}", redis.addr);
    let wrong_user = format!("redis://{USER}:{WRONG}@{}", redis.addr);
    let no_password = format!("redis://{}", redis.addr);
    let gws = instances(
        bin,
        &sim,
        1000,
        &[
            args(&["--redis", &wrong]),
            args(&["--redis", &wrong_user, "--redis-fallback", "fail-closed"]),
            args(&["--redis", &no_password, "--redis-fallback", "fail-closed"]),
        ],
    );
    // fail-open: served on this instance's own limits, counted, logged
    // with the reason.
    let (open, open_admin) = &gws[0];
    assert_eq!(open.chat(&body("")).status, 200);
    assert_eq!(unavailable(*open_admin), 1);
    let log = open.proc.stderr();
    assert!(
        log.contains("shared rate limiter unreachable") && log.contains("AUTH failed"),
        "{log}"
    );
    assert!(log.contains("WRONGPASS"), "{log}");
    // fail-closed: 503, counted, logged with the reason (a wrong password
    // for a user; no password at all).
    for (i, (gw, admin)) in gws.iter().enumerate().skip(1) {
        let r = gw.chat(&body(""));
        assert_eq!(r.status, 503, "instance {i}");
        assert_eq!(r.json()["error"]["code"], "server_overloaded");
        assert_eq!(unavailable(*admin), 1);
        let log = gw.proc.stderr();
        assert!(log.contains("shared rate limiter unreachable"), "{log}");
        let why = if i == 1 { "WRONGPASS" } else { "NOAUTH" };
        assert!(log.contains(why), "{log}");
    }
    for (gw, _) in &gws[..2] {
        assert_no_password_logged(gw);
    }
    let log = gws[2].0.proc.stderr();
    for secret in [PASSWORD, USER_PASSWORD, WRONG] {
        assert!(!log.contains(secret), "password in the log:\n{log}");
    }
}

fn rediss_shares_limits_and_verifies_the_certificate(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let redis = redis_with_passwords();
    let good = certs(&["localhost"]);
    let proxy = tls_proxy(&good, redis.addr);
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &good.ca_pem).unwrap();
    let ca = ca.to_string_lossy().into_owned();
    let url = format!("rediss://:{PASSWORD}@localhost:{}", proxy.port());
    let tls = args(&[
        "--redis",
        &url,
        "--upstream-ca",
        &ca,
        "--redis-timeout",
        "10s",
    ]);
    let gws = instances(bin, &sim, 3, &[tls.clone(), tls]);
    check_shared_bucket(&gws, 3, 6);
    for (gw, _) in &gws {
        assert_no_password_logged(gw);
    }
    let mut c = RedisClient::connect(redis.addr);
    c.cmd(&[b"AUTH", PASSWORD.as_bytes()]);
    assert_eq!(
        c.cmd(&[b"EXISTS", b"chatgate:limits:{shared}"]),
        RedisReply::Integer(1)
    );
    // A certificate from a CA the gateway does not trust (only the
    // system's web roots, or another test CA): the fallback, and the log
    // names the TLS failure.
    let other = certs(&["localhost"]);
    let other_ca = dir.path().join("other-ca.pem");
    std::fs::write(&other_ca, &other.ca_pem).unwrap();
    let other_ca = other_ca.to_string_lossy().into_owned();
    let untrusted = instances(
        bin,
        &sim,
        1000,
        &[
            args(&["--redis", &url]),
            args(&[
                "--redis",
                &url,
                "--upstream-ca",
                &other_ca,
                "--redis-fallback",
                "fail-closed",
            ]),
        ],
    );
    let (open, open_admin) = &untrusted[0];
    assert_eq!(open.chat(&body("")).status, 200);
    assert_eq!(unavailable(*open_admin), 1);
    let (closed, closed_admin) = &untrusted[1];
    let r = closed.chat(&body(""));
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"]["code"], "server_overloaded");
    assert_eq!(unavailable(*closed_admin), 1);
    for (gw, _) in &untrusted {
        let log = gw.proc.stderr();
        let line = log
            .lines()
            .find(|l| l.contains("shared rate limiter unreachable"))
            .unwrap_or_else(|| panic!("no fallback logged:\n{log}"));
        assert!(
            line.contains("TLS") && line.to_lowercase().contains("certificate"),
            "{line}"
        );
        assert_no_password_logged(gw);
    }
}

/// Limits above what the Redis script computes exactly
/// (`SHARED_MAX_PER_MINUTE`): `serve --redis` refuses to start (exit 2,
/// naming the key or setting); a keys file reloaded with such a key is
/// refused and the previous keys stay in force. Without `--redis` the same
/// limits are fine (the in-process limiter is exact).
fn limits_above_the_exact_range_are_refused(bin: &str) {
    use chatgate_core::SHARED_MAX_PER_MINUTE;
    let max = SHARED_MAX_PER_MINUTE.to_string();
    let over = (SHARED_MAX_PER_MINUTE + 1).to_string();
    let sim = Sim::start(bin, &[], &[]);
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.toml");
    let keys_arg = keys.to_string_lossy().into_owned();
    let ledger = dir.path().join("ledger.jsonl");
    let ledger_arg = ledger.to_string_lossy().into_owned();
    let serve = |extra: &[&str]| {
        let mut a = vec![
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "http://127.0.0.1:9/v1",
            "--keys",
            &keys_arg,
            "--ledger",
            &ledger_arg,
        ];
        a.extend(extra);
        // Every refusal happens before listening: the process exits.
        run(bin, &a, &[])
    };
    mint(
        bin,
        dir.path(),
        "huge",
        None,
        Some(SHARED_MAX_PER_MINUTE + 1),
    );
    let url = redis.url();
    let (code, _, err) = serve(&["--redis", &url]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("key 'huge'") && err.contains(&over) && err.contains(&max),
        "{err}"
    );
    // The default limits too, named by their setting.
    std::fs::remove_file(&keys).unwrap();
    mint(bin, dir.path(), "plain", None, None);
    let (code, _, err) = serve(&["--redis", &url, "--default-rpm", &over]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--default-rpm") && err.contains(&max), "{err}");
    // At the bound, and without --redis above it, the gateway starts.
    std::fs::remove_file(&keys).unwrap();
    let start = |rpm: u64, tpm: u64, redis_args: &[&str]| {
        let d = tempfile::tempdir().unwrap();
        let key = mint(bin, d.path(), "big", Some(rpm), Some(tpm));
        Gw::start_with_keys(
            bin,
            &sim.url(),
            GwOptions {
                args: args(redis_args),
                ..GwOptions::default()
            },
            d,
            key,
        )
    };
    let unshared = start(SHARED_MAX_PER_MINUTE * 2, SHARED_MAX_PER_MINUTE * 2, &[]);
    assert_eq!(unshared.chat(&body("")).status, 200);
    let gw = start(
        SHARED_MAX_PER_MINUTE,
        SHARED_MAX_PER_MINUTE,
        &["--redis", &url, "--redis-timeout", "10s"],
    );
    let r = gw.chat(&body(""));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-ratelimit-limit-tokens"), Some(max.as_str()));
    // A reload bringing a key above the bound is refused; the previous
    // keys stay in force.
    let keys_path = gw.dir.path().join("keys.toml");
    mint(
        bin,
        gw.dir.path(),
        "later",
        Some(SHARED_MAX_PER_MINUTE + 1),
        None,
    );
    eventually("the reload refused", || {
        gw.proc.stderr().contains("keys reload refused")
    });
    let log = gw.proc.stderr();
    assert!(log.contains("key 'later'") && log.contains(&over), "{log}");
    assert!(keys_path.exists());
    assert_eq!(gw.chat(&body("")).status, 200);
}
