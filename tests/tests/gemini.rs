//! Google's Gemini API (`--apis gemini`) through both binaries: off by
//! default as the specification says; the paths, the three ways a key
//! comes, the token count and the model list; Google's error shape; what
//! the chat exchange guarantees (limits, budgets, cut streams, a client
//! leaving); the official Google Gen AI SDKs for Node and Python; and
//! Gemini CLI itself, offline, answering and running its shell tool.

use std::process::Command;

use chatgate_tests::*;

cases!(
    the_paths_are_unknown_without_apis,
    keys_counts_models_and_errors_in_googles_shape,
    streams_limits_budgets_and_cut_streams_hold_on_this_api,
    the_node_sdk_generates_streams_calls_and_counts,
    the_python_sdk_generates_streams_calls_and_counts,
    gemini_cli_answers_and_runs_its_shell_tool,
    gemini_cli_runs_with_the_environment_demo_prints,
    a_key_sees_and_calls_its_models_only_and_spans_name_the_api,
);

const MODEL: &str = "reasoning-model-k3";

fn with_gemini(bin: &str, upstream: &str, mut args: Vec<String>) -> Gw {
    args.extend(["--apis".into(), "gemini".into()]);
    let opts = GwOptions {
        args,
        ..GwOptions::default()
    };
    Gw::start(bin, upstream, opts)
}

/// `POST /v1beta/models/{model}:{method}{query}` with the key as
/// `x-goog-api-key`, as the Google clients send it.
fn gemini_raw(key: &str, method: &str, query: &str, body: &str) -> Vec<u8> {
    format!(
        "POST /v1beta/models/{MODEL}:{method}{query} HTTP/1.1\r\nHost: test\r\n\
         x-goog-api-key: {key}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn gemini(gw: &Gw, method: &str, query: &str, body: &str) -> Response {
    let mut c = Conn::open(gw.addr);
    c.send(&gemini_raw(&gw.key, method, query, body));
    c.response()
}

/// Google's error: the status, and `error.status`, checked against
/// `error.code`.
fn google_error(r: &Response) -> (u16, String) {
    let v = r.json();
    let e = &v["error"];
    assert_eq!(e["code"], r.status, "{v}");
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    (r.status, e["status"].as_str().unwrap_or("").to_owned())
}

/// The SSE stream's `data:` objects, and a last error object written bare
/// (as Google's API writes an error that ends a stream).
fn sse_data(body: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(body)
        .split("\r\n\r\n")
        .filter(|frame| !frame.trim().is_empty())
        .map(|frame| {
            let frame = frame.trim();
            let data = frame.strip_prefix("data: ").unwrap_or(frame);
            serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {frame}"))
        })
        .collect()
}

/// The answer's text parts (not thoughts), joined.
fn text_of(responses: &[serde_json::Value]) -> String {
    responses
        .iter()
        .flat_map(|r| r["candidates"][0]["content"]["parts"].as_array().cloned())
        .flatten()
        .filter(|p| p["thought"] != true)
        .filter_map(|p| p["text"].as_str().map(str::to_owned))
        .collect()
}

const HI: &str = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;

fn the_paths_are_unknown_without_apis(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = Gw::start(bin, &sim.url(), GwOptions::default());
    let r = gemini(&gw, "generateContent", "", HI);
    let (status, _, code, _) = r.error();
    assert_eq!((status, code.as_str()), (404, "unknown_url"));
    // Turned on, the same request is answered and metered.
    let gw = with_gemini(bin, &sim.url(), Vec::new());
    let r = gemini(&gw, "generateContent", "", HI);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["candidates"][0]["finishReason"], "STOP", "{v}");
    assert_eq!(v["candidates"][0]["content"]["role"], "model", "{v}");
    assert!(
        text_of(std::slice::from_ref(&v)).starts_with("You said: hi"),
        "{v}"
    );
    let usage = &v["usageMetadata"];
    let rec = &gw.ledger_len(1)[0];
    assert_eq!(rec.api.as_deref(), Some("gemini"));
    assert!(rec.complete && !rec.stream, "{rec:?}");
    assert_eq!(usage["promptTokenCount"], rec.prompt_tokens, "{v}");
    let total = rec.prompt_tokens + rec.completion_tokens;
    assert_eq!(usage["totalTokenCount"], total, "{v}");
    // `--apis` names every value it takes, in its help and its refusal.
    let (code, help, _) = run(bin, &["serve", "--help"], &[]);
    assert_eq!(code, 0);
    assert!(help.contains("gemini (POST /v1beta/models/"), "{help}");
    let url = sim.url();
    let keys = gw.dir.path().join("keys.toml");
    let keys = keys.to_str().unwrap();
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &url,
        "--keys",
        keys,
        "--apis",
        "chat,bard",
    ];
    let (code, _, err) = run(bin, &args, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("chat, responses, messages, gemini"), "{err}");
    // `x-goog-api-key` stands for the key on this API only.
    let mut c = Conn::open(gw.addr);
    c.send(
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nx-goog-api-key: {}\r\n\
             Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}",
            gw.key,
        )
        .as_bytes(),
    );
    assert_eq!(c.response().status, 401);
}

