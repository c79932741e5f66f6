//! The Anthropic Messages API (`--apis messages`) through both binaries:
//! off by default as the specification says, the Anthropic Python and
//! TypeScript SDKs (plain, streamed with thinking, a tool round trip, both
//! key headers, a refusal), what the chat exchange guarantees (retries,
//! limits, budgets, cut streams, traces, a client leaving), and Claude
//! Code itself, offline, answering and running its Bash tool.

use std::process::Command;

use chatgate_tests::*;

cases!(
    the_path_is_unknown_without_apis,
    the_python_sdk_creates_streams_and_calls_a_tool,
    the_node_sdk_creates_streams_and_calls_a_tool,
    retries_limits_and_cut_streams_hold_on_this_api,
    traces_budgets_and_a_client_leaving_hold_on_this_api,
    claude_code_answers_and_runs_its_bash_tool,
    claude_code_runs_with_the_environment_demo_prints,
    claude_code_falls_back_when_a_stream_is_cut,
);

fn with_messages(bin: &str, upstream: &str, mut args: Vec<String>) -> Gw {
    args.extend(["--apis".into(), "messages".into()]);
    let opts = GwOptions {
        args,
        ..GwOptions::default()
    };
    Gw::start(bin, upstream, opts)
}

/// A request to `/v1/messages` with the key as `x-api-key`, the header
/// the Anthropic clients send.
fn messages_raw(key: &str, body: &str) -> Vec<u8> {
    format!(
        "POST /v1/messages?beta=true HTTP/1.1\r\nHost: test\r\nx-api-key: {key}\r\n\
         anthropic-version: 2023-06-01\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn messages(gw: &Gw, body: &str) -> Response {
    let mut c = Conn::open(gw.addr);
    c.send(&messages_raw(&gw.key, body));
    c.response()
}

/// The Anthropic error's status and `error.type`.
fn anthropic_error(r: &Response) -> (u16, String) {
    let v = r.json();
    assert_eq!(v["type"], "error", "{v}");
    (
        r.status,
        v["error"]["type"].as_str().unwrap_or("").to_owned(),
    )
}

/// The stream's events: `(name, data)`.
fn sse_events(body: &[u8]) -> Vec<(String, serde_json::Value)> {
    String::from_utf8_lossy(body)
        .split("\n\n")
        .filter_map(|frame| {
            let mut lines = frame.lines();
            let name = lines.next()?.strip_prefix("event: ")?.to_owned();
            let data = lines.next()?.strip_prefix("data: ")?;
            Some((
                name,
                serde_json::from_str(data).expect("event data is JSON"),
            ))
        })
        .collect()
}

const HI: &str = r#"{"model":"reasoning-model-k3","max_tokens":400,"messages":[{"role":"user","content":"hi"}]}"#;

fn the_path_is_unknown_without_apis(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = Gw::start(bin, &sim.url(), GwOptions::default());
    let r = request(gw.addr, "POST", "/v1/messages", Some(&gw.key), Some(HI));
    let (status, _, code, _) = r.error();
    assert_eq!((status, code.as_str()), (404, "unknown_url"));
    // Turned on, the same request is answered (with the query string
    // Claude Code sends, and the key as `x-api-key`) and metered.
    let gw = with_messages(bin, &sim.url(), Vec::new());
    let r = messages(&gw, HI);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["type"], "message");
    let rec = &gw.ledger_len(1)[0];
    assert_eq!(rec.api.as_deref(), Some("messages"));
    assert!(rec.complete && rec.completion_tokens > 0, "{rec:?}");
    // `x-api-key` stands for the key on this API only: chat completions
    // keep the specification's `Authorization`.
    let mut c = Conn::open(gw.addr);
    c.send(
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nx-api-key: {}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
            gw.key,
            HI.len(),
            HI
        )
        .as_bytes(),
    );
    assert_eq!(c.response().status, 401);
    // No key at all: the Anthropic shape, naming both headers.
    let r = request(gw.addr, "POST", "/v1/messages", None, Some(HI));
    assert_eq!(anthropic_error(&r), (401, "authentication_error".into()));
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("x-api-key")
    );
    // An unknown model: not_found_error. The wrong method: 405, in the
    // same shape.
    let r = messages(&gw, &HI.replace("reasoning-model-k3", "claude-nope"));
    assert_eq!(anthropic_error(&r), (404, "not_found_error".into()));
    let r = request(gw.addr, "GET", "/v1/messages", Some(&gw.key), None);
    assert_eq!(anthropic_error(&r), (405, "invalid_request_error".into()));
    assert_eq!(r.header("allow"), Some("POST"));
}

