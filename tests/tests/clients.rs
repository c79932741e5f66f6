//! Real, unmodified client libraries against the real binaries: the OpenAI
//! Python SDK, the OpenAI Node SDK and the Vercel AI SDK (OpenAI-compatible
//! provider) each run a scenario script from `clients/` against a gateway in
//! front of the simulator, for every runtime.
//!
//! The libraries are installed by `clients/install.sh` (a venv under
//! `.cache/clients/`, `clients/node/node_modules`); without them these tests
//! fail and say so. What each scenario covers is in `clients/README.md`.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chatgate_tests::*;
use serde_json::Value;

cases!(openai_python, openai_node, vercel_ai_sdk);

/// The longest a scenario may run (each takes a few seconds).
const SCENARIO_LIMIT: Duration = Duration::from_secs(90);

/// The name and limit of the key the 429 step drains.
const LIMITED: &str = "limited";
const LIMITED_RPM: u64 = 60;
/// The name of the key with a budget of zero (the no-retry step).
const BROKE: &str = "broke";

fn not_installed(what: &str) -> ! {
    panic!(
        "{what} is not installed: run clients/install.sh (it creates .cache/clients/venv \
         and clients/node/node_modules; needs python3, node and npm)"
    )
}

fn openai_python(bin: &str) {
    let python = repo().join(".cache/clients/venv/bin/python");
    if !python.exists() {
        not_installed("the OpenAI Python SDK venv");
    }
    let requirements =
        std::fs::read_to_string(repo().join("clients/python/requirements.txt")).unwrap();
    let pin = requirements
        .lines()
        .find_map(|l| l.strip_prefix("openai=="))
        .expect("openai pinned in requirements.txt");
    let script = repo().join("clients/python/scenario.py");
    let out = scenario(bin, &python, &[&script], NoRetry::Checked);
    expect_version(&out, &format!("openai (python) {pin}"));
}

fn openai_node(bin: &str) {
    let out = node_scenario(bin, "openai-sdk.mjs", NoRetry::Checked);
    expect_version(&out, &format!("openai (node) {}", node_pin("openai")));
}

fn vercel_ai_sdk(bin: &str) {
    // The AI SDK retries every 429 (it does not read `x-should-retry`), so
    // its scenario leaves the spent budget alone.
    let out = node_scenario(bin, "ai-sdk.mjs", NoRetry::NotRead);
    expect_version(
        &out,
        &format!(
            "ai {} + @ai-sdk/openai-compatible {}",
            node_pin("ai"),
            node_pin("@ai-sdk/openai-compatible")
        ),
    );
}

