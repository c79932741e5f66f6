//! Reasoning that survives the tool loop, through both binaries, in front
//! of a provider that requires its reasoning back (the simulator as Kimi,
//! `--require-reasoning-replay kimi`: a missing reasoning is its 400, and a
//! replayed one must be exactly what it produced for those calls, so a
//! filled or wrong one fails too). Claude Code and Codex CLI run three
//! tool calls in a row; the OpenAI SDK, LangChain's ChatOpenAI and the
//! Anthropic SDK run three-step loops (each also refused as the provider
//! refuses it when the gateway strips reasoning, the default); foreign and
//! tampered reasoning is neither replayed nor refused; a fleet of two
//! instances with Redis restores on one what the other served; a
//! conversation the gateway keeps (`previous_response_id`) gives the
//! reasoning back from its kept reasoning item; and the default stays the
//! specification's, byte for byte.

use std::process::Command;

use chatgate_tests::*;
use serde_json::{Value, json};

cases!(
    claude_code_runs_three_bash_calls_with_its_thinking_replayed,
    codex_runs_three_shell_calls_with_its_reasoning_replayed,
    sdk_and_langchain_loops_replay_from_the_client_and_from_memory,
    foreign_and_tampered_reasoning_is_neither_replayed_nor_refused,
    a_fleet_restores_on_one_instance_what_another_served,
    strip_is_the_default_byte_for_byte,
    a_kept_conversation_carries_its_reasoning_back,
);

/// A simulator that requires reasoning back as Kimi does, and `args`.
fn strict_sim(bin: &str, args: &[&str]) -> Sim {
    let mut all = vec!["--require-reasoning-replay", "kimi"];
    all.extend_from_slice(args);
    Sim::start(bin, &all, &[])
}

/// A gateway serving every API in front of `sim`, replaying reasoning as
/// `replay` says, with an admin listener for its metrics.
fn gateway(bin: &str, sim: &Sim, replay: &str, extra: &[&str]) -> (Gw, std::net::SocketAddr) {
    let mut args: Vec<String> = [
        "--apis",
        "chat,responses,messages",
        "--reasoning-replay",
        replay,
        "--admin-listen",
        "127.0.0.1:0",
    ]
    .map(String::from)
    .to_vec();
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            args,
            ..GwOptions::default()
        },
    );
    let admin = gw.admin_addr();
    (gw, admin)
}

