//! Single sign-on to the console against a real OpenID provider
//! (node-oidc-provider, OpenID certified, from `clients/oidc`, installed by
//! the test command), in headless Chromium, through both binaries:
//! - an administrator signs in and creates a key from the page;
//! - a viewer signs in, sees no way to change anything, and the API refuses
//!   a change even with the session's CSRF token;
//! - an address that is not allowed is refused, and so is an ID token from
//!   a client secret the gateway does not share (the code exchange fails);
//! - signing out ends the session;
//! - a forged state, a state started in another browser, and a state past
//!   `--sso-login-timeout` are refused;
//! - the admin token keeps working beside it;
//! - on an admin listener that serves TLS, the sign-in comes back to an
//!   `https` callback and its session cookie is `Secure`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use chatgate_tests::*;
use serde_json::{Value, json};

const TOKEN: &str = "sso-test-admin-token-0123456789abcdef";
const SECRET: &str = "chatgate-test-secret";

/// node-oidc-provider, killed when dropped.
struct Idp {
    child: Child,
    issuer: String,
}

impl Drop for Idp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn oidc_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/oidc")
}

/// The provider, knowing `redirects` as the client's callback URLs and
/// `secret` as its secret.
fn idp(redirects: &[String], secret: &str) -> Idp {
    let dir = oidc_dir();
    assert!(
        dir.join("node_modules/oidc-provider").exists(),
        "oidc-provider is not installed: run clients/install.sh"
    );
    let mut child = Command::new("node")
        .arg("provider.mjs")
        .current_dir(&dir)
        .env("PORT", "0")
        .env("REDIRECT_URIS", redirects.join(","))
        .env("CLIENT_SECRET", secret)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(
            std::fs::File::create(
                std::env::temp_dir().join(format!("oidc-{}.stderr", std::process::id())),
            )
            .map_or(Stdio::null(), Stdio::from),
        )
        .spawn()
        .expect("node");
    let mut line = String::new();
    use std::io::BufRead as _;
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let issuer = line.trim().to_owned();
    assert!(issuer.starts_with("http://localhost:"), "{issuer:?}");
    Idp { child, issuer }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A gateway whose console signs in at `idp`, its admin listener on `port`.
fn gateway(bin: &str, sim: &Sim, idp: &Idp, port: u16, extra: &[&str]) -> Gw {
    let mut args: Vec<String> = [
        "--admin-listen",
        &format!("127.0.0.1:{port}"),
        "--admin-token-env",
        "CHATGATE_ADMIN_TOKEN",
        "--sso-issuer",
        &idp.issuer,
        "--sso-client-id",
        "chatgate",
        "--sso-client-secret-env",
        "SSO_CLIENT_SECRET",
        "--sso-allowed",
        "@example.com",
        "--sso-admins",
        "admin@example.com",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let mut gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            args,
            env: vec![
                ("CHATGATE_ADMIN_TOKEN".into(), TOKEN.into()),
                ("SSO_CLIENT_SECRET".into(), SECRET.into()),
            ],
            ..GwOptions::default()
        },
    );
    assert_eq!(gw.admin_addr().port(), port);
    gw
}

/// Starts single sign-on from the login page and signs in at the provider
/// as `email` (the development login form takes any password), as a
/// different person would: without the provider's session of the last one.
fn sign_in_at_the_provider(browser: &Browser, idp: &Idp, base: &str, email: &str) {
    browser.go(&format!("{}/.well-known/openid-configuration", idp.issuer));
    browser.cmd("DELETE", "/cookie", None);
    browser.go(&format!("{base}/"));
    click(browser, "a.sso");
    browser.until(
        "the provider's login form",
        PATIENCE,
        "return document.querySelector('input[name=\"login\"]') !== null",
    );
    fill(browser, "input[name='login']", email);
    fill(browser, "input[name='password']", "any password");
    click(browser, "button[type='submit']");
}

/// Waits for the console, or for a page saying why not; its text.
fn landed(browser: &Browser) -> String {
    let text = browser.until(
        "the console or a refusal",
        PATIENCE,
        "if (document.body && document.body.dataset.updated && document.body.dataset.admin) return 'console'; \
         const c = document.querySelector('button[type=\"submit\"]'); \
         if (c && /continue/i.test(c.textContent) && !document.getElementById('login')) { c.click(); return ''; } \
         const m = document.querySelector('.message'); return m && m.textContent",
    );
    text.as_str().unwrap().to_owned()
}

