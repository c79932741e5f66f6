//! The operator's console in a real browser: headless Chromium driven over
//! WebDriver (Debian's `chromium` and `chromium-driver`, installed by the
//! test command), against both binaries under a small load.
//!
//! Checked: the page loads with no console error and no request to
//! another origin; each key's figures equal its ledger lines'; a key pushed
//! over its budget shows it within 10 s without a reload; an endpoint that
//! hangs up on every connection shows as ejected; without the token the page and its
//! data are refused; the tables work with the keyboard and every chart has
//! a text equivalent. A screenshot of each view goes to the test's output
//! directory (`target/tmp/console/`). Without a browser: the console off,
//! bad token settings, the login session, a restart, and two instances
//! sharing Redis.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chatgate_tests::*;
use serde_json::{Value, json};

const TOKEN: &str = "console-test-token-0123456789abcdef";

cases!(
    without_a_token_the_console_is_off_and_says_how_to_turn_it_on,
    a_bad_admin_token_setting_refuses_to_start,
    the_login_form_opens_a_strict_session_and_logout_ends_it,
    after_a_restart_the_console_reads_its_figures_from_the_ledger,
    with_redis_and_postgres_every_console_shows_the_cluster,
    wrong_tokens_make_their_address_wait,
);

fn shots_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("console");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A gateway with the console on: keys `test`, `bob` (no budget) and
/// `alice` (a budget of a tenth of a cent a day); endpoints `sim` and
/// `dead` (a port nobody listens on).
fn gateway(bin: &str, sim: &Sim) -> Gw {
    let dir = tempfile::tempdir().unwrap();
    // The load runs at up to 20 requests a second: far from its limits.
    let key = mint(bin, dir.path(), "test", Some(100_000), Some(100_000_000));
    let bob = mint(bin, dir.path(), "bob", None, None);
    let keys = dir.path().join("keys.toml").to_string_lossy().into_owned();
    let (code, out, err) = run(
        bin,
        &[
            "keys",
            "new",
            "--keys",
            &keys,
            "--name",
            "alice",
            "--budget-usd",
            "0.001",
            "--budget-period",
            "day",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let alice = out.lines().next().expect("alice's key").to_owned();
    // An endpoint that hangs up on every connection (kept listening, so
    // that no other test can take its port).
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            drop(conn);
        }
    });
    let config = dir.path().join("chatgate.toml");
    std::fs::write(
        &config,
        format!(
            "[[upstream]]\nname = \"sim\"\nurl = \"{}\"\n\n[[upstream]]\nname = \"dead\"\nurl = \"http://{dead}/v1\"\n",
            sim.url()
        ),
    )
    .unwrap();
    let opts = console_options(vec![
        "--config".into(),
        config.to_string_lossy().into_owned(),
    ]);
    let mut gw = Gw::start_with_keys(bin, "", opts, dir, key);
    gw.keys.insert("bob".into(), bob);
    gw.keys.insert("alice".into(), alice);
    gw
}

/// Waits out UTC midnight when it is less than `margin` away: the tests
/// compare the page's "today" with the ledger's.
fn clear_of_midnight(margin: Duration) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let left = Duration::from_secs(86_400 - now.as_secs() % 86_400);
    if left < margin {
        std::thread::sleep(left + Duration::from_secs(1));
    }
}

/// Sums of a key's ledger lines of today (UTC): requests, tokens, cost.
fn ledger_today(gw: &Gw) -> std::collections::BTreeMap<String, [u64; 6]> {
    let today = chatgate_core::rfc3339_ms(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64,
    )[..10]
        .to_owned();
    let mut sums = std::collections::BTreeMap::new();
    for r in gw.ledger() {
        if !r.ts.starts_with(&today) {
            continue;
        }
        let s: &mut [u64; 6] = sums.entry(r.key.clone()).or_default();
        for (slot, v) in s.iter_mut().zip([
            1,
            r.prompt_tokens,
            r.completion_tokens,
            r.reasoning_tokens,
            r.cached_tokens,
            r.cost_nano_usd,
        ]) {
            *slot += v;
        }
    }
    sums
}

/// A nano-dollar amount as the page writes it.
fn usd(nano: u64) -> String {
    let frac = format!("{:09}", nano % 1_000_000_000);
    let mut frac = frac.trim_end_matches('0').to_owned();
    while frac.len() < 2 {
        frac.push('0');
    }
    format!("{}.{frac}", nano / 1_000_000_000)
}

