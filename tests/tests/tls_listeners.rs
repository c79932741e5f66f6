//! TLS on the listeners (`--tls-cert`/`--tls-key`, `--admin-tls-cert`/
//! `--admin-tls-key`, `--admin-client-ca`), through both binaries, with a
//! throwaway CA:
//! - the OpenAI and Anthropic Python SDKs and curl (TLS 1.3, and 1.2 when
//!   asked) reach the public listener over TLS, streamed and not, metered;
//!   HTTP/1.1 is chosen by ALPN;
//! - plain HTTP to the TLS port gets a `400` saying to use `https://`, in
//!   plain HTTP; a TLS handshake to a plain port gets a `400` at once (not
//!   after the header timeout);
//! - OPERATIONS.md's TLS block, as written, serves both listeners; the
//!   admin listener refuses a client without a certificate, or with one
//!   from another CA, and serves one with a certificate from its CA; the
//!   console's cookies are `Secure` over TLS;
//! - a new certificate is served after its files change (and after
//!   SIGHUP), to new connections, while open ones go on; a pair that does
//!   not go together, or a file that cannot be read, is refused at start
//!   with one line and, at a reload, leaves the certificate in force;
//! - the console in headless Chromium over TLS: the login sets a `Secure`
//!   session cookie and the page works.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use chatgate_tests::*;
use serde_json::{Value, json};

cases!(
    sdks_and_curl_reach_the_public_listener_over_tls,
    the_admin_listener_asks_for_client_certificates,
    a_tls_handshake_to_a_plain_port_is_answered_at_once,
    certificates_reload_and_bad_pairs_are_refused,
);

const TOKEN: &str = "tls-test-admin-token-0123456789abcdef";

/// Writes `certs` as `cert.pem`, `key.pem` and `ca.pem` under `dir` (with
/// `prefix`); their paths.
fn write_certs(dir: &Path, prefix: &str, certs: &Certs) -> (String, String, String) {
    let file = |name: &str, text: &str| {
        let p = dir.join(format!("{prefix}{name}"));
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    };
    (
        file("cert.pem", &certs.cert_pem),
        file("key.pem", &certs.key_pem),
        file("ca.pem", &certs.ca_pem),
    )
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn chat_request(key: &str, stream: bool) -> Vec<u8> {
    let b = if stream {
        body(r#""stream":true,"stream_options":{"include_usage":true}"#)
    } else {
        body("")
    };
    raw_request("POST", "/v1/chat/completions", Some(key), Some(&b))
}

fn text(r: &Response) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

fn curl(args: &[&str]) -> (i32, String, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "30"])
        .args(args)
        .output()
        .expect("curl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn sdks_and_curl_reach_the_public_listener_over_tls(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let files = tempfile::tempdir().unwrap();
    let certs = certs(&["localhost", "127.0.0.1"]);
    let (cert, key, ca) = write_certs(files.path(), "", &certs);
    let gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            args: args(&[
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
                "--apis",
                "chat,messages",
            ]),
            ..GwOptions::default()
        },
    );
    let port = gw.addr.port();

    // A TLS client: HTTP/1.1 by ALPN (h2 offered first), TLS 1.3, a
    // keep-alive connection that serves a plain and a streamed request.
    let mut tls = tls_connect(gw.addr, "localhost", &certs.ca_pem, None).expect("handshake");
    assert_eq!(tls.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    assert_eq!(
        tls.conn.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_3)
    );
    assert_eq!(server_certificate(&tls), der_of(&certs.cert_pem));
    let r = tls_exchange(&mut tls, &chat_request(&gw.key, false)).unwrap();
    assert_eq!(r.status, 200, "{}", text(&r));
    let r = tls_exchange(&mut tls, &chat_request(&gw.key, true)).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.events().last().map(String::as_str), Some("[DONE]"));

    // curl, verifying against the CA, by name and by address; and over
    // TLS 1.2 when told to stop there.
    let url = |host: &str| format!("https://{host}:{port}/v1/chat/completions");
    let auth = format!("Authorization: Bearer {}", gw.key);
    for host in ["localhost", "127.0.0.1"] {
        let (code, out, err) = curl(&[
            "--cacert",
            &ca,
            "-H",
            &auth,
            "-H",
            "Content-Type: application/json",
            "-d",
            &body(""),
            "-w",
            "\n%{http_version} %{http_code}",
            &url(host),
        ]);
        assert_eq!(code, 0, "{err}");
        assert!(out.ends_with("\n1.1 200"), "{out}");
    }
    let (code, out, err) = curl(&[
        "-v",
        "--tlsv1.2",
        "--tls-max",
        "1.2",
        "--cacert",
        &ca,
        "-H",
        &auth,
        "-H",
        "Content-Type: application/json",
        "-d",
        &body(r#""stream":true"#),
        &url("localhost"),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("TLSv1.2"), "{err}");
    assert!(out.trim_end().ends_with("data: [DONE]"), "{out}");

    // The OpenAI and Anthropic Python SDKs, trusting the CA as their users
    // do (an httpx client with it), streamed and not.
    let python = repo().join(".cache/clients/venv/bin/python");
    assert!(
        python.exists(),
        "the client venv is not installed: run clients/install.sh"
    );
    let script = r#"
import json, os, ssl, sys
import anthropic, httpx, openai
ctx = ssl.create_default_context(cafile=os.environ["CA"])
MODEL = os.environ["MODEL"]
base = os.environ["BASE"]
key = os.environ["KEY"]
out = {}
oa = openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0,
                   http_client=openai.DefaultHttpxClient(verify=ctx))
r = oa.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
out["openai"] = r.choices[0].message.content
s = oa.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                               stream=True, stream_options={"include_usage": True})
text, usage = "", None
for c in s:
    if c.choices and c.choices[0].delta.content:
        text += c.choices[0].delta.content
    if c.usage:
        usage = c.usage.total_tokens