/// The key as `?key=` and as a bearer token too; no key, a wrong key, an
/// unknown model, the wrong method and a bad field in Google's shape;
/// `:countTokens` answered and not metered; the model list and one model
/// for the key.
fn keys_counts_models_and_errors_in_googles_shape(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = with_gemini(bin, &sim.url(), Vec::new());
    let path = format!("/v1beta/models/{MODEL}:generateContent");
    let r = request(
        gw.addr,
        "POST",
        &format!("{path}?key={}", gw.key),
        None,
        Some(HI),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let r = request(gw.addr, "POST", &path, Some(&gw.key), Some(HI));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let r = request(gw.addr, "POST", &path, None, Some(HI));
    assert_eq!(google_error(&r), (401, "UNAUTHENTICATED".into()));
    let r = request(gw.addr, "POST", &format!("{path}?key=nope"), None, Some(HI));
    assert_eq!(google_error(&r), (401, "UNAUTHENTICATED".into()));
    let nope = format!("/v1beta/models/gemini-nope:generateContent?key={}", gw.key);
    let r = request(gw.addr, "POST", &nope, None, Some(HI));
    assert_eq!(google_error(&r), (404, "NOT_FOUND".into()));
    let r = request(gw.addr, "GET", &path, Some(&gw.key), None);
    assert_eq!(google_error(&r), (405, "INVALID_ARGUMENT".into()));
    let bad = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"stopSequences":["a","b","c","d","e"]}}"#;
    let r = gemini(&gw, "generateContent", "", bad);
    assert_eq!(google_error(&r), (400, "INVALID_ARGUMENT".into()));
    let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("stopSequences"), "{message}");
    // Refused before it was translated, it is metered under the model its
    // path named.
    let refused = gw.ledger().into_iter().find(|r| r.status == 400).unwrap();
    assert_eq!(refused.model, MODEL, "{refused:?}");
    // Three answers and the refusal of a bad field are metered; the count,
    // the key failures and the unknown paths are not.
    let r = gemini(&gw, "countTokens", "", HI);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.json()["totalTokens"].as_u64().unwrap() > 0);
    let ledger = gw.ledger_len(3);
    assert!(ledger.iter().all(|r| r.api.as_deref() == Some("gemini")));
    // The model list, as the key sees it.
    let r = request(gw.addr, "GET", "/v1beta/models", Some(&gw.key), None);
    assert_eq!(r.status, 200);
    let names: Vec<String> = r.json()["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(names.contains(&format!("models/{MODEL}")), "{names:?}");
    let one = format!("/v1beta/models/{MODEL}");
    let r = request(gw.addr, "GET", &one, Some(&gw.key), None);
    assert_eq!(r.json()["name"], format!("models/{MODEL}"));
    let r = request(gw.addr, "GET", "/v1beta/models/nope", Some(&gw.key), None);
    assert_eq!(google_error(&r), (404, "NOT_FOUND".into()));
}

