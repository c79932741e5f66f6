//! OPERATIONS.md, run as written: its config file starts the gateway
//! through its systemd unit's `ExecStart`, its nginx server block fronts it
//! over TLS, and its `curl`, `keys`, `usage` and rotation commands run
//! through `sh` with only paths, ports and the provider's URL substituted.
//! What cannot run here (systemd as init, promtool, journald, Vector) is
//! named, skipped with a printed note, and its settings checked against the
//! gateway's instead. Every shell command of the guide must be run or
//! skipped by name: a command added to the guide without a place here
//! fails the test.
//!
//! Needs nginx (`scripts/install-nginx.sh`) and curl.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chatgate_core::parse_duration;
use chatgate_tests::*;
use serde_json::Value;

const BIN: &str = "chatgate-smol";

fn guide() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../OPERATIONS.md"))
        .expect("OPERATIONS.md")
}

/// The bodies of the guide's fenced blocks tagged `lang`.
fn fenced(doc: &str, lang: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in doc.lines() {
        match &mut current {
            None if line.trim_end() == format!("```{lang}") => current = Some(String::new()),
            Some(_) if line.trim_end() == "```" => out.extend(current.take()),
            Some(body) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {}
        }
    }
    out
}

/// The one block tagged `lang` that contains `marker`.
fn block(doc: &str, lang: &str, marker: &str) -> String {
    let found: Vec<String> = fenced(doc, lang)
        .into_iter()
        .filter(|b| b.contains(marker))
        .collect();
    assert_eq!(found.len(), 1, "one ```{lang} block with {marker:?}");
    found.into_iter().next().unwrap()
}

/// The guide's shell commands, each to be run or skipped exactly once.
struct Commands {
    list: Vec<(String, bool)>,
}

impl Commands {
    /// Every command of the `sh` blocks (continuation lines joined, comment
    /// lines dropped), and the inline `systemd-analyze verify …`.
    fn of(doc: &str) -> Commands {
        let mut list = Vec::new();
        for b in fenced(doc, "sh") {
            for cmd in b.replace("\\\n", " ").lines() {
                let cmd = cmd.trim();
                if !cmd.is_empty() && !cmd.starts_with('#') {
                    list.push((cmd.to_owned(), false));
                }
            }
        }
        let inline = doc
            .split('`')
            .find(|s| s.starts_with("systemd-analyze verify "))
            .expect("the guide says how to verify the unit");
        list.push((inline.to_owned(), false));
        Commands { list }
    }

    /// The commands starting with `prefix`, not taken before, in order;
    /// marks them taken. At least one must exist.
    fn take_all(&mut self, prefix: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (cmd, taken) in &mut self.list {
            if !*taken && cmd.starts_with(prefix) {
                *taken = true;
                out.push(cmd.clone());
            }
        }
        assert!(
            !out.is_empty(),
            "OPERATIONS.md has no command starting with {prefix:?}"
        );
        out
    }

    /// The next command starting with `prefix`.
    fn take(&mut self, prefix: &str) -> String {
        let (cmd, taken) = self
            .list
            .iter_mut()
            .find(|(c, t)| !*t && c.starts_with(prefix))
            .unwrap_or_else(|| panic!("OPERATIONS.md has no command starting with {prefix:?}"));
        *taken = true;
        cmd.clone()
    }

    /// Skips a command that cannot run here, saying so.
    fn skip(&mut self, prefix: &str, why: &str) {
        for cmd in self.take_all(prefix) {
            println!("note: not run: `{cmd}`: {why}");
        }
    }

    fn all_taken(&self) {
        let left: Vec<&str> = self
            .list
            .iter()
            .filter(|(_, t)| !*t)
            .map(|(c, _)| c.as_str())
            .collect();
        assert!(
            left.is_empty(),
            "OPERATIONS.md commands this test neither runs nor skips: {left:?}"
        );
    }
}

