//! The admin API (`/api/keys`, `/api/audit`, `/api/session`) through both
//! binaries, driven with curl as an operator would:
//! - a key's whole life (create → use → limit changed → rotate → the old
//!   secret works in its grace, then not → revoke → refused), with the
//!   audit trail matching what was done and holding no secret;
//! - bad input, conflicts, unknown names, wrong methods and bodies too
//!   large get their status with the field named, and change nothing;
//! - a console session must send its CSRF token to change anything, a
//!   bearer token need not;
//! - keys in PostgreSQL, shared by two instances (one of each runtime):
//!   `keys import`, a change on one instance in force on the other within
//!   a second, the CLI on the same store, and an outage of PostgreSQL that
//!   stops no request while the API says it cannot change anything;
//! - with PostgreSQL, a console session survives a restart and works on
//!   every instance, and logging out ends it everywhere.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use chatgate_tests::*;
use serde_json::{Value, json};

const TOKEN: &str = "admin-api-test-token-0123456789abcdef";

cases!(
    a_key_through_its_whole_life,
    bad_input_and_conflicts_change_nothing,
    a_session_needs_its_csrf_token_and_a_bearer_does_not,
    keys_in_postgres_are_shared_by_every_instance,
    console_sessions_outlive_a_restart_and_reach_every_instance,
    with_redis_a_limit_it_cannot_share_is_refused,
);