/// `chatgate_reasoning_replay_total` for `source` (0 when never counted).
fn replays(admin: std::net::SocketAddr, source: &str) -> u64 {
    let text = String::from_utf8(request(admin, "GET", "/metrics", None, None).body).unwrap();
    let name = format!("chatgate_reasoning_replay_total{{model=\"{MODEL}\",source=\"{source}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&name))
        .map_or(0, |v| v.parse().unwrap())
}

/// The provider accepted every request, and the `n` that carried tool
/// turns got their reasoning from the client.
fn every_turn_replayed_from_the_client(sim: &Sim, admin: std::net::SocketAddr, n: u64) {
    assert!(
        statuses(sim).iter().all(|s| *s == 200),
        "{:?}",
        sim.journal()
    );
    assert_eq!(replays(admin, "client"), n);
    assert_eq!(replays(admin, "memory") + replays(admin, "empty"), 0);
}

/// The statuses the simulator answered, in order.
fn statuses(sim: &Sim) -> Vec<u64> {
    sim.journal()
        .iter()
        .map(|e| e["status"].as_u64().unwrap())
        .collect()
}

fn claude_code_runs_three_bash_calls_with_its_thinking_replayed(bin: &str) {
    // The provider names its reasoning in OpenRouter's blocks; the
    // thinking blocks are made of them.
    let sim = strict_sim(bin, &["--reasoning-field", "reasoning_details"]);
    let (gw, admin) = gateway(bin, &sim, "tool_calls", &[]);
    let home = tempfile::tempdir().unwrap();
    // Claude Code asks for thinking and sends each turn's thinking block
    // back with the signature the gateway gave it.
    let (ok, out, text) = claude(
        home.path(),
        &claude_env(&gw, "bearer"),
        "Run it [[sim:tool=Bash,calls=3,input=echo chatgate-{n}]]",
    );
    assert!(ok, "{text}");
    assert_eq!(out["num_turns"], 4, "{text}");
    let result = out["result"].as_str().unwrap_or_default();
    assert!(
        result.starts_with("The tool returned: chatgate-3"),
        "{text}"
    );
    every_turn_replayed_from_the_client(&sim, admin, 3);
}

fn codex_runs_three_shell_calls_with_its_reasoning_replayed(bin: &str) {
    let sim = strict_sim(bin, &[]);
    let (gw, admin) = gateway(bin, &sim, "tool_calls", &[]);
    let home = tempfile::tempdir().unwrap();
    // Codex asks for `reasoning.encrypted_content` and sends the reasoning
    // items back as it got them, the sealed text in them.
    let (ok, text) = codex(
        &gw,
        home.path(),
        "echo chatgate-codex [[sim:calls=3,input=echo chatgate-{n}]]",
    );
    assert!(ok, "{text}");
    for n in 1..=3 {
        assert!(text.contains(&format!("echo chatgate-{n}")), "{text}");
    }
    assert!(text.contains("The tool returned:"), "{text}");
    every_turn_replayed_from_the_client(&sim, admin, 3);
}

/// `clients/python/reasoning.py` against `gw`.
fn loops(gw: &Gw, expect_refusal: bool) -> String {
    let python = repo().join(".cache/clients/venv/bin/python");
    assert!(python.exists(), "run clients/install.sh first");
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(python)
        .arg(repo().join("clients/python/reasoning.py"))
        .env("CHATGATE_TEST_BASE_URL", format!("http://{}/v1", gw.addr))
        .env("CHATGATE_TEST_KEY", &gw.key)
        .env(
            "CHATGATE_EXPECT_REFUSAL",
            if expect_refusal { "1" } else { "0" },
        )
        .env("HOME", home.path())
        .env("LANGSMITH_TRACING", "false")
        .env("HTTPS_PROXY", "http://127.0.0.1:9")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .output()
        .expect("python runs");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    text
}

fn sdk_and_langchain_loops_replay_from_the_client_and_from_memory(bin: &str) {
    let sim = strict_sim(bin, &[]);
    let (gw, admin) = gateway(bin, &sim, "tool_calls", &[]);
    let text = loops(&gw, false);
    for name in ["openai keep", "openai drop", "langchain", "anthropic"] {
        assert!(text.contains(&format!("{name} ok")), "{text}");
    }
    // Three requests of each loop carried tool turns: the OpenAI SDK's
    // own and the Anthropic SDK's signed thinking from the client; the
    // rebuilt messages and LangChain's from the memory.
    assert_eq!(replays(admin, "client"), 6);
    assert_eq!(replays(admin, "memory"), 6);
    assert_eq!(replays(admin, "empty"), 0);
    assert!(
        statuses(&sim).iter().all(|s| *s == 200),
        "{:?}",
        sim.journal()
    );
    // The same loops through the specification's default (strip): the
    // provider refuses each at its second request, as it refuses them
    // today.
    let plain = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            args: vec!["--apis".into(), "chat,messages".into()],
            ..GwOptions::default()
        },
    );
    let text = loops(&plain, true);
    for name in ["openai keep", "openai drop", "langchain", "anthropic"] {
        assert!(text.contains(&format!("{name} refused ok")), "{text}");
    }
}