/// A stream with `alt=sse` (and without it: a JSON array); a key's rate
/// limit answered `RESOURCE_EXHAUSTED` with retry info; a budget too small
/// refused before the provider; a stream the provider cuts ends with an
/// error event, never a last normal chunk; a client that leaves stops the
/// provider's answer.
fn streams_limits_budgets_and_cut_streams_hold_on_this_api(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = with_gemini(bin, &sim.url(), Vec::new());
    let thinking = r#"{"contents":[{"role":"user","parts":[{"text":"think"}]}],"generationConfig":{"thinkingConfig":{"includeThoughts":true}}}"#;
    let r = gemini(&gw, "streamGenerateContent", "?alt=sse", thinking);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let events = sse_data(&r.body);
    assert!(events.len() > 2, "{events:?}");
    let last = events.last().unwrap();
    assert_eq!(last["candidates"][0]["finishReason"], "STOP", "{last}");
    assert!(last["usageMetadata"]["totalTokenCount"].as_u64().unwrap() > 0);
    let thoughts = events
        .iter()
        .flat_map(|e| e["candidates"][0]["content"]["parts"].as_array().cloned())
        .flatten()
        .any(|p| p["thought"] == true);
    assert!(thoughts, "{events:?}");
    assert!(text_of(&events).starts_with("You said: think"));
    // Without `alt=sse`: one JSON array of the same responses.
    let r = gemini(&gw, "streamGenerateContent", "", HI);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let array: Vec<serde_json::Value> = serde_json::from_slice(&r.body).expect("a JSON array");
    assert!(text_of(&array).starts_with("You said: hi"), "{array:?}");
    let recs = gw.ledger_len(2);
    assert!(recs.iter().all(|r| r.stream && r.complete), "{recs:?}");

    // Cut by the provider: the last event is an error, and the ledger
    // says incomplete.
    let cut =
        r#"{"contents":[{"role":"user","parts":[{"text":"go on [[sim:fault=reset,after=6]]"}]}]}"#;
    let r = gemini(&gw, "streamGenerateContent", "?alt=sse", cut);
    let events = sse_data(&r.body);
    let last = events.last().expect("events");
    assert!(last["error"]["code"].as_u64().unwrap() >= 500, "{events:?}");
    assert!(
        events
            .iter()
            .all(|e| e["candidates"][0]["finishReason"].is_null()),
        "{events:?}"
    );
    assert!(!gw.ledger_len(3)[2].complete);

    // A client that leaves mid-stream: the provider's answer stops too.
    let slow = r#"{"contents":[{"role":"user","parts":[{"text":"slowly [[sim:token_ms=50]]"}]}]}"#;
    let mut c = Conn::open(gw.addr);
    c.send(&gemini_raw(
        &gw.key,
        "streamGenerateContent",
        "?alt=sse",
        slow,
    ));
    c.read_until("said: ");
    drop(c);
    let rec = gw.ledger_len(4)[3].clone();
    assert!(rec.client_disconnected && !rec.complete, "{rec:?}");

    // A key's rate limit: 429 RESOURCE_EXHAUSTED, with retry info.
    let opts = GwOptions {
        args: vec!["--apis".into(), "gemini".into()],
        rpm: Some(1),
        ..GwOptions::default()
    };
    let limited = Gw::start(bin, &sim.url(), opts);
    assert_eq!(gemini(&limited, "generateContent", "", HI).status, 200);
    let r = gemini(&limited, "generateContent", "", HI);
    assert_eq!(google_error(&r), (429, "RESOURCE_EXHAUSTED".into()));
    assert!(r.header("retry-after").is_some(), "{:?}", r.headers);

    // A budget that the request's reservation does not fit: refused
    // before the provider.
    let broke = with_gemini(
        bin,
        &sim.url(),
        vec!["--default-budget-usd".into(), "0.01".into()],
    );
    let asked = sim.journal().len();
    let big = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":32000}}"#;
    let r = gemini(&broke, "generateContent", "", big);
    assert_eq!(google_error(&r), (429, "RESOURCE_EXHAUSTED".into()));
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("budget")
    );
    assert_eq!(sim.journal().len(), asked, "the provider was not asked");
}

