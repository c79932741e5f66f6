//! The OpenAI Responses API (`--apis responses`) through both binaries:
//! off by default as the specification says, the OpenAI Python SDK's
//! `responses.create` (plain, streamed, a function tool round trip), and
//! Codex CLI itself, offline, answering and running its shell tool.

use std::process::Command;

use chatgate_tests::*;

cases!(
    the_path_is_unknown_without_apis,
    the_python_sdk_creates_streams_and_calls_a_tool,
    the_node_sdk_creates_streams_and_calls_a_tool,
    retries_limits_and_cut_streams_hold_on_this_api,
    codex_runs_on_the_table_demo_prints,
    codex_retries_a_turn_whose_stream_is_cut,
    traces_budgets_and_a_client_leaving_hold_on_this_api,
    codex_answers_and_runs_its_shell_tool,
    the_python_sdk_continues_kept_responses,
    kept_responses_survive_a_restart,
    a_second_instance_on_the_same_file_is_refused,
    kept_responses_expire_and_their_caps_refuse,
    the_ai_sdk_runs_a_tool_loop_on_item_references,
    the_agents_sdk_chains_runs_by_previous_response_id,
    the_python_sdk_polls_resumes_and_cancels_background_runs,
    a_drain_finishes_a_background_run_and_a_crash_fails_it,
    the_node_sdk_continues_and_runs_in_the_background,
    codex_asking_for_websockets_falls_back_at_once,
);

fn with_responses(bin: &str, upstream: &str) -> Gw {
    let opts = GwOptions {
        args: vec!["--apis".into(), "chat,responses".into()],
        ..GwOptions::default()
    };
    Gw::start(bin, upstream, opts)
}

fn the_path_is_unknown_without_apis(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = Gw::start(bin, &sim.url(), GwOptions::default());
    let body = r#"{"model":"reasoning-model-k3","input":"hi"}"#;
    let r = request(gw.addr, "POST", "/v1/responses", Some(&gw.key), Some(body));
    let (status, _, code, _) = r.error();
    assert_eq!((status, code.as_str()), (404, "unknown_url"));
    // Turned on, the same request is answered and metered.
    let gw = with_responses(bin, &sim.url());
    let r = request(gw.addr, "POST", "/v1/responses", Some(&gw.key), Some(body));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let rec = &gw.ledger_len(1)[0];
    assert_eq!(rec.api.as_deref(), Some("responses"));
    assert!(rec.complete && rec.completion_tokens > 0, "{rec:?}");
}

fn the_python_sdk_creates_streams_and_calls_a_tool(bin: &str) {
    let python = repo().join(".cache/clients/venv/bin/python");
    assert!(python.exists(), "run clients/install.sh first");
    sdk_scenario(
        bin,
        Command::new(python).arg(repo().join("clients/python/responses.py")),
    );
}

/// A gateway serving the Responses API with its store on (the default),
/// and a second key, `other`.
fn keeping(bin: &str, upstream: &str) -> Gw {
    let opts = GwOptions {
        args: vec!["--apis".into(), "chat,responses".into()],
        extra_keys: vec![("other".into(), None, None)],
        ..GwOptions::default()
    };
    Gw::start(bin, upstream, opts)
}

