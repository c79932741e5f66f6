//! Secrets never leak: one run of nearly every feature with a unique
//! canary for every secret, then a search of everything the gateway wrote
//! or answered.
//!
//! The secrets: the provider's key, the client keys (minted by `keys new`
//! and by the admin API, rotated), the admin token, the single sign-on
//! client's secret, the Redis and PostgreSQL passwords, the signing secret
//! and the trace collector's header. The features: chat (plain and
//! streamed), the Responses and Messages APIs, failover past a dead
//! endpoint, a budget that refuses, error paths, shared limits through a
//! Redis with a password, keys and the ledger in PostgreSQL with a
//! password, OTLP traces, the console's login and figures, single sign-on
//! (to an identity provider that cannot be reached), the admin API
//! (create, rotate, list, audit), and the `keys` and `usage` commands. The
//! search: the gateway's log at `trace` level, its stdout, the ledger
//! file, the ledger's and the audit trail's rows in PostgreSQL, the
//! metrics, every span the collector received, every answer (but the two
//! that mint a secret, which must hold it) and every command's output —
//! none holds a secret, nor the SHA-256 of a client key or of the admin
//! token. And the URLs printed show their passwords as `***`.

use std::net::SocketAddr;
use std::time::Duration;

use chatgate_tests::*;
use serde_json::{Value, json};

cases!(no_secret_leaks_from_any_feature);

/// A value no code path makes up: the secret's name and a random tail.
fn canary(what: &str) -> String {
    let mut bytes = [0u8; 12];
    let f = std::fs::File::open("/dev/urandom").unwrap();
    std::io::Read::read_exact(&mut &f, &mut bytes).unwrap();
    let tail: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{what}-canary-{tail}")
}

