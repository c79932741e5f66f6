//! The coding agents the tests drive, run offline: Claude Code, Codex CLI
//! and Gemini CLI, from `clients/` (installed by `clients/install.sh`), each with a
//! throwaway home, their vendors' traffic switched off and the proxy
//! variables at a port that refuses, so nothing leaves the machine.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::gateway::Gw;

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Where the agents' proxies point: a port that refuses.
const REFUSED: &str = "http://127.0.0.1:9";

/// Claude Code, `-p` with JSON output and its Bash tool allowed, in a
/// work directory under `home`; `env` adds or overrides variables.
/// Whether it succeeded, its JSON result, and all it printed.
pub fn claude(
    home: &Path,
    env: &[(&str, String)],
    prompt: &str,
) -> (bool, serde_json::Value, String) {
    let bin = repo().join("clients/claude/node_modules/.bin/claude");
    assert!(bin.exists(), "run clients/install.sh first");
    let work = home.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let mut cmd = Command::new(bin);
    cmd.args([
        "-p",
        prompt,
        "--output-format",
        "json",
        "--allowedTools",
        "Bash",
    ]);
    let own = [
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ("DISABLE_TELEMETRY", "1"),
        ("DISABLE_AUTOUPDATER", "1"),
        ("DISABLE_ERROR_REPORTING", "1"),
        ("CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL", "1"),
    ];
    run_offline(cmd, home, &work, &own, env)
}

/// Runs an agent's headless command in `work`, offline: nothing of the
/// caller's environment but `PATH`, a throwaway home (`HOME`, `TMPDIR`,
/// the XDG directories) under `home`, the proxy variables at a port that
/// refuses, then the agent's `own` switches; `env` adds or overrides
/// variables. Whether it succeeded, its
/// standard output read as JSON, and all it printed.
fn run_offline(
    mut cmd: Command,
    home: &Path,
    work: &Path,
    own: &[(&str, &str)],
    env: &[(&str, String)],
) -> (bool, serde_json::Value, String) {
    cmd.current_dir(work)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("TMPDIR", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("TERM", "dumb")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .stdin(Stdio::null());
    for proxy in [
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "ALL_PROXY",
        "https_proxy",
        "http_proxy",
        "all_proxy",
    ] {
        cmd.env(proxy, REFUSED);
    }
    for (k, v) in own {
        cmd.env(k, v);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("the agent runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let text = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let json = serde_json::from_str(stdout.trim()).unwrap_or(serde_json::Value::Null);
    (out.status.success(), json, text)
}

/// The environment that points Claude Code at `gw` with its key (as
/// `x-api-key` when `header` says so, else as a bearer token), every
/// model it asks for being the gateway's.
pub fn claude_env(gw: &Gw, header: &str) -> Vec<(&'static str, String)> {
    let key_var = if header == "x-api-key" {
        "ANTHROPIC_API_KEY"
    } else {
        "ANTHROPIC_AUTH_TOKEN"
    };
    vec![
        ("ANTHROPIC_BASE_URL", format!("http://{}", gw.addr)),
        (key_var, gw.key.clone()),
        ("ANTHROPIC_MODEL", "reasoning-model-k3".into()),
        ("ANTHROPIC_SMALL_FAST_MODEL", "reasoning-model-k3".into()),
        ("ANTHROPIC_DEFAULT_HAIKU_MODEL", "reasoning-model-k3".into()),
    ]
}

/// Codex CLI's `exec` with `gw` as its model provider (the Responses API).
pub fn codex(gw: &Gw, home: &Path, prompt: &str) -> (bool, String) {
    let provider = format!(
        "model = \"reasoning-model-k3\"\nmodel_provider = \"chatgate\"\n\
         [model_providers.chatgate]\nname = \"chatgate\"\nbase_url = \"http://{}/v1\"\n\
         env_key = \"CHATGATE_API_KEY\"\nwire_api = \"responses\"\n",
        gw.addr
    );
    codex_with(&provider, &gw.key, home, prompt)
}

/// Codex CLI with `provider` (its model and provider table) in its
/// config.toml, the rest of it offline: whether it succeeded, and all it
/// printed.
pub fn codex_with(provider: &str, key: &str, home: &Path, prompt: &str) -> (bool, String) {
    let bin = repo().join("clients/codex/node_modules/.bin/codex");
    assert!(bin.exists(), "run clients/install.sh first");
    // Top-level keys first, then the tables: the switches go in tables of
    // their own after the provider's.
    std::fs::write(
        home.join("config.toml"),
        format!("{provider}\n[analytics]\nenabled = false\n[features]\nplugins = false\n"),
    )
    .unwrap();
    let work = home.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let out = Command::new(bin)
        .args(["exec", "--skip-git-repo-check", prompt])
        .current_dir(&work)
        .env("CODEX_HOME", home)
        .env("HOME", home)
        .env("TMPDIR", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("CHATGATE_API_KEY", key)
        .env("HTTPS_PROXY", REFUSED)
        .env("HTTP_PROXY", REFUSED)
        .env("ALL_PROXY", REFUSED)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdin(Stdio::null())
        .output()
        .expect("codex runs");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Gemini CLI's headless mode (`-p`, JSON output, tools run without
/// asking) against `gw` with the model `reasoning-model-k3`, in a work
/// directory under `home`, its settings (API-key sign-in, no usage
/// statistics, telemetry or updates, one attempt a request) in
/// `home/.gemini`; `env` adds or overrides variables. Whether it
/// succeeded, its JSON result, and all it printed.
pub fn gemini_cli(
    home: &Path,
    env: &[(&str, String)],
    prompt: &str,
) -> (bool, serde_json::Value, String) {
    let bin = repo().join("clients/gemini/node_modules/.bin/gemini");
    assert!(bin.exists(), "run clients/install.sh first");
    std::fs::create_dir_all(home.join(".gemini")).unwrap();
    std::fs::write(
        home.join(".gemini/settings.json"),
        r#"{"security":{"auth":{"selectedType":"gemini-api-key"}},
            "privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false},
            "general":{"enableAutoUpdate":false,"enableAutoUpdateNotification":false,"maxAttempts":1},
            "model":{"disableLoopDetection":true,"skipNextSpeakerCheck":true}}"#,
    )
    .unwrap();
    let work = home.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let mut cmd = Command::new(bin);
    cmd.args([
        "-p",
        prompt,
        "-m",
        "reasoning-model-k3",
        "--approval-mode",
        "yolo",
        "--output-format",
        "json",
    ]);
    let own = [
        ("GEMINI_CLI_TRUST_WORKSPACE", "true"),
        ("GEMINI_CLI_NO_RELAUNCH", "true"),
    ];
    run_offline(cmd, home, &work, &own, env)
}

/// The environment that points Gemini CLI at `gw` with its key.
pub fn gemini_env(gw: &Gw) -> Vec<(&'static str, String)> {
    vec![
        ("GOOGLE_GEMINI_BASE_URL", format!("http://{}", gw.addr)),
        ("GEMINI_API_KEY", gw.key.clone()),
    ]
}