out["openai_stream"] = [text, usage]
an = anthropic.Anthropic(base_url=base, api_key=key, max_retries=0,
                         http_client=anthropic.DefaultHttpxClient(verify=ctx))
m = an.messages.create(model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "hi"}])
out["anthropic"] = m.content[0].text
with an.messages.stream(model=MODEL, max_tokens=64,
                        messages=[{"role": "user", "content": "hi"}]) as st:
    final = st.get_final_message()
out["anthropic_stream"] = [final.content[0].text, final.usage.output_tokens]
print(json.dumps(out))
"#;
    let out = Command::new(&python)
        .args(["-c", script])
        .env("CA", &ca)
        .env("BASE", format!("https://localhost:{port}"))
        .env("KEY", &gw.key)
        .env("MODEL", MODEL)
        .env("NO_PROXY", "*")
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    for k in ["openai", "anthropic"] {
        assert!(!v[k].as_str().unwrap().is_empty(), "{v}");
    }
    assert!(!v["openai_stream"][0].as_str().unwrap().is_empty(), "{v}");
    assert!(v["openai_stream"][1].as_u64().unwrap() > 0, "{v}");
    assert!(v["anthropic_stream"][1].as_u64().unwrap() > 0, "{v}");

    // Plain HTTP to the TLS port: a 400, in plain HTTP, saying what to
    // change; and the listener serves TLS after it.
    let r = request(gw.addr, "GET", "/v1/models", Some(&gw.key), None);
    assert_eq!(r.status, 400);
    let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("use https://"), "{message}");
    let (code, out, _) = curl(&[
        "-w",
        "\n%{http_code}",
        &format!("http://127.0.0.1:{port}/v1/models"),
    ]);
    assert_eq!(code, 0);
    assert!(out.ends_with("\n400") && out.contains("https://"), "{out}");

    // Every answered request is in the ledger: 2 + 3 curl + 4 SDK.
    let lines = gw.ledger_len(9);
    assert!(lines.iter().all(|l| l.status == 200), "{lines:?}");
}

