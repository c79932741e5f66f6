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
    Budget, Limits, Period, Quota, QuotaBook, QuotaRefusal, REBUILD_AFTER_MS, REDIS_SCRIPT,
    RateLimiter, SHARED_MAX_PER_MINUTE, ScriptOp, ScriptOutcome, ScriptQuota, decode_script_reply,
    script_args, script_keys,
};
use chatgate_tests::{Noise, RedisClient, RedisServer};

fn load(c: &mut RedisClient) -> Vec<u8> {
    match c.cmd(&[b"SCRIPT", b"LOAD", REDIS_SCRIPT.as_bytes()]) {
        RedisReply::Bulk(Some(sha)) => sha,
        other => panic!("SCRIPT LOAD: {other:?}"),
    }
}

fn eval(c: &mut RedisClient, sha: &[u8], key: &str, args: &[String]) -> RedisReply {
    let keys = script_keys(key);
    let mut cmd: Vec<&[u8]> = vec![b"EVALSHA", sha, b"4"];
    cmd.extend(keys.iter().map(|k| k.as_bytes()));
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
            &script_args(op, limits, &ScriptQuota::default(), Some(t0 + now)),
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
            ScriptOp::Seed { .. } | ScriptOp::Renew => unreachable!("not drawn"),
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
    let args = script_args(
        ScriptOp::Admit { tokens: 10 },
        limits,
        &ScriptQuota::default(),
        None,
    );
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
    match c.cmd(&[b"PTTL", b"chatgate:limits:{idle}"]) {
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

/// Budgets and in-flight caps: the script and the in-process book decide
/// the same admissions, with the same spend and reservations, across a
/// day's rollover (the clock passed in), and a key's spend must be seeded
/// before a budget can be decided.
#[test]
fn the_script_and_the_quota_book_agree() {
    let redis = RedisServer::start();
    let mut c = RedisClient::connect(redis.addr);
    let sha = load(&mut c);
    let limits = Limits {
        requests_per_minute: 1_000_000,
        tokens_per_minute: 1_000_000,
    };
    let quota = Quota {
        budget: Some(Budget {
            limit_nano: 3_000_000_000,
            period: Period::Day,
        }),
        max_in_flight: Some(3),
    };
    // 2026-11-25T22:00:00Z: the run crosses midnight.
    let t0: u64 = 1_795_644_000_000;
    let at = |ms: u64| ScriptQuota {
        quota,
        lease_ms: 3_600_000,
        unix_ms: ms,
        ..ScriptQuota::default()
    };
    let admit = ScriptOp::Admit { tokens: 1 };
    let first = outcome(&eval(
        &mut c,
        &sha,
        "q",
        &script_args(admit, limits, &at(t0), Some(t0)),
    ));
    assert_eq!(first, ScriptOutcome::Unseeded { before: None });
    let seed = ScriptOp::Seed {
        spent: [100_000_000, 200_000_000, 300_000_000, 400_000_000],
        before: None,
    };
    outcome(&eval(
        &mut c,
        &sha,
        "q",
        &script_args(seed, limits, &at(t0), Some(t0)),
    ));
    // A second seed (another instance, late) changes nothing.
    let late = ScriptOp::Seed {
        spent: [9; 4],
        before: None,
    };
    outcome(&eval(
        &mut c,
        &sha,
        "q",
        &script_args(late, limits, &at(t0), Some(t0)),
    ));
    let book = QuotaBook::new();
    book.seed(
        "q",
        [100_000_000, 200_000_000, 300_000_000, 400_000_000],
        t0,
    );
    let mut noise = Noise::new(17);
    let mut open: Vec<(String, u64, u64)> = Vec::new();
    let (mut admitted, mut over_budget, mut over_cap) = (0, 0, 0);
    for step in 0..3000u64 {
        // Four hours in 3,000 steps: midnight is crossed.
        let now = t0 + step * 4_800;
        if noise.next_u64() % 5 < 3 || open.is_empty() {
            let cost = noise.next_u64() % 40_000_000;
            let lease = format!("req_{step}");
            let q = ScriptQuota {
                cost,
                lease: &lease,
                ..at(now)
            };
            let remote = outcome(&eval(
                &mut c,
                &sha,
                "q",
                &script_args(admit, limits, &q, Some(now)),
            ));
            let mine = book.admit("q", &quota, cost, None, now);
            match (&remote, mine) {
                (ScriptOutcome::Admitted(_), Ok(reserved)) => {
                    admitted += 1;
                    open.push((lease, reserved, cost));
                }
                (ScriptOutcome::OverBudget { spent, reserved }, Err(QuotaRefusal::Budget(b))) => {
                    over_budget += 1;
                    assert_eq!((*spent, *reserved), (b.spent, b.reserved), "step {step}");
                }
                (ScriptOutcome::InFlight, Err(QuotaRefusal::InFlight { limit: 3 })) => {
                    over_cap += 1
                }
                (r, m) => panic!("step {step}: script {r:?}, book {m:?}"),
            }
        } else {
            let (lease, reserved, cost) =
                open.swap_remove((noise.next_u64() as usize) % open.len());
            // Mostly within the reservation; now and then beyond it.
            let metered = match noise.next_u64() % 10 {
                0 => cost + noise.next_u64() % 20_000_000,
                _ => cost / 2,
            };
            let q = ScriptQuota {
                metered,
                lease: &lease,
                ..at(now)
            };
            let settle = ScriptOp::Settle {
                reserved: 1,
                used: 1,
            };
            outcome(&eval(
                &mut c,
                &sha,
                "q",
                &script_args(settle, limits, &q, Some(now)),
            ));
            book.release("q", true, reserved, metered, now);
        }
    }
    assert!(
        admitted > 300 && over_budget > 50 && over_cap > 20,
        "{admitted} admitted, {over_budget} over budget, {over_cap} over the cap"
    );
    // The spend hash holds what the book holds.
    let now = t0 + 3000 * 4_800;
    let s = book.status("q", now);
    let field = |c: &mut RedisClient, f: &str| -> u64 {
        match c.cmd(&[b"HGET", b"chatgate:spend:{q}", f.as_bytes()]) {
            RedisReply::Bulk(Some(v)) => String::from_utf8(v).unwrap().parse().unwrap(),
            other => panic!("{f}: {other:?}"),
        }
    };
    assert_eq!(field(&mut c, "d"), s.spent_in(Period::Day));
    assert_eq!(field(&mut c, "m"), s.spent_in(Period::Month));
    assert_eq!(field(&mut c, "t"), s.spent_in(Period::Total));
    assert_eq!(field(&mut c, "r"), s.reserved);
}

/// After a failover the new primary holds the spend as it was replicated,
/// which may lack the old primary's last settlements and what instances
/// settled on their own while Redis was away. The first call under the
/// new history (another `master_replid`) marks the moment; settlements of
/// lines from then on are counted apart; REBUILD_AFTER_MS later an
/// admission asks for the rebuild, which sets the spend to the ledger's
/// lines before the moment plus those, once.
#[test]
fn a_changed_history_rebuilds_the_spend_from_the_ledger_once() {
    let redis = RedisServer::start();
    let mut c = RedisClient::connect(redis.addr);
    let sha = load(&mut c);
    let limits = Limits {
        requests_per_minute: 1_000_000,
        tokens_per_minute: 1_000_000,
    };
    let quota = Quota {
        budget: Some(Budget {
            limit_nano: 10_000_000_000,
            period: Period::Month,
        }),
        max_in_flight: None,
    };
    let t0: u64 = 1_795_644_000_000;
    let q = |ms: u64, history: &'static str| ScriptQuota {
        quota,
        lease_ms: 60_000,
        unix_ms: ms,
        history,
        rebuild_after_ms: Some(REBUILD_AFTER_MS),
        ..ScriptQuota::default()
    };
    let run = |c: &mut RedisClient, op: ScriptOp, quota: &ScriptQuota<'_>| {
        outcome(&eval(
            c,
            &sha,
            "h",
            &script_args(op, limits, quota, Some(quota.unix_ms)),
        ))
    };
    let spent = |c: &mut RedisClient, f: &str| -> Option<u64> {
        match c.cmd(&[b"HGET", b"chatgate:spend:{h}", f.as_bytes()]) {
            RedisReply::Bulk(Some(v)) => Some(String::from_utf8(v).unwrap().parse().unwrap()),
            _ => None,
        }
    };
    let admit = ScriptOp::Admit { tokens: 1 };
    let settle = ScriptOp::Settle {
        reserved: 1,
        used: 1,
    };
    let cost = |n: u64, q: ScriptQuota<'static>| ScriptQuota { metered: n, ..q };
    // Seeded under history A with 1 USD; 0.1 settled.
    assert_eq!(
        run(&mut c, admit, &q(t0, "A")),
        ScriptOutcome::Unseeded { before: None }
    );
    run(
        &mut c,
        ScriptOp::Seed {
            spent: [0, 0, 1_000_000_000, 1_000_000_000],
            before: None,
        },
        &q(t0, "A"),
    );
    assert_eq!(
        c.cmd(&[b"HGET", b"chatgate:spend:{h}", b"h"]),
        RedisReply::Bulk(Some(b"A".to_vec())),
        "the seed keeps the history it was made under"
    );
    run(&mut c, settle, &cost(100_000_000, q(t0 + 10, "A")));
    assert_eq!(spent(&mut c, "m"), Some(1_100_000_000));
    assert!(matches!(
        run(&mut c, admit, &q(t0 + 20, "A")),
        ScriptOutcome::Admitted(_)
    ));
    assert_eq!(
        spent(&mut c, "c"),
        None,
        "no rebuild under the same history"
    );
    // History B seen at 1.4 s past t0: admissions go on, on the spend as
    // it is; the moment is Redis's clock plus a second, on a whole second.
    let seen = t0 + 1_400;
    assert!(matches!(
        run(&mut c, admit, &q(seen, "B")),
        ScriptOutcome::Admitted(_)
    ));
    let t1 = t0 + 3_000;
    assert_eq!(spent(&mut c, "c"), Some(t1));
    // A line from before t1 (settled late, or by an instance whose clock
    // is ahead of Redis's) counts in the spend now and is left to the
    // ledger at the rebuild; one from t1 on is counted apart.
    run(&mut c, settle, &cost(7, q(t1 - 1, "B")));
    run(&mut c, settle, &cost(20_000_000, q(t1 + 5, "B")));
    assert_eq!(spent(&mut c, "m"), Some(1_120_000_007));
    assert_eq!(spent(&mut c, "nm"), Some(20_000_000));
    // Before REBUILD_AFTER_MS, no rebuild; then one, asked with the cut-off.
    let due = t1 + REBUILD_AFTER_MS;
    assert!(matches!(
        run(&mut c, admit, &q(due - 1, "B")),
        ScriptOutcome::Admitted(_)
    ));
    assert_eq!(
        run(&mut c, admit, &q(due, "B")),
        ScriptOutcome::Unseeded { before: Some(t1) }
    );
    // Without a rebuild (the ledger unreadable), admission still decides.
    let lenient = ScriptQuota {
        rebuild_after_ms: None,
        ..q(due, "B")
    };
    assert!(matches!(
        run(&mut c, admit, &lenient),
        ScriptOutcome::Admitted(_)
    ));
    // The ledger before t1 says 1.5 USD (it has the lines the old primary
    // lost): the spend is that plus what was settled since t1.
    let rebuild = ScriptOp::Seed {
        spent: [0, 0, 1_500_000_000, 1_500_000_000],
        before: Some(t1),
    };
    run(&mut c, rebuild, &q(due, "B"));
    assert_eq!(spent(&mut c, "m"), Some(1_520_000_000));
    assert_eq!(spent(&mut c, "t"), Some(1_520_000_000));
    assert_eq!((spent(&mut c, "c"), spent(&mut c, "nm")), (None, None));
    // Once: a second instance's rebuild with the same cut-off is late and
    // changes nothing, and settlements count as usual again.
    run(&mut c, rebuild, &q(due + 1, "B"));
    run(&mut c, settle, &cost(5, q(due + 2, "B")));
    assert_eq!(spent(&mut c, "m"), Some(1_520_000_005));
    assert!(matches!(
        run(&mut c, admit, &q(due + 3, "B")),
        ScriptOutcome::Admitted(_)
    ));
    // An unknown history (an ACL user without INFO) changes nothing.
    assert!(matches!(
        run(&mut c, admit, &q(due + 4, "")),
        ScriptOutcome::Admitted(_)
    ));
    assert_eq!(spent(&mut c, "c"), None);
    // A period that began after the tally was taken: the rebuild is left
    // for the next admission, which tallies the new period.
    let t2 = due + 10;
    assert!(matches!(
        run(&mut c, admit, &q(t2, "C")),
        ScriptOutcome::Admitted(_)
    ));
    let c2 = spent(&mut c, "c").expect("a moment under history C");
    let next_month = 1_796_083_200_000; // 2026-12-01T00:00:00Z
    let late = c2 + REBUILD_AFTER_MS;
    assert!(late < next_month);
    assert_eq!(
        run(&mut c, admit, &q(late, "C")),
        ScriptOutcome::Unseeded { before: Some(c2) }
    );
    // Meanwhile a settlement in the new month rolls the spend over.
    run(&mut c, settle, &cost(3, q(next_month + 1, "C")));
    let stale = ScriptOp::Seed {
        spent: [0, 0, 9_000_000_000, 9_000_000_000],
        before: Some(c2),
    };
    run(&mut c, stale, &q(late, "C"));
    assert_eq!(spent(&mut c, "c"), Some(c2), "still due");
    assert_eq!(
        spent(&mut c, "m"),
        Some(3),
        "the new month's spend is untouched"
    );
}
