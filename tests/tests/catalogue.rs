//! A catalogue of several models, through both binaries, every endpoint a
//! real simulator process: models on their own endpoints, aliases, keys
//! limited to models, fallback to another model (every endpoint down, a
//! context overflow), conversations kept on one endpoint, the
//! configuration's errors and its reload, and the Responses and Messages
//! APIs routed the same way.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chatgate_tests::*;
use serde_json::{Value, json};

cases!(
    two_models_never_cross_and_an_alias_is_metered_as_its_model,
    a_key_limited_to_a_model_sees_and_reaches_only_it,
    every_endpoint_down_hands_the_request_to_the_fallback_before_any_byte,
    a_context_overflow_goes_to_the_larger_model_unless_the_key_may_not_call_it,
    a_conversation_stays_on_one_endpoint_moves_when_it_is_ejected_and_comes_back,
    bad_catalogues_refuse_to_start_and_a_reload_moves_a_model,
    the_responses_and_messages_apis_route_the_same_way,
    the_readmes_two_provider_catalogue_works_as_written,
    a_budget_reserves_for_the_dearest_model_that_may_answer,
    a_timed_out_attempt_goes_to_the_fallback_not_to_the_same_endpoint,
);

/// The endpoints: `a` and `b` serve `small`, `c` serves `big` (which it
/// calls `provider/big`).
const CATALOGUE: &str = r#"
[[model]]
id = "small"
aliases = ["gpt-4o-mini", "claude-haiku-4-5"]
endpoints = ["a", "b"]
fallback = ["big"]
input_usd_per_million = 1
output_usd_per_million = 2

[[model]]
id = "big"
aliases = ["claude-sonnet-4-5"]
endpoints = ["c"]
input_usd_per_million = 10
output_usd_per_million = 20
"#;

/// Simulators behind a gateway whose config file is `catalogue` after
/// the `[[upstream]]` tables of `names` (each requiring its own key).
struct Fleet {
    sims: Vec<Sim>,
    names: Vec<String>,
    gw: Gw,
    config: PathBuf,
    tables: String,
    _dir: tempfile::TempDir,
}

impl Fleet {
    fn start(bin: &str, names: &[&str], catalogue: &str, args: &[&str]) -> Fleet {
        Fleet::start_with(bin, names, catalogue, args, GwOptions::default())
    }

    /// The usual fleet (`a`, `b`, `c` serving [`CATALOGUE`]) with one key
    /// more, named `name`.
    fn with_key(bin: &str, args: &[&str], name: &str) -> Fleet {
        Fleet::start_with(
            bin,
            &["a", "b", "c"],
            CATALOGUE,
            args,
            GwOptions {
                extra_keys: vec![(name.into(), None, None)],
                ..GwOptions::default()
            },
        )
    }

