//! Spend budgets and in-flight caps per key, through both binaries: the
//! 429 `insufficient_quota` and what it says, spend kept across a restart,
//! `keys set` on a running gateway (and bad values refused), the in-flight
//! cap with its queue, and budgets shared by three instances through Redis
//! with the spend rebuilt from PostgreSQL after a `FLUSHALL`, an in-flight
//! cap shared by three instances (and the slots of a killed one coming
//! back with its leases).

use std::time::{Duration, Instant};

use chatgate_tests::*;

cases!(
    a_budget_refuses_with_insufficient_quota_and_a_restart_keeps_the_spend,
    keys_set_changes_a_budget_within_a_second_and_refuses_bad_values,
    the_in_flight_cap_refuses_or_queues_in_order,
    three_instances_share_a_budget_through_redis_and_a_flushall_forgets_nothing,
    a_cap_holds_across_three_instances_and_a_killed_instance_gives_its_slots_back,
    cut_streams_settle_to_what_the_ledger_says,
);

/// Prices of the catalogue's model, nano-dollars per token.
const INPUT_NANO: u64 = 2_850;
const OUTPUT_NANO: u64 = 14_250;

/// The request every budget test sends: `max_tokens` 20, so the simulator
/// (which counts the prompt as the gateway estimates it and stops at
/// `max_tokens`) costs exactly what the gateway reserves.
fn capped() -> String {
    body(r#""max_tokens":20"#)
}

/// The simulator adds no chat template to the prompt, so the gateways here
/// are told so (`--prompt-overhead-tokens 0`): a reservation is then exactly
/// what a request costs (what a template changes is tested in
/// `real_providers.rs`).
fn exact() -> GwOptions {
    GwOptions {
        env: vec![("CHATGATE_PROMPT_OVERHEAD_TOKENS".into(), "0".into())],
        ..GwOptions::default()
    }
}

fn keys_cmd(bin: &str, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["keys"];
    all.extend_from_slice(args);
    run(bin, &all, &[])
}

fn assert_quota_refusal(r: &Response) {
    assert_eq!(r.status, 429, "{}", String::from_utf8_lossy(&r.body));
    let j = r.json();
    assert_eq!(j["error"]["type"], "insufficient_quota", "{j}");
    assert_eq!(j["error"]["code"], "insufficient_quota", "{j}");
    assert_eq!(r.header("x-should-retry"), Some("false"));
    assert_eq!(r.header("retry-after"), None);
}

fn a_budget_refuses_with_insufficient_quota_and_a_restart_keeps_the_spend(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = Gw::start(bin, &sim.url(), exact());
    let keys = gw.dir.path().join("keys.toml");
    let keys = keys.to_str().unwrap();
    // The first request tells what one costs.
    let r = gw.chat(&capped());
    assert_eq!(r.status, 200);
    let one = gw.ledger_len(1)[0].clone();
    assert_eq!(one.completion_tokens, 20);
    let cost = one.prompt_tokens * INPUT_NANO + 20 * OUTPUT_NANO;
    assert_eq!(one.cost_nano_usd, cost);
    // A budget for four more and a half: four pass, then 429.
    let budget = cost * 5 + cost / 2;
    let usd = format!("{}.{:09}", budget / 1_000_000_000, budget % 1_000_000_000);
    let (code, _, err) = keys_cmd(
        bin,
        &[
            "set",
            "test",
            "--keys",
            keys,
            "--budget-usd",
            &usd,
            "--budget-period",
            "day",
        ],
    );
    assert_eq!(code, 0, "{err}");
    gw.proc
        .stderr_when("the reload", |t| t.contains("keys reloaded"));
    let mut answered = 1;
    while gw.chat(&capped()).status == 200 {
        answered += 1;
        assert!(answered < 50, "the budget never applied");
    }
    let ledger = gw.ledger();
    let spent: u64 = ledger.iter().map(|r| r.cost_nano_usd).sum();
    assert_eq!(spent, cost * 5, "five answered");
    assert!(spent <= budget);
    let r = gw.chat(&capped());
    assert_quota_refusal(&r);
    let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
    for needle in [
        format!("spent {} USD", chatgate_core::format_usd(spent)),
        format!(
            "of its {} USD budget today (UTC)",
            chatgate_core::format_usd(budget)
        ),
        format!("could cost up to {} USD", chatgate_core::format_usd(cost)),
        "The budget resets at ".to_owned(),
        "T00:00:00.000Z".to_owned(),
    ] {
        assert!(message.contains(&needle), "{message} lacks {needle}");
    }
    // Refusals are metered (status 429, nothing spent).
    let last = gw.ledger().last().unwrap().clone();
    assert_eq!((last.status, last.cost_nano_usd), (429, 0));
    assert_eq!(last.error.as_deref(), Some("insufficient_quota"));
    // A restart rebuilds the day's spend from the ledger: still refused.
    let Gw {
        mut proc, dir, key, ..
    } = gw;
    proc.signal(libc::SIGTERM);
    proc.wait_exit(PATIENCE).expect("exits on SIGTERM");
    let gw = Gw::start_with_keys(bin, &sim.url(), exact(), dir, key);
    assert_quota_refusal(&gw.chat(&capped()));
    // A request that fits what is left passes: a smaller max_tokens.
    let small = body(r#""max_tokens":1"#);
    assert_eq!(gw.chat(&small).status, 200);
    // The usage report's budgets: spent as the ledger says, what remains,
    // and when the day resets.
    let spent: u64 = gw.ledger().iter().map(|r| r.cost_nano_usd).sum();
    let ledger = gw.dir.path().join("ledger.jsonl");
    let ledger = ledger.to_str().unwrap();
    let args = ["usage", "--budgets", "--keys", keys, "--ledger", ledger];
    let (code, out, err) = run(bin, &[&args[..], &["--format", "json"]].concat(), &[]);
    assert_eq!(code, 0, "{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    let b = &j["budgets"][0];
    assert_eq!(j["budgets"].as_array().unwrap().len(), 1, "{j}");
    assert_eq!(
        (b["key"].as_str(), b["period"].as_str()),
        (Some("test"), Some("day"))
    );
    assert_eq!(b["budget_nano_usd"], budget, "{b}");
    assert_eq!(b["spent_nano_usd"], spent, "{b}");
    let remaining = chatgate_core::report::usd(budget - spent);
    assert_eq!(b["remaining_usd"].to_string(), remaining, "{b}");
    assert!(b["resets"].as_str().unwrap().ends_with("T00:00:00Z"), "{b}");
    let (code, table, _) = run(bin, &args, &[]);
    assert_eq!(code, 0);
    let row = table.lines().nth(1).unwrap_or_default();
    assert!(
        table.starts_with("key") && table.contains("remaining_usd") && row.ends_with(&remaining),
        "{table}"
    );
    // Without --keys, one line says what is missing.
    let (code, _, err) = run(bin, &["usage", "--budgets", "--ledger", ledger], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("--keys"), "{err}");
}

fn keys_set_changes_a_budget_within_a_second_and_refuses_bad_values(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = Gw::start(bin, &sim.url(), exact());
    let path = gw.dir.path().join("keys.toml");
    let keys = path.to_str().unwrap();
    let (code, _, err) = keys_cmd(bin, &["set", "test", "--keys", keys, "--budget-usd", "0"]);
    assert_eq!(code, 0, "{err}");
    let set = Instant::now();
    eventually("a zero budget refuses", || gw.chat(&capped()).status == 429);
    assert!(
        set.elapsed() < Duration::from_secs(5),
        "{:?}",
        set.elapsed()
    );
    let (code, _, err) = keys_cmd(
        bin,
        &[
            "set",
            "test",
            "--keys",
            keys,
            "--budget-usd",
            "none",
            "--max-in-flight",
            "3",
        ],
    );
    assert_eq!(code, 0, "{err}");
    eventually("no budget again", || gw.chat(&capped()).status == 200);
    let (code, list, _) = keys_cmd(bin, &["list", "--keys", keys]);
    assert_eq!(code, 0);
    assert!(list.contains("in-flight") && list.contains(" 3 "), "{list}");
    // Bad values: one line naming the key and field, nothing written.
    let before = std::fs::read(&path).unwrap();
    for (args, needle) in [
        (vec!["--budget-usd", "-1"], "-1 is negative"),
        (vec!["--budget-usd", "NaN"], "NaN is not a number"),
        (
            vec!["--budget-usd", "ten"],
            "--budget-usd 'ten' is not an amount",
        ),
        (
            vec!["--budget-usd", "5", "--budget-period", "year"],
            "--budget-period: 'year' is not one of day, week, month, total",
        ),
        (
            vec!["--max-in-flight", "0"],
            "--max-in-flight: must be at least 1",
        ),
    ] {
        let mut all = vec!["set", "test", "--keys", keys];
        all.extend(args.iter().copied());
        let (code, _, err) = keys_cmd(bin, &all);
        assert_ne!(code, 0, "{args:?} accepted");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "{args:?} wrote the file"
        );
    }
    let (code, _, err) = keys_cmd(bin, &["set", "nobody", "--keys", keys, "--rpm", "5"]);
    assert_ne!(code, 0);
    assert!(err.contains("no key is named 'nobody'"), "{err}");
    // `keys new` takes the same flags.
    let (code, _, err) = keys_cmd(
        bin,
        &[
            "new",
            "--keys",
            keys,
            "--name",
            "capped",
            "--budget-usd",
            "2.5",
            "--budget-period",
            "week",
            "--max-in-flight",
            "4",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("budget_usd = 2.5\nbudget_period = \"week\"\nmax_in_flight = 4\n"),
        "{text}"
    );
}

/// Runs `keys set NAME FLAGS…` on each gateway's keys file and waits until
/// each has reloaded it (a loaded machine may take longer than the
/// one-second file check).
/// Three instances (this binary, then both) sharing the key `shared`
/// (limits high enough never to refuse) with `args` each.
fn three_sharing(bin: &str, sim: &Sim, args: &[String]) -> Vec<Gw> {
    let mut args = args.to_vec();
    args.extend(["--prompt-overhead-tokens".to_owned(), "0".to_owned()]);
    gateways_sharing_a_key(
        sim,
        "shared",
        1_000_000,
        1_000_000_000,
        &[
            (bin, args.to_vec()),
            ("chatgate-smol", args.to_vec()),
            ("chatgate-tokio", args.to_vec()),
        ],
    )
}

/// A gateway whose keys get the in-flight cap `cap` and a queue of
/// `timeout`.
fn queueing(bin: &str, sim: &Sim, timeout: &str, cap: &str) -> Gw {
    Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            args: vec![
                "--queue-timeout".into(),
                timeout.into(),
                "--default-max-in-flight".into(),
                cap.into(),
            ],
            ..exact()
        },
    )
}

/// Sends `n` streamed requests at once (the `i`th `stagger` × `i` late);
/// their responses in order.
fn at_once(gw: &Gw, n: usize, stagger: Duration) -> Vec<Response> {
    concurrently(n, stagger, |_| (gw.addr, gw.key.clone(), stream_body("")))
}

/// Sends the `n` requests `to(i)` names (address, key, body) from threads
/// of their own, the `i`th `stagger` × `i` late; their responses in order.
fn concurrently(
    n: usize,
    stagger: Duration,
    to: impl Fn(usize) -> (std::net::SocketAddr, String, String),
) -> Vec<Response> {
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (addr, key, body) = to(i);
            std::thread::spawn(move || {
                std::thread::sleep(stagger * i as u32);
                request(
                    addr,
                    "POST",
                    "/v1/chat/completions",
                    Some(&key),
                    Some(&body),
                )
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn the_in_flight_cap_refuses_or_queues_in_order(bin: &str) {
    // Streams of about a second each.
    let sim = Sim::start(bin, &["--token-ms", "25"], &[]);
    let gw = Gw::start(bin, &sim.url(), exact());
    let keys = gw.dir.path().join("keys.toml");
    let (code, _, err) = keys_cmd(
        bin,
        &[
            "set",
            "test",
            "--keys",
            keys.to_str().unwrap(),
            "--max-in-flight",
            "2",
        ],
    );
    assert_eq!(code, 0, "{err}");
    gw.proc
        .stderr_when("the reload", |t| t.contains("keys reloaded"));
    // Without a queue: two streams, the other four refused at once.
    let got = at_once(&gw, 6, Duration::ZERO);
    let ok = got.iter().filter(|r| r.status == 200).count();
    assert_eq!(
        ok,
        2,
        "{:?}",
        got.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    for r in got.iter().filter(|r| r.status != 200) {
        assert_eq!(r.status, 429);
        assert_eq!(r.json()["error"]["code"], "rate_limit_exceeded");
        assert_eq!(r.header("retry-after"), Some("1"));
        let m = r.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(m.contains("in-flight limit is 2"), "{m}");
    }
    drop(gw);
    // With a queue: all are served, two at a time, in the order they came.
    let gw = queueing(bin, &sim, "60s", "2");
    let got = at_once(&gw, 6, Duration::from_millis(150));
    assert!(
        got.iter().all(|r| r.status == 200),
        "{:?}",
        got.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    let mut ledger = gw.ledger_len(6);
    // Request ids count arrivals; in arrival order, each request got its
    // first byte no earlier than the one before it (a slot freed goes to
    // the first in the queue, which asks again within 20 ms: 30 ms of
    // slack for the provider's own first-byte time).
    ledger.sort_by(|a, b| a.request_id.cmp(&b.request_id));
    let first_byte = |r: &chatgate_core::LedgerRecord| -> u64 {
        let secs = chatgate_core::parse_rfc3339(&r.ts).unwrap();
        let ms: u64 = r.ts[20..23].parse().unwrap();
        secs * 1000 + ms - r.duration_ms + r.ttfb_ms.unwrap()
    };
    for pair in ledger.windows(2) {
        assert!(
            first_byte(&pair[1]) + 30 >= first_byte(&pair[0]),
            "served out of order: {pair:?}"
        );
    }
    let waited = ledger.iter().filter(|r| r.duration_ms > 1500).count();
    assert!(waited >= 3, "four waited for a slot: {ledger:?}");
    // A queue timeout: the third of three waits 300 ms, then 429.
    drop(gw);
    let gw = queueing(bin, &sim, "300ms", "1");
    let got = at_once(&gw, 3, Duration::from_millis(50));
    assert_eq!(got[0].status, 200);
    assert_eq!(got[2].status, 429);
    let m = got[2].json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(m.contains("in its queue"), "{m}");
}

fn three_instances_share_a_budget_through_redis_and_a_flushall_forgets_nothing(bin: &str) {
    let redis = RedisServer::start();
    let pg = PgServer::start();
    let sim = Sim::start(bin, &[], &[]);
    // One request's cost, from a gateway of its own.
    let probe = Gw::start(bin, &sim.url(), exact());
    assert_eq!(probe.chat(&capped()).status, 200);
    let cost = probe.ledger_len(1)[0].cost_nano_usd;
    drop(probe);
    let fits = 37u64;
    let budget = cost * fits + cost / 3;
    let args = vec![
        "--redis".to_owned(),
        redis.url(),
        "--ledger-postgres".into(),
        pg.url(),
    ];
    let gws = three_sharing(bin, &sim, &args);
    let usd = format!("{}.{:09}", budget / 1_000_000_000, budget % 1_000_000_000);
    set_on_each(&gws, "shared", &["--budget-usd", &usd]);
    // 200 at once, spread over the three.
    let got = concurrently(200, Duration::ZERO, |i| {
        (gws[i % 3].addr, gws[i % 3].key.clone(), capped())
    });
    let admitted = got.iter().filter(|r| r.status == 200).count() as u64;
    for r in got.iter().filter(|r| r.status != 200) {
        assert_quota_refusal(r);
    }
    // Redis decided every admission: the burst's first requests found the
    // spend missing and each instance rebuilt it from PostgreSQL once
    // (the test server allows 20 connections), none fell back to its
    // local limits.
    for gw in &gws {
        let log = gw.proc.stderr();
        assert!(!log.contains("shared rate limiter unreachable"), "{log}");
        let rebuilt = log.matches("rebuilt from the ledger").count();
        assert!(rebuilt <= 1, "{rebuilt} rebuilds:\n{log}");
    }
    // Each answer costs exactly its reservation: what the budget allows.
    assert_eq!(admitted, fits);
    let spent: u64 = gws
        .iter()
        .flat_map(|g| g.ledger())
        .map(|r| r.cost_nano_usd)
        .sum();
    assert_eq!(spent, cost * fits);
    assert!(spent <= budget);
    // Redis loses everything; once PostgreSQL has every line, the spend is
    // rebuilt from it and the key stays refused.
    let mut pgc = pg.client();
    eventually("every line shipped", || {
        let n: i64 = pgc
            .query_one(
                "SELECT count(*) FROM chatgate_ledger WHERE key = 'shared'",
                &[],
            )
            .map(|r| r.get(0))
            .unwrap_or(0);
        n == 200
    });
    let mut c = RedisClient::connect(redis.addr);
    c.cmd(&[b"FLUSHALL"]);
    for gw in &gws {
        assert_quota_refusal(&gw.chat(&capped()));
    }
    let small = body(r#""max_tokens":1"#);
    assert_eq!(gws[1].chat(&small).status, 200);
    // The usage report's budgets read the shared ledger: every instance's
    // spend.
    let spent: u64 = gws
        .iter()
        .flat_map(|g| g.ledger())
        .map(|r| r.cost_nano_usd)
        .sum();
    let path = gws[0].dir.path().join("keys.toml");
    eventually("the last line shipped", || {
        let j = pg.budgets(bin, path.to_str().unwrap());
        assert_eq!(j["budgets"][0]["budget_nano_usd"], budget, "{j}");
        j["budgets"][0]["spent_nano_usd"] == spent
    });
}

fn a_cap_holds_across_three_instances_and_a_killed_instance_gives_its_slots_back(bin: &str) {
    let redis = RedisServer::start();
    // Streams of about half a second each.
    let sim = Sim::start(bin, &["--token-ms", "10"], &[]);
    let args = vec![
        "--redis".to_owned(),
        redis.url(),
        "--queue-timeout".into(),
        "60s".into(),
    ];
    let mut gws = three_sharing(bin, &sim, &args);
    set_on_each(&gws, "shared", &["--max-in-flight", "2"]);
    // Nine streams at once over the three: all served, never more than two
    // at the provider.
    let got = concurrently(9, Duration::ZERO, |i| {
        (gws[i % 3].addr, gws[i % 3].key.clone(), stream_body(""))
    });
    assert!(
        got.iter().all(|r| r.status == 200),
        "{:?}",
        got.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    let peak =
        || request(sim.addr, "GET", "/_sim/stats", None, None).json()["peak_in_progress"].clone();
    assert_eq!(peak(), 2, "the provider saw more than two at once");
    // An instance holding both slots is killed: its leases keep them until
    // they lapse (10 s after the last renewal, renewed every 3 s), then a
    // request waiting on another instance gets one.
    let long = stream_body(r#""x_sim":{"token_ms":1000}"#);
    let held: Vec<Conn> = (0..2)
        .map(|_| {
            let mut c = Conn::open(gws[0].addr);
            c.send(&raw_request(
                "POST",
                "/v1/chat/completions",
                Some(&gws[0].key),
                Some(&long),
            ));
            c.read_until("data:");
            c
        })
        .collect();
    gws[0].proc.signal(libc::SIGKILL);
    let killed = Instant::now();
    gws[0].proc.wait_exit(PATIENCE).expect("killed");
    drop(held);
    let r = gws[1].chat(&stream_body(""));
    let waited = killed.elapsed();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    println!("slots of the killed instance back after {waited:?}");
    // Renewed at most 3 s before the kill, a lease outlives it by 7 s at
    // least: the slots were not handed back early.
    assert!(waited >= Duration::from_secs(6), "back after {waited:?}");
    assert_eq!(peak(), 2);
    let waited_line = gws[1].ledger().last().unwrap().clone();
    assert!(waited_line.complete, "{waited_line:?}");
}

fn cut_streams_settle_to_what_the_ledger_says(bin: &str) {
    let redis = RedisServer::start();
    for shared in [false, true] {
        let sim = Sim::start(bin, &["--token-ms", "20"], &[]);
        let mut args = vec!["--admin-listen".to_owned(), "127.0.0.1:0".into()];
        if shared {
            args.extend(["--redis".to_owned(), redis.url()]);
        }
        let mut gw = Gw::start(bin, &sim.url(), GwOptions { args, ..exact() });
        let admin = gw.admin_addr();
        set_on_each(
            std::slice::from_ref(&gw),
            "test",
            &["--budget-usd", "100", "--budget-period", "day"],
        );
        // The client goes away mid-stream, after usage so far came by
        // (the ledger meters what the provider reported).
        let mut c = Conn::open(gw.addr);
        let long = stream_body(r#""x_sim":{"token_ms":200,"usage_every":true}"#);
        c.send(&raw_request(
            "POST",
            "/v1/chat/completions",
            Some(&gw.key),
            Some(&long),
        ));
        c.read_until("\"completion_tokens\":2");
        drop(c);
        // The provider resets mid-stream, fails before its head, and
        // answers in full, streamed and not.
        let reset = stream_body(r#""x_sim":{"fault":"reset","after":4,"usage_every":true}"#);
        assert_eq!(gw.chat(&reset).status, 200);
        let reject = body(r#""x_sim":{"fault":"reject","status":500}"#);
        assert_eq!(gw.chat(&reject).status, 502);
        assert_eq!(gw.chat(&stream_body("")).status, 200);
        assert_eq!(gw.chat(&body("")).status, 200);
        let ledger = gw.ledger_len(5);
        let gone = ledger
            .iter()
            .find(|r| r.client_disconnected)
            .expect("the cut");
        assert!(gone.cost_nano_usd > 0 && !gone.complete, "{gone:?}");
        let cut = ledger
            .iter()
            .find(|r| r.stream && !r.complete && !r.client_disconnected)
            .expect("the reset");
        assert!(cut.cost_nano_usd > 0, "{cut:?}");
        let spent: u64 = ledger.iter().map(|r| r.cost_nano_usd).sum();
        // Every reservation (8,192 output tokens each, none set
        // max_tokens) was replaced by the ledger's cost.
        if shared {
            let mut c = RedisClient::connect(redis.addr);
            let field = |c: &mut RedisClient, f: &str| match c.cmd(&[
                b"HGET",
                b"chatgate:spend:{test}",
                f.as_bytes(),
            ]) {
                chatgate_core::RedisReply::Bulk(Some(v)) => {
                    String::from_utf8(v).unwrap().parse::<u64>().unwrap()
                }
                other => panic!("{f}: {other:?}"),
            };
            // Settlements go to Redis after the ledger line is written.
            eventually("every settlement in Redis", || {
                field(&mut c, "d") == spent && field(&mut c, "r") == 0
            });
            assert_eq!(
                c.cmd(&[b"ZCARD", b"chatgate:leases:{test}"]),
                chatgate_core::RedisReply::Integer(0)
            );
            c.cmd(&[b"FLUSHALL"]);
        } else {
            let text =
                String::from_utf8(request(admin, "GET", "/metrics", None, None).body).unwrap();
            let value = |name: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(name))
                    .unwrap_or_else(|| panic!("no {name}: {text}"))
                    .trim()
                    .to_owned()
            };
            assert_eq!(
                value("chatgate_budget_spent_usd{key=\"test\",period=\"day\"}"),
                chatgate_core::format_usd(spent)
            );
            assert_eq!(
                value("chatgate_budget_reserved_usd{key=\"test\"}"),
                "0.000000000"
            );
        }
    }
}