/// The keys table as the page shows it: per key, field → text.
const KEYS_TABLE: &str = r#"
    const rows = {};
    for (const tr of document.querySelectorAll('#keys-table tbody tr[data-key]')) {
        const r = {};
        for (const td of tr.querySelectorAll('td[data-field]')) r[td.dataset.field] = td.textContent;
        r.class = tr.className;
        rows[tr.dataset.key] = r;
    }
    return rows;"#;

#[test]
fn the_console_in_a_browser_shows_the_ledger_limits_and_providers() {
    let shots = shots_dir();
    let browser = Browser::start();
    for bin in RUNTIMES {
        console_in_a_browser(bin, &browser, &shots);
    }
}

#[test]
fn the_console_manages_keys_in_a_browser() {
    let shots = shots_dir();
    let browser = Browser::start();
    for bin in RUNTIMES {
        console_manages_keys(bin, &browser, &shots);
    }
}

fn notice_is(browser: &Browser, text: &str) {
    browser.until(
        &format!("the notice {text:?}"),
        PATIENCE,
        &format!("return document.getElementById('key-notice').textContent === {text:?}"),
    );
}

fn console_manages_keys(bin: &str, browser: &Browser, shots: &Path) {
    let name = bin.trim_start_matches("chatgate-");
    let sim = Sim::start(bin, &[], &[]);
    let mut gw = console_gateway(bin, &sim);
    let admin = gw.admin_addr();
    let base = format!("http://{admin}");
    browser.cmd(
        "POST",
        "/window/rect",
        Some(json!({"width": 1400, "height": 1000})),
    );
    browser.go(&format!("{base}/"));
    browser.js(&format!(
        "document.getElementById('token').value = '{TOKEN}'; document.getElementById('login').submit();"
    ));
    browser.until(
        "an administrator's session",
        PATIENCE,
        "return document.body.dataset.admin === 'true'",
    );
    let who = text_of(browser, "who is signed in", "#who");
    assert_eq!(who, "Signed in as CONSOLE_TEST_TOKEN");

    // A refusal is shown in the form, naming the field; nothing is made.
    click(browser, "#key-new");
    dialog_open(browser, "key-form");
    fill(browser, "#f-name", "web team");
    click(browser, "#key-form-save");
    let refused = text_of(browser, "the form's refusal", "#key-form-message");
    assert!(
        refused.starts_with("name: 'web team' is not a key name"),
        "{refused}"
    );

    // Created: the secret shown once, in a dialog that warns so.
    fill(browser, "#f-name", "web-team");
    fill(browser, "#f-rpm", "30");
    fill(browser, "#f-budget", "3");
    click(browser, "#key-form-save");
    dialog_open(browser, "key-secret");
    let secret = text_of(browser, "the new secret", "#secret-value");
    assert!(secret.starts_with("sk-cg-"), "{secret}");
    let warning = text_of(browser, "the warning", "#key-secret .warning");
    assert!(warning.contains("only time it is shown"), "{warning}");
    click(browser, "#secret-copy");
    let copied = text_of(browser, "the copy", "#secret-copied");
    assert!(
        copied.contains("Cop") || copied.contains("Select"),
        "{copied}"
    );
    browser.screenshot_of(None, &shots.join(format!("{name}-secret.png")));
    click(browser, "#secret-done");
    assert_eq!(
        browser.js("return document.getElementById('secret-value').value"),
        ""
    );
    let chat = |key: &str| chat_status(gw.addr, key);
    assert_eq!(chat(&secret), 200);

    // Filtered to it.
    browser.until(
        "the new key's row",
        PATIENCE,
        "return document.querySelector('#keys-table tr[data-key=\"web-team\"]')",
    );
    fill(browser, "#key-filter", "web");
    browser.until(
        "only the new key",
        PATIENCE,
        "const rows = [...document.querySelectorAll('#keys-table tbody tr[data-key]')].map(r => r.dataset.key); \
         return rows.length === 1 && rows[0] === 'web-team'",
    );
    browser.screenshot_of(
        Some("#keys"),
        &shots.join(format!("{name}-keys-manage.png")),
    );

    // Edited: only what changed is sent, so the budget stays as it was.
    click(browser, "#keys-table tr[data-key='web-team'] .key-edit");
    dialog_open(browser, "key-form");
    assert_eq!(text_of(browser, "the loaded limit", "#f-rpm"), "30");
    fill(browser, "#f-rpm", "5");
    browser.screenshot_of(None, &shots.join(format!("{name}-key-edit.png")));
    click(browser, "#key-form-save");
    notice_is(browser, "Saved web-team.");
    let view = request(admin, "GET", "/api/keys/web-team", Some(TOKEN), None).json();
    assert_eq!(
        (view["rpm"].clone(), view["budget"]["usd"].clone()),
        (json!(5), json!("3.000000000"))
    );

    // Rotated with no grace: the old secret refused, the new one works.
    click(browser, "#keys-table tr[data-key='web-team'] .key-rotate");
    dialog_open(browser, "key-confirm");
    fill(browser, "#f-grace", "0s");
    click(browser, "#key-confirm-ok");
    dialog_open(browser, "key-secret");
    let fresh = text_of(browser, "the rotated secret", "#secret-value");
    assert_ne!(fresh, secret);
    click(browser, "#secret-done");
    eventually("the old secret refused", || chat(&secret) == 401);
    assert_eq!(chat(&fresh), 200);

    // Revoked.
    click(browser, "#keys-table tr[data-key='web-team'] .key-revoke");
    dialog_open(browser, "key-confirm");
    browser.screenshot_of(None, &shots.join(format!("{name}-revoke.png")));
    click(browser, "#key-confirm-ok");
    notice_is(browser, "Revoked web-team.");
    assert_eq!(chat(&fresh), 401);

    // The trail shows each change, newest first, and no secret.
    let actions = browser.until(
        "the audit trail",
        PATIENCE,
        "const a = [...document.querySelectorAll('#audit-table td[data-field=\"action\"]')].map(t => t.textContent); \
         return a.length >= 4 && a",
    );
    assert_eq!(actions, json!(["revoke", "rotate", "update", "create"]));
    let trail = text_of(browser, "the trail's text", "#audit-table tbody");
    assert!(trail.contains("rpm 30 → 5"), "{trail}");
    assert!(!trail.contains(&secret) && !trail.contains(&fresh));
    browser.screenshot_of(Some("#audit"), &shots.join(format!("{name}-audit.png")));
    drop(gw);
}

