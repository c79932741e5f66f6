//! Several provider endpoints for the one model, through both binaries:
//! weights, failover before the first byte, ejection and readmission,
//! `Retry-After`, requests that must not be retried, the pool's
//! configuration and its live reload. Every endpoint is a real simulator
//! process.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chatgate_tests::*;
use serde_json::Value;

cases!(
    weights_are_respected_and_each_endpoint_gets_its_key_and_model,
    an_endpoint_killed_under_load_fails_no_request_that_had_no_byte,
    a_failing_endpoint_is_ejected_and_readmitted_and_retry_after_is_honoured,
    the_providers_4xx_is_not_retried_and_all_down_is_one_502,
    a_stream_whose_first_event_never_comes_is_retried_elsewhere,
    bad_pools_refuse_to_start_and_a_reload_keeps_requests_in_flight,
);

/// A pool of simulators behind one gateway.
struct Pool {
    sims: Vec<Sim>,
    gw: Gw,
    config: PathBuf,
    _dir: tempfile::TempDir,
}

impl Pool {
    /// Simulators named by `endpoints` (name, weight, model), each
    /// requiring its own key, behind a gateway configured with them.
    fn start(bin: &str, endpoints: &[(&str, u32, Option<&str>)], args: &[&str]) -> Pool {
        let dir = tempfile::tempdir().expect("temp dir");
        let sims: Vec<Sim> = endpoints
            .iter()
            .map(|(name, _, _)| {
                Sim::start(
                    bin,
                    &[],
                    &[("CHATGATE_SIM_API_KEY", &format!("sk-provider-{name}"))],
                )
            })
            .collect();
        let config = dir.path().join("chatgate.toml");
        let urls: Vec<String> = sims.iter().map(Sim::url).collect();
        write_pool(&config, endpoints, &urls);
        let mut all = vec!["--config".to_owned(), config.to_string_lossy().into_owned()];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        let env = endpoints
            .iter()
            .map(|(name, _, _)| (key_var(name), format!("sk-provider-{name}")))
            .collect();
        let gw = Gw::start(
            bin,
            "",
            GwOptions {
                args: all,
                env,
                rpm: Some(100_000_000),
                tpm: Some(1_000_000_000_000),
                ..GwOptions::default()
            },
        );
        Pool {
            sims,
            gw,
            config,
            _dir: dir,
        }
    }

    /// Chat requests each simulator received.
    fn received(&self) -> Vec<usize> {
        self.sims.iter().map(|s| s.journal().len()).collect()
    }

    /// `GET /upstreams` from the admin listener.
    fn upstreams(&self, admin: std::net::SocketAddr) -> Vec<Value> {
        let r = request(admin, "GET", "/upstreams", None, None);
        assert_eq!(r.status, 200);
        r.json()["upstreams"].as_array().expect("a list").clone()
    }
}

fn key_var(name: &str) -> String {
    format!("TEST_KEY_{}", name.to_ascii_uppercase())
}

fn write_pool(path: &std::path::Path, endpoints: &[(&str, u32, Option<&str>)], urls: &[String]) {
    let mut text = String::new();
    for ((name, weight, model), url) in endpoints.iter().zip(urls) {
        text.push_str(&format!(
            "[[upstream]]\nname = \"{name}\"\nurl = \"{url}\"\napi_key_env = \"{}\"\nweight = {weight}\n",
            key_var(name)
        ));
        if let Some(m) = model {
            text.push_str(&format!("model = \"{m}\"\n"));
        }
    }
    // Written whole, then renamed: the watcher never reads half a file.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write the config");
    std::fs::rename(&tmp, path).expect("rename the config");
}