fn the_node_sdk_generates_streams_calls_and_counts(bin: &str) {
    let dir = repo().join("clients/node");
    assert!(
        dir.join("node_modules/@google/genai").exists(),
        "run clients/install.sh first"
    );
    sdk_scenario(bin, Command::new("node").arg(dir.join("gemini.mjs")));
}

fn the_python_sdk_generates_streams_calls_and_counts(bin: &str) {
    let python = repo().join(".cache/clients/venv/bin/python");
    assert!(python.exists(), "run clients/install.sh first");
    sdk_scenario(
        bin,
        Command::new(python).arg(repo().join("clients/python/gemini_sdk.py")),
    );
}

/// Runs an SDK's scenario against a gateway serving the Gemini API; checks
/// it passed every step and that the ledger names the API.
fn sdk_scenario(bin: &str, cmd: &mut Command) -> String {
    let sim = Sim::start(bin, &[], &[]);
    let gw = with_gemini(bin, &sim.url(), Vec::new());
    let out = cmd
        .env("GOOGLE_GEMINI_BASE_URL", format!("http://{}", gw.addr))
        .env("CHATGATE_API_KEY", &gw.key)
        .env("CHATGATE_MODEL", MODEL)
        .env_remove("GEMINI_API_KEY")
        .env_remove("GOOGLE_API_KEY")
        .output()
        .expect("the scenario runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in ["plain ok", "stream ok", "tool ok", "count ok", "error ok"] {
        assert!(text.contains(line), "{text}");
    }
    let ledger = gw.ledger();
    assert!(
        ledger.iter().all(|r| r.api.as_deref() == Some("gemini")),
        "{ledger:?}"
    );
    assert!(ledger.iter().any(|r| r.stream), "the streamed one");
    assert!(
        ledger
            .iter()
            .any(|r| r.finish_reason.as_deref() == Some("tool_calls"))
    );
    text.into_owned()
}

/// Gemini CLI, offline, with the environment `demo` prints: a plain
/// answer; then the simulator calls its shell tool, the CLI runs the
/// command, and the final answer quotes its output.
fn gemini_cli_answers_and_runs_its_shell_tool(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = with_gemini(bin, &sim.url(), Vec::new());
    let home = tempfile::tempdir().unwrap();
    let env = gemini_env(&gw);
    let (ok, out, text) = gemini_cli(home.path(), &env, "Say hello [[sim:tools=none]]");
    assert!(ok, "{text}");
    let answer = out["response"].as_str().unwrap_or_default();
    assert!(answer.starts_with("You said: Say hello"), "{text}");
    let home = tempfile::tempdir().unwrap();
    let (ok, out, text) = gemini_cli(
        home.path(),
        &env,
        "Run it [[sim:tool=run_shell_command,input=echo chatgate-gemini-ok]]",
    );
    assert!(ok, "{text}");
    let answer = out["response"].as_str().unwrap_or_default();
    assert!(
        answer.starts_with("The tool returned:") && answer.contains("chatgate-gemini-ok"),
        "{text}"
    );
    let shell = &out["stats"]["tools"]["byName"]["run_shell_command"];
    assert_eq!(shell["success"], 1, "{text}");
    let ledger = gw.ledger();
    assert!(
        ledger
            .iter()
            .all(|r| r.api.as_deref() == Some("gemini") && r.complete),
        "{ledger:?}"
    );
    assert!(
        ledger
            .iter()
            .any(|r| r.finish_reason.as_deref() == Some("tool_calls")),
        "{ledger:?}"
    );
}

