//! Operating chatgate, through both binaries: exact metric values after a
//! known sequence of requests, health and readiness, keys reloaded live
//! (including a broken file), revoked and rotated, usage reports whose
//! totals equal the ledger's, start-up errors, and the worker threads.

use std::net::SocketAddr;
use std::time::Duration;

use chatgate_tests::*;
use serde_json::Value;

cases!(
    metrics_are_exact,
    health_and_readiness,
    keys_reload_revoke_and_rotate,
    usage_report_totals_equal_the_ledger,
    startup_errors_say_what_is_wrong,
    ledger_rotation_with_sighup,
    worker_threads_set_how_many_threads_serve,
    reuse_port_shares_the_port_between_instances,
);

/// A gateway with an admin listener; returns it and the admin address.
fn with_admin(bin: &str, upstream: &str, opts: GwOptions) -> (Gw, SocketAddr) {
    let mut opts = opts;
    opts.args
        .extend(["--admin-listen".to_owned(), "127.0.0.1:0".to_owned()]);
    let mut gw = Gw::start(bin, upstream, opts);
    let line = gw.proc.line();
    let admin = line
        .trim()
        .strip_prefix("chatgate admin listening on http://")
        .unwrap_or_else(|| panic!("no admin line: {line}"))
        .parse()
        .expect("admin address");
    (gw, admin)
}

fn admin_get(admin: SocketAddr, path: &str) -> Response {
    request(admin, "GET", path, None, None)
}