/// A request from the page (the session cookie goes with it): status and
/// JSON body.
fn from_page(browser: &Browser, method: &str, path: &str, body: Option<&str>) -> (u64, Value) {
    let r = browser.js(&format!(
        "const s = new XMLHttpRequest(); s.open('GET', '/api/session', false); s.send(); \
         const csrf = s.status === 200 ? JSON.parse(s.responseText).csrf : ''; \
         const x = new XMLHttpRequest(); x.open({method:?}, {path:?}, false); \
         x.setRequestHeader('X-CSRF-Token', csrf || ''); x.send({body}); \
         return [x.status, x.responseText];",
        body = body.map_or("null".to_owned(), |b| format!("{b:?}")),
    ));
    (
        r[0].as_u64().unwrap(),
        serde_json::from_str(r[1].as_str().unwrap()).unwrap_or(Value::Null),
    )
}

#[test]
fn single_sign_on_in_a_browser() {
    let browser = Browser::start();
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sso");
    std::fs::create_dir_all(&shots).unwrap();
    for bin in RUNTIMES {
        sign_in_and_out(bin, &browser, &shots);
    }
}

/// Single sign-on on an admin listener that serves TLS (one binary: TLS
/// and single sign-on are each tested on both): the provider sends the
/// browser back to the `https` callback the gateway asked for, and the
/// session and the sign-in's state are `Secure` cookies.
#[test]
fn single_sign_on_over_tls() {
    let certs = certs(&["127.0.0.1", "localhost"]);
    let files = tempfile::tempdir().unwrap();
    let cert = files.path().join("cert.pem");
    let key = files.path().join("key.pem");
    std::fs::write(&cert, &certs.cert_pem).unwrap();
    std::fs::write(&key, &certs.key_pem).unwrap();
    let browser = Browser::start_with(&[format!(
        "--ignore-certificate-errors-spki-list={}",
        certs.spki_sha256
    )]);
    let bin = "chatgate-tokio";
    let sim = Sim::start(bin, &[], &[]);
    let port = free_port();
    // The provider knows the https callback only.
    let provider = idp(&[format!("https://127.0.0.1:{port}/sso/callback")], SECRET);
    let _gw = gateway(
        bin,
        &sim,
        &provider,
        port,
        &[
            "--admin-tls-cert",
            cert.to_str().unwrap(),
            "--admin-tls-key",
            key.to_str().unwrap(),
        ],
    );
    let base = format!("https://127.0.0.1:{port}");
    sign_in_at_the_provider(&browser, &provider, &base, "admin@example.com");
    assert_eq!(landed(&browser), "console");
    assert_eq!(browser.js("return location.origin"), base.as_str());
    let session = browser.cookie("chatgate_console");
    assert_eq!(session["secure"], json!(true), "{session}");
}