fn the_admin_listener_asks_for_client_certificates(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let files = tempfile::tempdir().unwrap();
    let (certs, clients) = certs_and_clients(&["localhost", "127.0.0.1"], &["operator"]);
    let (cert, key, ca) = write_certs(files.path(), "", &certs);
    // A client certificate from a CA the listener does not trust.
    let (_, strangers) = certs_and_clients(&["localhost"], &["stranger"]);
    // OPERATIONS.md's block, as written, with these files in place.
    let guide = std::fs::read_to_string(repo().join("OPERATIONS.md")).unwrap();
    let block = guide
        .split("```toml\n")
        .filter_map(|b| b.split_once("```").map(|(b, _)| b))
        .find(|b| b.starts_with("# TLS on both listeners"))
        .expect("OPERATIONS.md's TLS block");
    let mut toml = block.to_owned();
    for (doc, here) in [
        ("/etc/chatgate/tls/fullchain.pem", &cert),
        ("/etc/chatgate/tls/privkey.pem", &key),
        ("/etc/chatgate/tls/admin.pem", &cert),
        ("/etc/chatgate/tls/admin.key", &key),
        ("/etc/chatgate/tls/operators-ca.pem", &ca),
    ] {
        assert!(toml.contains(doc), "the block names no {doc}");
        toml = toml.replace(doc, here);
    }
    let config = files.path().join("chatgate.toml");
    std::fs::write(&config, toml).unwrap();
    let mut gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            args: args(&[
                "--config",
                config.to_str().unwrap(),
                "--admin-listen",
                "127.0.0.1:0",
                "--admin-token-env",
                "CHATGATE_ADMIN_TOKEN",
            ]),
            env: vec![("CHATGATE_ADMIN_TOKEN".into(), TOKEN.into())],
            ..GwOptions::default()
        },
    );
    // The public listener too.
    assert_eq!(chat_request_over_tls(gw.addr, &certs.ca_pem, &gw.key), 200);
    let admin = gw.admin_addr();
    let get = |path: &str| raw_request("GET", path, Some(TOKEN), None);

    // Without a certificate, or with a stranger's: no answer.
    for client in [None, Some(&strangers[0])] {
        let refused = tls_connect(admin, "localhost", &certs.ca_pem, client)
            .and_then(|mut t| tls_exchange(&mut t, &get("/metrics")));
        let e = refused.expect_err("served without a trusted certificate");
        assert!(
            e.contains("CertificateRequired") || e.contains("alert"),
            "{client:?}: {e}",
            client = client.is_some()
        );
    }
    let (code, _, err) = curl(&[
        "--cacert",
        &ca,
        &format!("https://localhost:{}/healthz", admin.port()),
    ]);
    assert_ne!(code, 0, "curl without a certificate was served");
    assert!(err.contains("SSL") || err.contains("TLS"), "{err}");

    // With the operator's: served; curl too.
    let mut t = tls_connect(admin, "localhost", &certs.ca_pem, Some(&clients[0])).unwrap();
    let r = tls_exchange(&mut t, &get("/metrics")).unwrap();
    assert_eq!(r.status, 200);
    assert!(text(&r).contains("chatgate_requests_total"));
    let dir = files.path();
    std::fs::write(dir.join("op.pem"), &clients[0].cert_pem).unwrap();
    std::fs::write(dir.join("op.key"), &clients[0].key_pem).unwrap();
    let (code, out, err) = curl(&[
        "--cacert",
        &ca,
        "--cert",
        dir.join("op.pem").to_str().unwrap(),
        "--key",
        dir.join("op.key").to_str().unwrap(),
        &format!("https://localhost:{}/healthz", admin.port()),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ok"), "{out}");

    // The console's login over TLS: its session cookie is Secure.
    let form = format!("token={TOKEN}");
    let login = format!(
        "POST /login HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
        form.len()
    );
    let mut t = tls_connect(admin, "localhost", &certs.ca_pem, Some(&clients[0])).unwrap();
    let r = tls_exchange(&mut t, login.as_bytes()).unwrap();
    assert_eq!(r.status, 303, "{}", text(&r));
    let cookie = r.header("set-cookie").expect("a session cookie").to_owned();
    assert!(
        cookie.ends_with("; Secure") && cookie.contains("HttpOnly"),
        "{cookie}"
    );
}

/// A TLS handshake to a plain port gets a 400 at once (well before the
/// 60 s header timeout), which the TLS client reads as not TLS; the
/// gateway serves on.
fn a_tls_handshake_to_a_plain_port_is_answered_at_once(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let certs = certs(&["localhost"]);
    let gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            args: args(&["--client-header-timeout", "60s"]),
            ..GwOptions::default()
        },
    );
    let started = Instant::now();
    let e = tls_connect(gw.addr, "localhost", &certs.ca_pem, None)
        .map(|_| ())
        .expect_err("a plain port completed a TLS handshake");
    assert!(started.elapsed() < Duration::from_secs(30), "{e}");
    let mut c = Conn::open(gw.addr);
    c.send(&[0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00]);
    let r = c.response();
    assert_eq!(r.status, 400);
    let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("began a TLS handshake"), "{message}");
    assert!(c.closed());
    assert_eq!(chat_status(gw.addr, &gw.key), 200);
}