/// Text replacements: paths, ports and the provider's URL.
struct Subst(Vec<(String, String)>);

impl Subst {
    fn apply(&self, text: &str) -> String {
        self.0
            .iter()
            .fold(text.to_owned(), |t, (from, to)| t.replace(from, to))
    }

    fn add(&mut self, from: &str, to: &str) {
        self.0.push((from.to_owned(), to.to_owned()));
    }
}

/// Whether `program` is on PATH.
fn installed(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    })
}

/// Runs a guide command with `sh -c`, `chatgate-smol` found on PATH:
/// (status, stdout, stderr).
fn sh(cmd: &str, env: &[(&str, &str)], cwd: &Path) -> (i32, String, String) {
    let bin_dir = bin_path(BIN).parent().unwrap().to_owned();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![bin_dir];
    dirs.extend(std::env::split_paths(&path));
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(cmd)
        .current_dir(cwd)
        .env("PATH", std::env::join_paths(dirs).unwrap());
    for (k, _) in std::env::vars() {
        if k.starts_with("CHATGATE_") {
            c.env_remove(k);
        }
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("sh");
    let r = (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    let shown: Vec<&str> = r.1.lines().chain(r.2.lines()).collect();
    println!("$ {cmd}");
    for l in shown.iter().take(12) {
        println!("  {l}");
    }
    if shown.len() > 12 {
        println!("  … ({} lines)", shown.len());
    }
    r
}

/// `Key=value` of the unit.
fn unit_value<'a>(unit: &'a str, key: &str) -> &'a str {
    unit.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("the unit sets no {key}"))
}

/// `directive value;` in an nginx block's text.
fn nginx_value<'a>(text: &'a str, directive: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        l.trim()
            .strip_prefix(&format!("{directive} "))
            .and_then(|v| v.split(';').next())
            .map(str::trim)
    })
}

/// The text of the nginx block opened by `opening` (up to its `}`).
fn nginx_block<'a>(conf: &'a str, opening: &str) -> &'a str {
    let start = conf
        .find(opening)
        .unwrap_or_else(|| panic!("no `{opening}` in the nginx block"));
    let end = conf[start..].find('}').expect("a closing brace");
    &conf[start..start + end]
}

/// nginx with the guide's server block, killed with its workers on drop.
struct Nginx {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl Nginx {
    fn start(server_block: &str, subst: &Subst) -> Nginx {
        let bin = installed("nginx")
            .or_else(|| Some(PathBuf::from("/usr/sbin/nginx")).filter(|p| p.is_file()))
            .expect("nginx is not installed: run scripts/install-nginx.sh and the tests again");
        let mut last = String::new();
        for _attempt in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .unwrap()
                .port();
            let block = subst
                .apply(server_block)
                .replace("listen 443 ssl;", &format!("listen 127.0.0.1:{port} ssl;"));
            assert!(block.contains(&format!("127.0.0.1:{port} ssl")));
            let dir = tempfile::tempdir().unwrap();
            let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
            // As root, nginx would run its workers as `nobody`, who cannot
            // enter this private directory.
            // SAFETY: geteuid(2) cannot fail.
            let user = if unsafe { libc::geteuid() } == 0 {
                "user root root;"
            } else {
                ""
            };
            let conf = format!(
                "{user}\nworker_processes 1;\npid {pid};\nerror_log {err} info;\nevents {{ worker_connections 256; }}\nhttp {{\n\
                 client_body_temp_path {tmp}/client_body;\nproxy_temp_path {tmp}/proxy;\nfastcgi_temp_path {tmp}/fastcgi;\n\
                 uwsgi_temp_path {tmp}/uwsgi;\nscgi_temp_path {tmp}/scgi;\naccess_log {access};\n{block}}}\n",
                pid = p("nginx.pid"),
                err = p("error.log"),
                tmp = dir.path().display(),
                access = p("access.log"),
            );
            std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
            let mut cmd = Command::new(&bin);
            cmd.args(["-p", &p(""), "-c", &p("nginx.conf"), "-g", "daemon off;"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.path().join("stderr.log")).unwrap())
                .process_group(0);
            // SAFETY: prctl(2) is async-signal-safe; nginx dies with this
            // test's thread.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            let mut nginx = Nginx {
                child: cmd.spawn().expect("spawn nginx"),
                dir,
                port,
            };
            let deadline = Instant::now() + PATIENCE;
            loop {
                if let Ok(Some(status)) = nginx.child.try_wait() {
                    last = format!("nginx exited with {status}: {}", nginx.logs());
                    break;
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return nginx;
                }
                assert!(
                    Instant::now() < deadline,
                    "nginx did not start: {}",
                    nginx.logs()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            if !last.contains("Address already in use") {
                break;
            }
        }
        panic!("{last}");
    }