fn console_in_a_browser(bin: &str, browser: &Browser, shots: &Path) {
    clear_of_midnight(Duration::from_secs(240));
    let name = bin.trim_start_matches("chatgate-");
    let sim = Sim::start(bin, &[], &[]);
    let mut gw = gateway(bin, &sim);
    let admin = gw.admin_addr();
    let base = format!("http://{admin}");

    // Without the token: the page is the login form, its data refused.
    let page = request(admin, "GET", "/", None, None);
    assert_eq!(page.status, 401);
    let text = String::from_utf8_lossy(&page.body);
    assert!(text.contains("name=\"token\"") && !text.contains("keys-table"));
    let csp = page.header("content-security-policy").unwrap_or("");
    assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'self'"));
    for path in ["/api/overview", "/api/keys/test"] {
        assert_eq!(
            request(admin, "GET", path, None, None).status,
            401,
            "{path}"
        );
        assert_eq!(
            request(admin, "GET", path, Some("not-the-admin-token-at-all"), None).status,
            401
        );
    }
    assert_eq!(
        request(admin, "GET", "/api/overview", Some(TOKEN), None).status,
        200
    );
    // The scrapers' endpoints stay open.
    assert_eq!(request(admin, "GET", "/metrics", None, None).status, 200);
    // The public port never serves the console.
    assert_eq!(request(gw.addr, "GET", "/", None, None).status, 404);

    // A small load: two keys, streamed and not, until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let stop = Arc::clone(&stop);
        let (addr, test_key) = (gw.addr, gw.key.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let body = if n.is_multiple_of(3) {
                    stream_body("")
                } else {
                    body("")
                };
                let r = request(
                    addr,
                    "POST",
                    "/v1/chat/completions",
                    Some(&test_key),
                    Some(&body),
                );
                assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
                n += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            n
        })
    };

    // Log in through the form: a wrong token first.
    browser.cmd(
        "POST",
        "/window/rect",
        Some(json!({"width": 1400, "height": 1000})),
    );
    browser.go(&format!("{base}/"));
    browser.screenshot_of(None, &shots.join(format!("{name}-login.png")));
    browser.js(&format!(
        "document.getElementById('token').value = 'wrong-{TOKEN}'; document.getElementById('login').submit();"
    ));
    browser.until(
        "the refusal",
        PATIENCE,
        "return document.querySelector('.message') && document.querySelector('.message').textContent",
    );
    browser.js(&format!(
        "document.getElementById('token').value = '{TOKEN}'; document.getElementById('login').submit();"
    ));
    browser.until(
        "the console",
        PATIENCE,
        "return document.body && document.body.dataset.updated",
    );
    // The session cookie is not readable by script.
    assert_eq!(browser.js("return document.cookie"), "");
    // The login page's 401s are behind us; from here on, nothing may fail.
    let _ = browser.log();
    browser.go(&format!("{base}/"));
    browser.until(
        "the console",
        PATIENCE,
        "return document.body && document.body.dataset.updated",
    );

    // The endpoint nobody listens on is ejected, and shows as ejected.
    browser.until(
        "the dead endpoint shown as ejected",
        PATIENCE,
        "const td = document.querySelector('#providers-table tr[data-endpoint=\"dead\"] td[data-field=\"state\"]'); \
         return td && td.textContent.startsWith('ejected') && td.textContent",
    );
    let sim_row = browser.js(
        "return document.querySelector('#providers-table tr[data-endpoint=\"sim\"] td[data-field=\"state\"]').textContent",
    );
    assert_eq!(sim_row, "healthy");

    // Push alice over her budget: requests until the budget refuses one.
    browser.js("window.notReloaded = true;");
    let alice = read_key(&gw, "alice");
    let mut refused_at = None;
    for _ in 0..20 {
        let r = request(
            gw.addr,
            "POST",
            "/v1/chat/completions",
            Some(&alice),
            Some(&body(r#""max_tokens":50"#)),
        );
        if r.status == 429 {
            assert_eq!(r.error().2, "insufficient_quota");
            refused_at = Some(Instant::now());
            break;
        }
        assert_eq!(r.status, 200);
    }
    let refused_at = refused_at.expect("alice's budget refused a request");
    browser.until_by(
        "alice's budget refusal on the page within 10 s",
        refused_at + Duration::from_secs(10),
        "const r = document.querySelector('#keys-table tr[data-key=\"alice\"]'); \
         return r && r.querySelector('td[data-field=\"budget_refused\"]').textContent !== '0' \
                && r.querySelector('td[data-field=\"budget\"] meter') !== null",
    );
    assert_eq!(browser.js("return window.notReloaded === true"), true);

    // Stop the load; once the ledger holds every request, the page's
    // figures are the ledger's, key by key.
    stop.store(true, Ordering::Relaxed);
    let sent = load.join().unwrap();
    assert!(sent > 0);
    let deadline = Instant::now() + PATIENCE;
    let (rows, sums) = loop {
        let sums = ledger_today(&gw);
        // Two refreshes after the ledger was read.
        let before = browser.js("return document.body.dataset.updated");
        browser.until(
            "a refresh",
            PATIENCE,
            &format!(
                "return document.body.dataset.updated !== {before} && document.body.dataset.updated"
            ),
        );
        let rows = browser.js(KEYS_TABLE);
        let fits = sums.iter().all(|(key, s)| {
            let row = &rows[key.as_str()];
            let n = |f: &str| row[f].as_str().unwrap_or("").replace(',', "");
            n("requests") == s[0].to_string()
                && n("prompt_tokens") == s[1].to_string()
                && n("completion_tokens") == s[2].to_string()
                && n("reasoning_tokens") == s[3].to_string()
                && n("cached_tokens") == s[4].to_string()
                && row["cost"] == usd(s[5]).as_str()
        });
        if fits && sums == ledger_today(&gw) {
            break (rows, sums);
        }
        assert!(
            Instant::now() < deadline,
            "the page never matched the ledger:\npage {rows:#}\nledger {sums:?}"
        );
    };
    assert!(sums.contains_key("test") && sums.contains_key("alice"));
    // The one model's row: every request of the day, as the ledger says
    // (read on the same refresh as the keys above).
    let models = browser.js(
        "return Array.from(document.querySelectorAll('#models-table tbody tr[data-model]')).map(tr => \
           [tr.dataset.model, tr.querySelector('td[data-field=\"requests\"]').textContent, \
            tr.querySelector('td[data-field=\"cost\"]').textContent])",
    );
    let requests: u64 = sums.values().map(|s| s[0]).sum();
    let cost: u64 = sums.values().map(|s| s[5]).sum();
    let shown = models[0][1].as_str().unwrap_or("").replace(',', "");
    assert_eq!(
        (models[0][0].as_str(), shown, models[0][2].as_str()),
        (Some(MODEL), requests.to_string(), Some(usd(cost).as_str())),
        "{models}"
    );
    let served = browser.js(
        "return document.querySelector('#providers-table tr[data-endpoint=\"sim\"] td[data-field=\"models\"]').textContent",
    );
    assert_eq!(served, MODEL);
    assert_eq!(
        rows["bob"]["requests"], "0",
        "a key without requests has a row"
    );
    // Alice's budget is a day's: what the ledger says she spent today.
    let budget = rows["alice"]["budget"].as_str().unwrap();
    assert!(
        budget.starts_with(&format!("{} of 0.001 (day)", usd(sums["alice"][5]))),
        "{budget}"
    );

    // Every chart has a text equivalent, and a table of its figures.
    let charts = browser.js(
        "return Array.from(document.querySelectorAll('svg.chart')).map(s => \
           [s.getAttribute('role'), (s.getAttribute('aria-labelledby') || '').split(' ') \
              .map(id => document.getElementById(id).textContent).join(' '), \
            s.closest('figure').querySelectorAll('details table tbody tr').length])",
    );
    let charts = charts.as_array().unwrap();
    assert_eq!(charts.len(), 5, "{charts:?}");
    for c in charts {
        assert_eq!(c[0], "img");
        assert!(c[1].as_str().unwrap().contains("Last ten seconds"), "{c}");
        assert!(c[2].as_u64().unwrap() > 0, "{c}");
    }
    let rps = browser.js("return document.getElementById('chart-rps-sum').textContent");
    assert!(
        !rps.as_str().unwrap().ends_with("Highest: requests/s 0.0."),
        "the load shows: {rps}"
    );

    // Views, photographed.
    browser.screenshot_of(None, &shots.join(format!("{name}-page.png")));
    // A window as tall as the page: each view whole.
    browser.cmd(
        "POST",
        "/window/rect",
        Some(json!({"width": 1400, "height": 3000})),
    );
    for view in ["now", "keys", "providers", "failures"] {
        let path = shots.join(format!("{name}-{view}.png"));
        browser.screenshot_of(Some(&format!("#{view}")), &path);
    }
    // The failures list names alice's refusal.
    let failures = browser.js(
        "return Array.from(document.querySelectorAll('#failures-table tbody tr[data-request]')).map(tr => \
           tr.querySelector('td[data-field=\"error\"]').textContent)",
    );
    assert!(
        failures
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == "insufficient_quota"),
        "{failures}"
    );

    // The keyboard: Tab from the first sort button to the next, Enter sorts.
    browser.js("document.querySelector('#keys-table th[data-sort=\"name\"] button').focus();");
    browser.keys(&[TAB, ENTER]);
    let sorted = browser.js(
        "return [document.activeElement.closest('th').dataset.sort, \
                 document.activeElement.closest('th').getAttribute('aria-sort')]",
    );
    assert_eq!(sorted, json!(["requests", "descending"]));
    let order = browser.js(
        "return Array.from(document.querySelectorAll('#keys-table tbody tr')).map(tr => tr.dataset.key)",
    );
    assert_eq!(order[0], "test", "most requests first: {order}");
    // Enter on a key's name opens its 24 hours; Escape closes them.
    browser.js("document.querySelector('#keys-table tr[data-key=\"alice\"] .key-open').focus();");
    browser.keys(&[ENTER]);
    browser.until(
        "alice's hours",
        PATIENCE,
        "return !document.getElementById('key-detail').hidden && document.activeElement.id === 'key-detail-h' \
           && document.querySelectorAll('#key-hours tbody tr').length === 24",
    );
    let hours_total = browser.js(
        "return Array.from(document.querySelectorAll('#key-hours tbody tr')) \
           .map(tr => Number(tr.children[1].textContent.replace(/,/g, ''))).reduce((a, b) => a + b, 0)",
    );
    assert_eq!(hours_total, json!(sums["alice"][0]));
    browser.screenshot_of(Some("#key-detail"), &shots.join(format!("{name}-key.png")));
    browser.keys(&[ESCAPE]);
    browser.until(
        "the hours closed, focus back on alice",
        PATIENCE,
        "return document.getElementById('key-detail').hidden && \
           document.activeElement.closest('tr') && document.activeElement.closest('tr').dataset.key === 'alice'",
    );

    // No console error, and nothing from another origin.
    let errors: Vec<Value> = browser
        .log()
        .into_iter()
        .filter(|e| e["level"] == "SEVERE" || e["level"] == "WARNING")
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    let foreign = browser.js(
        "return performance.getEntriesByType('resource').map(e => e.name) \
           .filter(n => !n.startsWith(location.origin + '/'))",
    );
    assert_eq!(foreign, json!([]));

    // Logging out ends the session: the page is the login form again.
    browser.js("document.querySelector('form[action=\"/logout\"]').submit();");
    browser.until(
        "the login form",
        PATIENCE,
        "return document.getElementById('login') !== null",
    );
    let _ = browser.log();
    drop(sim);
}

