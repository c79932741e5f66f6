//! The gateways a user would pick instead, as optional rows of the lean
//! comparison: Portkey's open-source gateway (npm `@portkey-ai/gateway`)
//! and LiteLLM's proxy (PyPI `litellm[proxy]`), each in front of the same
//! static upstream and measured the same way (CPU of all their processes
//! per request).
//!
//! `bench/install-peers.sh` installs them, pinned, into the directory
//! named by `CHATGATE_BENCH_PEERS` (`bench/run.sh` does both); a peer that
//! is not there, or does not answer, is left out with a notice in the
//! report.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::procs::{Child, free_port};

/// A peer gateway, started.
pub(crate) struct Peer {
    pub name: &'static str,
    pub addr: SocketAddr,
    /// Its process group (all its processes).
    pub group: u32,
    /// wrk's script for it: the lean one with the headers it needs.
    pub lua: PathBuf,
    _child: Child,
}

/// Starts every installed peer in front of `upstream` (an OpenAI-shaped
/// base without `/v1`), each checked with a request of `body` (the
/// workload's); the notices say what was left out and why.
pub(crate) fn start(
    dir: &Path,
    upstream: SocketAddr,
    lua: &Path,
    body: &str,
) -> (Vec<Peer>, Vec<String>) {
    let Some(root) = std::env::var_os("CHATGATE_BENCH_PEERS").map(PathBuf::from) else {
        return (
            Vec::new(),
            vec!["Peers (Portkey, LiteLLM) not measured: run through `bench/run.sh`, which installs them (or set CHATGATE_BENCH_PEERS).".into()],
        );
    };
    let base_lua = std::fs::read_to_string(lua).expect("wrk script");
    let mut peers = Vec::new();
    let mut notices = Vec::new();
    for start in [portkey, litellm] {
        match start(dir, &root, upstream, &base_lua, body) {
            Ok(p) => peers.push(p),
            Err(why) => notices.push(why),
        }
    }
    (peers, notices)
}

/// Portkey's gateway 1.15.2 under Node: the provider and its base URL in
/// Portkey's headers, as its documentation shows for an OpenAI-compatible
/// server.
fn portkey(
    dir: &Path,
    root: &Path,
    upstream: SocketAddr,
    lua: &str,
    body: &str,
) -> Result<Peer, String> {
    let script = root.join("portkey/node_modules/@portkey-ai/gateway/build/start-server.js");
    if !script.exists() {
        return Err(
            "Portkey's gateway not measured: not installed (bench/install-peers.sh).".into(),
        );
    }
    let port = free_port();
    let child = Child::spawn(
        Path::new("node"),
        &[
            script.to_string_lossy().into_owned(),
            format!("--port={port}"),
            "--headless".into(),
        ],
        &[("NODE_ENV", "production")],
        &dir.join(format!("portkey-{port}.log")),
    );
    let headers = [
        ("x-portkey-provider", "openai".to_owned()),
        ("x-portkey-custom-host", format!("http://{upstream}/v1")),
    ];
    ready(
        "Portkey's gateway 1.15.2",
        child,
        port,
        dir,
        lua,
        &headers,
        body,
    )
}

/// LiteLLM's proxy 1.100.0, one worker, the upstream as an `openai/`
/// model; its cost map read from the package (no fetch).
fn litellm(
    dir: &Path,
    root: &Path,
    upstream: SocketAddr,
    lua: &str,
    body: &str,
) -> Result<Peer, String> {
    let bin = root.join("litellm/bin/litellm");
    if !bin.exists() {
        return Err("LiteLLM's proxy not measured: not installed (bench/install-peers.sh).".into());
    }
    let port = free_port();
    let config = dir.join(format!("litellm-{port}.yaml"));
    std::fs::write(
        &config,
        format!(
            "model_list:\n  - model_name: reasoning-model-k3\n    litellm_params:\n      \
             model: openai/reasoning-model-k3\n      api_base: http://{upstream}/v1\n      api_key: sk-bench\n\
             litellm_settings:\n  drop_params: true\n  telemetry: false\n"
        ),
    )
    .expect("litellm config");
    let child = Child::spawn(
        &bin,
        &[
            "--config".into(),
            config.to_string_lossy().into_owned(),
            "--host".into(),
            "127.0.0.1".into(),
            "--port".into(),
            port.to_string(),
            "--num_workers".into(),
            "1".into(),
        ],
        &[
            ("LITELLM_LOCAL_MODEL_COST_MAP", "True"),
            ("LITELLM_LOG", "ERROR"),
            ("NO_DOCS", "True"),
        ],
        &dir.join(format!("litellm-{port}.log")),
    );
    ready("LiteLLM's proxy 1.100.0", child, port, dir, lua, &[], body)
}

/// Waits (up to a minute: LiteLLM takes seconds to import) until the peer
/// answers a chat request carrying `headers` with 200; its wrk script is
/// `lua` with the same headers.
fn ready(
    name: &'static str,
    child: Child,
    port: u16,
    dir: &Path,
    lua: &str,
    headers: &[(&str, String)],
    body: &str,
) -> Result<Peer, String> {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let deadline = Instant::now() + Duration::from_secs(60);
    let probe = crate::client::chat_request("sk-bench", body);
    let probe_headers: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    loop {
        if let Some(status) = post(addr, &probe, &probe_headers) {
            if status == 200 {
                break;
            }
            return Err(format!("{name} not measured: it answered {status}."));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{name} not measured: it did not start within a minute."
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let path = dir.join(format!("peer-{port}.lua"));
    let lua: String = headers
        .iter()
        .fold(lua.to_owned(), |mut lua, (name, value)| {
            lua.push_str(&format!("wrk.headers[\"{name}\"] = \"{value}\"\n"));
            lua
        });
    std::fs::write(&path, lua).expect("wrk script");
    Ok(Peer {
        name,
        addr,
        group: child.pid(),
        lua: path,
        _child: child,
    })
}

/// One request with the extra headers: the status, or `None` if nothing
/// answered.
fn post(addr: SocketAddr, request: &[u8], headers: &str) -> Option<u16> {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let text = String::from_utf8_lossy(request);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let request = format!("{head}\r\n{headers}Connection: close\r\n\r\n{body}");
    s.write_all(request.as_bytes()).ok()?;
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let line = String::from_utf8_lossy(&got);
    line.split_whitespace().nth(1)?.parse().ok()
}