    fn start_with(
        bin: &str,
        names: &[&str],
        catalogue: &str,
        args: &[&str],
        opts: GwOptions,
    ) -> Fleet {
        let sims: Vec<Sim> = names
            .iter()
            .map(|n| {
                Sim::start(
                    bin,
                    &[],
                    &[("CHATGATE_SIM_API_KEY", &format!("sk-provider-{n}"))],
                )
            })
            .collect();
        let mut tables = String::new();
        for (n, sim) in names.iter().zip(&sims) {
            tables.push_str(&format!(
                "[[upstream]]\nname = \"{n}\"\nurl = \"{}\"\napi_key_env = \"TEST_KEY_{}\"\n",
                sim.url(),
                n.to_ascii_uppercase()
            ));
            if *n == "c" {
                tables.push_str("models = { \"big\" = \"provider/big\" }\n");
            }
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("chatgate.toml");
        write_atomically(&config, &format!("{tables}{catalogue}"));
        let mut all = vec!["--config".to_owned(), config.to_string_lossy().into_owned()];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        let env = names
            .iter()
            .map(|n| {
                (
                    format!("TEST_KEY_{}", n.to_ascii_uppercase()),
                    format!("sk-provider-{n}"),
                )
            })
            .collect();
        let gw = Gw::start(
            bin,
            "",
            GwOptions {
                args: all,
                env,
                rpm: Some(1_000_000),
                tpm: Some(1_000_000_000),
                ..opts
            },
        );
        Fleet {
            sims,
            names: names.iter().map(|n| (*n).to_owned()).collect(),
            gw,
            config,
            tables,
            _dir: dir,
        }
    }

    /// Chat requests each simulator received.
    fn received(&self) -> Vec<usize> {
        self.sims.iter().map(|s| s.journal().len()).collect()
    }

    /// The `model` each simulator was sent, in order.
    fn sent_models(&self, i: usize) -> Vec<String> {
        self.sims[i]
            .journal()
            .iter()
            .map(|e| {
                let body: Value = serde_json::from_str(e["body"].as_str().unwrap()).unwrap();
                body["model"].as_str().unwrap().to_owned()
            })
            .collect()
    }

    /// A chat request for `model` with `key`.
    fn chat(&self, key: &str, model: &str, extra: &str) -> Response {
        request(
            self.gw.addr,
            "POST",
            "/v1/chat/completions",
            Some(key),
            Some(&chat_for(model, extra)),
        )
    }
}

fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write the config");
    std::fs::rename(&tmp, path).expect("rename the config");
}

/// A chat request body for `model`, with extra members.
fn chat_for(model: &str, extra: &str) -> String {
    let body: Value = serde_json::from_str(&body(extra)).unwrap();
    let mut body = body;
    body["model"] = json!(model);
    body.to_string()
}

/// `keys set NAME ARGS…` on the fleet gateway's keys file.
fn keys_set(bin: &str, f: &Fleet, name: &str, args: &[&str]) {
    let keys = f.gw.dir.path().join("keys.toml");
    let mut all = vec!["keys", "set", name, "--keys", keys.to_str().unwrap()];
    all.extend_from_slice(args);
    let (code, _, err) = run(bin, &all, &[]);
    assert_eq!(code, 0, "{err}");
}