fn read_key(gw: &Gw, name: &str) -> String {
    gw.keys
        .get(name)
        .cloned()
        .unwrap_or_else(|| panic!("no key {name}"))
}

/// One request with extra header lines, on a new connection.
fn raw(addr: SocketAddr, req: &str) -> Response {
    let mut c = Conn::open(addr);
    c.send(req.as_bytes());
    c.response()
}

fn without_a_token_the_console_is_off_and_says_how_to_turn_it_on(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let mut gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            args: vec!["--admin-listen".into(), "127.0.0.1:0".into()],
            ..GwOptions::default()
        },
    );
    let admin = gw.admin_addr();
    let page = request(admin, "GET", "/", None, None);
    assert_eq!(page.status, 404);
    let text = String::from_utf8_lossy(&page.body);
    assert!(text.contains("--admin-token-env"), "{text}");
    let api = request(admin, "GET", "/api/overview", Some(TOKEN), None);
    assert_eq!(api.status, 404);
    assert!(
        api.json()["error"]
            .as_str()
            .unwrap()
            .contains("--admin-token-env")
    );
    // The files hold no data and are served all the same (the page above
    // uses the stylesheet).
    assert_eq!(
        request(admin, "GET", "/console.css", None, None).status,
        200
    );
    assert_eq!(request(admin, "GET", "/metrics", None, None).status, 200);
    assert!(gw.proc.stderr().contains("console=off"));
}