/// A Messages request whose assistant turn holds `thinking` and a call
/// of `id`, and the call's result.
fn messages_turn(thinking: Value, id: &str) -> String {
    json!({"model": MODEL, "max_tokens": 1000, "thinking": {"type": "enabled", "budget_tokens": 1024},
        "tools": [{"name": "run", "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}}}],
        "messages": [
            {"role": "user", "content": "go [[sim:tools=none]]"},
            {"role": "assistant", "content": [thinking, {"type": "tool_use", "id": id, "name": "run", "input": {"cmd": "ls"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "a.txt"}]}]})
    .to_string()
}

/// What the provider was sent last for the assistant turn.
fn last_assistant(sim: &Sim) -> Value {
    let journal = sim.journal();
    let body: Value =
        serde_json::from_str(journal.last().unwrap()["body"].as_str().unwrap()).unwrap();
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .cloned()
        .unwrap()
}

fn foreign_and_tampered_reasoning_is_neither_replayed_nor_refused(bin: &str) {
    let sim = strict_sim(bin, &["--reasoning-field", "reasoning_details"]);
    let (gw, admin) = gateway(bin, &sim, "tool_calls", &[]);
    let post = |path: &str, body: &str| request(gw.addr, "POST", path, Some(&gw.key), Some(body));
    // A thinking block another model signed (a conversation begun against
    // Anthropic's API): not replayed, not refused; its call unknown here,
    // the turn is filled empty.
    let foreign = json!({"type": "thinking", "thinking": "Anthropic's reasoning", "signature": "EqQBCkYIBxgCKkBr8sSxsignedbyanthropic=="});
    let r = post("/v1/messages", &messages_turn(foreign, "toolu_elsewhere"));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(last_assistant(&sim)["reasoning_content"], "");
    assert_eq!(replays(admin, "empty"), 1);
    // A reasoning item the gateway sealed, changed by the client: not
    // replayed, not refused; the gateway served that call, so its memory
    // restores the real reasoning (which the simulator checks).
    let first = json!({"model": MODEL, "input": "list the files", "include": ["reasoning.encrypted_content"],
        "tools": [{"type": "function", "name": "run", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]});
    let r = post("/v1/responses", &first.to_string());
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let output = r.json()["output"].as_array().unwrap().clone();
    let mut reasoning = output[0].clone();
    assert_eq!(reasoning["type"], "reasoning");
    let sealed = reasoning["encrypted_content"].as_str().unwrap().to_owned();
    let mut tampered = sealed.into_bytes();
    let at = tampered.len() - 3;
    tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
    reasoning["encrypted_content"] = json!(String::from_utf8(tampered).unwrap());
    let call = output[1].clone();
    let second = json!({"model": MODEL, "input": [
        {"type": "message", "role": "user", "content": "list the files"},
        reasoning, call,
        {"type": "function_call_output", "call_id": call["call_id"], "output": "a.txt"}]});
    let r = post("/v1/responses", &second.to_string());
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["status"], "completed");
    assert_eq!(replays(admin, "memory"), 1);
    assert_eq!(replays(admin, "client"), 0);
}

fn a_fleet_restores_on_one_instance_what_another_served(bin: &str) {
    let redis = RedisServer::start();
    // A vLLM-like provider: its reasoning is `reasoning`, and it reads it
    // back by that name, as its endpoint is told.
    let sim = strict_sim(bin, &["--reasoning-field", "reasoning"]);
    let args: Vec<String> = [
        "--redis",
        &redis.url(),
        "--reasoning-replay",
        "tool_calls",
        "--reasoning-field",
        "reasoning",
        "--admin-listen",
        "127.0.0.1:0",
    ]
    .map(String::from)
    .to_vec();
    let mut fleet = gateways_sharing_a_key(
        &sim,
        "fleet",
        600,
        1_000_000,
        &[(bin, args.clone()), (bin, args)],
    );
    let admin_b = fleet[1].admin_addr();
    let tools = r#""tools":[{"type":"function","function":{"name":"run","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}}}]"#;
    let first = format!(
        r#"{{"model":"{MODEL}","stream":true,"messages":[{{"role":"user","content":"list the files"}}],{tools}}}"#
    );
    let r = fleet[0].chat(&first);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let mut id = String::new();
    let mut arguments = String::new();
    for data in sse_data(&r.body) {
        let Ok(c) = serde_json::from_str::<Value>(&data) else {
            continue;
        };
        let tc = &c["choices"][0]["delta"]["tool_calls"][0];
        if let Some(i) = tc["id"].as_str() {
            id = i.to_owned();
        }
        arguments += tc["function"]["arguments"].as_str().unwrap_or("");
    }
    assert!(!id.is_empty(), "{}", String::from_utf8_lossy(&r.body));
    // The reasoning goes to Redis under the key's hash tag, with its TTL
    // (written after the answer, without holding it back).
    let shared = format!("chatgate:reasoning:{{fleet}}:{id}");
    let ttl = || match redis.client().cmd(&[b"PTTL", shared.as_bytes()]) {
        chatgate_core::RedisReply::Integer(ms) => ms,
        other => panic!("{other:?}"),
    };
    eventually("the shared reasoning", || ttl() > 0);
    let ttl = ttl();
    assert!(ttl > 3_500_000 && ttl <= 3_600_000, "{ttl}");
    // The next turn, without reasoning, on the other instance.
    let call =
        json!({"id": id, "type": "function", "function": {"name": "run", "arguments": arguments}});
    let second = format!(
        r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"list the files"}},{{"role":"assistant","content":null,"tool_calls":[{call}]}},{{"role":"tool","tool_call_id":"{id}","content":"a.txt"}}],{tools}}}"#
    );
    let r = fleet[1].chat(&second);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(replays(admin_b, "memory"), 1);
    let sent = last_assistant(&sim);
    assert!(!sent["reasoning"].as_str().unwrap().is_empty(), "{sent}");
    assert!(sent.get("reasoning_content").is_none(), "{sent}");
    drop(fleet.pop());
}