/// `demo` prints the two variables that point Gemini CLI at it; with
/// exactly those (and the model it names), Gemini CLI answers through the
/// demo.
fn gemini_cli_runs_with_the_environment_demo_prints(bin: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (_demo, _, banner, key) = start_demo(bin, dir.path());
    let section: Vec<&str> = banner
        .lines()
        .skip_while(|l| !l.contains("Or Gemini CLI"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    let env: Vec<(String, String)> = section
        .iter()
        .flat_map(|l| l.split_whitespace())
        .filter_map(|w| w.split_once('='))
        .filter(|(k, _)| k.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        ["GOOGLE_GEMINI_BASE_URL", "GEMINI_API_KEY"],
        "{banner}"
    );
    assert_eq!(env[1].1, key, "{banner}");
    assert!(
        section
            .iter()
            .any(|l| l.contains("gemini -m reasoning-model-k3")),
        "{banner}"
    );
    let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let home = tempfile::tempdir().unwrap();
    let (ok, out, text) = gemini_cli(home.path(), &env, "Why is the sky blue?");
    assert!(ok, "{text}");
    let answer = out["response"].as_str().unwrap_or_default();
    assert!(
        answer.starts_with("You said: Why is the sky blue?"),
        "{text}"
    );
}

/// A key limited to one model of two: the Gemini model list shows it
/// alone, the other is `NOT_FOUND` by path and by list, an alias (a
/// Google model name) reaches its model; a request sent with `?key=`
/// has a server span naming the API and the path, never the query, and a
/// provider failing once is asked again.
fn a_key_sees_and_calls_its_models_only_and_spans_name_the_api(bin: &str) {
    let receiver = OtlpReceiver::start();
    let sim = Sim::start(bin, &[], &[]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("chatgate.toml");
    std::fs::write(
        &config,
        "[[model]]\nid = \"small\"\naliases = [\"gemini-2.5-flash-lite\"]\n\n\
         [[model]]\nid = \"big\"\n",
    )
    .unwrap();
    let args = vec![
        "--config".into(),
        config.to_string_lossy().into_owned(),
        "--otlp-endpoint".into(),
        receiver.url(),
    ];
    let gw = with_gemini(bin, &sim.url(), args);
    let keys = gw.dir.path().join("keys.toml");
    let keys = keys.to_str().unwrap();
    let (code, _, err) = run(
        bin,
        &["keys", "set", "test", "--keys", keys, "--models", "small"],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let listed = || {
        let r = request(gw.addr, "GET", "/v1beta/models", Some(&gw.key), None);
        let models = r.json()["models"].as_array().cloned().unwrap_or_default();
        models
            .iter()
            .map(|m| m["name"].as_str().unwrap_or("").to_owned())
            .collect::<Vec<_>>()
    };
    eventually("the key's model list applied", || {
        listed() == ["models/small"]
    });
    let call = |model: &str| {
        let path = format!("/v1beta/models/{model}:generateContent?key={}", gw.key);
        request(gw.addr, "POST", &path, None, Some(HI))
    };
    assert_eq!(google_error(&call("big")), (404, "NOT_FOUND".into()));
    let r = request(gw.addr, "GET", "/v1beta/models/big", Some(&gw.key), None);
    assert_eq!(google_error(&r), (404, "NOT_FOUND".into()));
    sim.set_fault(r#"{"fault":"reject","status":503,"times":1}"#);
    let r = call("gemini-2.5-flash-lite");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let rec = gw.ledger_len(2).pop().unwrap();
    assert_eq!((rec.model.as_str(), rec.attempts), ("small", 2), "{rec:?}");
    let mut spans = Vec::new();
    eventually("the request's server span", || {
        spans = receiver.spans();
        spans.iter().any(|s| {
            s["kind"] == "server"
                && s["attributes"]["chatgate.request_id"] == rec.request_id.as_str()
        })
    });
    let server = spans
        .iter()
        .find(|s| {
            s["kind"] == "server"
                && s["attributes"]["chatgate.request_id"] == rec.request_id.as_str()
        })
        .unwrap();
    let a = &server["attributes"];
    assert_eq!(a["chatgate.api"], "gemini");
    assert_eq!(
        a["url.path"],
        "/v1beta/models/gemini-2.5-flash-lite:generateContent"
    );
    assert!(
        !serde_json::to_string(&spans).unwrap().contains(&gw.key),
        "{spans:?}"
    );
    let log = std::fs::read_to_string(gw.dir.path().join("gateway.stderr")).unwrap();
    assert!(!log.contains(&gw.key), "the key is logged: {log}");
}