fn a_bad_admin_token_setting_refuses_to_start(bin: &str) {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.toml").to_string_lossy().into_owned();
    mint(bin, dir.path(), "test", None, None);
    let base = [
        "serve",
        "--upstream",
        "http://127.0.0.1:9/v1",
        "--keys",
        &keys,
        "--listen",
        "127.0.0.1:0",
    ];
    for (extra, env, error) in [
        (
            vec!["--admin-token-env", "T"],
            vec![("T", TOKEN)],
            "admin_token_env: the console is served on the admin listener; set admin_listen too",
        ),
        (
            vec![
                "--admin-listen",
                "127.0.0.1:0",
                "--admin-token-env",
                "NOT_SET_HERE",
            ],
            vec![],
            "admin_token_env: the environment variable NOT_SET_HERE is not set",
        ),
        (
            vec!["--admin-listen", "127.0.0.1:0", "--admin-token-env", "T"],
            vec![("T", "short-token")],
            "admin_token_env: the token in T is shorter than 16 characters",
        ),
    ] {
        let args: Vec<&str> = base.iter().copied().chain(extra).collect();
        let (code, _, err) = run(bin, &args, &env);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(error), "{err}");
        // The token itself is never echoed.
        assert!(!err.contains("short-token"), "{err}");
    }
}