fn the_python_sdk_continues_kept_responses(bin: &str) {
    let python = repo().join(".cache/clients/venv/bin/python");
    assert!(python.exists(), "run clients/install.sh first");
    let sim = Sim::start(bin, &[], &[]);
    let gw = keeping(bin, &sim.url());
    let out = Command::new(python)
        .arg(repo().join("clients/python/responses_state.py"))
        .env("OPENAI_BASE_URL", format!("http://{}/v1", gw.addr))
        .env("OPENAI_API_KEY", &gw.key)
        .env("OTHER_API_KEY", &gw.keys["other"])
        .output()
        .expect("python runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "chain ok",
        "retrieve ok",
        "input items ok",
        "reference ok",
        "scoped ok",
        "delete ok",
    ] {
        assert!(text.contains(line), "{text}");
    }
    // What the provider was sent: turn 2 carried turn 1 (the question and
    // the tool call) before the tool's output; turn 3 all of it; the
    // reference, turn 2's answer.
    let journal = sim.journal();
    let messages = |i: usize| -> Vec<serde_json::Value> {
        let body: serde_json::Value =
            serde_json::from_str(journal[i]["body"].as_str().unwrap()).unwrap();
        body["messages"].as_array().unwrap().clone()
    };
    let roles = |i: usize| -> Vec<String> {
        messages(i)
            .iter()
            .map(|m| m["role"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(roles(1), ["user", "assistant", "tool"]);
    assert_eq!(roles(2), ["user", "assistant", "tool", "assistant", "user"]);
    assert_eq!(messages(2)[0]["content"], "Paris");
    assert_eq!(roles(3), ["assistant", "user"]);
    let referenced = messages(3)[0]["content"].to_string();
    assert!(
        referenced.contains("The tool returned: sunny 21C"),
        "{referenced}"
    );
    // The ledger names each kept response (not the one sent with store
    // false, nor the refusals).
    let ledger = gw.ledger();
    let kept: Vec<&str> = ledger
        .iter()
        .filter_map(|r| r.response_id.as_deref())
        .collect();
    assert_eq!(kept.len(), 3, "{ledger:?}");
    assert!(kept.iter().all(|id| id.starts_with("resp_")), "{kept:?}");
    // Each turn is metered for the whole conversation it sent the
    // provider: the prompt grows turn by turn.
    let prompts: Vec<u64> = ledger
        .iter()
        .filter(|r| r.response_id.is_some())
        .map(|r| r.prompt_tokens)
        .collect();
    assert!(prompts.windows(2).all(|w| w[0] < w[1]), "{prompts:?}");
}

/// The embedded store is one process's: a second `serve` on the same file
/// stops at start, with one line naming it.
fn a_second_instance_on_the_same_file_is_refused(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = keeping(bin, &sim.url());
    let dir = gw.dir.path();
    let path = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let (code, _, err) = run(
        bin,
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &sim.url(),
            "--keys",
            &path("keys.toml"),
            "--ledger",
            &path("second-ledger.jsonl"),
            "--apis",
            "chat,responses",
            "--responses-store",
            &path("chatgate-responses.redb"),
        ],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("cannot open the responses store") && err.contains("chatgate-responses.redb"),
        "{err}"
    );
    // The first one serves on.
    let r = responses(
        &gw,
        r#"{"model":"reasoning-model-k3","input":"still here"}"#,
    );
    assert_eq!(r.status, 200);
}

fn kept_responses_survive_a_restart(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = keeping(bin, &sim.url());
    let r = responses(
        &gw,
        r#"{"model":"reasoning-model-k3","input":"Remember me"}"#,
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let id = r.json()["id"].as_str().unwrap().to_owned();
    // Stopped (a drain), then started again on the same files.
    let Gw { proc, dir, key, .. } = gw;
    proc.signal(15);
    let mut proc = proc;
    assert!(proc.wait_exit(std::time::Duration::from_secs(20)).is_some());
    let opts = GwOptions {
        args: vec!["--apis".into(), "chat,responses".into()],
        ..GwOptions::default()
    };
    let gw = Gw::start_with_keys(bin, &sim.url(), opts, dir, key);
    let got = request(
        gw.addr,
        "GET",
        &format!("/v1/responses/{id}"),
        Some(&gw.key),
        None,
    );
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    assert_eq!(got.json()["output"], r.json()["output"]);
    let next = responses(
        &gw,
        &format!(
            r#"{{"model":"reasoning-model-k3","input":"Again","previous_response_id":"{id}"}}"#
        ),
    );
    assert_eq!(next.status, 200, "{}", String::from_utf8_lossy(&next.body));
    let last = sim.journal().pop().unwrap();
    assert!(
        last["body"].as_str().unwrap().contains("Remember me"),
        "{last}"
    );
}

fn the_node_sdk_creates_streams_and_calls_a_tool(bin: &str) {
    sdk_scenario(bin, &mut node("openai", "responses.mjs"));
}

/// Runs an SDK's scenario against a gateway serving the Responses API;
/// checks it passed every step and what the ledger recorded.
fn sdk_scenario(bin: &str, cmd: &mut Command) {
    let sim = Sim::start(bin, &[], &[]);
    // Stateless, as before the store: `previous_response_id` is refused.
    let opts = GwOptions {
        args: ["--apis", "chat,responses", "--responses-store", "off"]
            .map(str::to_owned)
            .to_vec(),
        ..GwOptions::default()
    };
    let gw = Gw::start(bin, &sim.url(), opts);
    let out = cmd
        .env("OPENAI_BASE_URL", format!("http://{}/v1", gw.addr))
        .env("OPENAI_API_KEY", &gw.key)
        .output()
        .expect("python runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in ["plain ok", "stream ok", "tool ok", "refusal ok"] {
        assert!(text.contains(line), "{text}");
    }
    // Four answers and the refusal, each named.
    let ledger = gw.ledger_len(5);
    assert!(
        ledger.iter().all(|r| r.api.as_deref() == Some("responses")),
        "{ledger:?}"
    );
    let statuses: Vec<u16> = ledger.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 200, 200, 200, 400]);
    assert!(ledger.iter().any(|r| r.stream), "the streamed one");
}

fn codex_answers_and_runs_its_shell_tool(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = with_responses(bin, &sim.url());
    let home = tempfile::tempdir().unwrap();
    // A plain answer (the simulator told to answer in words).
    let (ok, text) = codex(&gw, home.path(), "Say hello [[sim:tools=none]]");
    assert!(ok, "{text}");
    assert!(text.contains("You said: Say hello"), "{text}");
    // The simulator calls the first tool (Codex's shell) with the prompt
    // as its command; Codex runs it and the answer quotes its output.
    let (ok, text) = codex(&gw, home.path(), "echo chatgate-codex-ok");
    assert!(ok, "{text}");
    assert!(text.contains("The tool returned:"), "{text}");
    let quoted = text
        .lines()
        .filter(|l| l.contains("The tool returned:") || l.contains("chatgate-codex-ok"))
        .count();
    assert!(quoted >= 2, "{text}");
    let ledger = gw.ledger();
    assert!(ledger.len() >= 3, "{ledger:?}");
    assert!(ledger.iter().all(|r| r.api.as_deref() == Some("responses")));
    assert!(
        ledger
            .iter()
            .any(|r| r.finish_reason.as_deref() == Some("tool_calls"))
    );
}

fn responses(gw: &Gw, body: &str) -> Response {
    request(gw.addr, "POST", "/v1/responses", Some(&gw.key), Some(body))
}

/// What the chat exchange guarantees holds here too: a transient provider
/// failure retried before the first byte, a key's rate limit answered with
/// a JSON 429, a stream cut by the provider ended with `response.failed`
/// (never `response.completed`) and metered as incomplete.
fn retries_limits_and_cut_streams_hold_on_this_api(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = with_responses(bin, &sim.url());
    sim.set_fault(r#"{"fault":"reject","status":503,"times":1}"#);
    let r = responses(&gw, r#"{"model":"reasoning-model-k3","input":"hi"}"#);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["status"], "completed");
    let rec = &gw.ledger_len(1)[0];
    assert_eq!((rec.attempts, rec.api.as_deref()), (2, Some("responses")));

    let r = responses(
        &gw,
        r#"{"model":"reasoning-model-k3","stream":true,"input":"go on [[sim:fault=reset,after=6]]"}"#,
    );
    assert_eq!(r.status, 200);
    let body = String::from_utf8_lossy(&r.body).into_owned();
    let last = body
        .split("\n\n")
        .filter(|e| e.starts_with("event: "))
        .last()
        .unwrap_or_default();
    assert!(last.starts_with("event: response.failed"), "{body}");
    assert!(!body.contains("response.completed"), "{body}");
    let rec = &gw.ledger_len(2)[1];
    assert!(!rec.complete && rec.stream, "{rec:?}");

    let opts = GwOptions {
        args: vec!["--apis".into(), "responses".into()],
        rpm: Some(1),
        ..GwOptions::default()
    };
    let limited = Gw::start(bin, &sim.url(), opts);
    let body = r#"{"model":"reasoning-model-k3","input":"hi"}"#;
    assert_eq!(responses(&limited, body).status, 200);
    let (status, _, code, _) = responses(&limited, body).error();
    assert_eq!((status, code.as_str()), (429, "rate_limit_exceeded"));
}

/// `demo` prints a Codex provider table beside its curl line; pasted as it
/// is into Codex's config, Codex answers through the demo.
fn codex_runs_on_the_table_demo_prints(bin: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (_demo, _, banner, key) = start_demo(bin, dir.path());
    let table: String = banner
        .lines()
        .skip_while(|l| !l.contains("~/.codex/config.toml"))
        .skip(1)
        .take_while(|l| !l.starts_with("then:"))
        .map(|l| format!("{}\n", l.trim()))
        .collect();
    assert!(table.contains("wire_api = \"responses\""), "{banner}");
    let then = banner
        .lines()
        .find(|l| l.starts_with("then: "))
        .unwrap_or_else(|| panic!("{banner}"));
    assert!(
        then.contains(&format!("CHATGATE_API_KEY={key} codex exec")),
        "{then}"
    );
    let home = tempfile::tempdir().unwrap();
    let (ok, text) = codex_with(&table, &key, home.path(), "Say hello [[sim:tools=none]]");
    assert!(ok, "{text}");
    assert!(text.contains("You said: Say hello"), "{text}");
}

/// A provider stream cut mid-answer ends with `response.failed`, never
/// `response.completed`: Codex does not take the truncated answer, it
/// tries the turn again (five more times) and then says so.
fn codex_retries_a_turn_whose_stream_is_cut(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = with_responses(bin, &sim.url());
    let home = tempfile::tempdir().unwrap();
    let (ok, text) = codex(
        &gw,
        home.path(),
        "Say hello [[sim:fault=reset,after=8,tools=none]]",
    );
    assert!(!ok, "{text}");
    assert!(
        text.contains("stream disconnected before completion"),
        "{text}"
    );
    assert!(
        !text.contains("You said: Say hello"),
        "no truncated answer shown as the answer: {text}"
    );
    let ledger = gw.ledger_len(2);
    assert!(
        ledger
            .iter()
            .all(|r| !r.complete && r.api.as_deref() == Some("responses")),
        "{ledger:?}"
    );
}

/// The rest of what a chat request gets, through this API: a trace whose
/// server span names the API and matches the ledger, a budget that refuses
/// with `insufficient_quota`, and a client that leaves mid-stream stopping
/// the provider's answer, metered as disconnected.
fn traces_budgets_and_a_client_leaving_hold_on_this_api(bin: &str) {
    let receiver = OtlpReceiver::start();
    let sim = Sim::start(bin, &[], &[]);
    let opts = GwOptions {
        args: vec![
            "--apis".into(),
            "responses".into(),
            "--otlp-endpoint".into(),
            receiver.url(),
        ],
        ..GwOptions::default()
    };
    let gw = Gw::start(bin, &sim.url(), opts);
    let r = responses(&gw, r#"{"model":"reasoning-model-k3","input":"hi"}"#);
    assert_eq!(r.status, 200);
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
    assert_eq!(a["chatgate.api"], "responses");
    assert_eq!(a["url.path"], "/v1/responses");
    assert_eq!(a["chatgate.request_id"], rec.request_id.as_str());
    assert_eq!(a["gen_ai.usage.output_tokens"], rec.completion_tokens);

    // A client that leaves mid-stream: the provider's answer stops too.
    let mut c = Conn::open(gw.addr);
    let slow =
        r#"{"model":"reasoning-model-k3","stream":true,"input":"slowly [[sim:token_ms=50]]"}"#;
    c.send(&raw_request(
        "POST",
        "/v1/responses",
        Some(&gw.key),
        Some(slow),
    ));
    c.read_until("response.reasoning_summary_text.delta");
    drop(c);
    let rec = gw.ledger_len(2)[1].clone();
    assert!(rec.client_disconnected && !rec.complete, "{rec:?}");
    assert_eq!(sim.settled(1)["outcome"], "aborted");

    // A budget too small for one request: refused before the provider.
    let opts = GwOptions {
        args: vec![
            "--apis".into(),
            "responses".into(),
            "--default-budget-usd".into(),
            "0.000001".into(),
        ],
        ..GwOptions::default()
    };
    let broke = Gw::start(bin, &sim.url(), opts);
    let asked = sim.journal().len();
    let (status, _, code, _) =
        responses(&broke, r#"{"model":"reasoning-model-k3","input":"hi"}"#).error();
    assert_eq!((status, code.as_str()), (429, "insufficient_quota"));
    assert_eq!(sim.journal().len(), asked, "the provider was not asked");
}

fn kept_responses_expire_and_their_caps_refuse(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let start = |extra: &[&str]| {
        let mut args = vec!["--apis".to_owned(), "chat,responses".to_owned()];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        Gw::start(
            bin,
            &sim.url(),
            GwOptions {
                args,
                ..GwOptions::default()
            },
        )
    };
    let ask = r#"{"model":"reasoning-model-k3","input":"Keep me"}"#;
    // Kept for two seconds: then gone, everywhere.
    let gw = start(&["--responses-ttl", "2s"]);
    let r = responses(&gw, ask);
    assert_eq!(r.status, 200);
    let id = r.json()["id"].as_str().unwrap().to_owned();
    let get = |gw: &Gw| {
        request(
            gw.addr,
            "GET",
            &format!("/v1/responses/{id}"),
            Some(&gw.key),
            None,
        )
    };
    assert_eq!(get(&gw).status, 200);
    std::thread::sleep(std::time::Duration::from_millis(2_500));
    let gone = get(&gw);
    assert_eq!(gone.status, 404, "{}", String::from_utf8_lossy(&gone.body));
    let next = responses(
        &gw,
        &format!(r#"{{"model":"reasoning-model-k3","input":"x","previous_response_id":"{id}"}}"#),
    );
    assert_eq!(next.status, 404);
    assert_eq!(next.json()["error"]["code"], "previous_response_not_found");

    // A key's cap: the first response is kept, the key is then full, and
    // `store: true` is refused before the provider is asked; `store:
    // false` still answers.
    let gw = start(&["--responses-key-max-bytes", "1000"]);
    assert_eq!(responses(&gw, ask).status, 200);
    let asked = sim.journal().len();
    let full = responses(&gw, ask);
    assert_eq!(full.status, 400, "{}", String::from_utf8_lossy(&full.body));
    assert_eq!(full.json()["error"]["param"], "store");
    assert!(
        full.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("store': false"),
        "{}",
        full.json()
    );
    assert_eq!(sim.journal().len(), asked, "the provider was not asked");
    let unkept = responses(
        &gw,
        r#"{"model":"reasoning-model-k3","input":"x","store":false}"#,
    );
    assert_eq!(unkept.status, 200);

    // One response's cap: an input larger than it is refused up front.
    let gw = start(&["--responses-max-bytes", "200"]);
    let big = format!(
        r#"{{"model":"reasoning-model-k3","input":"{}"}}"#,
        "a".repeat(400)
    );
    let refused = responses(&gw, &big);
    assert_eq!(refused.status, 400);
    assert_eq!(refused.json()["error"]["param"], "input");
    // Its ledger line says it was refused, and names no kept response.
    let ledger = gw.ledger_len(1);
    assert_eq!(ledger[0].status, 400);
    assert_eq!(ledger[0].response_id, None);
}

/// Two instances, smol and tokio, keeping responses in `pg`, sharing the
/// key `team`; and their arguments.
fn postgres_fleet(sim: &Sim, pg: &PgServer) -> (Vec<Gw>, Vec<String>) {
    let args = vec![
        "--apis".to_owned(),
        "chat,responses".into(),
        "--responses-store".into(),
        pg.url(),
    ];
    let each = ["chatgate-smol", "chatgate-tokio"].map(|bin| (bin, args.clone()));
    let gws = gateways_sharing_a_key(sim, "team", 100_000, 100_000_000, &each);
    (gws, args)
}

/// Two instances, smol and tokio, keep responses in one PostgreSQL: each
/// continues the other's conversations, reads and deletes the other's
/// responses; a third started later has them too.
#[test]
fn two_instances_share_kept_responses_in_postgres() {
    let pg = PgServer::start();
    let sim = Sim::start(RUNTIMES[0], &[], &[]);
    let (gws, args) = postgres_fleet(&sim, &pg);
    let first = responses(&gws[0], r#"{"model":"reasoning-model-k3","input":"Paris"}"#);
    assert_eq!(
        first.status,
        200,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    let id = first.json()["id"].as_str().unwrap().to_owned();
    let second = responses(
        &gws[1],
        &format!(
            r#"{{"model":"reasoning-model-k3","input":"And Rome?","previous_response_id":"{id}","stream":true}}"#
        ),
    );
    assert_eq!(
        second.status,
        200,
        "{}",
        String::from_utf8_lossy(&second.body)
    );
    let last = sim.journal().pop().unwrap();
    let body: serde_json::Value = serde_json::from_str(last["body"].as_str().unwrap()).unwrap();
    let roles: Vec<&str> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert_eq!(body["messages"][0]["content"], "Paris");
    let second_id = second
        .events()
        .iter()
        .find_map(|e| {
            let v: serde_json::Value = serde_json::from_str(e).ok()?;
            (v["type"] == "response.completed")
                .then(|| v["response"]["id"].as_str().unwrap().to_owned())
        })
        .expect("a completed event");
    // The first instance reads the second's, through its conversation.
    let items = request(
        gws[0].addr,
        "GET",
        &format!("/v1/responses/{second_id}/input_items?order=asc"),
        Some(&gws[0].key),
        None,
    );
    assert_eq!(
        items.status,
        200,
        "{}",
        String::from_utf8_lossy(&items.body)
    );
    let data = items.json()["data"].as_array().unwrap().clone();
    assert_eq!(data.first().unwrap()["content"][0]["text"], "Paris");
    assert_eq!(data.last().unwrap()["content"][0]["text"], "And Rome?");
    // A third instance, started later, has them too; one deleted on one
    // instance is gone on the others.
    let third = gateways_sharing_a_key(
        &sim,
        "team",
        100_000,
        100_000_000,
        &[("chatgate-smol", args.clone())],
    );
    let got = request(
        third[0].addr,
        "GET",
        &format!("/v1/responses/{second_id}"),
        Some(&third[0].key),
        None,
    );
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    let del = request(
        gws[1].addr,
        "DELETE",
        &format!("/v1/responses/{id}"),
        Some(&gws[1].key),
        None,
    );
    assert_eq!(del.status, 200, "{}", String::from_utf8_lossy(&del.body));
    assert_eq!(del.json()["deleted"], true);
    let gone = request(
        gws[0].addr,
        "GET",
        &format!("/v1/responses/{id}"),
        Some(&gws[0].key),
        None,
    );
    assert_eq!(gone.status, 404);
    let kept = request(
        gws[0].addr,
        "GET",
        &format!("/v1/responses/{second_id}"),
        Some(&gws[0].key),
        None,
    );
    assert_eq!(kept.status, 200);
    // What PostgreSQL holds: one row, its bytes counted for the key.
    let mut c = pg.client();
    let rows: i64 = c
        .query_one("SELECT count(*) FROM chatgate_responses", &[])
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
    let bytes: i64 = c
        .query_one(
            "SELECT bytes FROM chatgate_response_bytes WHERE key_name = 'team'",
            &[],
        )
        .unwrap()
        .get(0);
    let row_bytes: i64 = c
        .query_one("SELECT bytes FROM chatgate_responses", &[])
        .unwrap()
        .get(0);
    assert_eq!(bytes, row_bytes);
}

/// Runs a client scenario against a gateway keeping responses: it must
/// pass and print each of `lines`.
fn kept_scenario(bin: &str, cmd: &mut Command, lines: &[&str]) -> (Sim, Gw) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = keeping(bin, &sim.url());
    let out = cmd
        .env("OPENAI_BASE_URL", format!("http://{}/v1", gw.addr))
        .env("OPENAI_API_KEY", &gw.key)
        .env("CHATGATE_TEST_SIM_URL", format!("http://{}", sim.addr))
        .output()
        .expect("the client runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in lines {
        assert!(text.contains(line), "{text}");
    }
    (sim, gw)
}

fn the_ai_sdk_runs_a_tool_loop_on_item_references(bin: &str) {
    let (_, gw) = kept_scenario(
        bin,
        &mut node("@ai-sdk/openai", "responses-ai-sdk.mjs"),
        &["tool loop ok", "next turn ok"],
    );
    // Three answers, each kept.
    let ledger = gw.ledger_len(3);
    assert!(
        ledger
            .iter()
            .all(|r| r.status == 200 && r.response_id.is_some()),
        "{ledger:?}"
    );
}

fn the_agents_sdk_chains_runs_by_previous_response_id(bin: &str) {
    let (sim, _) = kept_scenario(
        bin,
        &mut python("venv-agents", "agents_sdk.py"),
        &["chained ok", "conversation ok", "auto ok"],
    );
    // The third run sent only "Thanks": the provider got the whole
    // conversation, the first question and the tool's result in it.
    let journal = sim.journal();
    let third = journal
        .iter()
        .map(|e| e["body"].as_str().unwrap().to_owned())
        .find(|b| b.contains("Thanks"))
        .expect("the third run reached the provider");
    assert!(
        third.contains("Paris") && third.contains("sunny 21C"),
        "{third}"
    );
}

fn the_python_sdk_polls_resumes_and_cancels_background_runs(bin: &str) {
    let (sim, gw) = kept_scenario(
        bin,
        &mut python("venv", "responses_background.py"),
        &["poll ok", "resume ok", "cancel ok", "delete ok"],
    );
    // Each run metered once, the cancelled one as cancelled; the provider
    // of the cancelled one was left before it finished.
    let ledger = gw.ledger_len(4);
    let runs: Vec<_> = ledger
        .iter()
        .filter(|r| r.response_id.is_some() || r.error.as_deref() == Some("cancelled"))
        .collect();
    assert!(runs.len() >= 4, "{ledger:?}");
    let cancelled = ledger
        .iter()
        .find(|r| r.error.as_deref() == Some("cancelled"))
        .unwrap_or_else(|| panic!("no cancelled run: {ledger:?}"));
    assert!(!cancelled.complete, "{cancelled:?}");
    let left = sim.journal().iter().any(|e| {
        e["body"].as_str().unwrap_or("").contains("A long story")
            && e["outcome"]
                .as_str()
                .is_some_and(|o| o.eq_ignore_ascii_case("aborted"))
    });
    assert!(left, "{:?}", sim.journal());
}

fn a_drain_finishes_a_background_run_and_a_crash_fails_it(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let args = vec!["--apis".to_owned(), "chat,responses".to_owned()];
    let gw = keeping(bin, &sim.url());
    let start = |gw: &Gw, story: &str| -> String {
        let r = responses(
            gw,
            &format!(
                r#"{{"model":"reasoning-model-k3","background":true,"input":"{story} [[sim:token_ms=20,reasoning_tokens=20,answer_tokens=60]]"}}"#
            ),
        );
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json()["status"], "queued");
        r.json()["id"].as_str().unwrap().to_owned()
    };
    let get = |gw: &Gw, id: &str| -> serde_json::Value {
        request(
            gw.addr,
            "GET",
            &format!("/v1/responses/{id}"),
            Some(&gw.key),
            None,
        )
        .json()
    };
    // A drain waits for the run to finish, as for a stream.
    let finished = start(&gw, "Finish me");
    let Gw { proc, dir, key, .. } = gw;
    proc.signal(15);
    let mut proc = proc;
    assert!(proc.wait_exit(std::time::Duration::from_secs(30)).is_some());
    let opts = || GwOptions {
        args: args.clone(),
        ..GwOptions::default()
    };
    let gw = Gw::start_with_keys(bin, &sim.url(), opts(), dir, key);
    let after = get(&gw, &finished);
    assert_eq!(after["status"], "completed", "{after}");
    // A crash leaves a run unfinished: the next start says it failed.
    let lost = start(&gw, "Lose me");
    let Gw { proc, dir, key, .. } = gw;
    proc.signal(9);
    let mut proc = proc;
    assert!(proc.wait_exit(std::time::Duration::from_secs(10)).is_some());
    let gw = Gw::start_with_keys(bin, &sim.url(), opts(), dir, key);
    let after = get(&gw, &lost);
    assert_eq!(after["status"], "failed", "{after}");
    assert!(
        after["error"]["message"]
            .as_str()
            .unwrap()
            .contains("gateway stopped"),
        "{after}"
    );
}

fn the_node_sdk_continues_and_runs_in_the_background(bin: &str) {
    kept_scenario(
        bin,
        &mut node("openai", "responses-state.mjs"),
        &["chain ok", "retrieve ok", "background ok"],
    );
}

/// Codex told its provider speaks the Responses WebSocket: the upgrade is
/// answered 426, and Codex goes on over HTTP at once (with a 405 it tried
/// five times more, seconds each).
fn codex_asking_for_websockets_falls_back_at_once(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = with_responses(bin, &sim.url());
    let home = tempfile::tempdir().unwrap();
    let provider = format!(
        "model = \"reasoning-model-k3\"\nmodel_provider = \"chatgate\"\n\
         [model_providers.chatgate]\nname = \"chatgate\"\nbase_url = \"http://{}/v1\"\n\
         env_key = \"CHATGATE_API_KEY\"\nwire_api = \"responses\"\nsupports_websockets = true\n",
        gw.addr
    );
    let (ok, text) = codex_with(
        &provider,
        &gw.key,
        home.path(),
        "Say hello [[sim:tools=none]]",
    );
    assert!(ok, "{text}");
    assert!(text.contains("You said: Say hello"), "{text}");
    // Access lines are written in batches (at most 100 ms apart).
    let upgrades = |log: &str| log.lines().filter(|l| l.contains("status=426")).count();
    eventually("the upgrade's access line", || {
        upgrades(&gw.proc.stderr()) > 0
    });
    let log = gw.proc.stderr();
    assert_eq!(upgrades(&log), 1, "{log}");
    assert!(log.contains("websocket_not_supported"), "{log}");
}

/// An instance keeping responses in PostgreSQL dies with a background run
/// going: another instance marks it failed once its lease lapses, never
/// leaving it in progress.
#[test]
fn another_instance_fails_a_run_whose_instance_died() {
    let pg = PgServer::start();
    let sim = Sim::start(RUNTIMES[0], &[], &[]);
    let (mut gws, _) = postgres_fleet(&sim, &pg);
    let r = responses(
        &gws[0],
        r#"{"model":"reasoning-model-k3","background":true,"input":"Long [[sim:token_ms=50,reasoning_tokens=20,answer_tokens=1000]]"}"#,
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let id = r.json()["id"].as_str().unwrap().to_owned();
    let get = |gw: &Gw| {
        request(
            gw.addr,
            "GET",
            &format!("/v1/responses/{id}"),
            Some(&gw.key),
            None,
        )
        .json()
    };
    eventually("the run in progress", || {
        get(&gws[1])["status"] == "in_progress"
    });
    gws[0].proc.signal(9);
    let started = std::time::Instant::now();
    let failed = loop {
        let v = get(&gws[1]);
        if v["status"] != "in_progress" {
            break v;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "{v}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    assert_eq!(failed["status"], "failed", "{failed}");
    assert!(
        failed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("gateway stopped"),
        "{failed}"
    );
    let _ = gws.remove(0);
}

/// A script of `clients/python/` run by the venv `venv` makes.
fn python(venv: &str, script: &str) -> Command {
    let python = repo().join(format!(".cache/clients/{venv}/bin/python"));
    assert!(python.exists(), "run clients/install.sh first");
    let mut c = Command::new(python);
    c.arg(repo().join("clients/python").join(script));
    c
}

/// A script of `clients/node/` run by node, with the package it needs.
fn node(package: &str, script: &str) -> Command {
    let dir = repo().join("clients/node");
    assert!(
        dir.join("node_modules").join(package).exists(),
        "run clients/install.sh first"
    );
    let mut c = Command::new("node");
    c.arg(dir.join(script));
    c
}