fn sign_in_and_out(bin: &str, browser: &Browser, shots: &Path) {
    let name = bin.trim_start_matches("chatgate-");
    let sim = Sim::start(bin, &[], &[]);
    let (port, slow_port) = (free_port(), free_port());
    let callback = |p: u16| format!("http://127.0.0.1:{p}/sso/callback");
    let provider = idp(&[callback(port), callback(slow_port)], SECRET);
    let gw = gateway(bin, &sim, &provider, port, &[]);
    let base = format!("http://127.0.0.1:{port}");
    let admin: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    browser.cmd(
        "POST",
        "/window/rect",
        Some(json!({"width": 1400, "height": 1000})),
    );

    // The login page offers single sign-on beside the token.
    browser.go(&format!("{base}/"));
    browser.until(
        "the login page",
        PATIENCE,
        "return document.querySelector('a.sso') !== null",
    );
    browser.screenshot_of(None, &shots.join(format!("{name}-login.png")));

    // An administrator signs in and creates a key from the page.
    sign_in_at_the_provider(browser, &provider, &base, "admin@example.com");
    assert_eq!(landed(browser), "console");
    assert_eq!(
        text_of(browser, "who", "#who"),
        "Signed in as admin@example.com"
    );
    assert_eq!(
        browser.js("return document.cookie"),
        "",
        "the session is HttpOnly"
    );
    click(browser, "#key-new");
    dialog_open(browser, "key-form");
    fill(browser, "#f-name", "from-sso");
    click(browser, "#key-form-save");
    dialog_open(browser, "key-secret");
    let secret = text_of(browser, "the secret", "#secret-value");
    click(browser, "#secret-done");
    let chat = |key: &str| chat_status(gw.addr, key);
    assert_eq!(chat(&secret), 200);
    browser.screenshot_of(None, &shots.join(format!("{name}-admin.png")));
    // The audit trail names the person.
    let trail = request(admin, "GET", "/api/audit", Some(TOKEN), None).json();
    assert_eq!(trail["records"][0]["actor"], "user:admin@example.com");

    // Signing out ends the session: the page asks again, the API refuses.
    click(browser, "header form button[type='submit']");
    browser.until(
        "the login page again",
        PATIENCE,
        "return document.querySelector('a.sso') !== null",
    );
    assert_eq!(from_page(browser, "GET", "/api/keys", None).0, 401);

    // A viewer looks but cannot change.
    sign_in_at_the_provider(browser, &provider, &base, "viewer@example.com");
    assert_eq!(landed(browser), "console");
    assert_eq!(
        text_of(browser, "who", "#who"),
        "Signed in as viewer@example.com (may look, not change)"
    );
    assert_eq!(
        browser.js("return getComputedStyle(document.getElementById('key-new')).display"),
        "none"
    );
    let (status, refused) = from_page(
        browser,
        "POST",
        "/api/keys",
        Some(r#"{"name":"by-viewer"}"#),
    );
    assert_eq!(status, 403, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("may look but not change")
    );
    let (status, _) = from_page(browser, "DELETE", "/api/keys/from-sso", None);
    assert_eq!(status, 403);
    assert_eq!(chat(&secret), 200, "the viewer changed nothing");
    assert_eq!(
        from_page(browser, "GET", "/api/keys", None).0,
        200,
        "but may look"
    );
    browser.screenshot_of(None, &shots.join(format!("{name}-viewer.png")));
    click(browser, "header form button[type='submit']");

    // An address that is not allowed is refused, with the reason.
    sign_in_at_the_provider(browser, &provider, &base, "mallory@elsewhere.org");
    let why = landed(browser);
    assert!(
        why.contains("mallory@elsewhere.org may not enter this console"),
        "{why}"
    );

    // A forged state, and one started in another browser (a sign-in
    // begun without this browser's cookie).
    browser.go(&format!("{base}/sso/callback?code=forged&state=forged"));
    let why = landed(browser);
    assert!(why.contains("not one this gateway started"), "{why}");
    let started = request(admin, "GET", "/sso/login", None, None);
    assert_eq!(started.status, 303);
    let location = started.header("location").unwrap().to_owned();
    let state = location
        .split("state=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap();
    browser.go(&format!("{base}/sso/callback?code=stolen&state={state}"));
    let why = landed(browser);
    assert!(why.contains("started in another browser"), "{why}");

    // The admin token works beside single sign-on.
    assert_eq!(
        request(admin, "GET", "/api/keys", Some(TOKEN), None).status,
        200
    );

    // A sign-in that takes longer than --sso-login-timeout is refused.
    let slow = gateway(
        bin,
        &sim,
        &provider,
        slow_port,
        &["--sso-login-timeout", "2s"],
    );
    let slow_base = format!("http://127.0.0.1:{slow_port}");
    browser.go(&format!(
        "{}/.well-known/openid-configuration",
        provider.issuer
    ));
    browser.cmd("DELETE", "/cookie", None);
    browser.go(&format!("{slow_base}/"));
    click(browser, "a.sso");
    browser.until(
        "the provider's login form",
        PATIENCE,
        "return document.querySelector('input[name=\"login\"]') !== null",
    );
    std::thread::sleep(Duration::from_millis(2500));
    fill(browser, "input[name='login']", "admin@example.com");
    fill(browser, "input[name='password']", "x");
    click(browser, "button[type='submit']");
    let why = landed(browser);
    assert!(why.contains("took too long"), "{why}");
    drop(slow);

    // A gateway whose client secret the provider does not know: the code
    // is refused at the token endpoint, and so is the sign-in.
    no_secret_in_the_log(&gw);
    drop(gw);
    let wrong = idp(&[callback(port)], "another-secret");
    let gw = gateway(bin, &sim, &wrong, port, &[]);
    sign_in_at_the_provider(browser, &wrong, &base, "admin@example.com");
    let why = landed(browser);
    assert!(why.contains("refused the code"), "{why}");
    assert!(!why.contains(SECRET), "{why}");
    no_secret_in_the_log(&gw);
    drop(gw);
}

/// The client secret (sent to the token endpoint, and refused there in
/// the last case) and the admin token are in no line of the gateway's log.
fn no_secret_in_the_log(gw: &Gw) {
    let log = gw.proc.stderr();
    assert!(
        log.contains("single sign-on") || log.contains("signed in to the console"),
        "the sign-ins were not logged:\n{log}"
    );
    for secret in [SECRET, TOKEN] {
        assert!(!log.contains(secret), "{secret} in the log:\n{log}");
    }
}