fn the_python_sdk_creates_streams_and_calls_a_tool(bin: &str) {
    let python = repo().join(".cache/clients/venv/bin/python");
    assert!(python.exists(), "run clients/install.sh first");
    let out = sdk_scenario(
        bin,
        Command::new(python).arg(repo().join("clients/python/messages.py")),
    );
    // `messages.count_tokens` answered, and not metered (the ledger has
    // the six lines of the others).
    assert!(out.contains("count ok"), "{out}");
}

fn the_node_sdk_creates_streams_and_calls_a_tool(bin: &str) {
    let dir = repo().join("clients/node");
    assert!(
        dir.join("node_modules/@anthropic-ai/sdk").exists(),
        "run clients/install.sh first"
    );
    sdk_scenario(bin, Command::new("node").arg(dir.join("messages.mjs")));
}

/// Runs an SDK's scenario against a gateway serving the Messages API;
/// checks it passed every step and what the ledger recorded; its output.
fn sdk_scenario(bin: &str, cmd: &mut Command) -> String {
    let sim = Sim::start(bin, &[], &[]);
    let gw = with_messages(bin, &sim.url(), Vec::new());
    let out = cmd
        .env("ANTHROPIC_BASE_URL", format!("http://{}", gw.addr))
        .env("CHATGATE_API_KEY", &gw.key)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_AUTH_TOKEN")
        .output()
        .expect("the scenario runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "plain ok",
        "bearer ok",
        "stream ok",
        "tool ok",
        "refusal ok",
    ] {
        assert!(text.contains(line), "{text}");
    }
    // Five answers and the refusal, each named.
    let ledger = gw.ledger_len(6);
    assert!(
        ledger.iter().all(|r| r.api.as_deref() == Some("messages")),
        "{ledger:?}"
    );
    let statuses: Vec<u16> = ledger.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 400]);
    assert!(ledger.iter().any(|r| r.stream), "the streamed one");
    assert!(
        ledger
            .iter()
            .any(|r| r.finish_reason.as_deref() == Some("tool_calls"))
    );
    assert_eq!(gw.ledger().len(), 6, "nothing else metered");
    text.into_owned()
}

