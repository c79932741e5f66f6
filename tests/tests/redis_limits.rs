//! The rate limiter's Redis script (`core/src/limits.lua`) against the
//! in-process limiter (`core/src/limits.rs`): the same sequence of
//! admissions, settlements and status reads at the same instants gives the
//! same answers, to the token and the millisecond. Also: EVALSHA after the
//! server lost its scripts (NOSCRIPT, then load and retry), and idle keys
//! expiring.

use std::time::Duration;

use chatgate_core::Instant;
use chatgate_core::RedisReply;
use chatgate_core::{
    Limits, REDIS_SCRIPT, RateLimiter, SHARED_MAX_PER_MINUTE, ScriptOp, ScriptOutcome,
    decode_script_reply, script_args,
};
use chatgate_tests::{Noise, RedisClient, RedisServer};

fn load(c: &mut RedisClient) -> Vec<u8> {
    match c.cmd(&[b"SCRIPT", b"LOAD", REDIS_SCRIPT.as_bytes()]) {
        RedisReply::Bulk(Some(sha)) => sha,
        other => panic!("SCRIPT LOAD: {other:?}"),
    }
}

fn eval(c: &mut RedisClient, sha: &[u8], key: &str, args: &[String]) -> RedisReply {
    let mut cmd: Vec<&[u8]> = vec![b"EVALSHA", sha, b"1", key.as_bytes()];
    cmd.extend(args.iter().map(|a| a.as_bytes()));
    c.cmd(&cmd)
}

fn outcome(r: &RedisReply) -> ScriptOutcome {
    let v = r
        .integers()
        .unwrap_or_else(|| panic!("script reply: {r:?}"));
    decode_script_reply(&v).unwrap_or_else(|| panic!("script reply: {v:?}"))
}

#[test]
fn the_script_and_the_core_limiter_agree() {
    agree(
        Limits {
            requests_per_minute: 30,
            tokens_per_minute: 5_000,
        },
        Limits {
            requests_per_minute: 10,
            tokens_per_minute: 20_000,
        },
        1,
    );
}

/// The same at the largest limit `serve --redis` accepts: the script's
/// doubles are still exact (token amounts scaled up alike).
#[test]
fn the_script_and_the_core_limiter_agree_at_the_shared_maximum() {
    let max = SHARED_MAX_PER_MINUTE;
    agree(
        Limits {
            requests_per_minute: max,
            tokens_per_minute: max / 4,
        },
        Limits {
            requests_per_minute: 10,
            tokens_per_minute: max,
        },
        max / 20_000,
    );
}

/// 3,000 random operations through both, `first` limits then `second`
/// (edited while buckets are in use), token amounts times `scale`.
fn agree(first: Limits, second: Limits, scale: u64) {
    let redis = RedisServer::start();
    let mut c = RedisClient::connect(redis.addr);
    let sha = load(&mut c);
    let local = RateLimiter::new();
    let t0 = 1_795_000_000_000u64;
    let mut noise = Noise::new(42);
    let mut now = 0u64;
    let mut limits = first;
    let mut reserved: Vec<u64> = Vec::new();
    let (mut admitted, mut refused) = (0, 0);
    for step in 0..3000 {
        // Time moves by 0 to ~4 s, sometimes not at all.
        now += match noise.next_u64() % 4 {
            0 => 0,
            1 => noise.next_u64() % 50,
            2 => noise.next_u64() % 1000,
            _ => noise.next_u64() % 4000,
        };
        if step == 1500 {
            // Limits edited while buckets are in use.
            limits = second;
        }
        let at = Instant::ZERO + Duration::from_millis(now);
        let op = match noise.next_u64() % 5 {
            0..=2 => ScriptOp::Admit {
                tokens: noise.next_u64() % 3000 * scale,
            },
            3 if !reserved.is_empty() => {
                let r = reserved.swap_remove((noise.next_u64() as usize) % reserved.len());
                ScriptOp::Settle {
                    reserved: r,
                    used: noise.next_u64() % 4000 * scale,
                }
            }
            _ => ScriptOp::Status,
        };
        let remote = outcome(&eval(
            &mut c,
            &sha,
            "k",
            &script_args(op, limits, Some(t0 + now)),
        ));
        let mine = match op {
            ScriptOp::Admit { tokens } => match local.admit("k", limits, tokens, at) {
                Ok(a) => {
                    reserved.push(a.reserved_tokens);
                    admitted += 1;
                    ScriptOutcome::Admitted(a)
                }
                Err(r) => {
                    refused += 1;
                    ScriptOutcome::Refused(r)
                }
            },
            ScriptOp::Settle { reserved, used } => {
                ScriptOutcome::Status(local.settle("k", limits, reserved, used, at))
            }
            ScriptOp::Status => ScriptOutcome::Status(local.status("k", limits, at)),
        };
        assert_eq!(remote, mine, "step {step} at {now} ms: {op:?}");
    }
    assert!(
        admitted > 100 && refused > 100,
        "{admitted} admitted, {refused} refused"
    );
}

#[test]
fn noscript_is_recovered_and_idle_keys_expire() {
    let redis = RedisServer::start();
    let mut c = RedisClient::connect(redis.addr);
    let sha = load(&mut c);
    c.cmd(&[b"SCRIPT", b"FLUSH"]);
    let limits = Limits {
        requests_per_minute: 2,
        tokens_per_minute: 100,
    };
    let args = script_args(ScriptOp::Admit { tokens: 10 }, limits, None);
    match eval(&mut c, &sha, "idle", &args) {
        RedisReply::Error(e) => assert!(e.starts_with("NOSCRIPT"), "{e}"),
        other => panic!("expected NOSCRIPT, got {other:?}"),
    }
    // The fallback: load again (same digest), retry.
    assert_eq!(load(&mut c), sha);
    let first = outcome(&eval(&mut c, &sha, "idle", &args));
    assert!(matches!(first, ScriptOutcome::Admitted(a) if a.reserved_tokens == 10));
    // With the server's own clock: the second request passes, the third is
    // refused for about 30 s.
    assert!(matches!(
        outcome(&eval(&mut c, &sha, "idle", &args)),
        ScriptOutcome::Admitted(_)
    ));
    match outcome(&eval(&mut c, &sha, "idle", &args)) {
        ScriptOutcome::Refused(r) => assert!((29..=31).contains(&r.retry_after_secs), "{r:?}"),
        other => panic!("{other:?}"),
    }
    // The key expires once both buckets would be full again, plus a minute.
    match c.cmd(&[b"PTTL", b"idle"]) {
        RedisReply::Integer(ms) => assert!((60_000..=125_000).contains(&ms), "{ms}"),
        other => panic!("{other:?}"),
    }
    // An unknown operation is a script error, not a crash.
    let mut bad = args.clone();
    bad[0] = "refund".into();
    assert!(matches!(
        eval(&mut c, &sha, "idle", &bad),
        RedisReply::Error(_)
    ));
}