fn the_login_form_opens_a_strict_session_and_logout_ends_it(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let mut gw = console_gateway(bin, &sim);
    let admin = gw.admin_addr();
    let post = |body: &str, cookie: &str| {
        raw(
            admin,
            &format!(
                "POST {} HTTP/1.1\r\nHost: a\r\nContent-Type: application/x-www-form-urlencoded\r\n{cookie}Content-Length: {}\r\n\r\n{}",
                if body.is_empty() { "/logout" } else { "/login" },
                body.len(),
                body
            ),
        )
    };
    let wrong = post("token=nope", "");
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("set-cookie").is_none());
    assert!(String::from_utf8_lossy(&wrong.body).contains("That is not the admin token."));
    let ok = post(&format!("token={TOKEN}"), "");
    assert_eq!(ok.status, 303);
    assert_eq!(ok.header("location"), Some("/"));
    let set = ok.header("set-cookie").unwrap().to_owned();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"] {
        assert!(set.contains(attr), "{set}");
    }
    let cookie = set.split(';').next().unwrap().to_owned();
    let get = |path: &str, cookie: &str| {
        raw(
            admin,
            &format!("GET {path} HTTP/1.1\r\nHost: a\r\nCookie: {cookie}\r\n\r\n"),
        )
    };
    let page = get("/", &cookie);
    assert_eq!(page.status, 200);
    assert!(String::from_utf8_lossy(&page.body).contains("keys-table"));
    let csp = page.header("content-security-policy").unwrap();
    assert_eq!(csp, chatgate_core::console::CSP);
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    assert_eq!(get("/api/overview", &cookie).status, 200);
    // Not the key's hash, nor a key, nor the provider's key on any answer.
    assert_eq!(gw.chat(&body("")).status, 200);
    let overview = String::from_utf8_lossy(&get("/api/overview", &cookie).body).into_owned();
    assert!(!overview.contains(&gw.key) && !overview.contains("sha256"));
    let hash = chatgate_core::key_hash_hex(&gw.key);
    assert!(!overview.contains(&hash));
    // A forged or altered session opens nothing.
    let forged = format!("chatgate_console={}", "ab".repeat(32));
    assert_eq!(get("/api/overview", &forged).status, 401);
    assert_eq!(get("/", &forged).status, 401);
    // Logging out closes the session for good.
    let out = post("", &format!("Cookie: {cookie}\r\n"));
    assert_eq!(out.status, 303);
    assert!(out.header("set-cookie").unwrap().contains("Max-Age=0"));
    assert_eq!(get("/api/overview", &cookie).status, 401);
    // A body too large to be a login form is not read, and opens nothing.
    let big = raw(
        admin,
        "POST /login HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\ntoken=x",
    );
    assert_eq!(big.status, 401);
    // While a rotated key's grace runs, its name is in the keys file
    // twice: one row.
    let keys = gw.dir.path().join("keys.toml");
    let keys = keys.to_string_lossy();
    let (code, _, err) = run(
        bin,
        &["keys", "rotate", "test", "--keys", &keys, "--grace", "1h"],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    eventually("the rotated keys loaded", || {
        metric(admin, "chatgate_keys") == 2
    });
    let o = request(admin, "GET", "/api/overview", Some(TOKEN), None).json();
    let rows = o["keys"].as_array().unwrap();
    assert_eq!(
        rows.iter().filter(|k| k["name"] == "test").count(),
        1,
        "{o}"
    );
}