    fn logs(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.dir.path().join(f)).unwrap_or_default();
        format!("{}{}", read("stderr.log"), read("error.log"))
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let group = self.child.id() as i32;
        // SAFETY: kill(2) on the process group this guard created.
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// One request over TLS to nginx, for `llm.example.com`: the response and
/// when its first `data: ` arrived.
fn https(port: u16, ca_pem: &str, raw: &[u8]) -> (Response, Option<Duration>) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let conn = rustls::ClientConnection::new(
        Arc::new(config),
        ServerName::try_from("llm.example.com").unwrap(),
    )
    .unwrap();
    let sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
    sock.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let start = Instant::now();
    tls.write_all(raw).unwrap();
    let (mut buf, mut first) = (Vec::new(), None);
    let mut b = vec![0u8; 65536];
    loop {
        if let Some((r, _)) = parse_one(&buf, false) {
            return (r, first);
        }
        let n = match tls.read(&mut b) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => 0,
            Err(e) => panic!("reading from nginx: {e}"),
        };
        if n == 0 {
            let (r, _) = parse_one(&buf, true).expect("a whole response");
            return (r, first);
        }
        buf.extend_from_slice(&b[..n]);
        if first.is_none() && String::from_utf8_lossy(&buf).contains("data: ") {
            first = Some(start.elapsed());
        }
    }
}

fn metric(admin: SocketAddr, name: &str) -> u64 {
    let text = String::from_utf8(request(admin, "GET", "/metrics", None, None).body).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name}"))
}