/// What the chat exchange guarantees holds here too: a transient provider
/// failure retried before the first byte; a provider that stays
/// overloaded answered with `overloaded_error` (529); a key's rate limit
/// with `rate_limit_error` and `retry-after`; a stream cut by the provider
/// ended with an `error` event (never `message_stop`) and metered as
/// incomplete.
fn retries_limits_and_cut_streams_hold_on_this_api(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = with_messages(bin, &sim.url(), Vec::new());
    sim.set_fault(r#"{"fault":"reject","status":503,"times":1}"#);
    let r = messages(&gw, HI);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["stop_reason"], "end_turn");
    let rec = &gw.ledger_len(1)[0];
    assert_eq!((rec.attempts, rec.api.as_deref()), (2, Some("messages")));

    sim.set_fault(r#"{"fault":"reject","status":503,"times":3}"#);
    let r = messages(&gw, HI);
    assert_eq!(anthropic_error(&r), (529, "overloaded_error".into()));
    let rec = &gw.ledger_len(2)[1];
    assert_eq!(rec.status, 529, "{rec:?}");

    let cut = r#"{"model":"reasoning-model-k3","max_tokens":400,"stream":true,"messages":[{"role":"user","content":"go on [[sim:fault=reset,after=6]]"}]}"#;
    let r = messages(&gw, cut);
    assert_eq!(r.status, 200);
    let events = sse_events(&r.body);
    let (last, data) = events.last().expect("events");
    assert_eq!(last, "error", "{events:?}");
    assert_eq!(data["error"]["type"], "api_error");
    assert!(
        events.iter().all(|(n, _)| n != "message_stop"),
        "{events:?}"
    );
    let rec = &gw.ledger_len(3)[2];
    assert!(!rec.complete && rec.stream, "{rec:?}");

    let opts = GwOptions {
        args: vec!["--apis".into(), "messages".into()],
        rpm: Some(1),
        ..GwOptions::default()
    };
    let limited = Gw::start(bin, &sim.url(), opts);
    assert_eq!(messages(&limited, HI).status, 200);
    let r = messages(&limited, HI);
    assert_eq!(anthropic_error(&r), (429, "rate_limit_error".into()));
    assert!(r.header("retry-after").is_some(), "{:?}", r.headers);
}

/// A trace whose server span names the API and matches the ledger, a
/// client that leaves mid-stream stopping the provider's answer, and a
/// budget too small for Claude Code's `max_tokens` refusing before the
/// provider with what was spent.
fn traces_budgets_and_a_client_leaving_hold_on_this_api(bin: &str) {
    let receiver = OtlpReceiver::start();
    let sim = Sim::start(bin, &[], &[]);
    let gw = with_messages(
        bin,
        &sim.url(),
        vec!["--otlp-endpoint".into(), receiver.url()],
    );
    assert_eq!(messages(&gw, HI).status, 200);
    let rec = gw.ledger_len(1)[0].clone();
    let mut spans = Vec::new();
    eventually("the request's spans", || {
        spans = receiver.spans();
        spans.len() >= 2
    });
    let server = spans
        .iter()
        .find(|s| s["kind"] == "server")
        .unwrap_or_else(|| panic!("{spans:#?}"));
    let a = &server["attributes"];
    assert_eq!(a["chatgate.api"], "messages");
    assert_eq!(a["url.path"], "/v1/messages");
    assert_eq!(a["chatgate.request_id"], rec.request_id.as_str());
    assert_eq!(a["gen_ai.usage.output_tokens"], rec.completion_tokens);

    // A client that leaves mid-stream: the provider's answer stops too.
    let mut c = Conn::open(gw.addr);
    let slow = r#"{"model":"reasoning-model-k3","max_tokens":2000,"stream":true,"thinking":{"type":"adaptive"},"messages":[{"role":"user","content":"slowly [[sim:token_ms=50]]"}]}"#;
    c.send(&messages_raw(&gw.key, slow));
    c.read_until("thinking_delta");
    drop(c);
    let rec = gw.ledger_len(2)[1].clone();
    assert!(rec.client_disconnected && !rec.complete, "{rec:?}");
    assert_eq!(sim.settled(1)["outcome"], "aborted");

    // A budget that a request of Claude Code's size (32000 output tokens
    // reserved) does not fit: refused before the provider.
    let broke = with_messages(
        bin,
        &sim.url(),
        vec!["--default-budget-usd".into(), "0.01".into()],
    );
    let asked = sim.journal().len();
    let big = HI.replace("400", "32000");
    let r = messages(&broke, &big);
    assert_eq!(anthropic_error(&r), (429, "rate_limit_error".into()));
    let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("budget"), "{message}");
    assert_eq!(r.header("x-should-retry"), Some("false"));
    assert_eq!(sim.journal().len(), asked, "the provider was not asked");
}

