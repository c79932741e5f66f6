//! `demo` (the gateway with the simulator in-process and a throwaway key)
//! and `sim` (the simulator alone).

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use chatgate_core::Gateway;
use chatgate_core::Limits;
use chatgate_core::WallClock;
use chatgate_core::{GatewayConfig, Target};
use chatgate_core::{KeyEntry, KeyTable, key_sha256, mint_key};
use chatgate_sim::{Fault, SimOptions, SimServer};
use clap::ArgMatches;

use crate::provider::connector::Connectors;
use crate::runtime::{Runtime, raise_fd_limit, random_32, random_u64, unix_ms_at_start};
use crate::serving::listener::bind;
use crate::serving::sim::run_sim;
use crate::stores::ledger::Ledger;
use crate::telemetry::logging::init_logging;

use super::serve::{Bound, run_bound};
use super::*;

pub(super) fn demo<R: Runtime>(rt: R, m: &ArgMatches) -> ExitCode {
    init_logging("info", false);
    match start_demo(rt, m) {
        Ok(code) => code,
        Err(e) => fail(e),
    }
}

/// `demo`: the simulator on an ephemeral port, a throwaway key and ledger,
/// and the gateway in front of them.
pub(super) fn start_demo<R: Runtime>(rt: R, m: &ArgMatches) -> Result<ExitCode, Error> {
    let listen = m
        .get_one::<String>("listen")
        .cloned()
        .or_else(|| std::env::var("CHATGATE_LISTEN").ok())
        .unwrap_or_else(|| "127.0.0.1:8080".into());
    let sim_addr = start_demo_sim(&rt)?;
    let key = mint_key(&random_32());
    let keys = KeyTable::new(vec![KeyEntry {
        name: "demo".into(),
        sha256: key_sha256(&key),
        limits: Limits::default(),
        quota: chatgate_core::Quota::default(),
        created: None,
        expires: None,
        expires_unix: None,
        models: None,
    }])
    .map_err(|e| Error::Config(e.to_string()))?;
    let ledger_path =
        std::env::temp_dir().join(format!("chatgate-demo-{}.jsonl", std::process::id()));
    let ledger_path = ledger_path.to_string_lossy().into_owned();
    let ledger = Ledger::open(&ledger_path)?;
    let upstream = Target::parse(&format!("http://{sim_addr}/v1")).map_err(Error::Config)?;
    // The console on an admin listener of its own port, with a fresh token.
    let admin = bind("127.0.0.1:0")?;
    let admin_addr = admin.local_addr().map_err(Error::Io)?;
    let admin_token: String = random_32()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut config = GatewayConfig::new(upstream.clone());
    // The simulator continues a final assistant message with `prefix`: a
    // stream it cuts (`[[sim:fault=reset,after=20]]`) is finished.
    for e in &mut config.endpoints {
        e.continuation = chatgate_core::Continuation::Prefix;
    }
    config.console_token = Some(chatgate_core::Secret::new(admin_token.clone()));
    // Every client API, so a coding agent can be pointed at it as it is.
    config.apis = chatgate_core::Apis {
        responses: true,
        messages: true,
        gemini: true,
        stored: true,
    };
    // Responses are kept beside the demo's ledger, for as long as OpenAI
    // keeps them.
    config.responses_kept = Some(chatgate_core::ResponsesKeeping::default());
    let responses_path =
        std::env::temp_dir().join(format!("chatgate-demo-{}.redb", std::process::id()));
    let responses = crate::stores::responses::ResponsesStore::open(
        &chatgate_core::ResponsesStoreAt::File(responses_path.to_string_lossy().into_owned()),
    )?;
    let gateway = Gateway::new(
        super::serve::with_signing_secret(config),
        keys,
        WallClock::new(unix_ms_at_start()),
        random_u64(),
    );
    let connectors = Connectors::new(
        rt.clone(),
        &gateway.endpoints(),
        64,
        Duration::from_secs(30),
    )?;
    // A whole message, not `Error::Net`: the way out comes after the cause.
    let listener = bind(&listen)
        .map_err(|e| Error::Config(format!("{e} (choose another address with --listen)")))?;
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or(listen);
    eprintln!(
        "\nchatgate demo: a simulated reasoning provider is built in; nothing leaves this machine.\n\
         Base URL: http://{addr}/v1\nAPI key:  {key}\nModel:    reasoning-model-k3\nLedger:   {ledger_path}\n\n\
         Try (streaming):\n  curl -N http://{addr}/v1/chat/completions \\\n    -H 'Authorization: Bearer {key}' \\\n    \
         -H 'Content-Type: application/json' \\\n    -d '{{\"model\":\"reasoning-model-k3\",\"stream\":true,\"messages\":[{{\"role\":\"user\",\"content\":\"Why is the sky blue?\"}}]}}'\n\n\
         Or point an OpenAI SDK at it:\n  OPENAI_BASE_URL=http://{addr}/v1 OPENAI_API_KEY={key}\n\n\
         Or Codex CLI (the Responses API): in ~/.codex/config.toml\n  \
         model = \"reasoning-model-k3\"\n  model_provider = \"chatgate\"\n  \
         [model_providers.chatgate]\n  name = \"chatgate\"\n  base_url = \"http://{addr}/v1\"\n  \
         env_key = \"CHATGATE_API_KEY\"\n  wire_api = \"responses\"\n\
         then: CHATGATE_API_KEY={key} codex exec \"Why is the sky blue?\"\n\n\
         Or Claude Code (the Messages API):\n  \
         ANTHROPIC_BASE_URL=http://{addr} ANTHROPIC_AUTH_TOKEN={key} \\\n  \
         ANTHROPIC_MODEL=reasoning-model-k3 ANTHROPIC_SMALL_FAST_MODEL=reasoning-model-k3 \\\n  \
         ANTHROPIC_DEFAULT_HAIKU_MODEL=reasoning-model-k3 \\\n  \
         claude -p \"Why is the sky blue?\"\n\n\
         Or Gemini CLI (the Gemini API):\n  \
         GOOGLE_GEMINI_BASE_URL=http://{addr} GEMINI_API_KEY={key} \\\n  \
         gemini -m reasoning-model-k3 -p \"Why is the sky blue?\"\n\n\
         Console:  http://{admin_addr}/\nAdmin token: {admin_token}\n\nCtrl-C stops it.\n"
    );
    let summary = format!(
        "demo upstream={} ledger={ledger_path}",
        upstream.display_url()
    );
    let bound = Bound {
        listener,
        admin: Some(admin),
        keys_src: None,
        raw_keys: None,
        endpoints_src: None,
        ledger_postgres: None,
        otlp: None,
        tls: None,
        admin_tls: None,
        responses: Some(responses),
    };
    Ok(run_bound(
        rt,
        bound,
        (gateway, None),
        connectors,
        ledger,
        &summary,
    ))
}