/// Options that turn the console on (the admin listener, the test's
/// token), after `args`.
fn console_options(mut args: Vec<String>) -> GwOptions {
    args.extend(
        [
            "--admin-listen",
            "127.0.0.1:0",
            "--admin-token-env",
            "CONSOLE_TEST_TOKEN",
        ]
        .map(String::from),
    );
    GwOptions {
        args,
        env: vec![("CONSOLE_TEST_TOKEN".into(), TOKEN.into())],
        ..GwOptions::default()
    }
}

/// A gateway in front of `sim` with the console on.
fn console_gateway(bin: &str, sim: &Sim) -> Gw {
    Gw::start(bin, &sim.url(), console_options(vec![]))
}

fn after_a_restart_the_console_reads_its_figures_from_the_ledger(bin: &str) {
    clear_of_midnight(Duration::from_secs(120));
    let sim = Sim::start(bin, &[], &[]);
    let mut gw = console_gateway(bin, &sim);
    let admin = gw.admin_addr();
    for i in 0..5 {
        let b = if i % 2 == 0 {
            body("")
        } else {
            stream_body("")
        };
        assert_eq!(gw.chat(&b).status, 200);
    }
    // A failure: the provider refuses.
    sim.set_fault(r#"{"fault":"reject","status":500}"#);
    assert_eq!(gw.chat(&body("")).status, 502);
    sim.clear_fault();
    let ledger = gw.ledger_len(6);
    let before = overview(admin);
    gw.proc.signal(libc::SIGTERM);
    gw.proc.wait_exit(PATIENCE).expect("exits on SIGTERM");

    // The same keys file and ledger, a new process.
    let key = gw.key.clone();
    let opts = console_options(vec![]);
    let Gw { dir, .. } = gw;
    let mut again = Gw::start_with_keys(bin, &sim.url(), opts, dir, key);
    let admin = again.admin_addr();
    let after = overview(admin);
    let row = |o: &Value| {
        o["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["name"] == "test")
            .cloned()
            .unwrap()
    };
    let (b, a) = (row(&before), row(&after));
    for f in [
        "requests",
        "prompt_tokens",
        "completion_tokens",
        "reasoning_tokens",
        "cost_nano_usd",
        "errors",
    ] {
        assert_eq!(a[f], b[f], "{f}: {a} / {b}");
    }
    assert_eq!(a["requests"], ledger.len() as u64);
    let cost: u64 = ledger.iter().map(|r| r.cost_nano_usd).sum();
    assert_eq!(a["cost_nano_usd"], cost);
    assert_eq!(a["errors"], 1);
    let failed = ledger.iter().find(|r| r.status == 502).unwrap();
    assert_eq!(
        after["failures"][0]["request_id"],
        failed.request_id.as_str()
    );
    assert_eq!(
        after["failures"][0]["error"],
        failed.error.as_deref().unwrap()
    );
    // The hours add up to the day.
    let hours = request(admin, "GET", "/api/keys/test", Some(TOKEN), None).json();
    let total: u64 = hours["hours"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(total, ledger.len() as u64);
}

fn overview(admin: SocketAddr) -> Value {
    let r = request(admin, "GET", "/api/overview", Some(TOKEN), None);
    assert_eq!(r.status, 200);
    r.json()
}

/// Two instances, one of each binary, sharing Redis and the ledger in
/// PostgreSQL: each console shows every instance's requests, spend and
/// requests in flight for a key, and says which figures are whose.
fn with_redis_and_postgres_every_console_shows_the_cluster(bin: &str) {
    let redis = RedisServer::start();
    let pg = PgServer::start();
    let sim = Sim::start(bin, &[], &[]);
    let dir = tempfile::tempdir().unwrap();
    let key = mint(bin, dir.path(), "shared", None, None);
    let keys_path = dir.path().join("keys.toml").to_string_lossy().into_owned();
    let (code, _, err) = run(
        bin,
        &[
            "keys",
            "set",
            "shared",
            "--keys",
            &keys_path,
            "--budget-usd",
            "10",
            "--max-in-flight",
            "5",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let keys = std::fs::read_to_string(&keys_path).unwrap();
    let other = if bin == "chatgate-smol" {
        "chatgate-tokio"
    } else {
        "chatgate-smol"
    };
    let mut gws: Vec<(Gw, SocketAddr)> = [bin, other]
        .into_iter()
        .map(|b| {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("keys.toml"), &keys).unwrap();
            let opts = console_options(vec![
                "--redis".into(),
                redis.url(),
                "--ledger-postgres".into(),
                pg.url(),
            ]);
            let mut gw = Gw::start_with_keys(b, &sim.url(), opts, dir, key.clone());
            let admin = gw.admin_addr();
            (gw, admin)
        })
        .collect();
    for (i, (gw, _)) in gws.iter_mut().enumerate() {
        for _ in 0..=i {
            assert_eq!(gw.chat(&body("")).status, 200);
        }
    }
    let cost: u64 = gws
        .iter()
        .enumerate()
        .flat_map(|(i, (gw, _))| gw.ledger_len(i + 1))
        .map(|r| r.cost_nano_usd)
        .sum();
    for (_, admin) in &gws {
        // The first look starts the gathering; the figures follow.
        let mut o = overview(*admin);
        eventually("every instance's figures", || {
            o = overview(*admin);
            o["keys"][0]["requests"] == 3 && o["keys"][0]["budget"]["spent_nano_usd"] == cost
        });
        let scope = o["scope"].as_str().unwrap();
        assert!(
            scope.starts_with("all instances for each key's requests"),
            "{scope}"
        );
        assert_eq!(
            o["cluster"],
            json!({"today": true, "budgets_and_in_flight": true})
        );
        assert_eq!(o["keys"][0]["name"], "shared");
    }
    // A request held open on the second instance is in flight on the
    // first one's page.
    let slow = {
        let (addr, key) = (gws[1].0.addr, key.clone());
        std::thread::spawn(move || {
            let b = body(r#""x_sim":{"ttft_ms":4000}"#);
            request(addr, "POST", "/v1/chat/completions", Some(&key), Some(&b)).status
        })
    };
    eventually("the other instance's request in flight", || {
        overview(gws[0].1)["keys"][0]["in_flight"] == 1
    });
    assert_eq!(slow.join().unwrap(), 200);
}

/// Three wrong tokens are free; then each wrong one makes the address wait
/// longer (`429`, `Retry-After`, a message saying so), even the right
/// token is refused while it waits, and the right one after the wait
/// clears it. A bearer token counts as a guess too.
fn wrong_tokens_make_their_address_wait(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let mut gw = console_gateway(bin, &sim);
    let admin = gw.admin_addr();
    let login = |token: &str| {
        let body = format!("token={token}");
        raw(
            admin,
            &format!(
                "POST /login HTTP/1.1\r\nHost: a\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            ),
        )
    };
    let bearer = |token: &str| {
        raw(
            admin,
            &format!(
                "GET /api/overview HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {token}\r\n\r\n"
            ),
        )
    };
    assert_eq!(login("wrong-1").status, 401);
    assert_eq!(bearer("wrong-2").status, 401);
    assert_eq!(login("wrong-3").status, 401);
    let waits = login("wrong-4");
    assert_eq!(waits.status, 429);
    assert_eq!(waits.header("retry-after"), Some("1"));
    let text = String::from_utf8_lossy(&waits.body).into_owned();
    assert!(
        text.contains("Too many wrong admin tokens from this address: try again in 1 second."),
        "{text}"
    );
    // While it waits, not even the right token is looked at.
    let early = login(TOKEN);
    assert_eq!((early.status, early.header("set-cookie")), (429, None));
    let api = bearer(TOKEN);
    assert_eq!(api.status, 429);
    assert!(
        api.json()["error"]
            .as_str()
            .unwrap()
            .starts_with("Too many wrong admin tokens")
    );
    // After the wait, one more wrong token doubles it.
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(login("wrong-5").header("retry-after"), Some("2"));
    std::thread::sleep(Duration::from_millis(2100));
    // The right token opens a session and clears the address.
    assert_eq!(login(TOKEN).status, 303);
    assert_eq!(login("wrong-6").status, 401, "free tries again");
    assert_eq!(bearer(TOKEN).status, 200);
}