fn claude_code_answers_and_runs_its_bash_tool(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = with_messages(bin, &sim.url(), Vec::new());
    let home = tempfile::tempdir().unwrap();
    // A plain answer (the simulator told to answer in words), the key as
    // `x-api-key`.
    let (ok, out, text) = claude(
        home.path(),
        &claude_env(&gw, "x-api-key"),
        "Say hello [[sim:tools=none]]",
    );
    assert!(ok, "{text}");
    assert_eq!(out["is_error"], false, "{text}");
    let result = out["result"].as_str().unwrap_or_default();
    assert!(result.starts_with("You said: Say hello"), "{text}");
    // The simulator calls Claude Code's Bash tool with a command; Claude
    // Code runs it and the final answer quotes its output. The key as a
    // bearer token this time.
    let (ok, out, text) = claude(
        home.path(),
        &claude_env(&gw, "bearer"),
        "Run it [[sim:tool=Bash,input=echo chatgate-claude-ok]]",
    );
    assert!(ok, "{text}");
    assert_eq!(out["num_turns"], 2, "{text}");
    let result = out["result"].as_str().unwrap_or_default();
    assert!(
        result.starts_with("The tool returned: chatgate-claude-ok"),
        "{text}"
    );
    let ledger = gw.ledger();
    assert_eq!(ledger.len(), 3, "{ledger:?}");
    assert!(
        ledger
            .iter()
            .all(|r| r.api.as_deref() == Some("messages") && r.stream && r.complete)
    );
    assert_eq!(ledger[1].finish_reason.as_deref(), Some("tool_calls"));
}

/// `demo` prints the environment that points Claude Code at it; with
/// exactly those variables, Claude Code answers through the demo.
fn claude_code_runs_with_the_environment_demo_prints(bin: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (_demo, _, banner, key) = start_demo(bin, dir.path());
    let section: Vec<&str> = banner
        .lines()
        .skip_while(|l| !l.contains("Or Claude Code"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    let mut env = Vec::new();
    let mut command = None;
    for word in section.iter().flat_map(|l| l.split_whitespace()) {
        if let Some((k, v)) = word.split_once('=')
            && k.chars().all(|c| c.is_ascii_uppercase() || c == '_')
        {
            env.push((k.to_owned(), v.to_owned()));
        }
        if word == "claude" {
            command = Some(());
        }
    }
    assert!(command.is_some(), "{banner}");
    let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
    for want in [
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_MODEL",
        "ANTHROPIC_SMALL_FAST_MODEL",
    ] {
        assert!(names.contains(&want), "{banner}");
    }
    assert!(env.iter().any(|(_, v)| *v == key), "{banner}");
    let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let home = tempfile::tempdir().unwrap();
    let (ok, out, text) = claude(home.path(), &env, "Why is the sky blue?");
    assert!(ok, "{text}");
    let result = out["result"].as_str().unwrap_or_default();
    assert!(
        result.starts_with("You said: Why is the sky blue?"),
        "{text}"
    );
}

/// A provider stream cut mid-answer ends with an `error` event, never a
/// `message_stop`: Claude Code does not take the truncated answer; it asks
/// again without streaming, and that answer is the one it shows.
fn claude_code_falls_back_when_a_stream_is_cut(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = with_messages(bin, &sim.url(), Vec::new());
    sim.set_fault(r#"{"fault":"reset","after":8,"times":1}"#);
    let home = tempfile::tempdir().unwrap();
    let (ok, out, text) = claude(
        home.path(),
        &claude_env(&gw, "bearer"),
        "Say hello [[sim:tools=none]]",
    );
    assert!(ok, "{text}");
    let result = out["result"].as_str().unwrap_or_default();
    assert!(result.starts_with("You said: Say hello"), "{text}");
    let ledger = gw.ledger();
    assert!(ledger.len() >= 2, "{ledger:?}");
    assert!(ledger[0].stream && !ledger[0].complete, "{ledger:?}");
    let last = ledger.last().unwrap();
    assert!(
        last.complete && last.api.as_deref() == Some("messages"),
        "{ledger:?}"
    );
    assert!(
        !last.stream,
        "the answer shown came without streaming: {ledger:?}"
    );
}