#[test]
fn operations_guide_runs_as_written() {
    let doc = guide();
    let mut commands = Commands::of(&doc);
    let tmp = tempfile::tempdir().unwrap();
    let t = |p: &str| tmp.path().join(p).to_string_lossy().into_owned();
    for d in ["etc", "var", "ssl"] {
        std::fs::create_dir(tmp.path().join(d)).unwrap();
    }
    let sim = Sim::start(BIN, &[], &[]);
    let mut subst = Subst(Vec::new());
    subst.add(
        "/etc/systemd/system/chatgate.service",
        &t("chatgate.service"),
    );
    subst.add("/etc/chatgate/", &format!("{}/", t("etc")));
    subst.add("/var/lib/chatgate/", &format!("{}/", t("var")));
    subst.add("/etc/ssl/", &format!("{}/", t("ssl")));
    subst.add(
        "/usr/local/bin/chatgate-smol",
        &bin_path(BIN).to_string_lossy(),
    );
    subst.add("https://api.provider.example/v1", &sim.url());

    // A key, as the guide mints one.
    let (code, out, err) = sh(
        &subst.apply(&commands.take("chatgate-smol keys new ")),
        &[],
        tmp.path(),
    );
    assert_eq!(code, 0, "{err}");
    let alice = out.lines().next().unwrap().to_owned();
    assert!(alice.starts_with("sk-cg-"), "{out}");

    // The config file and the unit; the gateway started by the unit's
    // ExecStart. Its two ports are picked free (printed at start).
    let config_text = block(&doc, "toml", "admin_listen");
    let config: toml_like::Table = toml_like::parse(&config_text);
    let ports = Subst(vec![
        ("127.0.0.1:8080".into(), "127.0.0.1:0".into()),
        ("127.0.0.1:9090".into(), "127.0.0.1:0".into()),
    ]);
    std::fs::write(
        t("etc/chatgate.toml"),
        ports.apply(&subst.apply(&config_text)),
    )
    .unwrap();
    // The full unit (the per-core template beside it has no `[Unit]`).
    let unit = subst.apply(&block(&doc, "ini", "[Unit]"));
    std::fs::write(t("chatgate.service"), &unit).unwrap();
    let exec: Vec<&str> = unit_value(&unit, "ExecStart").split_whitespace().collect();
    assert_eq!(exec[0], bin_path(BIN).to_string_lossy());
    let args: Vec<String> = exec[1..].iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(args, ["serve", "--config", &t("etc/chatgate.toml")]);
    // The admin token, as the guide adds it to the unit's EnvironmentFile,
    // which the unit hands to the gateway.
    let (code, _, err) = sh(
        &subst.apply(&commands.take("echo \"CHATGATE_ADMIN_TOKEN=")),
        &[],
        tmp.path(),
    );
    assert_eq!(code, 0, "{err}");
    let env_file = std::fs::read_to_string(t("etc/provider.env")).unwrap();
    let unit_env: Vec<(String, String)> = env_file
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let admin_token = unit_env
        .iter()
        .find(|(k, _)| k == "CHATGATE_ADMIN_TOKEN")
        .map(|(_, v)| v.clone())
        .expect("the token in provider.env");
    assert_eq!(admin_token.len(), 64, "{admin_token}");
    let mut gw = Proc::spawn(BIN, &args, &unit_env, &tmp.path().join("gateway.stderr"));
    let addr_of = |line: String, prefix: &str| -> SocketAddr {
        line.trim()
            .strip_prefix(prefix)
            .unwrap_or_else(|| panic!("{line}"))
            .trim_end_matches("/v1")
            .parse()
            .unwrap()
    };
    let public = addr_of(gw.line(), "chatgate listening on http://");
    let admin = addr_of(gw.line(), "chatgate admin listening on http://");
    subst.add("127.0.0.1:8080", &public.to_string());
    subst.add("127.0.0.1:9090", &admin.to_string());
    // log_format = "json": every stderr line one JSON object; the start-up
    // line shows the file's timeouts.
    let first_byte = parse_duration(config.get("upstream_first_byte_timeout")).unwrap();
    let drain = parse_duration(config.get("drain_timeout")).unwrap();
    eventually("the start-up line", || gw.stderr().contains("starting:"));
    for line in gw.stderr().lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v.is_object());
    }
    let log = gw.stderr();
    assert!(
        log.contains(&format!("first_byte={first_byte:?}"))
            && log.contains(&format!("drain={drain:?}")),
        "{log}"
    );
    assert_eq!(chat_status(public, &alice), 200);

    // The unit: verified by systemd-analyze where it exists; its stop
    // timeout covers the drain.
    let verify = subst.apply(&commands.take("systemd-analyze verify "));
    if installed("systemd-analyze").is_some() {
        let (code, out, err) = sh(&verify, &[], tmp.path());
        assert_eq!(code, 0, "{out}{err}");
        assert!(err.trim().is_empty() && out.trim().is_empty(), "{out}{err}");
    } else {
        println!("note: not run: `{verify}`: systemd-analyze is not installed");
    }
    let stop_timeout = parse_duration(unit_value(&unit, "TimeoutStopSec")).unwrap();
    assert!(
        stop_timeout > drain + Duration::from_secs(2),
        "TimeoutStopSec must exceed drain_timeout plus two seconds"
    );
    commands.skip(
        "systemctl daemon-reload",
        "needs systemd as init; the unit was verified and its ExecStart run",
    );
    commands.skip(
        "systemctl enable --now chatgate",
        "needs systemd as init; the unit was verified and its ExecStart run",
    );

    // Health and metrics, as the guide reads them.
    let (code, out, _) = sh(
        &subst.apply(&commands.take("curl -s http://127.0.0.1:9090/readyz")),
        &[],
        tmp.path(),
    );
    assert_eq!(code, 0);
    assert!(out.contains("keys: ok"), "{out}");
    let scrape = subst.apply(&commands.take("curl -s http://127.0.0.1:9090/metrics"));
    if installed("promtool").is_some() {
        let (code, out, err) = sh(&scrape, &[], tmp.path());
        assert_eq!(code, 0, "{out}{err}");
    } else {
        println!("note: promtool is not installed: `{scrape}` runs without it");
        let curl = scrape.split('|').next().unwrap();
        let (code, out, _) = sh(curl, &[], tmp.path());
        assert_eq!(code, 0);
        assert!(
            out.contains("# TYPE chatgate_requests_total counter"),
            "{out}"
        );
    }
    // The console's data, as scripts read it; the page needs the token.
    let (code, out, err) = sh(
        &subst.apply(&commands.take("curl -s -H \"Authorization: Bearer $CHATGATE_ADMIN_TOKEN\"")),
        &[("CHATGATE_ADMIN_TOKEN", &admin_token)],
        tmp.path(),
    );
    assert_eq!(code, 0, "{err}");
    let overview: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(overview["keys"][0]["name"], "alice", "{out}");
    assert_eq!(request(admin, "GET", "/", None, None).status, 401);
    admin_api(&mut commands, &subst, &admin_token, public, tmp.path());
    let prometheus = block(&doc, "yaml", "scrape_configs");
    assert!(prometheus.contains("\"127.0.0.1:9090\""));
    std::fs::write(t("prometheus.yml"), subst.apply(&prometheus)).unwrap();
    std::fs::write(t("chatgate-alerts.yml"), block(&doc, "yaml", "groups:")).unwrap();
    for check in commands.take_all("promtool check ") {
        if installed("promtool").is_some() {
            let (code, out, err) = sh(&check, &[], tmp.path());
            assert_eq!(code, 0, "{out}{err}");
        } else {
            println!("note: not run: `{check}`: promtool is not installed");
        }
    }

    // nginx with the guide's server block in front of the gateway.
    let server_block = block(&doc, "nginx", "proxy_pass http://chatgate;");
    let upstream = nginx_block(&server_block, "upstream chatgate {");
    let location = nginx_block(&server_block, "location / {");
    let idle = parse_duration(
        nginx_value(upstream, "keepalive_timeout")
            .expect("the upstream block sets keepalive_timeout (idle connections to chatgate)"),
    )
    .unwrap();
    assert!(idle < Duration::from_secs(75), "below client_idle_timeout");
    assert!(nginx_value(upstream, "keepalive").is_some());
    assert!(
        nginx_value(location, "keepalive_timeout").is_none(),
        "keepalive_timeout in location is the clients' timeout, not chatgate's"
    );
    let read_timeout =
        parse_duration(nginx_value(location, "proxy_read_timeout").unwrap()).unwrap();
    assert!(
        read_timeout > first_byte,
        "proxy_read_timeout > upstream_first_byte_timeout"
    );
    assert_eq!(nginx_value(location, "proxy_buffering"), Some("off"));
    let certs = certs(&["llm.example.com"]);
    std::fs::write(t("ssl/llm.example.com.pem"), &certs.cert_pem).unwrap();
    std::fs::write(t("ssl/llm.example.com.key"), &certs.key_pem).unwrap();
    let nginx = Nginx::start(&server_block, &subst);
    let post = |b: &str| raw_request("POST", "/v1/chat/completions", Some(&alice), Some(b));
    // Bodies up to chatgate's limit (2 MiB) go through; above it nginx
    // refuses them itself (sent on, chatgate's early 413 would end as a
    // 502 from nginx).
    assert_eq!(
        nginx_value(&server_block, "client_max_body_size"),
        Some("2m")
    );
    let padded = |len: usize| {
        let short = body(r#""user":"""#).len();
        body(&format!(r#""user":"{}""#, "a".repeat(len - short)))
    };
    let (r, _) = https(nginx.port, &certs.ca_pem, &post(&padded(2 << 20)));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let (r, _) = https(nginx.port, &certs.ca_pem, &post(&padded((2 << 20) + 1)));
    assert_eq!(r.status, 413, "{}", nginx.logs());
    let (r, _) = https(nginx.port, &certs.ca_pem, &post(&body("")));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.json()["choices"][0]["message"]["content"].is_string());
    // Streamed and paced: nothing buffers it on the way.
    let paced = stream_body(
        r#""x_sim":{"ttft_ms":0,"token_ms":25,"reasoning_tokens":12,"answer_tokens":12}"#,
    );
    let start = Instant::now();
    let (r, first) = https(nginx.port, &certs.ca_pem, &post(&paced));
    let total = start.elapsed();
    assert_eq!(r.status, 200);
    assert_eq!(r.events().last().map(String::as_str), Some("[DONE]"));
    let first = first.expect("events");
    assert!(
        total >= Duration::from_millis(500) && first * 3 < total,
        "first event after {first:?}, whole stream {total:?}"
    );
    // Keep-alive to chatgate: one connection, kept and used again.
    let (r, _) = https(nginx.port, &certs.ca_pem, &post(&body("")));
    assert_eq!(r.status, 200);
    eventually("nginx keeps one connection to chatgate", || {
        metric(admin, "chatgate_open_connections") == 1
    });
    drop(nginx);

    // Keys, as the guide manages them.
    let (code, out, err) = sh(
        &subst.apply(&commands.take("chatgate-smol keys list ")),
        &[],
        tmp.path(),
    );
    assert_eq!(code, 0, "{err}");
    let row = out.lines().find(|l| l.starts_with("alice ")).expect(&out);
    assert!(row.contains("120") && row.contains("400000"), "{out}");
    // A budget and a cap, then the budget back to the default.
    for cmd in commands.take_all("chatgate-smol keys set alice ") {
        let (code, _, err) = sh(&subst.apply(&cmd), &[], tmp.path());
        assert_eq!(code, 0, "{cmd}: {err}");
    }
    let (_, out, _) = sh(
        &subst.apply("chatgate-smol keys list --keys /etc/chatgate/keys.toml"),
        &[],
        tmp.path(),
    );
    let row = out.lines().find(|l| l.starts_with("alice ")).expect(&out);
    assert!(
        row.contains("default/month") && row.contains(" 4 "),
        "{out}"
    );
    // A key limited to a model: `keys list` says which.
    let (code, minted, err) = sh(
        &subst.apply(
            &commands.take("chatgate-smol keys new --keys /etc/chatgate/keys.toml --name ci "),
        ),
        &[],
        tmp.path(),
    );
    assert_eq!(code, 0, "{err}");
    assert!(minted.starts_with("sk-cg-"), "{minted}");
    let (_, out, _) = sh(
        &subst.apply("chatgate-smol keys list --keys /etc/chatgate/keys.toml"),
        &[],
        tmp.path(),
    );
    let row = out.lines().find(|l| l.starts_with("ci ")).expect(&out);
    assert!(row.contains(" k3 "), "{out}");
    let (code, out, err) = sh(
        &subst.apply(&commands.take("chatgate-smol keys rotate alice ")),
        &[],
        tmp.path(),
    );
    assert_eq!(code, 0, "{err}");
    let rotated = out.lines().next().unwrap().to_owned();
    assert!(rotated.starts_with("sk-cg-") && rotated != alice);
    eventually("the new key works", || chat_status(public, &rotated) == 200);
    assert_eq!(
        chat_status(public, &alice),
        200,
        "the old key during the grace"
    );

    // Usage reports, as the guide runs them.
    let ledger = std::fs::read_to_string(t("var/ledger.jsonl")).unwrap();
    let lines = ledger.lines().count();
    let mut reports = commands.take_all("chatgate-smol usage ");
    let budgets = reports.remove(
        reports
            .iter()
            .position(|c| c.contains("--budgets"))
            .expect("the budgets report"),
    );
    // alice's budget went back to the default (none): a header only.
    let (code, out, err) = sh(&subst.apply(&budgets), &[], tmp.path());
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("key  period  started  resets  budget_usd") && out.lines().count() == 1,
        "{out}"
    );
    assert_eq!(reports.len(), 3);
    let (code, out, err) = sh(&subst.apply(&reports[0]), &[], tmp.path());
    assert_eq!(code, 0, "{err}");
    let total = out.lines().last().unwrap();
    assert!(total.starts_with("TOTAL"), "{out}");
    assert!(
        total.split_whitespace().any(|w| w == lines.to_string()),
        "{lines} lines: {out}"
    );
    let (code, out, err) = sh(&subst.apply(&reports[1]), &[], tmp.path());
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("key,month,requests,"), "{out}");
    let (code, out, err) = sh(&subst.apply(&reports[2]), &[], tmp.path());
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v["total"]["requests"].is_u64(), "{out}");

    // Rotation: the guide's mv, then `systemctl reload`, which is the
    // unit's ExecReload (both places the guide says it).
    let reload = unit_value(&unit, "ExecReload").to_owned();
    let pid = gw.pid().to_string();
    let (code, _, err) = sh(
        &subst.apply(&commands.take("mv /var/lib/chatgate/ledger.jsonl ")),
        &[],
        tmp.path(),
    );
    assert_eq!(code, 0, "{err}");
    // Until the signal, lines go on into the moved file.
    assert_eq!(chat_status(public, &rotated), 200);
    let reloads = commands.take_all("systemctl reload chatgate");
    assert_eq!(reloads.len(), 2);
    println!("note: `systemctl reload chatgate` runs the unit's ExecReload: `{reload}`");
    let (code, _, err) = sh(&reload, &[("MAINPID", &pid)], tmp.path());
    assert_eq!(code, 0, "{err}");
    eventually("the ledger is reopened", || {
        gw.stderr().contains("ledger reopened")
    });
    assert_eq!(chat_status(public, &rotated), 200);
    let moved = std::fs::read_dir(t("var"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n != "ledger.jsonl" && !n.ends_with(".audit.jsonl"))
        .expect("the moved ledger");
    let moved = std::fs::read_to_string(tmp.path().join("var").join(moved)).unwrap();
    assert_eq!(
        moved.lines().count(),
        lines + 1,
        "every line before the signal"
    );
    let fresh = std::fs::read_to_string(t("var/ledger.jsonl")).unwrap();
    assert_eq!(fresh.lines().count(), 1, "the line after it");

    // Revoked: both of alice's keys are refused.
    let (code, _, err) = sh(
        &subst.apply(&commands.take("chatgate-smol keys revoke alice ")),
        &[],
        tmp.path(),
    );
    assert_eq!(code, 0, "{err}");
    eventually("both keys are refused", || {
        chat_status(public, &rotated) == 401 && chat_status(public, &alice) == 401
    });

    // Logs: the journal and the collector are not here.
    commands.skip(
        "journalctl -u chatgate",
        "no journald here; the JSON lines were checked above",
    );
    let vector = block(&doc, "toml", "[sources.chatgate]");
    if installed("vector").is_some() {
        std::fs::write(t("vector.toml"), &vector).unwrap();
        let (code, out, err) = sh(
            "vector validate --no-environment vector.toml",
            &[],
            tmp.path(),
        );
        assert_eq!(code, 0, "{out}{err}");
    } else {
        println!("note: the Vector example is not validated: vector is not installed");
    }

    // `systemctl stop`: the unit's KillSignal, a drain, exit 0 in time.
    commands.take("systemctl stop chatgate");
    assert_eq!(unit_value(&unit, "KillSignal"), "SIGTERM");
    gw.signal(libc::SIGTERM);
    let status = gw
        .wait_exit(stop_timeout)
        .expect("stopped within TimeoutStopSec");
    assert_eq!(status.code(), Some(0), "{}", gw.stderr());

    commands.all_taken();
}