fn certificates_reload_and_bad_pairs_are_refused(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let files = tempfile::tempdir().unwrap();
    let dir = files.path();
    let first = certs(&["localhost"]);
    let second = certs(&["localhost"]);
    let third = certs(&["localhost"]);
    let (cert, key, _) = write_certs(dir, "", &first);

    // At start: a key that is not the certificate's, a file that cannot
    // be read, a file with no certificate: one line each, exit 2.
    let (_, wrong_key, _) = write_certs(dir, "wrong-", &second);
    let keys = tempfile::tempdir().unwrap();
    mint(bin, keys.path(), "test", None, None);
    let keys_file = keys.path().join("keys.toml");
    let missing = dir.join("missing.pem").to_string_lossy().into_owned();
    for (c, k, says) in [
        (
            &cert,
            &wrong_key,
            "do not go together: the private key is not the certificate's",
        ),
        (&missing, &key, "cannot read the certificate (tls_cert)"),
        (&key, &key, "no PEM certificate"),
    ] {
        let (code, _, err) = run(
            bin,
            &[
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                &sim.url(),
                "--keys",
                keys_file.to_str().unwrap(),
                "--ledger",
                keys.path().join("ledger.jsonl").to_str().unwrap(),
                "--tls-cert",
                c,
                "--tls-key",
                k,
            ],
            &[],
        );
        assert_eq!(code, 2, "{err}");
        let last = err.trim_end().lines().last().unwrap_or_default();
        assert!(last.contains(says), "{err}");
        assert!(
            !keys.path().join("ledger.jsonl").exists(),
            "a ledger was opened before the certificates were read"
        );
    }

    let mut gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            args: args(&["--tls-cert", &cert, "--tls-key", &key]),
            ..GwOptions::default()
        },
    );
    let served = |ca: &str| {
        let t = tls_connect(gw.addr, "localhost", ca, None)?;
        Ok::<_, String>(server_certificate(&t))
    };
    let mut open = tls_connect(gw.addr, "localhost", &first.ca_pem, None).unwrap();
    assert_eq!(server_certificate(&open), der_of(&first.cert_pem));
    assert_eq!(
        tls_exchange(&mut open, &chat_request(&gw.key, false))
            .unwrap()
            .status,
        200
    );

    // New files, written whole and moved in place (as certbot and
    // cert-manager do): the next handshake has the new certificate.
    let replace = |path: &str, text: &str| {
        let tmp = format!("{path}.new");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    };
    replace(&key, &second.key_pem);
    replace(&cert, &second.cert_pem);
    eventually("the new certificate is served", || {
        served(&second.ca_pem).is_ok_and(|der| der == der_of(&second.cert_pem))
    });
    // The connection opened before goes on with the old one.
    assert_eq!(
        tls_exchange(&mut open, &chat_request(&gw.key, false))
            .unwrap()
            .status,
        200
    );

    // A certificate whose key did not come with it: refused, logged, and
    // the certificate in force stays.
    replace(&cert, &third.cert_pem);
    let log = gw.proc.stderr_when("the refused reload", |l| {
        l.contains("keeps the certificate it has")
    });
    assert!(log.contains("do not go together"), "{log}");
    assert_eq!(served(&second.ca_pem).unwrap(), der_of(&second.cert_pem));
    assert_eq!(chat_request_over_tls(gw.addr, &second.ca_pem, &gw.key), 200);

    // Its key follows: in force. And SIGHUP reads the files again.
    replace(&key, &third.key_pem);
    eventually("the third certificate is served", || {
        served(&third.ca_pem).is_ok_and(|der| der == der_of(&third.cert_pem))
    });
    gw.proc.signal(libc::SIGHUP);
    gw.proc.stderr_when("a reload on SIGHUP", |l| {
        l.contains("TLS certificate reloaded (SIGHUP)")
    });
    assert_eq!(chat_request_over_tls(gw.addr, &third.ca_pem, &gw.key), 200);
    assert!(gw.alive());
}