/// `n` non-streamed requests over `threads` keep-alive connections; the
/// statuses.
fn load(gw: &Gw, n: usize, threads: usize, body: &str) -> Vec<u16> {
    let per = n / threads;
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (addr, key, body) = (gw.addr, gw.key.clone(), body.to_owned());
            std::thread::spawn(move || {
                let mut c = Conn::open(addr);
                let raw = raw_request("POST", "/v1/chat/completions", Some(&key), Some(&body));
                (0..per)
                    .map(|_| {
                        c.send(&raw);
                        c.response().status
                    })
                    .collect::<Vec<u16>>()
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().expect("a load thread"))
        .collect()
}

fn weights_are_respected_and_each_endpoint_gets_its_key_and_model(bin: &str) {
    let pool = Pool::start(
        bin,
        &[
            ("a", 1, None),
            ("b", 2, Some("k3-as-b-names-it")),
            ("c", 3, None),
        ],
        &[],
    );
    let statuses = load(&pool.gw, 3000, 4, &body(""));
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let received = pool.received();
    for (got, want) in received.iter().zip([500.0, 1000.0, 1500.0]) {
        let off = (*got as f64 - want).abs() / want;
        assert!(off <= 0.05, "{received:?}: {got} is {off:.3} off {want}");
    }
    // Every sim requires its own key: a wrong one would have been a 401.
    let ledger = pool.gw.ledger_len(3000);
    for (name, n) in ["a", "b", "c"].iter().zip(&received) {
        let served = ledger
            .iter()
            .filter(|r| r.endpoint.as_deref() == Some(name))
            .count();
        assert_eq!(served, *n, "the ledger names the endpoint that served");
    }
    assert!(ledger.iter().all(|r| r.attempts == 1 && r.status == 200));
    // b is sent the model id it expects; the others the catalogue's; the
    // client always sees its own.
    let b_body: Value =
        serde_json::from_str(pool.sims[1].journal()[0]["body"].as_str().expect("a body"))
            .expect("JSON");
    assert_eq!(b_body["model"], "k3-as-b-names-it");
    let a_body: Value =
        serde_json::from_str(pool.sims[0].journal()[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(a_body["model"], MODEL);
    assert!(ledger.iter().all(|r| r.model == MODEL));
    // No endpoint key in the log or the ledger.
    let log = pool.gw.proc.stderr();
    let ledger_text = std::fs::read_to_string(pool.gw.dir.path().join("ledger.jsonl")).unwrap();
    for name in ["a", "b", "c"] {
        let secret = format!("sk-provider-{name}");
        assert!(!log.contains(&secret) && !ledger_text.contains(&secret));
    }
}

fn an_endpoint_killed_under_load_fails_no_request_that_had_no_byte(bin: &str) {
    let pool = Pool::start(bin, &[("a", 1, None), ("b", 1, None), ("c", 1, None)], &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let (addr, key, stop) = (pool.gw.addr, pool.gw.key.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut results = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    // Streams that last about a second, and answers.
                    let stream = t % 2 == 0;
                    let b = if stream {
                        stream_body(r#""x_sim":{"token_ms":20}"#)
                    } else {
                        body(r#""x_sim":{"ttft_ms":100}"#)
                    };
                    let r = request(addr, "POST", "/v1/chat/completions", Some(&key), Some(&b));
                    results.push((stream, r));
                }
                results
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    pool.sims[1].proc.signal(libc::SIGKILL);
    std::thread::sleep(Duration::from_millis(2500));
    stop.store(true, Ordering::Relaxed);
    let results: Vec<(bool, Response)> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("a client"))
        .collect();
    assert!(results.len() >= 12, "{} requests", results.len());
    let mut cut = 0;
    for (stream, r) in &results {
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        if *stream {
            let events = r.events();
            assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
            assert_eq!(events.iter().filter(|e| *e == "[DONE]").count(), 1);
            if !events
                .iter()
                .any(|e| e.contains(r#""finish_reason":"stop""#))
            {
                cut += 1;
            }
        }
    }
    let ledger = pool.gw.ledger_len(results.len());
    assert_eq!(ledger.len(), results.len(), "one line per request");
    let incomplete = ledger.iter().filter(|r| !r.complete).count();
    assert_eq!(
        incomplete, cut,
        "a stream cut mid-way is metered incomplete"
    );
    assert!(
        ledger
            .iter()
            .filter(|r| !r.complete)
            .all(|r| r.endpoint.as_deref() == Some("b")),
        "only b's streams were cut"
    );
    assert!(
        ledger.iter().any(|r| r.attempts > 1),
        "a request on its way to b went elsewhere: {:?}",
        ledger.iter().map(|r| r.attempts).collect::<Vec<_>>()
    );
    println!(
        "figure: {bin} endpoint killed under load: {} requests, {cut} streams cut mid-way, {} failed over",
        results.len(),
        ledger.iter().filter(|r| r.attempts > 1).count()
    );
}

fn a_failing_endpoint_is_ejected_and_readmitted_and_retry_after_is_honoured(bin: &str) {
    let mut pool = Pool::start(
        bin,
        &[("a", 1, None), ("b", 1, None)],
        &["--admin-listen", "127.0.0.1:0"],
    );
    let admin = pool.gw.admin_addr();
    pool.sims[0].set_fault(r#"{"fault":"reject","status":503}"#);
    for _ in 0..8 {
        assert_eq!(pool.gw.chat(&body("")).status, 200, "b answers for a");
    }
    let up = pool.upstreams(admin);
    assert_eq!(up[0]["state"], "ejected", "{up:?}");
    assert_eq!(up[0]["reason"], "status_5xx");
    assert_eq!(up[1]["state"], "healthy");
    assert!(up[0]["failures"]["status_5xx"].as_u64().unwrap() >= 3);
    assert_eq!(request(admin, "GET", "/readyz", None, None).status, 200);
    let metrics = String::from_utf8(request(admin, "GET", "/metrics", None, None).body).unwrap();
    assert!(metrics.contains("chatgate_upstream_state{endpoint=\"a\",state=\"ejected\"} 1"));
    let listed = String::from_utf8(request(admin, "GET", "/upstreams", None, None).body).unwrap();
    for shown in [&metrics, &listed] {
        assert!(!shown.contains("sk-provider-"), "no endpoint key: {shown}");
    }
    // Recovered: a trial readmits it.
    pool.sims[0].clear_fault();
    eventually("a readmitted", || {
        assert_eq!(pool.gw.chat(&body("")).status, 200);
        pool.upstreams(admin)[0]["state"] == "healthy"
    });
    let log = pool.gw.proc.stderr_when("the readmission line", |l| {
        l.contains("provider endpoint readmitted")
    });
    assert!(log.contains("provider endpoint ejected"));

    // 429 with Retry-After: a is out for that long, then back.
    pool.sims[0].set_fault(r#"{"fault":"reject","status":429,"retry_after":3}"#);
    let before = pool.sims[0].journal().len();
    let mut limited_at = None;
    for _ in 0..4 {
        assert_eq!(pool.gw.chat(&body("")).status, 200);
        if pool.sims[0].journal().len() > before {
            limited_at = Some(Instant::now());
            break;
        }
    }
    let limited_at = limited_at.expect("a was asked and answered 429");
    let asked = pool.sims[0].journal().len();
    pool.sims[0].clear_fault();
    assert_eq!(pool.upstreams(admin)[0]["reason"], "retry_after");
    while limited_at.elapsed() < Duration::from_secs(2) {
        assert_eq!(pool.gw.chat(&body("")).status, 200);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        pool.sims[0].journal().len(),
        asked,
        "nothing went to a within its Retry-After"
    );
    eventually("a asked again after its Retry-After", || {
        assert_eq!(pool.gw.chat(&body("")).status, 200);
        pool.sims[0].journal().len() > asked
    });
    assert!(limited_at.elapsed() >= Duration::from_secs(3));
}

fn the_providers_4xx_is_not_retried_and_all_down_is_one_502(bin: &str) {
    let mut pool = Pool::start(
        bin,
        &[("a", 1, None), ("b", 1, None)],
        &["--admin-listen", "127.0.0.1:0"],
    );
    let admin = pool.gw.admin_addr();
    let r = pool.gw.chat(&body(
        r#""x_sim":{"fault":"reject","status":400,"message":"context too long"}"#,
    ));
    assert_eq!(r.status, 502);
    assert_eq!(r.json()["error"]["code"], "upstream_error");
    assert!(
        !r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Tried")
    );
    assert_eq!(pool.received().iter().sum::<usize>(), 1, "not retried");
    let rec = &pool.gw.ledger_len(1)[0];
    assert_eq!((rec.attempts, rec.upstream_status), (1, Some(400)));

    // Every endpoint failing: one 502 after trying each (and the best one
    // again: three attempts), saying so.
    for sim in &pool.sims {
        sim.set_fault(r#"{"fault":"reject","status":500}"#);
    }
    let r = pool.gw.chat(&body(""));
    assert_eq!(r.status, 502);
    let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("Tried 3 times."), "{message}");
    let received = pool.received();
    // The refused request before, and three attempts now.
    assert_eq!(
        received.iter().sum::<usize>(),
        1 + 3,
        "three attempts, at least one on each: {received:?}"
    );
    assert!(received.iter().all(|n| *n >= 1), "{received:?}");
    let rec = &pool.gw.ledger_len(2)[1];
    assert_eq!((rec.status, rec.attempts), (502, 3));
    // Ejected both: not ready, and still one attempt each.
    for _ in 0..3 {
        assert_eq!(pool.gw.chat(&body("")).status, 502);
    }
    let ready = request(admin, "GET", "/readyz", None, None);
    assert_eq!(ready.status, 503);
    assert!(String::from_utf8_lossy(&ready.body).contains("every provider endpoint is ejected"));
    // Down for good (refused connections): the same.
    for sim in &mut pool.sims {
        sim.proc.signal(libc::SIGKILL);
    }
    std::thread::sleep(Duration::from_millis(200));
    let r = pool.gw.chat(&stream_body(""));
    assert_eq!(r.status, 502);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Tried 3 times."),
        "{:?}",
        r.json()
    );
}

fn a_stream_whose_first_event_never_comes_is_retried_elsewhere(bin: &str) {
    let pool = Pool::start(
        bin,
        &[("a", 1, None), ("b", 1, None)],
        &["--upstream-attempt-timeout", "1s"],
    );
    // a sends its response head, then nothing.
    pool.sims[0].set_fault(r#"{"fault":"stall","after":0}"#);
    for _ in 0..4 {
        let r = pool.gw.chat(&stream_body(""));
        assert_eq!(r.status, 200);
        let events = r.events();
        assert_eq!(events.iter().filter(|e| *e == "[DONE]").count(), 1);
        assert!(
            events
                .iter()
                .any(|e| e.contains(r#""finish_reason":"stop""#))
        );
        assert!(
            events[0].contains(r#""role":"assistant""#),
            "one clean stream"
        );
    }
    let ledger = pool.gw.ledger_len(4);
    assert!(
        ledger
            .iter()
            .all(|r| r.complete && r.endpoint.as_deref() == Some("b"))
    );
    assert!(
        ledger.iter().any(|r| r.attempts == 2),
        "a was tried first at least once"
    );
    assert!(
        pool.sims[0].journal().len() <= 3,
        "ejected after three stalls"
    );
}

fn bad_pools_refuse_to_start_and_a_reload_keeps_requests_in_flight(bin: &str) {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.toml");
    mint(bin, dir.path(), "k", None, None);
    let config = dir.path().join("bad.toml");
    for (text, names) in [
        ("upstream = []\n", "[[upstream]]: the pool has no endpoint"),
        (
            "[[upstream]]\nname = \"a\"\nurl = \"http://h/v1\"\n[[upstream]]\nname = \"a\"\nurl = \"http://g/v1\"\n",
            "[[upstream]] #2 name:",
        ),
        (
            "[[upstream]]\nname = \"a\"\nurl = \"http://h/v1\"\napi_key_env = \"CHATGATE_TEST_NOT_SET\"\n",
            "[[upstream]] #1 api_key_env: the environment variable CHATGATE_TEST_NOT_SET is not set",
        ),
        (
            "[[upstream]]\nname = \"a\"\nurl = \"gopher://h/v1\"\n",
            "[[upstream]] #1 url:",
        ),
    ] {
        std::fs::write(&config, text).unwrap();
        let (code, out, err) = serve_refusing(bin, &config, &keys);
        assert_eq!(code, 2, "{text}: {err}");
        assert!(out.is_empty());
        let line = err.trim();
        assert!(
            !line.contains('\n') && line.contains(names),
            "{text}: {err}"
        );
    }

    // A reload moves new requests to the new pool; a stream in flight on
    // the old one finishes.
    let mut pool = Pool::start(bin, &[("a", 1, None)], &["--admin-listen", "127.0.0.1:0"]);
    let admin = pool.gw.admin_addr();
    let b = Sim::start(bin, &[], &[("CHATGATE_SIM_API_KEY", "sk-provider-a")]);
    let addr = pool.gw.addr;
    let key = pool.gw.key.clone();
    let in_flight = std::thread::spawn(move || {
        request(
            addr,
            "POST",
            "/v1/chat/completions",
            Some(&key),
            Some(&stream_body(r#""x_sim":{"token_ms":50}"#)),
        )
    });
    eventually("the stream on a", || pool.sims[0].journal().len() == 1);
    write_pool(&pool.config, &[("a", 1, None)], &[b.url()]);
    eventually("the pool reloaded", || {
        pool.upstreams(admin)[0]["url"] == Value::String(b.url())
    });
    let r = in_flight.join().unwrap();
    assert_eq!(r.status, 200);
    assert!(
        r.events()
            .iter()
            .any(|e| e.contains(r#""finish_reason":"stop""#))
    );
    assert_eq!(pool.gw.chat(&body("")).status, 200);
    assert_eq!(
        b.journal().len(),
        1,
        "the next request went to the new endpoint"
    );
    assert_eq!(pool.sims[0].journal().len(), 1);
    // A bad reload keeps the pool in force.
    std::fs::write(&pool.config, "upstream = []\n").unwrap();
    pool.gw.proc.stderr_when("the refused reload", |l| {
        l.contains("provider pool reload refused")
    });
    assert_eq!(pool.gw.chat(&body("")).status, 200);
    assert_eq!(b.journal().len(), 2);
}