fn strip_is_the_default_byte_for_byte(bin: &str) {
    let sim = strict_sim(bin, &[]);
    let gw = Gw::start(bin, &sim.url(), GwOptions::default());
    // A client that sends reasoning back: the specification's rule takes
    // `reasoning_content` out and changes nothing else; the provider that
    // wants it refuses (a 502, its message in ours).
    let sent = format!(
        r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"go"}},{{"role":"assistant","content":null,"reasoning_content":"mine","tool_calls":[{{"id":"c1","type":"function","function":{{"name":"run","arguments":"{{}}"}}}}]}},{{"role":"tool","tool_call_id":"c1","content":"ok"}}],"seed":7}}"#
    );
    let r = gw.chat(&sent);
    let (status, _, code, _) = r.error();
    assert_eq!((status, code.as_str()), (502, "upstream_error"));
    let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        message.contains("reasoning_content is missing in assistant tool call message at index 1"),
        "{message}"
    );
    let journal = sim.journal();
    let received = journal.last().unwrap()["body"].as_str().unwrap().to_owned();
    assert_eq!(received, sent.replace(r#","reasoning_content":"mine""#, ""));
}

/// A conversation kept by the gateway (the Responses API's
/// `previous_response_id`) gives the provider its reasoning back from the
/// kept reasoning item: the strict provider accepts the turn that answers
/// its tool call, and the replay is counted as the request's own, not the
/// memory's.
fn a_kept_conversation_carries_its_reasoning_back(bin: &str) {
    let sim = strict_sim(bin, &[]);
    // The memory off: only the kept conversation can give it back.
    let (gw, admin) = gateway(
        bin,
        &sim,
        "tool_calls",
        &["--reasoning-memory-entries", "0"],
    );
    let tools = r#"[{"type":"function","name":"run","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}}]"#;
    let post = |body: String| {
        let r = request(gw.addr, "POST", "/v1/responses", Some(&gw.key), Some(&body));
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        r.json()
    };
    let first = post(format!(
        r#"{{"model":"{MODEL}","input":"go","tools":{tools}}}"#
    ));
    let call = first["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call")
        .unwrap_or_else(|| panic!("{first}"))
        .clone();
    let second = post(format!(
        r#"{{"model":"{MODEL}","tools":{tools},"previous_response_id":{},"input":[{{"type":"function_call_output","call_id":{},"output":"ok"}}]}}"#,
        first["id"], call["call_id"]
    ));
    assert!(
        second["output"]
            .to_string()
            .contains("The tool returned: ok"),
        "{second}"
    );
    assert!(
        statuses(&sim).iter().all(|s| *s == 200),
        "{:?}",
        sim.journal()
    );
    assert_eq!(replays(admin, "client"), 1);
}