/// The demo's simulator, on an ephemeral port, for as long as the process
/// lives (the gateway's drain decides when that ends).
pub(super) fn start_demo_sim<R: Runtime>(rt: &R) -> Result<std::net::SocketAddr, Error> {
    let listener = bind("127.0.0.1:0")?;
    let addr = listener.local_addr().map_err(Error::Io)?;
    let wall = WallClock::new(unix_ms_at_start());
    let sim = SimServer::new(
        SimOptions {
            ttft: Duration::from_millis(300),
            token_interval: Duration::from_millis(20),
            tools_on_request: true,
            continuation: chatgate_sim::Continuation::Prefix,
            ..SimOptions::default()
        },
        wall,
    );
    let listener = rt.listener(listener).map_err(Error::Io)?;
    rt.spawn(run_sim(rt.clone(), listener, sim, std::future::pending()));
    Ok(addr)
}

pub(super) fn sim<R: Runtime>(rt: R, m: &ArgMatches) -> ExitCode {
    init_logging("warn", false);
    let ms = |k: &str| m.get_one::<u64>(k).copied().map(Duration::from_millis);
    let fault = match m.get_one::<String>("fault") {
        Some(name) => {
            let after = m.get_one::<u64>("fault-after").map(u64::to_string);
            let status = m.get_one::<u64>("fault-status").map(u64::to_string);
            let get = |k: &str| match k {
                "after" => after.clone(),
                "status" => status.clone(),
                _ => None,
            };
            match Fault::parse(name, &get) {
                Ok(f) => Some(f),
                Err(e) => return fail(e),
            }
        }
        None => None,
    };
    let options = SimOptions {
        ttft: ms("ttft-ms").unwrap_or(Duration::ZERO),
        token_interval: ms("token-ms").unwrap_or(Duration::ZERO),
        reasoning_tokens: m.get_one::<u64>("reasoning-tokens").map(|&n| n as u32),
        answer_tokens: m.get_one::<u64>("answer-tokens").map(|&n| n as u32),
        fault,
        api_key: std::env::var("CHATGATE_SIM_API_KEY")
            .ok()
            .filter(|k| !k.is_empty()),
        strict_request_id: m.get_flag("strict-request-id"),
        template_tokens: m.get_one::<u64>("template-tokens").copied().unwrap_or(0),
        tools_on_request: false,
        require_reasoning_replay: m
            .get_one::<String>("require-reasoning-replay")
            .and_then(|s| chatgate_sim::ReplayCheck::parse(s)),
        reasoning_field: m
            .get_one::<String>("reasoning-field")
            .and_then(|s| chatgate_sim::ReasoningName::parse(s))
            .unwrap_or_default(),
        continuation: m
            .get_one::<String>("continuation")
            .and_then(|s| chatgate_sim::Continuation::parse(s))
            .unwrap_or_default(),
    };
    raise_fd_limit();
    let listen = m.get_one::<String>("listen").expect("required");
    let listener = match bind(listen) {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    let listener = match rt.listener(listener) {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    // Handlers first: whoever reads the line may signal at once.
    let stop = rt.shutdown_signal();
    println!("sim listening on http://{addr}/v1");
    let _ = std::io::stdout().flush();
    let server = SimServer::new(options, WallClock::new(unix_ms_at_start()));
    rt.block_on(run_sim(rt.clone(), listener, server, stop));
    ExitCode::SUCCESS
}