/// One call of the admin API with curl and the admin token: status and
/// JSON body (`Null` when empty).
fn api(admin: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-o", "-", "-w", "\n%{http_code}", "-X", method])
        .args(["-H", &format!("Authorization: Bearer {TOKEN}")]);
    if let Some(b) = body {
        cmd.args(["-H", "Content-Type: application/json", "--data-binary"])
            .arg(b.to_string());
    }
    cmd.arg(format!("http://{admin}{path}"));
    let out = cmd.output().expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').expect("curl's status line");
    (
        status.trim().parse().expect("a status"),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

fn options(extra: &[&str]) -> GwOptions {
    let mut args: Vec<String> = vec![
        "--admin-listen".into(),
        "127.0.0.1:0".into(),
        "--admin-token-env".into(),
        "CHATGATE_ADMIN_TOKEN".into(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    GwOptions {
        args,
        env: vec![("CHATGATE_ADMIN_TOKEN".into(), TOKEN.into())],
        ..GwOptions::default()
    }
}

fn audit_file(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("ledger.audit.jsonl")).unwrap_or_default()
}

/// No secret minted in this test appears in `text`, nor its digest.
fn holds_no_secret(text: &str, secrets: &[&str]) {
    for s in secrets {
        assert!(!text.contains(s), "a secret in: {text}");
        let digest = chatgate_core::key_hash_hex(s);
        assert!(!text.contains(&digest), "a secret's digest in: {text}");
        assert!(
            !text.contains(&digest[..16]),
            "a secret's digest in: {text}"
        );
    }
}

fn a_key_through_its_whole_life(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let mut gw = Gw::start(bin, &sim.url(), options(&[]));
    let admin = gw.admin_addr();

    // Created with limits: 201 and the secret, this once.
    let (status, created) = api(
        admin,
        "POST",
        "/api/keys",
        Some(&json!({"name": "team-a", "rpm": 100, "budget_usd": 5, "max_in_flight": 4})),
    );
    assert_eq!(status, 201, "{created}");
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("sk-cg-"));
    assert_eq!(created["rpm"], 100);
    assert_eq!(created["budget"]["usd"], "5.000000000");
    assert_eq!(created["state"], "active");
    // In force on the public listener at once.
    assert_eq!(chat_status(gw.addr, &secret), 200);
    let (_, list) = api(admin, "GET", "/api/keys", None);
    let names: Vec<&str> = list["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["test", "team-a"]);
    let (_, one) = api(admin, "GET", "/api/keys/team-a", None);
    assert_eq!(one["max_in_flight"], 4);
    assert_eq!(one["hours"].as_array().unwrap().len(), 24);
    assert!(one["last_used"].is_string(), "{one}");
    assert!(one.get("secret").is_none() && one.get("sha256").is_none());

    // The limit lowered: the third request in the minute is refused.
    let (status, changed) = api(
        admin,
        "PATCH",
        "/api/keys/team-a",
        Some(&json!({"rpm": 2, "budget_usd": null})),
    );
    assert_eq!(status, 200, "{changed}");
    assert_eq!(
        (changed["rpm"].clone(), changed["budget"].clone()),
        (json!(2), Value::Null)
    );
    let statuses: Vec<u16> = (0..3).map(|_| chat_status(gw.addr, &secret)).collect();
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    api(
        admin,
        "PATCH",
        "/api/keys/team-a",
        Some(&json!({"rpm": 100_000})),
    );
    // The bucket keeps its level and refills at the new rate.
    eventually("the raised limit admits again", || {
        chat_status(gw.addr, &secret) == 200
    });

    // Rotated with a 3 s grace: both secrets work, then only the new one.
    let (status, rotated) = api(
        admin,
        "POST",
        "/api/keys/team-a/rotate",
        Some(&json!({"grace": "3s"})),
    );
    assert_eq!(status, 200, "{rotated}");
    let fresh = rotated["secret"].as_str().unwrap().to_owned();
    assert_ne!(fresh, secret);
    assert_eq!(rotated["state"], "rotating");
    assert!(rotated["previous_secret_expires"].is_string());
    assert_eq!(rotated["rpm"], 100_000, "the limits stay");
    assert_eq!(
        chat_status(gw.addr, &secret),
        200,
        "the old secret in its grace"
    );
    assert_eq!(chat_status(gw.addr, &fresh), 200);
    eventually("the old secret refused after its grace", || {
        chat_status(gw.addr, &secret) == 401
    });
    assert_eq!(chat_status(gw.addr, &fresh), 200);

    // Revoked: 204, refused at once.
    let (status, _) = api(admin, "DELETE", "/api/keys/team-a", None);
    assert_eq!(status, 204);
    assert_eq!(chat_status(gw.addr, &fresh), 401);
    let (status, gone) = api(admin, "GET", "/api/keys/team-a", None);
    assert_eq!(
        (status, gone["state"].as_str()),
        (200, Some("revoked")),
        "its hours stay: {gone}"
    );

    // The trail, newest first, says what was done and by whom.
    let (status, trail) = api(admin, "GET", "/api/audit?limit=10", None);
    assert_eq!(status, 200);
    let records = trail["records"].as_array().unwrap();
    let actions: Vec<&str> = records
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["revoke", "rotate", "update", "update", "create"]);
    for r in records {
        assert_eq!(r["actor"], "token:CHATGATE_ADMIN_TOKEN");
        assert_eq!(r["address"], "127.0.0.1");
        assert_eq!(r["key"], "team-a");
    }
    let update = &records[3]["changes"];
    assert_eq!(
        update,
        &json!([
            {"field": "rpm", "before": 100, "after": 2},
            {"field": "budget_usd", "before": 5.0, "after": null},
        ])
    );
    // Paginated: two at a time, then from where the page ended.
    let (_, page) = api(admin, "GET", "/api/audit?limit=2", None);
    assert_eq!(page["records"].as_array().unwrap().len(), 2);
    let next = page["next_before"].as_u64().unwrap();
    let (_, rest) = api(
        admin,
        "GET",
        &format!("/api/audit?limit=10&before={next}"),
        None,
    );
    assert_eq!(rest["records"].as_array().unwrap().len(), 3);
    assert_eq!(rest["records"][0]["action"], "update");
    // The file beside the ledger holds the same, and no secret.
    let file = audit_file(gw.dir.path());
    assert_eq!(file.lines().count(), 5);
    holds_no_secret(&file, &[&secret, &fresh]);
    holds_no_secret(&trail.to_string(), &[&secret, &fresh]);
    let keys_file = std::fs::read_to_string(gw.dir.path().join("keys.toml")).unwrap();
    assert!(!keys_file.contains("team-a"), "revoked from the file");
}

fn bad_input_and_conflicts_change_nothing(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let mut gw = Gw::start(bin, &sim.url(), options(&[]));
    let admin = gw.admin_addr();
    let keys_path = gw.dir.path().join("keys.toml");
    let (status, _) = api(admin, "POST", "/api/keys", Some(&json!({"name": "team-b"})));
    assert_eq!(status, 201);
    let before = std::fs::read_to_string(&keys_path).unwrap();
    let trail = audit_file(gw.dir.path());
    let refused =
        |method: &str, path: &str, body: Option<Value>, status: u16, field: Option<&str>| {
            let (got, answer) = api(admin, method, path, body.as_ref());
            assert_eq!(got, status, "{method} {path}: {answer}");
            assert_eq!(answer["error"]["field"].as_str(), field, "{answer}");
            assert!(
                answer["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty())
            );
        };
    refused(
        "POST",
        "/api/keys",
        Some(json!({"name": "team-b"})),
        409,
        Some("name"),
    );
    refused(
        "POST",
        "/api/keys",
        Some(json!({"rpm": 5})),
        400,
        Some("name"),
    );
    refused(
        "POST",
        "/api/keys",
        Some(json!({"name": "bad name"})),
        400,
        Some("name"),
    );
    refused(
        "POST",
        "/api/keys",
        Some(json!({"name": "c", "rpm": 0})),
        400,
        Some("rpm"),
    );
    refused(
        "POST",
        "/api/keys",
        Some(json!({"name": "c", "tpm": "many"})),
        400,
        Some("tpm"),
    );
    refused(
        "POST",
        "/api/keys",
        Some(json!({"name": "c", "budget_usd": -1})),
        400,
        Some("budget_usd"),
    );
    refused(
        "POST",
        "/api/keys",
        Some(json!({"name": "c", "budget_period": "year"})),
        400,
        Some("budget_period"),
    );
    refused(
        "POST",
        "/api/keys",
        Some(json!({"name": "c", "models": ["no-such-model"]})),
        400,
        Some("models"),
    );
    refused(
        "POST",
        "/api/keys",
        Some(json!({"name": "c", "sha256": "00"})),
        400,
        Some("sha256"),
    );
    refused(
        "POST",
        "/api/keys",
        Some(json!(["not", "an", "object"])),
        400,
        Some("body"),
    );
    refused(
        "PATCH",
        "/api/keys/team-b",
        Some(json!({})),
        400,
        Some("body"),
    );
    refused(
        "PATCH",
        "/api/keys/team-b",
        Some(json!({"max_in_flight": 0})),
        400,
        Some("max_in_flight"),
    );
    refused(
        "PATCH",
        "/api/keys/nobody",
        Some(json!({"rpm": 5})),
        404,
        Some("name"),
    );
    refused("DELETE", "/api/keys/nobody", None, 404, Some("name"));
    refused("POST", "/api/keys/nobody/rotate", None, 404, Some("name"));
    refused(
        "POST",
        "/api/keys/team-b/rotate",
        Some(json!({"grace": "soon"})),
        400,
        Some("grace"),
    );
    refused(
        "PUT",
        "/api/keys/team-b",
        Some(json!({"rpm": 5})),
        405,
        None,
    );
    refused("GET", "/api/audit?limit=zero", None, 400, Some("limit"));
    // Not JSON at all, and a body over the cap.
    let (status, answer) = raw_api(admin, "POST", "/api/keys", "{name: team-c");
    assert_eq!(
        (status, answer["error"]["field"].as_str()),
        (400, Some("body"))
    );
    let big = format!("{{\"name\":\"c\",\"models\":[\"{}\"]}}", "m".repeat(20_000));
    let (status, _) = raw_api(admin, "POST", "/api/keys", &big);
    assert_eq!(status, 413);
    // Without the token: 401, nothing read.
    let anon = request(
        admin,
        "POST",
        "/api/keys",
        None,
        Some(r#"{"name":"team-d"}"#),
    );
    assert_eq!(anon.status, 401);
    assert_eq!(
        std::fs::read_to_string(&keys_path).unwrap(),
        before,
        "the keys file is as it was"
    );
    assert_eq!(audit_file(gw.dir.path()), trail, "nothing was recorded");
    let (_, list) = api(admin, "GET", "/api/keys", None);
    assert_eq!(list["keys"].as_array().unwrap().len(), 2);
}

/// A request with the admin token and a body as given (not through curl,
/// which would not send a malformed body as is).
fn raw_api(admin: SocketAddr, method: &str, path: &str, body: &str) -> (u16, Value) {
    let r = request(admin, method, path, Some(TOKEN), Some(body));
    (
        r.status,
        serde_json::from_slice(&r.body).unwrap_or(Value::Null),
    )
}

fn a_session_needs_its_csrf_token_and_a_bearer_does_not(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let mut gw = Gw::start(bin, &sim.url(), options(&[]));
    let admin = gw.admin_addr();
    let cookie = log_in(admin);
    let with_cookie = |method: &str, path: &str, csrf: Option<&str>, body: &str| {
        let mut c = Conn::open(admin);
        let csrf = csrf.map_or(String::new(), |t| format!("X-CSRF-Token: {t}\r\n"));
        c.send(
            format!(
                "{method} {path} HTTP/1.1\r\nHost: a\r\nCookie: {cookie}\r\n{csrf}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
        let r = c.response();
        (
            r.status,
            serde_json::from_slice::<Value>(&r.body).unwrap_or(Value::Null),
        )
    };
    let (status, session) = with_cookie("GET", "/api/session", None, "");
    assert_eq!(status, 200);
    assert_eq!(session["actor"], "token:CHATGATE_ADMIN_TOKEN");
    assert_eq!(session["admin"], true);
    let csrf = session["csrf"].as_str().unwrap().to_owned();
    // Reading needs no CSRF token; changing does.
    assert_eq!(with_cookie("GET", "/api/keys", None, "").0, 200);
    let (status, refused) = with_cookie("POST", "/api/keys", None, r#"{"name":"from-page"}"#);
    assert_eq!(
        (status, refused["error"]["type"].as_str()),
        (403, Some("csrf"))
    );
    let (status, _) = with_cookie(
        "POST",
        "/api/keys",
        Some("0".repeat(64).as_str()),
        r#"{"name":"from-page"}"#,
    );
    assert_eq!(status, 403);
    let (status, _) = with_cookie("DELETE", "/api/keys/test", None, "");
    assert_eq!(status, 403);
    assert_eq!(
        chat_status(gw.addr, &gw.key),
        200,
        "the key refused to be revoked works"
    );
    let (status, made) = with_cookie("POST", "/api/keys", Some(&csrf), r#"{"name":"from-page"}"#);
    assert_eq!(status, 201, "{made}");
    // A bearer token needs none.
    let (status, _) = api(admin, "POST", "/api/keys/from-page/rotate", None);
    assert_eq!(status, 200);
    // The session's changes are recorded as the token's.
    let (_, trail) = api(admin, "GET", "/api/audit", None);
    assert_eq!(trail["records"].as_array().unwrap().len(), 2);
}

/// A gateway with its keys in PostgreSQL at `url`.
struct PgGw {
    _proc: Proc,
    addr: SocketAddr,
    admin: SocketAddr,
    _dir: tempfile::TempDir,
}

impl PgGw {
    fn start(bin: &str, sim: &Sim, url: &str) -> PgGw {
        let dir = tempfile::tempdir().unwrap();
        let args: Vec<String> = [
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &sim.url(),
            "--keys",
            url,
            "--ledger",
            &dir.path().join("ledger.jsonl").to_string_lossy(),
            "--admin-listen",
            "127.0.0.1:0",
            "--admin-token-env",
            "CHATGATE_ADMIN_TOKEN",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let env = [("CHATGATE_ADMIN_TOKEN".to_owned(), TOKEN.to_owned())];
        let mut proc = Proc::spawn(bin, &args, &env, &dir.path().join("gateway.stderr"));
        let addr = address_from(&proc.line());
        let admin = proc
            .line()
            .trim()
            .trim_start_matches("chatgate admin listening on http://")
            .parse()
            .unwrap();
        PgGw {
            _proc: proc,
            addr,
            admin,
            _dir: dir,
        }
    }
}

fn other(bin: &str) -> &'static str {
    if bin == "chatgate-smol" {
        "chatgate-tokio"
    } else {
        "chatgate-smol"
    }
}

/// Waits at most a second (and a little, for a loaded machine) for `f`.
fn within_a_second(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_millis(1500);
    while !f() {
        assert!(Instant::now() < deadline, "not within a second: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn keys_in_postgres_are_shared_by_every_instance(bin: &str) {
    let mut pg = PgServer::start();
    let url = pg.url();
    let sim = Sim::start(bin, &[], &[]);
    // A keys file imported into PostgreSQL, hashes and all; twice is fine.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.toml").to_string_lossy().into_owned();
    let old = mint(bin, dir.path(), "from-file", Some(50), None);
    for _ in 0..2 {
        let (code, _, err) = run(
            bin,
            &["keys", "import", "--from", &file, "--keys", &url],
            &[],
        );
        assert_eq!(code, 0, "{err}");
    }
    let a = PgGw::start(bin, &sim, &url);
    let b = PgGw::start(other(bin), &sim, &url);
    assert_eq!(chat_status(a.addr, &old), 200);
    assert_eq!(chat_status(b.addr, &old), 200);

    // Made on A, in force on B within a second.
    let (status, made) = api(
        a.admin,
        "POST",
        "/api/keys",
        Some(&json!({"name": "shared"})),
    );
    assert_eq!(status, 201, "{made}");
    let secret = made["secret"].as_str().unwrap().to_owned();
    within_a_second("a new key on the other instance", || {
        chat_status(b.addr, &secret) == 200
    });
    api(
        a.admin,
        "PATCH",
        "/api/keys/shared",
        Some(&json!({"rpm": 1})),
    );
    within_a_second("a new limit on the other instance", || {
        api(b.admin, "GET", "/api/keys/shared", None).1["rpm"] == 1
    });
    api(
        a.admin,
        "PATCH",
        "/api/keys/shared",
        Some(&json!({"rpm": 100_000})),
    );
    let (_, rotated) = api(
        b.admin,
        "POST",
        "/api/keys/shared/rotate",
        Some(&json!({"grace": "3s"})),
    );
    let fresh = rotated["secret"].as_str().unwrap().to_owned();
    within_a_second("a rotation on the other instance", || {
        chat_status(a.addr, &fresh) == 200
    });
    assert_eq!(
        chat_status(a.addr, &secret),
        200,
        "the old secret in its grace"
    );
    eventually("the old secret refused after its grace", || {
        chat_status(a.addr, &secret) == 401 && chat_status(b.addr, &secret) == 401
    });
    // The CLI works on the same store, and is recorded as its user.
    let (code, listed, err) = run(bin, &["keys", "list", "--keys", &url], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        listed.contains("shared") && listed.contains("from-file"),
        "{listed}"
    );
    let (code, _, err) = run(
        bin,
        &["keys", "revoke", "shared", "--keys", &url],
        &[("USER", "ops")],
    );
    assert_eq!(code, 0, "{err}");
    within_a_second("a revocation on both instances", || {
        chat_status(a.addr, &fresh) == 401 && chat_status(b.addr, &fresh) == 401
    });
    // One trail for the cluster, in PostgreSQL, on either instance.
    let (_, trail) = api(b.admin, "GET", "/api/audit", None);
    let who: Vec<(String, String)> = trail["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["action"].as_str().unwrap().to_owned(),
                r["actor"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let tok = "token:CHATGATE_ADMIN_TOKEN".to_owned();
    assert_eq!(
        who,
        [
            ("revoke".to_owned(), "cli:ops".to_owned()),
            ("rotate".into(), tok.clone()),
            ("update".into(), tok.clone()),
            ("update".into(), tok.clone()),
            ("create".into(), tok),
            ("import".into(), who[5].1.clone()),
        ]
    );
    holds_no_secret(&trail.to_string(), &[&old, &secret, &fresh]);

    // PostgreSQL goes away: both instances keep admitting with the keys
    // they hold; the API says it cannot change anything.
    pg.stop();
    for _ in 0..3 {
        assert_eq!(chat_status(a.addr, &old), 200);
        assert_eq!(chat_status(b.addr, &old), 200);
    }
    let (status, down) = api(
        a.admin,
        "POST",
        "/api/keys",
        Some(&json!({"name": "during"})),
    );
    assert_eq!(status, 503, "{down}");
    let (status, _) = api(a.admin, "GET", "/api/keys", None);
    assert_eq!(status, 200, "the keys in force are listed");
    // Back: a change made while an instance was reconnecting reaches it.
    pg.restart();
    let mut made = (0, Value::Null);
    eventually("PostgreSQL takes changes again", || {
        made = api(
            b.admin,
            "POST",
            "/api/keys",
            Some(&json!({"name": "after"})),
        );
        made.0 == 201
    });
    let after = made.1["secret"].as_str().unwrap().to_owned();
    eventually("the other instance reconnected and read it", || {
        chat_status(a.addr, &after) == 200
    });
}

/// Logs in to the console at `admin` with the token: the session cookie.
fn log_in(admin: SocketAddr) -> String {
    let form = format!("token={TOKEN}");
    let mut c = Conn::open(admin);
    c.send(
        format!(
            "POST /login HTTP/1.1\r\nHost: a\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
            form.len()
        )
        .as_bytes(),
    );
    let r = c.response();
    assert_eq!(r.status, 303);
    r.header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned()
}

/// A request with the session cookie: its status.
fn with_cookie(admin: SocketAddr, method: &str, path: &str, cookie: &str) -> u16 {
    let mut c = Conn::open(admin);
    c.send(
        format!(
            "{method} {path} HTTP/1.1\r\nHost: a\r\nCookie: {cookie}\r\nContent-Length: 0\r\n\r\n"
        )
        .as_bytes(),
    );
    c.response().status
}

fn console_sessions_outlive_a_restart_and_reach_every_instance(bin: &str) {
    let pg = PgServer::start();
    let url = pg.url();
    let sim = Sim::start(bin, &[], &[]);
    let a = PgGw::start(bin, &sim, &url);
    let b = PgGw::start(other(bin), &sim, &url);
    let cookie = log_in(a.admin);
    // Written before the login's answer: the other instance takes it at
    // its next read of the store.
    assert_eq!(with_cookie(a.admin, "GET", "/api/session", &cookie), 200);
    eventually("the session on the other instance", || {
        with_cookie(b.admin, "GET", "/api/session", &cookie) == 200
    });
    // A restart forgets nothing.
    drop(a);
    let a = PgGw::start(bin, &sim, &url);
    assert_eq!(with_cookie(a.admin, "GET", "/api/overview", &cookie), 200);
    // The store holds digests, never a session's id.
    let id = cookie.split_once('=').unwrap().1.to_owned();
    let rows: Vec<String> = pg
        .client()
        .query("SELECT id_sha256 FROM chatgate_sessions", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(rows.len(), 1);
    assert!(rows[0].len() == 64 && rows[0] != id);
    // Logging out on one instance ends it on every one.
    assert_eq!(with_cookie(b.admin, "POST", "/logout", &cookie), 303);
    assert_eq!(with_cookie(b.admin, "GET", "/api/session", &cookie), 401);
    eventually("the session ended on the other instance", || {
        with_cookie(a.admin, "GET", "/api/session", &cookie) == 401
    });
}

/// With limits shared through Redis, a limit above what its script computes
/// exactly is refused by the API (every instance would refuse the keys).
fn with_redis_a_limit_it_cannot_share_is_refused(bin: &str) {
    let redis = RedisServer::start();
    let sim = Sim::start(bin, &[], &[]);
    let url = redis.url();
    let mut gw = Gw::start(bin, &sim.url(), options(&["--redis", &url]));
    let admin = gw.admin_addr();
    let (status, answer) = api(
        admin,
        "POST",
        "/api/keys",
        Some(&json!({"name": "huge", "tpm": 100_000_000_000u64})),
    );
    assert_eq!(
        (status, answer["error"]["field"].as_str()),
        (400, Some("tpm")),
        "{answer}"
    );
    let (status, _) = api(
        admin,
        "PATCH",
        "/api/keys/test",
        Some(&json!({"rpm": 100_000_000_000u64})),
    );
    assert_eq!(status, 400);
    assert_eq!(chat_status(gw.addr, &gw.key), 200, "the keys in force stay");
}