/// The exact version `clients/node/package.json` pins.
fn node_pin(package: &str) -> String {
    let text = std::fs::read_to_string(repo().join("clients/node/package.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v["dependencies"][package]
        .as_str()
        .unwrap_or_else(|| panic!("{package} pinned in package.json"))
        .to_owned()
}

/// Whether a library reads `x-should-retry: false` (its scenario then
/// meets a spent budget).
#[derive(Clone, Copy, PartialEq)]
enum NoRetry {
    Checked,
    NotRead,
}

fn node_scenario(bin: &str, script: &str, no_retry: NoRetry) -> String {
    let dir = repo().join("clients/node");
    for package in ["openai", "ai", "@ai-sdk/openai-compatible"] {
        if !dir
            .join("node_modules")
            .join(package)
            .join("package.json")
            .exists()
        {
            not_installed(&format!("the npm package {package}"));
        }
    }
    scenario(bin, Path::new("node"), &[&dir.join(script)], no_retry)
}

fn expect_version(out: &str, line: &str) {
    assert!(
        out.lines().any(|l| l == line),
        "expected the scenario to report {line:?} (installed versions differ from the pins? \
         run clients/install.sh); it printed:\n{out}"
    );
}

/// Starts the simulator and a gateway, runs `program args…` with the
/// scenario's environment, asserts it succeeded and that the ledger saw
/// the 429 and its successful retry; returns the scenario's stdout.
fn scenario(bin: &str, program: &Path, args: &[&Path], no_retry: NoRetry) -> String {
    let sim = Sim::start(bin, &[], &[]);
    let dir = tempfile::tempdir().unwrap();
    let key = mint(bin, dir.path(), "test", None, None);
    let limited = mint(bin, dir.path(), LIMITED, Some(LIMITED_RPM), None);
    let broke = mint(bin, dir.path(), BROKE, None, None);
    let file = dir.path().join("keys.toml");
    let (code, _, err) = run(
        bin,
        &[
            "keys",
            "set",
            BROKE,
            "--keys",
            file.to_str().unwrap(),
            "--budget-usd",
            "0",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    // Cut streams end with an error event, which the SDKs raise.
    let opts = GwOptions {
        args: vec!["--stream-error-event".into()],
        ..GwOptions::default()
    };
    let gw = Gw::start_with_keys(bin, &sim.url(), opts, dir, key);
    let base_url = format!("http://{}/v1", gw.addr);
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(repo())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Nothing from the caller's environment that would steer the libraries.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        let proxy = k.to_ascii_lowercase().ends_with("_proxy");
        if k.starts_with("OPENAI_") || k.starts_with("AI_SDK") || proxy {
            cmd.env_remove(&*k);
        }
    }
    cmd.env("CHATGATE_TEST_BASE_URL", &base_url)
        .env("CHATGATE_TEST_KEY", &gw.key)
        .env("CHATGATE_TEST_LIMITED_KEY", &limited)
        .env("CHATGATE_TEST_BROKE_KEY", &broke)
        .env("CHATGATE_TEST_SIM_URL", format!("http://{}", sim.addr))
        .env("OPENAI_BASE_URL", &base_url)
        .env("OPENAI_API_KEY", &gw.key)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1");
    let started = Instant::now();
    let (code, out, err) = run_with_limit(cmd, SCENARIO_LIMIT);
    let show = || {
        format!(
            "{} {} against {bin}: exit {code:?} after {:.1}s\n--- stdout\n{out}\n--- stderr\n{err}\n--- gateway stderr\n{}",
            program.display(),
            args.iter()
                .map(|a| a.display().to_string())
                .collect::<Vec<_>>()
                .join(" "),
            started.elapsed().as_secs_f64(),
            gw.proc.stderr()
        )
    };
    assert_eq!(code, Some(0), "{}", show());

    // The SDK's own retry, seen by the gateway: a 429 for the limited key,
    // then, at least about the Retry-After later, the 200 of the retry.
    let elapsed_ms: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("RETRY_ELAPSED_MS="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no RETRY_ELAPSED_MS line\n{}", show()));
    assert!(
        elapsed_ms >= 950,
        "retried after {elapsed_ms} ms\n{}",
        show()
    );
    let ledger = gw.ledger();
    let limited: Vec<_> = ledger.iter().filter(|r| r.key == LIMITED).collect();
    let n = limited.len();
    assert!(n >= 2, "{}", show());
    let (rejected, retried) = (limited[n - 2], limited[n - 1]);
    assert_eq!(
        (rejected.status, retried.status),
        (429, 200),
        "the limited key's last two ledger lines\n{}",
        show()
    );
    let gap = ms_of_day(&retried.ts) - ms_of_day(&rejected.ts);
    assert!(
        gap >= 900,
        "the retry came {gap} ms after the 429 ({} → {})\n{}",
        rejected.ts,
        retried.ts,
        show()
    );
    // A spent budget: the library read `x-should-retry: false` and asked
    // once, where a 429 alone would have had it ask three times.
    let broke: Vec<_> = ledger.iter().filter(|r| r.key == BROKE).collect();
    if no_retry == NoRetry::Checked {
        assert_eq!(broke.len(), 1, "{broke:?}\n{}", show());
        assert_eq!(broke[0].status, 429);
        assert_eq!(broke[0].error.as_deref(), Some("insufficient_quota"));
    } else {
        assert!(broke.is_empty(), "{broke:?}");
    }
    // Every stream and answer was read to its end, and only the stream the
    // provider cut on purpose (the error-event step) is incomplete.
    for r in &ledger {
        assert!(!r.client_disconnected, "{r:?}\n{}", show());
        if r.status == 200 && r.error.as_deref() != Some("upstream_reset") {
            assert!(r.complete, "{r:?}\n{}", show());
        }
    }
    if no_retry == NoRetry::Checked {
        let cut: Vec<_> = ledger
            .iter()
            .filter(|r| r.error.as_deref() == Some("upstream_reset"))
            .collect();
        assert_eq!(cut.len(), 1, "{cut:?}\n{}", show());
        assert!(!cut[0].complete && cut[0].status == 200);
    }
    out
}

/// Milliseconds since midnight of a ledger timestamp
/// (`2026-11-22T10:00:00.123Z`); a later day adds a day.
fn ms_of_day(ts: &str) -> i64 {
    let (date, time) = ts.split_once('T').expect("a timestamp");
    let time = time.trim_end_matches('Z');
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut parts = hms.split(':').map(|p| p.parse::<i64>().expect("a number"));
    let (h, m, s) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    let ms: i64 = format!("{frac:0<3}")[..3].parse().expect("milliseconds");
    let day: i64 = date[8..10].parse().expect("a day");
    ((day * 24 + h) * 60 + m) * 60_000 + s * 1000 + ms
}

/// Runs `cmd` to completion or kills it after `limit`:
/// (exit code, stdout, stderr).
fn run_with_limit(mut cmd: Command, limit: Duration) -> (Option<i32>, String, String) {
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", cmd.get_program()));
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = r.read_to_end(&mut s);
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("stdout")));
    let err = drain(Box::new(child.stderr.take().expect("stderr")));
    let deadline = Instant::now() + limit;
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (
        code,
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    )
}