/// The model ids `GET /v1/models` lists for `key`.
fn listed(f: &Fleet, key: &str) -> Vec<String> {
    let r = request(f.gw.addr, "GET", "/v1/models", Some(key), None);
    assert_eq!(r.status, 200);
    r.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Waits until `key` sees exactly `models` (a keys-file change applied).
fn wait_listed(f: &Fleet, key: &str, models: &[&str]) {
    let deadline = Instant::now() + PATIENCE;
    while listed(f, key) != models {
        assert!(Instant::now() < deadline, "{key} never saw {models:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A metric's value, or 0 when it has no line yet.
fn metric_or_zero(admin: std::net::SocketAddr, name: &str) -> String {
    let text = String::from_utf8(request(admin, "GET", "/metrics", None, None).body).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or("0")
        .to_owned()
}

fn two_models_never_cross_and_an_alias_is_metered_as_its_model(bin: &str) {
    let mut f = Fleet::start(
        bin,
        &["a", "b", "c"],
        CATALOGUE,
        &["--admin-listen", "127.0.0.1:0"],
    );
    let admin = f.gw.admin_addr();
    let key = f.gw.key.clone();
    for model in ["small", "gpt-4o-mini", "big", "claude-sonnet-4-5"] {
        for _ in 0..4 {
            let r = f.chat(&key, model, "");
            assert_eq!(
                r.status,
                200,
                "{model}: {}",
                String::from_utf8_lossy(&r.body)
            );
        }
    }
    let got = f.received();
    assert_eq!(got[0] + got[1], 8, "small on a and b only: {got:?}");
    assert!(got[0] > 0 && got[1] > 0, "balanced: {got:?}");
    assert_eq!(got[2], 8, "big on c only: {got:?}");
    // Each endpoint is sent the model's name for it, whatever the client
    // called it.
    assert!(f.sent_models(0).iter().all(|m| m == "small"));
    assert!(f.sent_models(2).iter().all(|m| m == "provider/big"));
    let ledger = f.gw.ledger_len(16);
    let models: Vec<&str> = ledger.iter().map(|r| r.model.as_str()).collect();
    assert_eq!(models.iter().filter(|m| **m == "small").count(), 8);
    assert_eq!(models.iter().filter(|m| **m == "big").count(), 8);
    for r in &ledger {
        assert_eq!(r.served_model, None, "no fallback");
        let (input, output) = if r.model == "big" { (10, 20) } else { (1, 2) };
        assert_eq!(
            r.cost_nano_usd,
            (r.prompt_tokens * input + r.completion_tokens * output) * 1000,
            "priced as {}",
            r.model
        );
        let on_c = r.endpoint.as_deref() == Some("c");
        assert_eq!(on_c, r.model == "big");
    }
    // An unknown name is still unknown.
    let r = f.chat(&key, "gpt-5", "");
    assert_eq!(r.error().2, "model_not_found");
    // What operators see.
    let up = request(admin, "GET", "/upstreams", None, None).json();
    let served = |i: usize| up["upstreams"][i]["models"].clone();
    assert_eq!(served(0), json!([{"id": "small", "sent_as": "small"}]));
    assert_eq!(served(2), json!([{"id": "big", "sent_as": "provider/big"}]));
    assert_eq!(
        metric_or_zero(admin, "chatgate_model_requests_total{model=\"big\"}"),
        "8"
    );
    let small_cost: u64 = ledger
        .iter()
        .filter(|r| r.model == "small")
        .map(|r| r.cost_nano_usd)
        .sum();
    assert_eq!(
        metric_or_zero(admin, "chatgate_model_cost_usd_total{model=\"small\"}"),
        chatgate_core::format_usd(small_cost)
    );
}

fn a_key_limited_to_a_model_sees_and_reaches_only_it(bin: &str) {
    let f = Fleet::with_key(bin, &[], "limited");
    let keys = f.gw.dir.path().join("keys.toml");
    keys_set(bin, &f, "limited", &["--models", "claude-haiku-4-5"]);
    let limited = f.gw.keys["limited"].clone();
    // Applied within a second: the list shows the one model.
    wait_listed(&f, &limited, &["small"]);
    let ids = |key: &str| listed(&f, key);
    assert_eq!(ids(&f.gw.key), ["small", "big"], "another key sees all");
    // The model it may not call answers as an unknown model would.
    let unknown = f.chat(&limited, "no-such-model", "");
    for name in ["big", "claude-sonnet-4-5"] {
        let r = f.chat(&limited, name, "");
        assert_eq!(r.error(), unknown.error());
        assert_eq!(
            r.json()["error"]["message"],
            unknown.json()["error"]["message"]
                .as_str()
                .unwrap()
                .replace("no-such-model", name)
        );
    }
    assert_eq!(f.received()[2], 0, "big was never asked");
    // Its own model, by any name.
    for name in ["small", "gpt-4o-mini"] {
        assert_eq!(f.chat(&limited, name, "").status, 200);
    }
    // `keys list` says so; `all` gives every model back.
    let (_, out, _) = run(
        bin,
        &["keys", "list", "--keys", keys.to_str().unwrap()],
        &[],
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("limited") && l.contains("claude-haiku-4-5")),
        "{out}"
    );
    keys_set(bin, &f, "limited", &["--models", "all"]);
    wait_listed(&f, &limited, &["small", "big"]);
    let deadline = Instant::now() + PATIENCE;
    // `keys new --models` mints a limited key.
    let (code, out, err) = run(
        bin,
        &[
            "keys",
            "new",
            "--keys",
            keys.to_str().unwrap(),
            "--name",
            "big-only",
            "--models",
            "big",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let big_only = out.trim().to_owned();
    while request(f.gw.addr, "GET", "/v1/models", Some(&big_only), None).status != 200 {
        assert!(Instant::now() < deadline, "the new key never applied");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(ids(&big_only), ["big"]);
    assert_eq!(f.chat(&big_only, "small", "").error().2, "model_not_found");
}

fn every_endpoint_down_hands_the_request_to_the_fallback_before_any_byte(bin: &str) {
    let pg = PgServer::start();
    let pg_url = pg.url();
    let mut f = Fleet::start(
        bin,
        &["a", "b", "c"],
        CATALOGUE,
        &[
            "--admin-listen",
            "127.0.0.1:0",
            "--ledger-postgres",
            &pg_url,
        ],
    );
    let admin = f.gw.admin_addr();
    let key = f.gw.key.clone();
    for s in &f.sims[..2] {
        s.set_fault(r#"{"fault":"reject","status":503}"#);
    }
    let r = f.chat(&key, "small", "");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        r.json()["model"],
        "provider/big",
        "the fallback's own answer"
    );
    let s = f.chat(&key, "gpt-4o-mini", r#""stream":true"#);
    assert_eq!(s.status, 200);
    assert!(s.events().iter().any(|e| e.contains("provider/big")));
    assert_eq!(s.events().last().map(String::as_str), Some("[DONE]"));
    let ledger = f.gw.ledger_len(2);
    for r in &ledger {
        assert_eq!(r.model, "small", "the model asked for");
        assert_eq!(
            r.served_model.as_deref(),
            Some("big"),
            "and the one that answered"
        );
        assert_eq!(r.endpoint.as_deref(), Some("c"));
        assert!(r.complete && r.attempts >= 2, "{r:?}");
        assert_eq!(
            r.cost_nano_usd,
            (r.prompt_tokens * 10 + r.completion_tokens * 20) * 1000,
            "at the fallback's prices"
        );
    }
    assert_eq!(
        metric_or_zero(
            admin,
            "chatgate_model_fallbacks_total{from=\"small\",to=\"big\"}"
        ),
        "2"
    );
    assert_eq!(
        metric_or_zero(admin, "chatgate_model_requests_total{model=\"big\"}"),
        "2"
    );
    // The shared ledger has both models too.
    let deadline = Instant::now() + PATIENCE;
    let mut c = pg.client();
    loop {
        let rows = c
            .query("SELECT model, served_model FROM chatgate_ledger", &[])
            .unwrap_or_default();
        let got: Vec<(String, Option<String>)> =
            rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        if got.len() == 2 {
            assert!(
                got.iter()
                    .all(|g| *g == ("small".into(), Some("big".into()))),
                "{got:?}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "rows never shipped: {got:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A stream cut after its first byte never moves to another model: it
    // ends incomplete, and big hears nothing of it.
    for s in &f.sims[..2] {
        s.set_fault(r#"{"fault":"reset","after":2}"#);
    }
    let before = f.received()[2];
    let s = f.chat(&key, "small", r#""stream":true"#);
    assert_eq!(s.status, 200);
    assert!(!s.events().iter().any(|e| e.contains("provider/big")));
    assert_eq!(f.received()[2], before, "no fallback after a byte");
    let last = f.gw.ledger_len(3).pop().unwrap();
    assert!(!last.complete);
    assert_eq!(last.served_model, None);
}

fn a_context_overflow_goes_to_the_larger_model_unless_the_key_may_not_call_it(bin: &str) {
    let f = Fleet::with_key(bin, &[], "small-only");
    let overflow = r#"{"fault":"reject","status":400,"message":"This model's maximum context length is 2048 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion)."}"#;
    for s in &f.sims[..2] {
        s.set_fault(overflow);
    }
    let key = f.gw.key.clone();
    let r = f.chat(&key, "small", "");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let rec = f.gw.ledger_len(1).pop().unwrap();
    assert_eq!(
        (rec.model.as_str(), rec.served_model.as_deref()),
        ("small", Some("big"))
    );
    assert_eq!(
        f.received()[..2].iter().sum::<usize>(),
        1,
        "a refusal is not tried on the model's other endpoint"
    );
    // A key that may not call the larger model gets small's refusal.
    keys_set(bin, &f, "small-only", &["--models", "small"]);
    let limited = f.gw.keys["small-only"].clone();
    wait_listed(&f, &limited, &["small"]);
    let big_before = f.received()[2];
    let r = f.chat(&limited, "small", "");
    assert_eq!(r.status, 502);
    assert_eq!(r.json()["error"]["provider"]["status"], 400);
    assert_eq!(
        f.received()[2],
        big_before,
        "the fallback it may not call is skipped"
    );
    let rec = f.gw.ledger_len(2).pop().unwrap();
    assert_eq!(rec.served_model, None);
}

/// A conversation's `n` turns (`prompt_cache_key` names it); the
/// simulator each went to, by index, and each turn's cached tokens.
fn converse(f: &Fleet, name: &str, turns: usize) -> (Vec<usize>, Vec<u64>) {
    let mut messages = vec![json!({"role": "user", "content": format!("{name}: hello")})];
    let mut went = Vec::new();
    let mut cached = Vec::new();
    for turn in 0..turns {
        let body = json!({
            "model": MODEL,
            "prompt_cache_key": name,
            "messages": messages,
        });
        let r = request(
            f.gw.addr,
            "POST",
            "/v1/chat/completions",
            Some(&f.gw.key),
            Some(&body.to_string()),
        );
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        cached.push(
            v["usage"]["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap_or(0),
        );
        // The endpoint that answered, as its ledger line says.
        let rec = f.gw.ledger_line(r.header("x-request-id").expect("an id"));
        let answered = f
            .names
            .iter()
            .position(|n| Some(n.as_str()) == rec.endpoint.as_deref())
            .expect("an endpoint answered");
        went.push(answered);
        messages.push(v["choices"][0]["message"].clone());
        messages.push(json!({"role": "user", "content": format!("turn {turn}")}));
    }
    (went, cached)
}

fn a_conversation_stays_on_one_endpoint_moves_when_it_is_ejected_and_comes_back(bin: &str) {
    let mut f = Fleet::start(
        bin,
        &["a", "b", "d"],
        "",
        &[
            "--admin-listen",
            "127.0.0.1:0",
            "--upstream-probe-interval",
            "200ms",
        ],
    );
    let admin = f.gw.admin_addr();
    let (went, cached) = converse(&f, "conversation-1", 20);
    let home = went[0];
    assert!(went.iter().all(|&i| i == home), "{went:?}");
    assert_eq!(cached[0], 0);
    assert!(
        cached[1..].iter().all(|&c| c > 0),
        "its prefix cached: {cached:?}"
    );
    // Other conversations spread over the endpoints.
    let homes: std::collections::BTreeSet<usize> = (0..12)
        .map(|k| converse(&f, &format!("conversation-other-{k}"), 1).0[0])
        .collect();
    assert!(homes.len() >= 2, "{homes:?}");
    // Its endpoint fails: ejected, the conversation moves to one other.
    f.sims[home].set_fault(r#"{"fault":"reject","status":503}"#);
    let (went, _) = converse(&f, "conversation-1", 8);
    let moved = *went.last().unwrap();
    assert_ne!(moved, home);
    assert!(went[3..].iter().all(|&i| i == moved), "{went:?}");
    let name = ["a", "b", "d"][home];
    let state = |admin| {
        let up = request(admin, "GET", "/upstreams", None, None).json();
        up["upstreams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["name"] == name)
            .unwrap()["state"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(state(admin), "ejected");
    // Healthy again (its probe answers): the conversation comes back.
    f.sims[home].clear_fault();
    let deadline = Instant::now() + PATIENCE;
    while state(admin) != "healthy" {
        assert!(Instant::now() < deadline, "never readmitted");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (went, _) = converse(&f, "conversation-1", 3);
    assert!(went.iter().all(|&i| i == home), "{went:?}");
}

fn bad_catalogues_refuse_to_start_and_a_reload_moves_a_model(bin: &str) {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.toml");
    mint(bin, dir.path(), "k", None, None);
    let config = dir.path().join("bad.toml");
    let pool = "[[upstream]]\nname = \"a\"\nurl = \"http://127.0.0.1:9/v1\"\n";
    for (models, says) in [
        (
            "[[model]]\nid = \"m\"\nendpoints = [\"z\"]\n",
            "config file: [[model]] #1 endpoints: 'z' is not the name of an [[upstream]] table (endpoints: a)",
        ),
        (
            "[[model]]\nid = \"m\"\nfallback = [\"n\"]\n",
            "config file: [[model]] #1 fallback: 'n' is not the id or an alias of a [[model]]",
        ),
        (
            "[[model]]\nid = \"m\"\n[[model]]\nid = \"n\"\naliases = [\"m\"]\n",
            "config file: [[model]] #2 aliases: 'm' is the id of [[model]] #1",
        ),
    ] {
        std::fs::write(&config, format!("{pool}{models}")).unwrap();
        let (code, out, err) = serve_refusing(bin, &config, &keys);
        assert_eq!((code, out.as_str()), (2, ""), "{models}: {err}");
        assert_eq!(err.trim(), format!("chatgate: {says}"));
    }

    // A reload moves `big` from c to a; a stream in flight on c finishes
    // there, and a bad catalogue leaves the one in force.
    let f = Fleet::start(bin, &["a", "b", "c"], CATALOGUE, &[]);
    let key = f.gw.key.clone();
    let mut slow = Conn::open(f.gw.addr);
    slow.send(&raw_request(
        "POST",
        "/v1/chat/completions",
        Some(&key),
        Some(&chat_for(
            "big",
            r#""stream":true,"x_sim":{"token_ms":100,"answer_tokens":20}"#,
        )),
    ));
    slow.read_until("data:");
    let moved = CATALOGUE.replace("endpoints = [\"c\"]", "endpoints = [\"a\"]");
    write_atomically(&f.config, &format!("{}{moved}", f.tables));
    let deadline = Instant::now() + PATIENCE;
    while !f.sent_models(0).iter().any(|m| m == "big") {
        assert!(Instant::now() < deadline, "the reload never moved big");
        assert_eq!(f.chat(&key, "big", "").status, 200);
        std::thread::sleep(Duration::from_millis(100));
    }
    let finished = slow.response();
    assert_eq!(finished.status, 200);
    assert_eq!(finished.events().last().map(String::as_str), Some("[DONE]"));
    // A bad catalogue: refused, the one in force stays.
    write_atomically(
        &f.config,
        &format!("{}{moved}[[model]]\nid = \"small\"\n", f.tables),
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(f.chat(&key, "gpt-4o-mini", "").status, 200);
    let log = std::fs::read_to_string(f.gw.dir.path().join("gateway.stderr")).unwrap();
    assert!(
        log.contains("[[model]] #3 id: 'small' is the id of [[model]] #1"),
        "{log}"
    );
}

fn the_responses_and_messages_apis_route_the_same_way(bin: &str) {
    let f = Fleet::start(
        bin,
        &["a", "b", "c"],
        CATALOGUE,
        &["--apis", "responses,messages"],
    );
    let key = f.gw.key.clone();
    // Claude Code's background model name is an alias of small; its
    // session header keeps the conversation on one endpoint.
    let messages = |session: &str, model: &str| {
        let body = json!({
            "model": model,
            "max_tokens": 256,
            "messages": [{"role": "user", "content": "hello"}],
        })
        .to_string();
        let raw = format!(
            "POST /v1/messages HTTP/1.1\r\nHost: test\r\nx-api-key: {key}\r\nanthropic-version: 2023-06-01\r\n\
             X-Claude-Code-Session-Id: {session}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut c = Conn::open(f.gw.addr);
        c.send(raw.as_bytes());
        c.response()
    };
    for _ in 0..6 {
        let r = messages("session-7", "claude-haiku-4-5");
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    }
    let got = f.received();
    assert_eq!(got[2], 0);
    assert!(
        got[0] == 6 || got[1] == 6,
        "one session, one endpoint: {got:?}"
    );
    let r = messages("session-7", "claude-sonnet-4-5");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["model"], "provider/big");
    // The Responses API: an alias, and its prompt_cache_key.
    let before = f.received();
    for _ in 0..6 {
        let body = json!({"model": "gpt-4o-mini", "input": "hello", "prompt_cache_key": "conv-r"});
        let r = request(
            f.gw.addr,
            "POST",
            "/v1/responses",
            Some(&key),
            Some(&body.to_string()),
        );
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    }
    let after = f.received();
    let grew: Vec<usize> = (0..3).map(|i| after[i] - before[i]).collect();
    assert!(grew == [6, 0, 0] || grew == [0, 6, 0], "{grew:?}");
    let ledger = f.gw.ledger_len(13);
    assert!(
        ledger
            .iter()
            .filter(|r| r.api.as_deref() == Some("responses"))
            .all(|r| r.model == "small")
    );
    assert_eq!(
        ledger
            .iter()
            .filter(|r| r.api.as_deref() == Some("messages") && r.model == "small")
            .count(),
        6
    );
}

fn the_readmes_two_provider_catalogue_works_as_written(bin: &str) {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    let block = readme
        .split("```toml\n")
        .map(|b| b.split("```").next().unwrap_or(""))
        .find(|b| b.starts_with("# two providers"))
        .expect("the README's two-provider catalogue");
    let local = Sim::start(bin, &[], &[]);
    let cloud = Sim::start(bin, &[], &[("CHATGATE_SIM_API_KEY", "sk-cloud")]);
    // The file as written, with the simulators where the providers are
    // (the keys file given on the command line wins over its `keys`).
    let mut urls = [local.url(), cloud.url()].into_iter();
    let text: String = block
        .lines()
        .map(|l| match l.starts_with("url = ") {
            true => format!("url = \"{}\"\n", urls.next().expect("two endpoints")),
            false => format!("{l}\n"),
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("chatgate.toml");
    std::fs::write(&config, text).unwrap();
    let gw = Gw::start(
        bin,
        "",
        GwOptions {
            args: vec!["--config".into(), config.to_string_lossy().into_owned()],
            env: vec![("CLOUD_PROVIDER_KEY".into(), "sk-cloud".into())],
            ..GwOptions::default()
        },
    );
    let ask = |model: &str| {
        request(
            gw.addr,
            "POST",
            "/v1/chat/completions",
            Some(&gw.key),
            Some(&chat_for(model, "")),
        )
    };
    let sent = |sim: &Sim| -> Vec<String> {
        sim.journal()
            .iter()
            .map(|e| {
                let body: Value = serde_json::from_str(e["body"].as_str().unwrap()).unwrap();
                body["model"].as_str().unwrap().to_owned()
            })
            .collect()
    };
    for model in ["k3", "claude-haiku-4-5", "gpt-4o-mini"] {
        assert_eq!(ask(model).status, 200);
    }
    for model in ["k3-large", "claude-sonnet-4-5", "gpt-4o"] {
        assert_eq!(ask(model).status, 200);
    }
    assert_eq!(sent(&local), ["Qwen/Qwen3-8B"; 3]);
    assert_eq!(sent(&cloud), ["provider-large-2026"; 3]);
    // The local server down: k3's requests are answered by k3-large.
    local.set_fault(r#"{"fault":"reject","status":503}"#);
    let r = ask("claude-haiku-4-5");
    assert_eq!(r.status, 200);
    let rec = gw.ledger_len(7).pop().unwrap();
    assert_eq!(
        (
            rec.model.as_str(),
            rec.served_model.as_deref(),
            rec.endpoint.as_deref()
        ),
        ("k3", Some("k3-large"), Some("cloud"))
    );
    assert_eq!(
        rec.cost_nano_usd,
        rec.prompt_tokens * 5_000 + rec.completion_tokens * 25_000
    );
    let models = request(gw.addr, "GET", "/v1/models", Some(&gw.key), None).json();
    assert_eq!(models["data"][0]["id"], "k3");
    assert_eq!(models["data"][1]["id"], "k3-large");
}

fn a_budget_reserves_for_the_dearest_model_that_may_answer(bin: &str) {
    let mut f = Fleet::with_key(bin, &["--admin-listen", "127.0.0.1:0"], "thrifty");
    let admin = f.gw.admin_addr();
    let set = |args: &[&str]| keys_set(bin, &f, "thrifty", args);
    // A thousandth of a dollar a day: small's worst case for 100 tokens
    // fits many times over, big's (ten times the prices) does not.
    set(&["--budget-usd", "0.001", "--budget-period", "day"]);
    let deadline = Instant::now() + PATIENCE;
    let budget = "chatgate_budget_usd{key=\"thrifty\",period=\"day\"}";
    while metric_or_zero(admin, budget) == "0" {
        assert!(Instant::now() < deadline, "the budget never applied");
        std::thread::sleep(Duration::from_millis(100));
    }
    let thrifty = f.gw.keys["thrifty"].clone();
    let ask = || f.chat(&thrifty, "small", r#""max_tokens":100"#);
    // small may fall back to big: the reservation is big's, refused.
    let r = ask();
    assert_eq!(
        r.error().2,
        "insufficient_quota",
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(f.received(), [0, 0, 0]);
    // Limited to small, it has no fallback to reserve for: admitted.
    set(&["--models", "small"]);
    wait_listed(&f, &thrifty, &["small"]);
    assert_eq!(ask().status, 200);
}

/// An attempt that times out (no response head within the attempt
/// timeout) is not waited for again on the same endpoint when the model
/// has a fallback: each of the model's endpoints is tried once, then the
/// fallback answers. A 503 keeps the same-endpoint retry.
fn a_timed_out_attempt_goes_to_the_fallback_not_to_the_same_endpoint(bin: &str) {
    let f = Fleet::start(
        bin,
        &["a", "b", "c"],
        CATALOGUE,
        &["--upstream-attempt-timeout", "1s"],
    );
    let key = f.gw.key.clone();
    for s in &f.sims[..2] {
        s.set_fault(r#"{"fault":"stall_headers"}"#);
    }
    let r = f.chat(&key, "small", r#""stream":true"#);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.events().last().map(String::as_str), Some("[DONE]"));
    let rec = f.gw.ledger_len(1)[0].clone();
    assert_eq!(
        (
            rec.served_model.as_deref(),
            rec.endpoint.as_deref(),
            rec.attempts
        ),
        (Some("big"), Some("c"), 3),
        "{rec:?}"
    );
    assert_eq!(f.received(), [1, 1, 1], "a and b each asked once");
    // Without a fallback to go to (the key may not call big), the model's
    // endpoints are tried again as before.
    let keys = f.gw.dir.path().join("keys.toml");
    let (code, _, err) = run(
        bin,
        &[
            "keys",
            "set",
            "test",
            "--keys",
            keys.to_str().unwrap(),
            "--models",
            "small",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    wait_listed(&f, &key, &["small"]);
    let r = f.chat(&key, "small", r#""stream":true"#);
    assert_eq!(r.status, 504, "{}", String::from_utf8_lossy(&r.body));
    let rec = f.gw.ledger_len(2)[1].clone();
    assert!(rec.attempts > 2, "{rec:?}");
}