fn sha256_hex(s: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, s.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn secret_of(stdout: &str) -> String {
    stdout
        .split_whitespace()
        .find(|w| w.starts_with("sk-cg-"))
        .unwrap_or_else(|| panic!("no key in {stdout}"))
        .to_owned()
}

/// Everything seen, to be searched at the end.
#[derive(Default)]
struct Haystack(Vec<(String, String)>);

impl Haystack {
    fn add(&mut self, where_: impl Into<String>, text: impl Into<String>) {
        self.0.push((where_.into(), text.into()));
    }

    fn answer(&mut self, what: &str, r: &Response) -> Value {
        let head: String = r
            .headers
            .iter()
            .map(|(k, v)| format!("{k}: {v}\n"))
            .collect();
        let body = String::from_utf8_lossy(&r.body).into_owned();
        self.add(what, format!("{} {head}{body}", r.status));
        serde_json::from_str(&body).unwrap_or(Value::Null)
    }
}

fn exchange(addr: SocketAddr, raw: &[u8]) -> Response {
    try_exchange(addr, raw).expect("an answer")
}

fn with_headers(method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: test\r\n");
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str(&format!(
        "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    ));
    r.into_bytes()
}

fn no_secret_leaks_from_any_feature(bin: &str) {
    let provider_key = canary("provider");
    let admin_token = canary("admin");
    let sso_secret = canary("sso");
    let redis_password = canary("redis");
    let pg_password = canary("pg");
    let signing_secret = canary("signing-secret-of-32-characters");
    let otlp_token = canary("otlp");

    let sim = Sim::start(bin, &[], &[]);
    let otlp = OtlpReceiver::start();
    let redis = RedisServer::start_with(&["--requirepass", &redis_password]);
    let redis_url = format!("redis://:{redis_password}@{}", redis.addr);
    let pg = PgServer::start();
    let port = pg
        .url()
        .rsplit(':')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    pg.client()
        .batch_execute(&format!(
            "CREATE ROLE canary LOGIN SUPERUSER PASSWORD '{pg_password}'"
        ))
        .unwrap();
    let pg_url = format!("postgres://canary:{pg_password}@127.0.0.1:{port}/postgres");

    let mut seen = Haystack::default();
    let run_cmd = |seen: &mut Haystack, args: &[&str]| -> String {
        let (code, out, err) = run(bin, args, &[]);
        assert_eq!(code, 0, "{args:?}: {err}");
        seen.add(format!("`{}` stderr", args.join(" ")), err);
        out
    };
    // Keys in PostgreSQL: minted by the command (its output holds the
    // secret, once); a key with a budget of nothing.
    let alice = secret_of(&run_cmd(
        &mut Haystack::default(),
        &["keys", "new", "--keys", &pg_url, "--name", "alice"],
    ));
    let broke = secret_of(&run_cmd(
        &mut Haystack::default(),
        &[
            "keys",
            "new",
            "--keys",
            &pg_url,
            "--name",
            "broke",
            "--budget-usd",
            "0",
        ],
    ));

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("chatgate.toml");
    std::fs::write(
        &config,
        format!(
            "apis = \"chat,responses,messages\"\n\
             [[upstream]]\nname = \"dead\"\nurl = \"http://127.0.0.1:1/v1\"\napi_key_env = \"CANARY_PROVIDER_KEY\"\n\
             [[upstream]]\nname = \"sim\"\nurl = \"{}\"\napi_key_env = \"CANARY_PROVIDER_KEY\"\n",
            sim.url()
        ),
    )
    .unwrap();
    let ledger = dir.path().join("ledger.jsonl");
    let otlp_header = format!("authorization=Bearer%20{otlp_token}");
    let args: Vec<String> = [
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--keys",
        &pg_url,
        "--ledger",
        ledger.to_str().unwrap(),
        "--ledger-postgres",
        &pg_url,
        "--redis",
        &redis_url,
        "--admin-listen",
        "127.0.0.1:0",
        "--admin-token-env",
        "CANARY_ADMIN_TOKEN",
        "--signing-secret-env",
        "CANARY_SIGNING_SECRET",
        "--otlp-endpoint",
        &otlp.url(),
        "--otlp-headers",
        &otlp_header,
        "--sso-issuer",
        "http://127.0.0.1:9/realms/none",
        "--sso-client-id",
        "chatgate",
        "--sso-client-secret-env",
        "CANARY_SSO_SECRET",
        "--sso-allowed",
        "@example.com",
        "--log-level",
        "trace",
    ]
    .map(str::to_owned)
    .to_vec();
    let env: Vec<(String, String)> = [
        ("CANARY_PROVIDER_KEY", &provider_key),
        ("CANARY_ADMIN_TOKEN", &admin_token),
        ("CANARY_SIGNING_SECRET", &signing_secret),
        ("CANARY_SSO_SECRET", &sso_secret),
    ]
    .map(|(k, v)| (k.to_owned(), v.clone()))
    .to_vec();
    let mut gw = Proc::spawn(bin, &args, &env, &dir.path().join("gateway.stderr"));
    let first = gw.line();
    let second = gw.line();
    seen.add("serve's stdout", format!("{first}{second}"));
    let addr = address_from(&first);
    let admin = address_from(&second);

    // The public API: chat (the dead endpoint first, then the simulator),
    // streamed, the Responses and Messages APIs, and the error paths.
    let chat = |extra: &str| body(extra);
    for (what, raw) in [
        ("chat", raw_request("POST", "/v1/chat/completions", Some(&alice), Some(&chat("")))),
        (
            "chat streamed",
            raw_request("POST", "/v1/chat/completions", Some(&alice), Some(&chat(r#""stream":true"#))),
        ),
        (
            "responses",
            raw_request(
                "POST",
                "/v1/responses",
                Some(&alice),
                Some(&json!({"model": MODEL, "input": "What is two plus two?"}).to_string()),
            ),
        ),
        (
            "messages",
            with_headers(
                "POST",
                "/v1/messages",
                &[("x-api-key", &alice), ("anthropic-version", "2023-06-01")],
                &json!({"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]})
                    .to_string(),
            ),
        ),
        ("models", raw_request("GET", "/v1/models", Some(&alice), None)),
    ] {
        let r = exchange(addr, &raw);
        assert_eq!(r.status, 200, "{what}: {}", String::from_utf8_lossy(&r.body));
        seen.answer(what, &r);
    }
    for (what, raw) in [
        (
            "a wrong key",
            raw_request(
                "POST",
                "/v1/chat/completions",
                Some("sk-cg-not-a-key"),
                Some(&chat("")),
            ),
        ),
        (
            "a spent budget",
            raw_request(
                "POST",
                "/v1/chat/completions",
                Some(&broke),
                Some(&chat("")),
            ),
        ),
        (
            "bad JSON",
            raw_request(
                "POST",
                "/v1/chat/completions",
                Some(&alice),
                Some("{not json"),
            ),
        ),
        (
            "an unknown model",
            raw_request(
                "POST",
                "/v1/chat/completions",
                Some(&alice),
                Some(r#"{"model":"nope","messages":[]}"#),
            ),
        ),
    ] {
        let r = exchange(addr, &raw);
        let v = seen.answer(what, &r);
        assert!(r.status >= 400, "{what}: {} {v}", r.status);
    }

    // The admin listener: metrics and health, the console's login and
    // figures, single sign-on, the admin API.
    for path in [
        "/metrics",
        "/healthz",
        "/readyz",
        "/upstreams",
        "/sso/login",
    ] {
        let r = exchange(admin, &raw_request("GET", path, None, None));
        seen.answer(path, &r);
    }
    let form = format!("token={admin_token}");
    let login = format!(
        "POST /login HTTP/1.1\r\nHost: test\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
        form.len()
    );
    let r = exchange(admin, login.as_bytes());
    assert_eq!(r.status, 303);
    seen.answer("the login", &r);
    let cookie = r
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    for path in [
        "/",
        "/api/overview",
        "/api/session",
        "/api/keys",
        "/api/audit",
    ] {
        let raw = format!("GET {path} HTTP/1.1\r\nHost: test\r\nCookie: {cookie}\r\n\r\n");
        let r = exchange(admin, raw.as_bytes());
        assert_eq!(r.status, 200, "{path}");
        seen.answer(path, &r);
    }
    // A key made and rotated through the API: those two answers hold the
    // secret, as they must, and are not searched.
    let r = exchange(
        admin,
        &raw_request(
            "POST",
            "/api/keys",
            Some(&admin_token),
            Some(r#"{"name":"carol"}"#),
        ),
    );
    assert_eq!(r.status, 201);
    let carol = r.json()["secret"].as_str().unwrap().to_owned();
    let r = exchange(
        admin,
        &raw_request(
            "POST",
            "/api/keys/carol/rotate",
            Some(&admin_token),
            Some(r#"{"grace":"1s"}"#),
        ),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let carol_rotated = r.json()["secret"].as_str().unwrap().to_owned();
    eventually("the rotated key is in force", || {
        chat_status(addr, &carol_rotated) == 200
    });
    for path in ["/api/keys", "/api/keys/carol", "/api/audit"] {
        let r = exchange(admin, &raw_request("GET", path, Some(&admin_token), None));
        seen.answer(path, &r);
    }

    // The commands on the same stores.
    let out = run_cmd(&mut seen, &["keys", "list", "--keys", &pg_url]);
    seen.add("keys list", out);
    let out = run_cmd(&mut seen, &["keys", "revoke", "carol", "--keys", &pg_url]);
    seen.add("keys revoke", out);
    // Every line in PostgreSQL, then the reports.
    let lines = || {
        std::fs::read_to_string(&ledger)
            .unwrap_or_default()
            .lines()
            .count() as i64
    };
    eventually("every line is in PostgreSQL", || {
        pg.client()
            .query_one("SELECT count(*) FROM chatgate_ledger", &[])
            .map(|r| r.get::<_, i64>(0) == lines())
            .unwrap_or(false)
    });
    let out = run_cmd(&mut seen, &["usage", "--postgres", &pg_url]);
    seen.add("usage --postgres", out);
    let out = run_cmd(&mut seen, &["usage", "--ledger", ledger.to_str().unwrap()]);
    seen.add("usage --ledger", out);

    // Stopped, so that the last spans and lines are out.
    eventually("spans at the collector", || !otlp.spans().is_empty());
    gw.signal(libc::SIGTERM);
    assert!(gw.wait_exit(Duration::from_secs(30)).is_some());
    seen.add("serve's log", gw.stderr());
    seen.add("the ledger file", std::fs::read_to_string(&ledger).unwrap());
    seen.add("the spans", Value::Array(otlp.spans()).to_string());
    for table in ["chatgate_ledger", "chatgate_audit"] {
        let rows: Vec<String> = pg
            .client()
            .query(&format!("SELECT row_to_json(t)::text FROM {table} t"), &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert!(!rows.is_empty(), "{table} is empty");
        seen.add(table, rows.join("\n"));
    }

    let mut needles: Vec<(String, String)> = [
        ("the provider's key", &provider_key),
        ("the admin token", &admin_token),
        ("the single sign-on secret", &sso_secret),
        ("the Redis password", &redis_password),
        ("the PostgreSQL password", &pg_password),
        ("the signing secret", &signing_secret),
        ("the trace collector's token", &otlp_token),
        ("alice's key", &alice),
        ("broke's key", &broke),
        ("carol's key", &carol),
        ("carol's rotated key", &carol_rotated),
    ]
    .map(|(k, v)| (k.to_owned(), v.clone()))
    .to_vec();
    for (what, secret) in [
        ("alice's key", &alice),
        ("broke's key", &broke),
        ("carol's key", &carol),
        ("carol's rotated key", &carol_rotated),
        ("the admin token", &admin_token),
    ] {
        needles.push((format!("the SHA-256 of {what}"), sha256_hex(secret)));
    }
    let mut leaks = Vec::new();
    for (where_, text) in &seen.0 {
        for (what, needle) in &needles {
            if text.contains(needle.as_str()) {
                leaks.push(format!("{what} in {where_}"));
            }
        }
    }
    assert!(leaks.is_empty(), "secrets leaked: {leaks:#?}");
    // What was searched was real: the log holds the requests and the
    // URLs with their passwords hidden.
    let log = &seen.0.iter().find(|(w, _)| w == "serve's log").unwrap().1;
    assert!(
        log.contains("redis://***@"),
        "the Redis URL is not shown redacted"
    );
    assert!(
        log.contains("starting:") && log.lines().count() > 20,
        "a log of {} lines:\n{log}",
        log.lines().count()
    );
    assert!(seen.0.len() > 30, "{} places searched", seen.0.len());
}