fn chat_request_over_tls(addr: SocketAddr, ca: &str, key: &str) -> u16 {
    let mut t = tls_connect(addr, "localhost", ca, None).unwrap();
    tls_exchange(&mut t, &chat_request(key, false))
        .unwrap()
        .status
}

/// The console in headless Chromium over TLS, on both binaries: the
/// browser trusts the test certificate alone (by its public key), the
/// login sets a `Secure`, `HttpOnly` session cookie, and the page loads
/// its data.
#[test]
fn the_console_in_a_browser_over_tls() {
    let certs = certs(&["localhost", "127.0.0.1"]);
    let files = tempfile::tempdir().unwrap();
    let (cert, key, _) = write_certs(files.path(), "", &certs);
    let browser = Browser::start_with(&[format!(
        "--ignore-certificate-errors-spki-list={}",
        certs.spki_sha256
    )]);
    for bin in RUNTIMES {
        let sim = Sim::start(bin, &[], &[]);
        let mut gw = Gw::start(
            bin,
            &sim.url(),
            GwOptions {
                args: args(&[
                    "--admin-listen",
                    "127.0.0.1:0",
                    "--admin-tls-cert",
                    &cert,
                    "--admin-tls-key",
                    &key,
                    "--admin-token-env",
                    "CHATGATE_ADMIN_TOKEN",
                ]),
                env: vec![("CHATGATE_ADMIN_TOKEN".into(), TOKEN.into())],
                ..GwOptions::default()
            },
        );
        let admin = gw.admin_addr();
        assert_eq!(chat_status(gw.addr, &gw.key), 200);
        browser.cmd("DELETE", "/cookie", None);
        browser.go(&format!("https://localhost:{}/", admin.port()));
        browser.until(
            "the login form",
            PATIENCE,
            "return document.getElementById('token') !== null",
        );
        browser.js(&format!(
            "document.getElementById('token').value = '{TOKEN}'; document.getElementById('login').submit();"
        ));
        browser.until(
            "the console with its data",
            PATIENCE,
            "return document.body.dataset.admin === 'true' && !!document.body.dataset.updated",
        );
        let session = browser.cookie("chatgate_console");
        assert_eq!(
            (session["secure"].clone(), session["httpOnly"].clone()),
            (json!(true), json!(true)),
            "{session}"
        );
        assert_eq!(browser.js("return location.protocol"), "https:");
    }
}