/// The metrics as `series → value`.
fn metrics(admin: SocketAddr) -> std::collections::HashMap<String, String> {
    let r = admin_get(admin, "/metrics");
    assert_eq!(r.status, 200);
    assert!(
        r.header("content-type")
            .is_some_and(|c| c.starts_with("text/plain; version=0.0.4"))
    );
    String::from_utf8(r.body)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').expect("series value");
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

fn metric(m: &std::collections::HashMap<String, String>, series: &str) -> String {
    m.get(series)
        .cloned()
        .unwrap_or_else(|| panic!("no series {series} in {m:#?}"))
}

fn metrics_are_exact(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let (gw, admin) = with_admin(
        bin,
        &sim.url(),
        GwOptions {
            rpm: Some(5),
            tpm: Some(1_000_000),
            extra_keys: vec![("carol".into(), Some(1000), Some(10_000_000))],
            ..GwOptions::default()
        },
    );
    // The known sequence.
    assert_eq!(gw.chat(&body("")).status, 200);
    assert_eq!(gw.chat(&body("")).status, 200);
    let r = gw.chat(&stream_body(""));
    assert_eq!(r.events().last().map(String::as_str), Some("[DONE]"));
    assert_eq!(
        gw.chat(&body(r#""x_sim":{"fault":"reject","status":500}"#))
            .status,
        502
    );
    assert_eq!(gw.chat(&body(r#""temperature":7"#)).status, 400);
    assert_eq!(gw.chat(&body("")).status, 200);
    assert_eq!(gw.chat(&body("")).status, 429);
    let models = request(gw.addr, "GET", "/v1/models", Some(&gw.key), None);
    assert_eq!(models.status, 200);
    let bad = "sk-cg-0000000000000000000000000000000000000000000";
    assert_eq!(
        request(
            gw.addr,
            "POST",
            "/v1/chat/completions",
            Some(bad),
            Some(&body(""))
        )
        .status,
        401
    );
    let ledger = gw.ledger_len(7);
    let m = metrics(admin);
    let req = |status: u16, stream: bool, key: &str| {
        metric(
            &m,
            &format!(
                "chatgate_requests_total{{key=\"{key}\",status=\"{status}\",stream=\"{stream}\"}}"
            ),
        )
    };
    assert_eq!(
        req(200, false, "test"),
        "4",
        "three answers and the models list"
    );
    assert_eq!(req(200, true, "test"), "1");
    assert_eq!(req(502, false, "test"), "1");
    assert_eq!(req(400, false, "test"), "1");
    assert_eq!(req(429, false, "test"), "1");
    assert_eq!(req(401, false, ""), "1");
    assert_eq!(metric(&m, "chatgate_request_duration_seconds_count"), "9");
    assert_eq!(metric(&m, "chatgate_time_to_first_byte_seconds_count"), "9");
    assert_eq!(metric(&m, "chatgate_overhead_seconds_count"), "9");
    assert_eq!(
        metric(&m, "chatgate_request_duration_seconds_bucket{le=\"+Inf\"}"),
        "9"
    );
    assert_eq!(
        metric(&m, "chatgate_upstream_errors_total{kind=\"rejected\"}"),
        "1"
    );
    assert_eq!(
        metric(&m, "chatgate_upstream_errors_total{kind=\"connect\"}"),
        "0"
    );
    assert_eq!(
        metric(
            &m,
            "chatgate_rate_limited_total{key=\"test\",limit=\"requests\"}"
        ),
        "1"
    );
    assert_eq!(
        metric(
            &m,
            "chatgate_rate_limited_total{key=\"test\",limit=\"tokens\"}"
        ),
        "0"
    );
    let sum = |f: fn(&chatgate_core::LedgerRecord) -> u64| -> u64 { ledger.iter().map(f).sum() };
    for (kind, total) in [
        ("prompt", sum(|r| r.prompt_tokens)),
        ("completion", sum(|r| r.completion_tokens)),
        ("reasoning", sum(|r| r.reasoning_tokens)),
        ("cached", sum(|r| r.cached_tokens)),
    ] {
        assert_eq!(
            metric(
                &m,
                &format!("chatgate_tokens_total{{key=\"test\",kind=\"{kind}\"}}")
            ),
            total.to_string(),
            "{kind}"
        );
    }
    let cost = sum(|r| r.cost_nano_usd);
    assert!(cost > 0);
    assert_eq!(
        metric(&m, "chatgate_cost_usd_total{key=\"test\"}"),
        format!("{}.{:09}", cost / 1_000_000_000, cost % 1_000_000_000)
    );
    assert_eq!(metric(&m, "chatgate_open_streams"), "0");
    assert_eq!(metric(&m, "chatgate_incomplete_streams_total"), "0");
    assert_eq!(metric(&m, "chatgate_client_disconnects_total"), "0");
    assert_eq!(metric(&m, "chatgate_ledger_write_seconds_count"), "7");
    assert_eq!(metric(&m, "chatgate_ledger_errors_total"), "0");
    assert_eq!(metric(&m, "chatgate_keys"), "2");
    // Five requests reached the provider, the one it failed with a 500
    // three times (a transient failure is tried again): seven attempts,
    // each on a new or a pooled connection.
    let opened: u64 = metric(&m, "chatgate_upstream_connections_opened_total")
        .parse()
        .unwrap();
    let reused: u64 = metric(&m, "chatgate_upstream_connections_reused_total")
        .parse()
        .unwrap();
    assert_eq!(opened + reused, 7);
    assert!(reused >= 1, "the pool is used");
    assert_eq!(sim.journal().len(), 7);
    // A stream in progress and a client that leaves: counted.
    let mut c = Conn::open(gw.addr);
    c.send(&raw_request(
        "POST",
        "/v1/chat/completions",
        Some(&gw.keys["carol"]),
        Some(&stream_body(r#""x_sim":{"token_ms":200}"#)),
    ));
    c.read_until("reasoning_content");
    assert_eq!(metric(&metrics(admin), "chatgate_open_streams"), "1");
    assert!(
        metric(&metrics(admin), "chatgate_open_connections")
            .parse::<u64>()
            .unwrap()
            >= 1
    );
    drop(c);
    eventually("the stream ended", || {
        let m = metrics(admin);
        metric(&m, "chatgate_open_streams") == "0"
            && metric(&m, "chatgate_client_disconnects_total") == "1"
            && metric(&m, "chatgate_incomplete_streams_total") == "1"
    });
    // Never on the public port.
    let r = request(gw.addr, "GET", "/metrics", Some(&gw.key), None);
    assert_eq!(
        (r.status, r.json()["error"]["code"].clone()),
        (404, Value::from("unknown_url"))
    );
    assert_eq!(request(gw.addr, "GET", "/healthz", None, None).status, 404);
}

fn health_and_readiness(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let (gw, admin) = with_admin(bin, &sim.url(), GwOptions::default());
    let h = admin_get(admin, "/healthz");
    assert_eq!((h.status, h.body.as_slice()), (200, b"ok\n".as_slice()));
    // Ready: keys, ledger, and the provider (no request yet: a connection
    // is opened to check).
    let r = admin_get(admin, "/readyz");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(admin_get(admin, "/nothing").status, 404);
    assert_eq!(
        request(admin, "POST", "/metrics", None, Some("{}")).status,
        404
    );
    drop(gw);
    // A provider that cannot be reached: not ready, and says why.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (gw, admin) = with_admin(
        bin,
        &format!("http://127.0.0.1:{port}/v1"),
        GwOptions::default(),
    );
    let r = admin_get(admin, "/readyz");
    let text = String::from_utf8_lossy(&r.body).into_owned();
    assert_eq!(r.status, 503, "{text}");
    assert!(
        text.contains("upstream: unreachable") && text.contains("keys: ok"),
        "{text}"
    );
    assert_eq!(admin_get(admin, "/healthz").status, 200);
    // The ledger gone: not ready.
    std::fs::remove_file(gw.dir.path().join("ledger.jsonl")).unwrap();
    let text = String::from_utf8_lossy(&admin_get(admin, "/readyz").body).into_owned();
    assert!(text.contains("ledger: not writable"), "{text}");
}

fn chat_with(gw: &Gw, key: &str) -> u16 {
    chat_status(gw.addr, key)
}

fn keys_reload_revoke_and_rotate(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let (gw, admin) = with_admin(bin, &sim.url(), GwOptions::default());
    let keys = gw.dir.path().join("keys.toml");
    let keys_s = keys.to_string_lossy().into_owned();
    let alice = gw.key.clone();
    // A keep-alive connection, open across every reload below.
    // (Requests without a body: a refused request with a body closes its
    // connection, since the body is not read.)
    let mut kept = Conn::open(gw.addr);
    let mut kept_chat = |key: &str| {
        kept.send(&raw_request("GET", "/v1/models", Some(key), None));
        kept.response().status
    };
    assert_eq!(kept_chat(&alice), 200);
    // A new key works without a restart.
    let bob = mint(bin, gw.dir.path(), "bob", None, None);
    eventually("bob is loaded", || chat_with(&gw, &bob) == 200);
    assert_eq!(kept_chat(&bob), 200);
    // A broken file: reported, the previous keys stay in force.
    let good = std::fs::read_to_string(&keys).unwrap();
    std::fs::write(&keys, "[[key]]\nname = \"broken\n").unwrap();
    eventually("the broken file is reported", || {
        gw.proc.stderr().contains("keys reload refused")
    });
    assert_eq!(chat_with(&gw, &alice), 200);
    assert_eq!(kept_chat(&bob), 200);
    assert_eq!(
        metric(&metrics(admin), "chatgate_key_reload_errors_total"),
        "1"
    );
    // An empty file is refused too.
    std::fs::write(&keys, "").unwrap();
    eventually("the empty file is reported", || {
        metric(&metrics(admin), "chatgate_key_reload_errors_total") == "2"
    });
    assert_eq!(chat_with(&gw, &bob), 200);
    std::fs::write(&keys, &good).unwrap();
    eventually("the good file is back", || {
        metric(&metrics(admin), "chatgate_key_reloads_total") == "2"
    });
    // SIGHUP reloads without a change.
    gw.proc.signal(libc::SIGHUP);
    eventually("SIGHUP reloads", || {
        metric(&metrics(admin), "chatgate_key_reloads_total") == "3"
    });
    assert!(gw.alive_pid());
    // Revoke: refused at once by new and kept-alive connections.
    let (code, _, err) = run(bin, &["keys", "revoke", "bob", "--keys", &keys_s], &[]);
    assert_eq!(code, 0, "{err}");
    eventually("bob is refused", || chat_with(&gw, &bob) == 401);
    assert_eq!(kept_chat(&bob), 401);
    assert_eq!(kept_chat(&alice), 200, "the connection was not dropped");
    let (code, _, err) = run(bin, &["keys", "revoke", "bob", "--keys", &keys_s], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("no key is named 'bob'"), "{err}");
    // Rotate: the new key works, the old one until its grace ends.
    let (code, out, err) = run(
        bin,
        &["keys", "rotate", "test", "--grace", "3s", "--keys", &keys_s],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let new_alice = out.lines().next().unwrap().to_owned();
    assert!(new_alice.starts_with("sk-cg-") && new_alice != alice);
    assert!(err.contains("accepted until"), "{err}");
    eventually("the new key is loaded", || {
        chat_with(&gw, &new_alice) == 200
    });
    assert_eq!(
        chat_with(&gw, &alice),
        200,
        "the old key is valid during the grace"
    );
    eventually("the old key expires", || chat_with(&gw, &alice) == 401);
    assert_eq!(kept_chat(&alice), 401);
    assert_eq!(kept_chat(&new_alice), 200);
    // Both entries carry the same name: one ledger name, one limit.
    let recs = gw.ledger();
    assert!(
        recs.iter()
            .all(|r| r.key == "test" || r.key == "bob" || r.key.is_empty())
    );
    // keys list: names, limits, times; never a full hash.
    let (code, out, _) = run(bin, &["keys", "list", "--keys", &keys_s], &[]);
    assert_eq!(code, 0);
    assert!(out.starts_with("name"), "{out}");
    assert!(out.contains("(expired)"), "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("test ")).count(),
        2,
        "{out}"
    );
    let text = std::fs::read_to_string(&keys).unwrap();
    for hash in text.lines().filter_map(|l| l.strip_prefix("sha256 = \"")) {
        let hash = hash.trim_end_matches('"');
        assert_eq!(hash.len(), 64);
        assert!(!out.contains(hash), "keys list shows a full hash");
        assert!(out.contains(&hash[..8]));
    }
    // A second rotation drops the expired entry.
    let (code, out, err) = run(
        bin,
        &["keys", "rotate", "test", "--grace", "0s", "--keys", &keys_s],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let newest = out.lines().next().unwrap().to_owned();
    let text = std::fs::read_to_string(&keys).unwrap();
    assert_eq!(text.matches("name = \"test\"").count(), 2, "{text}");
    eventually("the newest key is loaded", || {
        chat_with(&gw, &newest) == 200
    });
    // Revoking the last key takes effect too: no key, every request 401,
    // and the gateway is no longer ready.
    let (code, _, err) = run(bin, &["keys", "revoke", "test", "--keys", &keys_s], &[]);
    assert_eq!(code, 0, "{err}");
    eventually("the last key is refused", || chat_with(&gw, &newest) == 401);
    let r = admin_get(admin, "/readyz");
    assert_eq!(r.status, 503);
    assert!(String::from_utf8_lossy(&r.body).contains("keys: none loaded"));
}

fn usage_report_totals_equal_the_ledger(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            extra_keys: vec![("bob".into(), None, None)],
            ..GwOptions::default()
        },
    );
    let bob = gw.keys["bob"].clone();
    for i in 0..6 {
        let b = if i % 2 == 0 {
            body("")
        } else {
            stream_body("")
        };
        assert_eq!(gw.chat(&b).status, 200);
    }
    for _ in 0..3 {
        let r = request(
            gw.addr,
            "POST",
            "/v1/chat/completions",
            Some(&bob),
            Some(&stream_body("")),
        );
        assert_eq!(r.status, 200);
    }
    // An incomplete stream for bob.
    let r = request(
        gw.addr,
        "POST",
        "/v1/chat/completions",
        Some(&bob),
        Some(&stream_body(r#""x_sim":{"fault":"reset","after":3}"#)),
    );
    assert_eq!(r.status, 200);
    let ledger = gw.ledger_len(10);
    let path = gw
        .dir
        .path()
        .join("ledger.jsonl")
        .to_string_lossy()
        .into_owned();
    let (code, out, err) = run(bin, &["usage", "--ledger", &path, "--format", "json"], &[]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let total = &v["total"];
    let sum = |key: Option<&str>, f: fn(&chatgate_core::LedgerRecord) -> u64| -> u64 {
        ledger
            .iter()
            .filter(|r| key.is_none_or(|k| r.key == k))
            .map(f)
            .sum()
    };
    assert_eq!(total["requests"], 10);
    assert_eq!(total["prompt_tokens"], sum(None, |r| r.prompt_tokens));
    assert_eq!(
        total["completion_tokens"],
        sum(None, |r| r.completion_tokens)
    );
    assert_eq!(total["reasoning_tokens"], sum(None, |r| r.reasoning_tokens));
    assert_eq!(total["cached_tokens"], sum(None, |r| r.cached_tokens));
    assert_eq!(total["incomplete_streams"], 1);
    let cost = sum(None, |r| r.cost_nano_usd);
    assert_eq!(total["cost_nano_usd"], cost);
    // cost_usd is the exact decimal, not a float's approximation.
    assert!(
        out.contains(&format!(
            "\"cost_usd\":{}.{:09},\"cost_nano_usd\":{cost}}}}}",
            cost / 1_000_000_000,
            cost % 1_000_000_000
        )),
        "{out}"
    );
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "one day, two keys: {out}");
    assert_eq!(rows[0]["key"], "bob");
    assert_eq!(rows[0]["requests"], 4);
    assert_eq!(rows[0]["incomplete_streams"], 1);
    assert_eq!(
        rows[1]["cost_nano_usd"],
        sum(Some("test"), |r| r.cost_nano_usd)
    );
    // --key, --by, --since/--until, csv and table.
    let (_, out, _) = run(
        bin,
        &[
            "usage", "--ledger", &path, "--key", "test", "--format", "csv", "--by", "month",
        ],
        &[],
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "key,month,requests,prompt_tokens,completion_tokens,reasoning_tokens,cached_tokens,incomplete_streams,cost_usd"
    );
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[1].starts_with(&format!("test,{},6,", &ledger[0].ts[..7])),
        "{out}"
    );
    let (_, out, _) = run(
        bin,
        &[
            "usage",
            "--ledger",
            &path,
            "--since",
            "2999-01-01",
            "--format",
            "json",
        ],
        &[],
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["total"]["requests"], 0);
    let (_, out, _) = run(
        bin,
        &[
            "usage",
            "--ledger",
            &path,
            "--until",
            "2999-01-01T00:00:00Z",
        ],
        &[],
    );
    let last = out.lines().last().unwrap();
    assert!(last.starts_with("TOTAL") && last.contains(" 10 "), "{out}");
    let (code, _, err) = run(
        bin,
        &["usage", "--ledger", &path, "--since", "yesterday"],
        &[],
    );
    assert_eq!(code, 2);
    assert!(err.contains("--since"), "{err}");
    let (code, _, err) = run(
        bin,
        &["usage", "--ledger", "/nonexistent/ledger.jsonl"],
        &[],
    );
    assert_eq!(code, 2);
    assert!(err.contains("cannot read the ledger"), "{err}");
}

fn startup_errors_say_what_is_wrong(bin: &str) {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.toml");
    mint(bin, dir.path(), "a", None, None);
    let keys_s = keys.to_string_lossy().into_owned();
    let ledger = dir.path().join("l.jsonl").to_string_lossy().into_owned();
    let serve = |extra: &[&str]| {
        let mut args = vec![
            "serve",
            "--keys",
            &keys_s,
            "--ledger",
            &ledger,
            "--listen",
            "127.0.0.1:0",
        ];
        args.extend_from_slice(extra);
        run(bin, &args, &[])
    };
    // Unreadable keys file.
    let (code, _, err) = run(
        bin,
        &[
            "serve",
            "--upstream",
            "http://h/v1",
            "--keys",
            "/nonexistent/keys.toml",
        ],
        &[],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("cannot read the keys file '/nonexistent/keys.toml'"),
        "{err}"
    );
    // A bad URL.
    let (code, _, err) = serve(&["--upstream", "ftp://h/v1"]);
    assert_eq!(code, 2);
    assert!(err.contains("upstream URL 'ftp://h/v1'"), "{err}");
    // The admin port in use.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = busy.local_addr().unwrap().to_string();
    let (code, _, err) = serve(&["--upstream", "http://h/v1", "--admin-listen", &busy]);
    assert_eq!(code, 2);
    assert!(
        err.contains("admin listener") && err.contains("cannot listen"),
        "{err}"
    );
    // The summary line: effective settings, never a secret.
    let sim = Sim::start(bin, &[], &[]);
    let gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            env: vec![(
                "CHATGATE_UPSTREAM_API_KEY".into(),
                "sk-provider-SECRET".into(),
            )],
            ..GwOptions::default()
        },
    );
    std::thread::sleep(Duration::from_millis(100));
    let log = gw.proc.stderr();
    let line = log
        .lines()
        .find(|l| l.contains("starting:"))
        .expect("a start-up line");
    for needle in [
        "listen=",
        "admin=off",
        "upstream=http://",
        "provider_key=set",
        "keys=1",
        "ledger=",
        "connect=",
        "max_connections=",
    ] {
        assert!(line.contains(needle), "{needle} missing: {line}");
    }
    assert!(!log.contains("sk-provider-SECRET") && !log.contains(&gw.key));
}

fn ledger_rotation_with_sighup(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = Gw::start(bin, &sim.url(), GwOptions::default());
    for _ in 0..2 {
        assert_eq!(gw.chat(&body("")).status, 200);
    }
    gw.ledger_len(2);
    let path = gw.dir.path().join("ledger.jsonl");
    let moved = gw.dir.path().join("ledger-1.jsonl");
    std::fs::rename(&path, &moved).unwrap();
    // Until the signal, lines still go to the moved file.
    assert_eq!(gw.chat(&body("")).status, 200);
    eventually("the third line", || {
        std::fs::read_to_string(&moved).unwrap().lines().count() == 3
    });
    gw.proc.signal(libc::SIGHUP);
    eventually("the ledger is reopened", || {
        gw.proc.stderr().contains("ledger reopened")
    });
    assert_eq!(gw.chat(&stream_body("")).status, 200);
    let fresh = gw.ledger_len(1);
    assert_eq!(fresh.len(), 1);
    assert!(fresh[0].stream);
    assert_eq!(std::fs::read_to_string(&moved).unwrap().lines().count(), 3);
    assert!(gw.alive_pid());
}

/// The threads of process `pid` that serve connections besides the main
/// thread: smol's executor threads (`chatgate-N`) or tokio's workers
/// (`tokio-rt-worker`).
fn serving_threads(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .filter(|comm| {
            let comm = comm.trim();
            comm == "tokio-rt-worker"
                || comm
                    .strip_prefix("chatgate-")
                    .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .count()
}

/// Waits until `n` threads serve (a thread names itself once it runs).
fn threads_become(gw: &Gw, n: usize) {
    let pid = gw.proc.pid();
    eventually(&format!("{n} serving threads"), || {
        serving_threads(pid) == n
    });
    // And no more come.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(serving_threads(pid), n);
}

/// Gateway options with these extra arguments and environment.
fn options(args: &[&str], env: &[(&str, &str)]) -> GwOptions {
    GwOptions {
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        env: env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..GwOptions::default()
    }
}

fn worker_threads_set_how_many_threads_serve(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let with = |args: &[&str], env: &[(&str, &str)]| Gw::start(bin, &sim.url(), options(args, env));
    let summary = |gw: &Gw| {
        gw.proc
            .stderr_when("the start-up line", |t| t.contains("starting:"))
            .lines()
            .find(|l| l.contains("starting:"))
            .unwrap()
            .to_owned()
    };
    // Three, from the flag: three threads serve, and say so.
    let gw = with(&["--worker-threads", "3"], &[]);
    assert!(
        summary(&gw).contains("worker_threads=3"),
        "{}",
        summary(&gw)
    );
    threads_become(&gw, 3);
    assert_eq!(gw.chat(&body("")).status, 200);
    drop(gw);
    // One, from the environment: on either runtime the main thread serves
    // (tokio's current-thread runtime; smol's executor run by the main
    // thread), and no worker thread starts.
    let gw = with(&[], &[("CHATGATE_WORKER_THREADS", "1")]);
    assert!(summary(&gw).contains("worker_threads=1"));
    threads_become(&gw, 0);
    assert_eq!(gw.chat(&body("")).status, 200);
    drop(gw);
    // The default: one per core.
    let gw = with(&[], &[]);
    assert!(summary(&gw).contains("worker_threads=one per core"));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    threads_become(&gw, cores);
    // Zero is refused in one line, before anything starts.
    let keys = gw.dir.path().join("keys.toml");
    let (code, _, err) = run(
        bin,
        &[
            "serve",
            "--upstream",
            &sim.url(),
            "--keys",
            keys.to_str().unwrap(),
            "--worker-threads",
            "0",
        ],
        &[],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("--worker-threads") && err.contains("positive number"),
        "{err}"
    );
}

/// `--reuse-port`: two instances on one port (one per core, or the old and
/// the new one of a restart) each serve part of the connections, with
/// their own ledger; the one that stops leaves the port to the other, so
/// no request is refused. Without it, the second instance is refused the
/// port in one line.
fn reuse_port_shares_the_port_between_instances(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let shared = |env: &[(&str, &str)], args: &[&str]| GwOptions {
        listen: Some(listen.clone()),
        ..options(args, env)
    };
    // The flag on one, the environment on the other; the same keys.
    let mut a = Gw::start(
        bin,
        &sim.url(),
        shared(&[], &["--reuse-port", "on", "--worker-threads", "1"]),
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(a.dir.path().join("keys.toml"), dir.path().join("keys.toml")).unwrap();
    let b = Gw::start_with_keys(
        bin,
        &sim.url(),
        shared(
            &[("CHATGATE_REUSE_PORT", "true")],
            &["--worker-threads", "1"],
        ),
        dir,
        a.key.clone(),
    );
    assert_eq!(a.addr, b.addr, "one port");
    let started = a
        .proc
        .stderr_when("the start-up line", |t| t.contains("starting:"));
    assert!(started.contains("(shared port)"), "{started}");
    // Each request on a connection of its own: the kernel spreads them by
    // the connection's addresses, so both serve some (all 24 on one:
    // one chance in eight million).
    for _ in 0..24 {
        assert_eq!(a.chat(&body("")).status, 200);
    }
    let (on_a, on_b) = (a.ledger().len(), b.ledger().len());
    assert_eq!(on_a + on_b, 24, "every request in one of the ledgers");
    assert!(on_a > 0 && on_b > 0, "both served: {on_a} and {on_b}");
    // A stops (SIGTERM: it closes its listener, then drains); B serves every
    // request after that on the same port.
    a.proc.signal(15);
    assert!(a.proc.wait_exit(PATIENCE).is_some_and(|s| s.success()));
    for _ in 0..8 {
        assert_eq!(b.chat(&body("")).status, 200);
    }
    assert_eq!(b.ledger().len(), on_b + 8);
    // Without the setting the port is B's alone.
    let keys = b.dir.path().join("keys.toml");
    let (code, _, err) = run(
        bin,
        &[
            "serve",
            "--listen",
            &listen,
            "--upstream",
            &sim.url(),
            "--keys",
            keys.to_str().unwrap(),
            "--ledger",
            b.dir.path().join("other.jsonl").to_str().unwrap(),
        ],
        &[],
    );
    assert_ne!(code, 0);
    assert!(err.contains(&format!("cannot listen on {listen}")), "{err}");
}