/// The admin API's curl examples, in the guide's order, against the
/// running gateway; then `keys import` into a PostgreSQL of its own.
fn admin_api(commands: &mut Commands, subst: &Subst, token: &str, public: SocketAddr, dir: &Path) {
    let mut next = || {
        let cmd = subst
            .apply(&commands.take("curl -s -H \"Authorization: Bearer $CHATGATE_ADMIN_TOKEN\""));
        let (code, out, err) = sh(&cmd, &[("CHATGATE_ADMIN_TOKEN", token)], dir);
        assert_eq!(code, 0, "{err}");
        (
            cmd,
            serde_json::from_str::<Value>(&out).unwrap_or(Value::Null),
        )
    };
    let (_, list) = next();
    assert_eq!(list["keys"][0]["name"], "alice", "{list}");
    let (cmd, bob) = next();
    assert!(cmd.contains("-d '{\"name\": \"bob\""), "{cmd}");
    let first = bob["secret"]
        .as_str()
        .unwrap_or_else(|| panic!("{bob}"))
        .to_owned();
    assert_eq!(
        (bob["rpm"].clone(), bob["models"].clone()),
        (60.into(), serde_json::json!(["reasoning-model-k3"]))
    );
    assert_eq!(chat_status(public, &first), 200);
    let (_, changed) = next();
    assert_eq!(
        (changed["rpm"].clone(), changed["budget"].clone()),
        (120.into(), Value::Null)
    );
    let (_, rotated) = next();
    let second = rotated["secret"].as_str().unwrap().to_owned();
    assert_eq!(rotated["state"], "rotating");
    assert_eq!(chat_status(public, &first), 200, "in its grace hour");
    assert_eq!(chat_status(public, &second), 200);
    let (_, gone) = next();
    assert_eq!(gone, Value::Null, "204, no body");
    assert_eq!(chat_status(public, &first), 401);
    assert_eq!(chat_status(public, &second), 401);
    let (_, trail) = next();
    let actions: Vec<&str> = trail["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["key"] == "bob")
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["revoke", "rotate", "update", "create"]);
    assert!(!trail.to_string().contains(&first) && !trail.to_string().contains(&second));

    // The keys file into PostgreSQL, twice: the second finds them there.
    let pg = PgServer::start();
    let import = commands
        .take("chatgate-smol keys import ")
        .replace("postgres://chatgate@db.internal/chatgate", &pg.url());
    for _ in 0..2 {
        let (code, _, err) = sh(&subst.apply(&import), &[], dir);
        assert_eq!(code, 0, "{err}");
    }
    let rows: i64 = pg
        .client()
        .query_one(
            "SELECT count(*) FROM chatgate_keys WHERE name = 'alice'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
}

/// The config sample's `key = "value"` lines (the sample is flat).
mod toml_like {
    pub(crate) struct Table(Vec<(String, String)>);

    impl Table {
        pub(crate) fn get(&self, key: &str) -> &str {
            self.0
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
                .unwrap_or_else(|| panic!("the config sample sets no {key}"))
        }
    }

    pub(crate) fn parse(text: &str) -> Table {
        Table(
            text.lines()
                .filter_map(|l| l.split_once(" = "))
                .map(|(k, v)| (k.trim().to_owned(), v.trim().trim_matches('"').to_owned()))
                .collect(),
        )
    }
}
