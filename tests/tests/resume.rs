//! A stream cut mid-answer, finished (`--stream-resume`), through both
//! binaries with real simulator processes: the model `small` is served by
//! `a`, which the tests make cut its streams, and falls back to `big`,
//! served by `c`, which continues a final assistant message as the
//! simulator's `--continuation` mode says (and as its `[[upstream]]`
//! table's `continuation` tells the gateway). Each failure of a stream
//! after its first event — a reset, a stall, broken framing, `[DONE]`
//! without `finish_reason` — is finished by `c`, and the client's stream
//! reads as the uncut answer `big` gives when asked directly: one role,
//! one id, the same reasoning and text, one usage (both providers'
//! reports added), one `[DONE]`; the ledger meters both attempts and says
//! the answer was continued. A fallback that refuses the prefix is asked
//! for the answer from its start, spliced only where it repeats the
//! client's text. A cut inside a tool call's arguments, and
//! `--stream-resume off`, end as a cut stream always did.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chatgate_tests::*;
use serde_json::{Value, json};

cases!(
    each_cut_after_the_first_event_is_finished_by_the_fallback,
    a_cut_in_the_reasoning_is_continued_or_the_answer_restarted,
    a_fallback_that_refuses_the_prefix_is_asked_again_and_spliced_only_if_it_repeats,
    the_responses_messages_and_gemini_streams_continue_as_one_stream,
    a_cut_in_a_tool_call_and_resume_off_end_as_before,
    a_client_that_leaves_during_the_continuation_stops_it,
    the_sdks_and_coding_agents_read_a_continued_answer_as_whole,
    no_answer_or_a_slow_first_event_goes_to_the_fallback_once,
    the_trace_shows_the_cut_attempt_and_its_continuation,
    the_demo_finishes_a_stream_it_cuts,
);

/// `small` on `a` falls back to `big` on `c`.
const CATALOGUE: &str = r#"
[[model]]
id = "small"
endpoints = ["a"]
fallback = ["big"]
input_usd_per_million = 1
output_usd_per_million = 2

[[model]]
id = "big"
endpoints = ["c"]
input_usd_per_million = 10
output_usd_per_million = 20
"#;

/// The question. Its answers are short and made of known parts: four
/// reasoning events, then twelve of text (the simulator's marker, which
/// every API carries in the user's text).
const PROMPT: &str = "Tell me about splicing streams. [[sim:reasoning_tokens=4,answer_tokens=12]]";

/// `a` (which the tests make fail) and `c` (which continues as
/// `c_mode`, and is said to continue as `said`) behind a gateway.
struct Pair {
    a: Sim,
    c: Sim,
    gw: Gw,
    admin: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Pair {
    fn start(bin: &str, c_mode: &str, said: &str, args: &[&str]) -> Pair {
        Pair::start_with(bin, &[], c_mode, said, args)
    }

    fn start_with(bin: &str, a_args: &[&str], c_mode: &str, said: &str, args: &[&str]) -> Pair {
        let a = Sim::start(bin, a_args, &[]);
        let c = Sim::start(bin, &["--continuation", c_mode], &[]);
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("chatgate.toml");
        let tables = format!(
            "[[upstream]]\nname = \"a\"\nurl = \"{}\"\n\n[[upstream]]\nname = \"c\"\nurl = \"{}\"\ncontinuation = \"{said}\"\n{CATALOGUE}",
            a.url(),
            c.url()
        );
        std::fs::write(&config, tables).expect("write the config");
        let mut all = vec![
            "--config".to_owned(),
            config.to_string_lossy().into_owned(),
            "--admin-listen".to_owned(),
            "127.0.0.1:0".to_owned(),
            "--apis".to_owned(),
            "chat,responses,messages,gemini".to_owned(),
        ];
        all.extend(args.iter().map(|s| (*s).to_owned()));
        let mut gw = Gw::start(
            bin,
            "",
            GwOptions {
                args: all,
                rpm: Some(1_000_000),
                tpm: Some(1_000_000_000),
                ..GwOptions::default()
            },
        );
        let admin = gw.admin_addr();
        Pair {
            a,
            c,
            gw,
            admin,
            _dir: dir,
        }
    }

    /// A streamed chat request for `model` (with usage asked for) of
    /// [`PROMPT`].
    fn chat(&self, model: &str, extra: &str) -> Response {
        self.chat_asking(model, PROMPT, extra)
    }

    fn chat_asking(&self, model: &str, prompt: &str, extra: &str) -> Response {
        let body = json!({
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        let mut body = body.to_string();
        body.pop();
        body.push_str(&format!("{extra}}}"));
        self.post("/v1/chat/completions", &body)
    }

    /// `body` posted to `path` with the test key.
    fn post(&self, path: &str, body: &str) -> Response {
        request(self.gw.addr, "POST", path, Some(&self.gw.key), Some(body))
    }

    fn resumes(&self, outcome: &str) -> u64 {
        metric(
            self.admin,
            &format!("chatgate_stream_resumes_total{{outcome=\"{outcome}\"}}"),
        )
    }
}

/// What a chat client reads of a stream: the roles it was told, the
/// chunk ids, reasoning, text, finish reasons, usage chunks, and whether
/// it ended with one `[DONE]`.
#[derive(Debug, PartialEq)]
struct Read {
    roles: Vec<String>,
    ids: Vec<String>,
    reasoning: String,
    text: String,
    finishes: Vec<String>,
    usages: Vec<Value>,
    done: usize,
    errors: usize,
}

fn read(r: &Response) -> Read {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let events = r.events();
    let mut out = Read {
        roles: Vec::new(),
        ids: Vec::new(),
        reasoning: String::new(),
        text: String::new(),
        finishes: Vec::new(),
        usages: Vec::new(),
        done: events.iter().filter(|e| *e == "[DONE]").count(),
        errors: 0,
    };
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{events:?}"
    );
    for e in events.iter().filter(|e| *e != "[DONE]") {
        let v: Value = serde_json::from_str(e).expect("chunk JSON");
        if v.get("error").is_some() {
            out.errors += 1;
            continue;
        }
        out.ids.push(v["id"].as_str().unwrap_or("").to_owned());
        if !v["usage"].is_null() {
            out.usages.push(v["usage"].clone());
        }
        let choice = &v["choices"][0];
        assert!(
            choice.is_null() || choice["index"] == 0,
            "one choice, index 0: {v}"
        );
        let d = &choice["delta"];
        if let Some(role) = d["role"].as_str() {
            out.roles.push(role.to_owned());
        }
        out.reasoning += d["reasoning_content"].as_str().unwrap_or("");
        out.text += d["content"].as_str().unwrap_or("");
        if let Some(f) = choice["finish_reason"].as_str() {
            out.finishes.push(f.to_owned());
        }
    }
    out
}

/// The answer `big` gives uncut: the reference a continued stream must
/// read as.
fn uncut(p: &Pair) -> Read {
    let r = read(&p.chat("big", ""));
    assert_eq!(r.roles, ["assistant"]);
    assert!(!r.text.is_empty() && !r.reasoning.is_empty(), "{r:?}");
    r
}

/// A continued stream reads as `reference`: one role, one id, the same
/// reasoning, text and finish, one usage, one `[DONE]`, no error.
fn assert_reads_as(got: &Read, reference: &Read) {
    assert_eq!(got.roles, ["assistant"], "{got:?}");
    assert!(
        got.ids.iter().all(|i| *i == got.ids[0]),
        "one id: {:?}",
        got.ids
    );
    assert_eq!(got.reasoning, reference.reasoning);
    assert_eq!(got.text, reference.text);
    assert_eq!(got.finishes, ["stop"]);
    assert_eq!(got.usages.len(), 1, "{got:?}");
    assert_eq!((got.done, got.errors), (1, 0));
}

/// Every way a stream breaks after its first event, each finished by the
/// fallback: the client reads the uncut answer, the ledger meters both
/// attempts (their usage together: the cut one reported none) and says
/// it was continued, and the fallback was asked with the part the client
/// had as a prefix.
fn each_cut_after_the_first_event_is_finished_by_the_fallback(bin: &str) {
    let p = Pair::start(
        bin,
        "prefix",
        "prefix",
        &["--upstream-idle-timeout", "1s", "--stream-error-event"],
    );
    let reference = uncut(&p);
    let faults = [
        r#"{"fault":"reset","after":9}"#,
        r#"{"fault":"stall","after":9}"#,
        r#"{"fault":"bad_chunk","after":9}"#,
        r#"{"fault":"end_early","after":9}"#,
    ];
    for (n, fault) in faults.iter().enumerate() {
        p.a.set_fault(fault);
        let got = read(&p.chat("small", ""));
        assert_reads_as(&got, &reference);
        let rec = p.gw.ledger_len(n + 2)[n + 1].clone();
        assert_eq!(
            (
                rec.complete,
                rec.attempts,
                rec.continued,
                rec.served_model.as_deref(),
                rec.endpoint.as_deref()
            ),
            (true, 2, 1, Some("big"), Some("c")),
            "{fault}: {rec:?}"
        );
        assert_eq!(rec.error, None, "{fault}");
        // The usage the client was told is what was metered: the
        // continuation's report (the cut attempt reported none).
        let usage = &got.usages[0];
        assert_eq!(rec.prompt_tokens, usage["prompt_tokens"].as_u64().unwrap());
        assert_eq!(
            rec.completion_tokens,
            usage["completion_tokens"].as_u64().unwrap()
        );
        let asked = p.c.journal().last().cloned().expect("c was asked");
        let body: Value = serde_json::from_str(asked["body"].as_str().unwrap()).unwrap();
        let last = body["messages"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(
            (last["role"].as_str(), last["prefix"].as_bool()),
            (Some("assistant"), Some(true)),
            "{fault}: {last}"
        );
        assert!(
            reference
                .text
                .starts_with(last["content"].as_str().unwrap()),
            "{fault}: the part is the start of the answer: {last}"
        );
        assert_eq!(body["model"], "big");
    }
    assert_eq!(p.resumes("continued"), 4);
    assert_eq!(p.resumes("failed"), 0);

    // A continuation cut in its turn, with none left to try: the stream
    // ends as a cut one, its error event before one `[DONE]`.
    p.a.set_fault(r#"{"fault":"reset","after":9}"#);
    p.c.set_fault(r#"{"fault":"end_early","after":3,"times":1}"#);
    let got = read(&p.chat("small", ""));
    assert!(got.finishes.is_empty(), "{got:?}");
    assert_eq!(
        (got.done, got.errors, got.roles.len()),
        (1, 1, 1),
        "{got:?}"
    );
    let rec = p.gw.ledger_len(6)[5].clone();
    assert_eq!(
        (rec.complete, rec.continued, rec.attempts),
        (false, 1, 2),
        "{rec:?}"
    );
    assert_eq!(p.resumes("failed"), 1);
}

/// A cut in the reasoning: a server that reads the part's reasoning
/// continues it; one that reads only text (`final_assistant`) is asked
/// for the answer anew, and the client is not sent reasoning it has. A
/// cut in the text on the latter is continued without the part it sends
/// back first.
fn a_cut_in_the_reasoning_is_continued_or_the_answer_restarted(bin: &str) {
    for (mode, outcome) in [("prefix", "continued"), ("final_assistant", "restarted")] {
        let p = Pair::start(bin, mode, mode, &[]);
        let reference = uncut(&p);
        // The role chunk, then two of the four reasoning events.
        p.a.set_fault(r#"{"fault":"reset","after":3}"#);
        let got = read(&p.chat("small", ""));
        assert_reads_as(&got, &reference);
        assert_eq!(p.resumes(outcome), 1, "{mode}");
        let asked = p.c.journal().last().cloned().unwrap();
        let body: Value = serde_json::from_str(asked["body"].as_str().unwrap()).unwrap();
        let last = body["messages"].as_array().unwrap().last().unwrap().clone();
        if mode == "prefix" {
            assert_eq!(last["role"], "assistant", "{last}");
            assert!(
                reference
                    .reasoning
                    .starts_with(last["reasoning_content"].as_str().unwrap()),
                "{last}"
            );
        } else {
            assert_eq!(last["role"], "user", "asked anew: {last}");
            // A cut in the text, on a server that sends the part back
            // before the rest (llama.cpp's): the echo is taken off.
            p.a.set_fault(r#"{"fault":"reset","after":9}"#);
            assert_reads_as(&read(&p.chat("small", "")), &reference);
            assert_eq!(p.resumes("continued"), 1, "{mode}");
            let echoed = p.c.journal().last().cloned().unwrap();
            let part = serde_json::from_str::<Value>(echoed["body"].as_str().unwrap()).unwrap()
                ["messages"][1]["content"]
                .as_str()
                .unwrap()
                .to_owned();
            assert!(
                !part.is_empty() && echoed["response"].as_str().unwrap().contains(&part),
                "the simulator sent the part back: {echoed}"
            );
        }
    }
}

/// A fallback said to continue that refuses a final assistant message
/// (llama.cpp's 400 with thinking on): its refusal is not the client's
/// answer. The answer is asked from its start and, repeating what the
/// client has byte for byte, spliced; the simulator's answer is the same
/// each time, so it is. A restart that says something else is not
/// spliced: the stream ends as it was cut.
fn a_fallback_that_refuses_the_prefix_is_asked_again_and_spliced_only_if_it_repeats(bin: &str) {
    let p = Pair::start(bin, "refuse", "final_assistant", &["--stream-error-event"]);
    let reference = uncut(&p);
    p.a.set_fault(r#"{"fault":"reset","after":9}"#);
    let got = read(&p.chat("small", ""));
    assert_reads_as(&got, &reference);
    let rec = p.gw.ledger_len(2)[1].clone();
    assert_eq!(
        (rec.complete, rec.attempts, rec.continued),
        (true, 3, 1),
        "{rec:?}"
    );
    assert_eq!(p.resumes("restarted"), 1);
    let j = p.c.journal();
    assert_eq!(
        j[j.len() - 2]["status"],
        400,
        "the refusal: {:?}",
        j[j.len() - 2]
    );

    // A restart that differs: `a` thinks for two events where `c`
    // thinks for its own count, so their texts are other words.
    let p = Pair::start_with(
        bin,
        &["--reasoning-tokens", "2"],
        "refuse",
        "final_assistant",
        &["--stream-error-event"],
    );
    // The role, two reasoning events, then ten words of text: the
    // simulator's answer says the question's eight words back, then
    // draws words after its reasoning's.
    p.a.set_fault(r#"{"fault":"reset","after":13}"#);
    let r = p.chat_asking(
        "small",
        "Tell me about splicing streams. [[sim:answer_tokens=30]]",
        "",
    );
    let got = read(&r);
    assert!(got.finishes.is_empty(), "{got:?}");
    assert_eq!(got.errors, 1, "the cut stream's error event");
    let rec = p.gw.ledger_len(1)[0].clone();
    assert_eq!(
        (rec.complete, rec.continued, rec.error.as_deref()),
        (false, 1, Some("upstream_reset")),
        "{rec:?}"
    );
    assert_eq!(p.resumes("diverged"), 1);
}

/// The Responses, Messages and Gemini streams of an answer cut each way
/// continue as one: one `response.completed` (one `message_stop`, one
/// `finishReason`) whose text is the uncut answer's.
fn the_responses_messages_and_gemini_streams_continue_as_one_stream(bin: &str) {
    let p = Pair::start(bin, "prefix", "prefix", &["--upstream-idle-timeout", "1s"]);
    let reference = uncut(&p);
    let post = |path: &str, body: Value| {
        let r = p.post(path, &body.to_string());
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        r.events()
            .iter()
            .map(|e| serde_json::from_str::<Value>(e).unwrap())
            .collect::<Vec<Value>>()
    };
    let count = |events: &[Value], kind: &str| events.iter().filter(|e| e["type"] == kind).count();
    let faults = [
        r#"{"fault":"reset","after":9}"#,
        r#"{"fault":"stall","after":9}"#,
        r#"{"fault":"bad_chunk","after":9}"#,
        r#"{"fault":"end_early","after":9}"#,
    ];
    for fault in faults {
        p.a.set_fault(fault);
        let events = post(
            "/v1/responses",
            json!({"model": "small", "input": PROMPT, "stream": true}),
        );
        assert_eq!(count(&events, "response.created"), 1, "{fault}");
        assert_eq!(
            count(&events, "response.completed"),
            1,
            "{fault}: {events:?}"
        );
        assert_eq!(count(&events, "response.failed"), 0, "{fault}");
        let text: String = events
            .iter()
            .filter(|e| e["type"] == "response.output_text.delta")
            .map(|e| e["delta"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(text, reference.text, "{fault}");

        let events = post(
            "/v1/messages",
            json!({"model": "small", "max_tokens": 1000, "stream": true,
                   "messages": [{"role": "user", "content": PROMPT}]}),
        );
        assert_eq!(count(&events, "message_start"), 1, "{fault}");
        assert_eq!(count(&events, "message_stop"), 1, "{fault}: {events:?}");
        assert_eq!(count(&events, "error"), 0, "{fault}");
        let text: String = events
            .iter()
            .filter(|e| e["type"] == "content_block_delta" && e["delta"]["type"] == "text_delta")
            .map(|e| e["delta"]["text"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(text, reference.text, "{fault}");
        let stop = events
            .iter()
            .find(|e| e["type"] == "message_delta")
            .unwrap();
        assert_eq!(stop["delta"]["stop_reason"], "end_turn", "{fault}");

        let events = post(
            "/v1beta/models/small:streamGenerateContent?alt=sse",
            json!({"contents": [{"role": "user", "parts": [{"text": PROMPT}]}]}),
        );
        let text: String = events
            .iter()
            .flat_map(|e| {
                e["candidates"][0]["content"]["parts"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter(|part| part["thought"] != true)
            .filter_map(|part| part["text"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(text, reference.text, "{fault}");
        let finishes: Vec<&Value> = events
            .iter()
            .filter_map(|e| e["candidates"][0].get("finishReason"))
            .collect();
        assert_eq!(finishes, [&json!("STOP")], "{fault}: {events:?}");
        assert!(events.iter().all(|e| e.get("error").is_none()), "{fault}");
    }
    let recs = p.gw.ledger_len(13);
    assert!(
        recs[1..].iter().all(|r| r.continued == 1 && r.complete),
        "{recs:?}"
    );
}

/// What is not continued ends as a cut stream always did: a cut inside a
/// tool call's arguments (no server continues them exactly), a provider
/// that breaks after the answer's finish (it is whole), and every cut
/// with `--stream-resume off` — the fallback is never asked.
fn a_cut_in_a_tool_call_and_resume_off_end_as_before(bin: &str) {
    let p = Pair::start(bin, "prefix", "prefix", &[]);
    let tools = r#","tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]"#;
    // Role, four reasoning events, the call's name, then one event of
    // its arguments.
    p.a.set_fault(r#"{"fault":"reset","after":7}"#);
    let got = read(&p.chat("small", tools));
    assert!(got.finishes.is_empty(), "{got:?}");
    assert!(p.c.journal().is_empty(), "c was not asked");
    let rec = p.gw.ledger_len(1)[0].clone();
    assert_eq!((rec.complete, rec.continued, rec.attempts), (false, 0, 1));

    // A provider that breaks after the answer's finish: the answer is
    // whole (role, four reasoning events, twelve of text, the finish).
    p.a.set_fault(r#"{"fault":"reset","after":18}"#);
    let got = read(&p.chat("small", ""));
    assert_eq!(got.finishes, ["stop"], "{got:?}");
    assert!(p.c.journal().is_empty(), "c was not asked");
    let rec = p.gw.ledger_len(2)[1].clone();
    assert_eq!((rec.complete, rec.continued), (true, 0), "{rec:?}");

    let off = Pair::start(bin, "prefix", "prefix", &["--stream-resume", "off"]);
    off.a.set_fault(r#"{"fault":"end_early","after":9}"#);
    let r = off.chat("small", "");
    let got = read(&r);
    assert!(got.finishes.is_empty() && got.usages.is_empty(), "{got:?}");
    assert!(off.c.journal().is_empty(), "c was not asked");
    let rec = off.gw.ledger_len(1)[0].clone();
    assert_eq!((rec.complete, rec.continued, rec.attempts), (false, 0, 1));
    // The provider's own bytes, its `[DONE]` included: nothing was held.
    let sent = off.a.settled(0);
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        sent["response"].as_str().unwrap()
    );
}

/// A client that leaves while the continuation streams: the continuation
/// is stopped (the fallback sees its client go), and the ledger says the
/// client left, with the continuation counted.
fn a_client_that_leaves_during_the_continuation_stops_it(bin: &str) {
    let p = Pair::start(bin, "prefix", "prefix", &[]);
    p.a.set_fault(r#"{"fault":"reset","after":9}"#);
    let body = json!({
        "model": "small",
        "messages": [{"role": "user", "content":
            "Tell me about splicing streams. [[sim:reasoning_tokens=4,answer_tokens=400,token_ms=50]]"}],
        "stream": true,
    });
    let mut conn = Conn::open(p.gw.addr);
    conn.send(&raw_request(
        "POST",
        "/v1/chat/completions",
        Some(&p.gw.key),
        Some(&body.to_string()),
    ));
    // Wait for the continuation to stream, then leave.
    eventually("the continuation streams", || {
        conn.read_more();
        !p.c.journal().is_empty()
            && String::from_utf8_lossy(conn.pending())
                .matches("data:")
                .count()
                > 14
    });
    drop(conn);
    let settled = p.c.settled(0);
    assert_eq!(settled["outcome"], "aborted", "{settled}");
    let rec = p.gw.ledger_len(1)[0].clone();
    assert!(rec.client_disconnected && rec.continued == 1, "{rec:?}");
    assert_eq!(p.resumes("abandoned"), 1);
}

/// What `program script` printed, one JSON object a line, run with the
/// gateway, key, model and prompt of a cut stream in its environment.
fn client_lines(p: &Pair, program: &Path, script: &Path, prompt: &str) -> Vec<Value> {
    assert!(
        program.is_absolute() && program.exists() || !program.is_absolute(),
        "{} is not installed: run clients/install.sh",
        program.display()
    );
    let mut child = Command::new(program)
        .arg(script)
        .current_dir(repo())
        .env("CHATGATE_BASE_URL", format!("http://{}", p.gw.addr))
        .env("CHATGATE_API_KEY", &p.gw.key)
        .env("CHATGATE_MODEL", "small")
        .env("CHATGATE_PROMPT", prompt)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the client");
    let deadline = Instant::now() + Duration::from_secs(90);
    while child.try_wait().expect("wait").is_none() {
        assert!(
            Instant::now() < deadline,
            "{} did not finish",
            script.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("its output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}: {stdout}\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// The id of the first chunk a simulator sent in its journal entry.
fn first_id(entry: &Value) -> String {
    let response = entry["response"].as_str().unwrap();
    let data = response
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap();
    let v: Value = serde_json::from_str(data).unwrap();
    v["id"].as_str().unwrap().to_owned()
}

/// The official SDKs and the coding agents, across a cut: the OpenAI
/// Python SDK's stream helper (which would read a second role as
/// `assistantassistant`), the Node one (which would take a second id as
/// the answer's), the Anthropic Python SDK's message stream, Codex CLI
/// (the Responses API) and Claude Code (the Messages API) each read the
/// whole answer, as if nothing broke.
fn the_sdks_and_coding_agents_read_a_continued_answer_as_whole(bin: &str) {
    let p = Pair::start(bin, "prefix", "prefix", &[]);
    let reference = uncut(&p);
    p.a.set_fault(r#"{"fault":"reset","after":9}"#);
    let python = repo().join(".cache/clients/venv/bin/python");
    let mut lines = client_lines(
        &p,
        &python,
        &repo().join("clients/python/resume.py"),
        PROMPT,
    );
    lines.extend(client_lines(
        &p,
        Path::new("node"),
        &repo().join("clients/node/resume.mjs"),
        PROMPT,
    ));
    assert_eq!(lines.len(), 3, "{lines:?}");
    for l in &lines {
        assert_eq!(l["role"], "assistant", "{l}");
        assert_eq!(l["text"].as_str(), Some(reference.text.as_str()), "{l}");
        assert!(l["finish"] == "stop" || l["finish"] == "end_turn", "{l}");
    }
    // The OpenAI SDKs' answer has the id of the stream's first chunk: the
    // cut attempt's.
    let cut = p.a.journal();
    assert_eq!(lines[0]["id"].as_str().unwrap(), first_id(&cut[0]));
    assert_eq!(lines[2]["id"].as_str().unwrap(), first_id(&cut[2]));
    let recs = p.gw.ledger_len(4);
    assert!(
        recs[1..].iter().all(|r| r.continued == 1 && r.complete),
        "{recs:?}"
    );

    let home = tempfile::tempdir().unwrap();
    let provider = format!(
        "model = \"small\"\nmodel_provider = \"chatgate\"\n\
         [model_providers.chatgate]\nname = \"chatgate\"\nbase_url = \"http://{}/v1\"\n\
         env_key = \"CHATGATE_API_KEY\"\nwire_api = \"responses\"\n",
        p.gw.addr
    );
    let (ok, text) = codex_with(
        &provider,
        &p.gw.key,
        home.path(),
        "Say hello [[sim:tools=none]]",
    );
    assert!(ok, "{text}");
    assert!(text.contains("You said: Say hello"), "{text}");

    let home = tempfile::tempdir().unwrap();
    let env = vec![
        ("ANTHROPIC_BASE_URL", format!("http://{}", p.gw.addr)),
        ("ANTHROPIC_API_KEY", p.gw.key.clone()),
        ("ANTHROPIC_MODEL", "small".to_owned()),
        ("ANTHROPIC_SMALL_FAST_MODEL", "small".to_owned()),
        ("ANTHROPIC_DEFAULT_HAIKU_MODEL", "small".to_owned()),
    ];
    let (ok, out, text) = claude(home.path(), &env, "Say hello [[sim:tools=none]]");
    assert!(ok, "{text}");
    assert_eq!(out["is_error"], false, "{text}");
    let result = out["result"].as_str().unwrap_or_default();
    assert!(result.starts_with("You said: Say hello"), "{text}");
    // Every answer the agents were given was cut, and continued.
    let recs = p.gw.ledger();
    assert!(recs.len() >= 6, "{recs:?}");
    assert!(
        recs[4..].iter().all(|r| r.continued == 1 && r.complete),
        "{recs:?}"
    );
}

/// No response at all, and a first event later than the attempt
/// timeout, on every API: the fallback answers after one attempt timeout
/// (`a` is asked once, never waited on again), the whole answer.
fn no_answer_or_a_slow_first_event_goes_to_the_fallback_once(bin: &str) {
    for (a_args, fault) in [
        (&[][..], Some(r#"{"fault":"stall_headers"}"#)),
        (&["--ttft-ms", "4000"][..], None),
    ] {
        let p = Pair::start_with(
            bin,
            a_args,
            "prefix",
            "prefix",
            &["--upstream-attempt-timeout", "1s"],
        );
        if let Some(f) = fault {
            p.a.set_fault(f);
        }
        let reference = uncut(&p);
        assert_reads_as(&read(&p.chat("small", "")), &reference);
        let responses = json!({"model": "small", "input": PROMPT, "stream": true}).to_string();
        let r = p.post("/v1/responses", &responses);
        assert!(
            r.events()
                .iter()
                .any(|e| e.contains("\"response.completed\"")),
            "{}",
            String::from_utf8_lossy(&r.body)
        );
        let messages = json!({"model": "small", "max_tokens": 1000, "stream": true,
            "messages": [{"role": "user", "content": PROMPT}]})
        .to_string();
        let r = p.post("/v1/messages", &messages);
        assert!(
            r.events().iter().any(|e| e.contains("\"message_stop\"")),
            "{}",
            String::from_utf8_lossy(&r.body)
        );
        let recs = p.gw.ledger_len(4);
        for rec in &recs[1..] {
            assert_eq!(
                (rec.complete, rec.attempts, rec.served_model.as_deref()),
                (true, 2, Some("big")),
                "{rec:?}"
            );
        }
        assert_eq!(p.a.journal().len(), 3, "a asked once a request");
    }
}

/// A continued stream's trace: the request's span, with the cut attempt
/// (its error the cut's) and the continuation (on the fallback's
/// endpoint, saying how it continued, the provider sent the next id) as
/// its two client spans.
fn the_trace_shows_the_cut_attempt_and_its_continuation(bin: &str) {
    let receiver = OtlpReceiver::start();
    let p = Pair::start(
        bin,
        "prefix",
        "prefix",
        &["--otlp-endpoint", &receiver.url()],
    );
    p.a.set_fault(r#"{"fault":"reset","after":9}"#);
    read(&p.chat("small", ""));
    let rec = p.gw.ledger_len(1)[0].clone();
    let mut spans = Vec::new();
    eventually("three spans", || {
        spans = receiver.spans();
        spans.len() >= 3
    });
    let server = spans
        .iter()
        .find(|s| s["kind"] == "server")
        .expect("the request's span");
    assert_eq!(server["attributes"]["chatgate.request_id"], rec.request_id);
    assert_eq!(server["attributes"]["chatgate.attempts"], 2);
    let kids: Vec<&Value> = spans
        .iter()
        .filter(|s| s["parent_span_id"] == server["span_id"] && s["kind"] == "client")
        .collect();
    assert_eq!(kids.len(), 2, "{spans:#?}");
    let on = |name: &str| {
        &kids
            .iter()
            .find(|s| s["attributes"]["chatgate.endpoint"] == name)
            .unwrap_or_else(|| panic!("no span on {name}: {kids:#?}"))["attributes"]
    };
    let (cut, continued) = (on("a"), on("c"));
    assert_eq!(cut["error.type"], "upstream_reset", "{cut:#}");
    assert_eq!(continued["chatgate.endpoint"], "c");
    assert_eq!(continued["chatgate.continuation"], "prefix");
    assert!(continued.get("error.type").is_none(), "{continued:#}");
    let sent: Vec<String> = [&p.a, &p.c]
        .iter()
        .map(|s| s.journal()[0]["request_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(cut["http.request.header.x-request-id"], sent[0]);
    assert_eq!(continued["http.request.header.x-request-id"], sent[1]);
    assert_eq!(rec.provider_request_id.as_deref(), Some(sent[1].as_str()));
}

/// `demo`'s simulator continues (`prefix`): a stream cut by the marker in
/// its question arrives whole, in one stream, as the same question
/// answered uncut.
fn the_demo_finishes_a_stream_it_cuts(bin: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (_demo, addr, _, key) = start_demo(bin, dir.path());
    let ask = |q: &str| {
        let body = json!({"model": "reasoning-model-k3", "stream": true,
                          "messages": [{"role": "user", "content": q}]});
        read(&request(
            addr,
            "POST",
            "/v1/chat/completions",
            Some(&key),
            Some(&body.to_string()),
        ))
    };
    let got = ask("Why is the sky blue? [[sim:fault=reset,after=20]]");
    assert_eq!(got.roles, ["assistant"], "{got:?}");
    assert_eq!(
        (got.finishes.as_slice(), got.done, got.errors),
        (&["stop".to_owned()][..], 1, 0)
    );
    assert!(got.ids.iter().all(|i| *i == got.ids[0]), "{:?}", got.ids);
    assert!(
        got.text.starts_with("You said: Why is the sky blue?"),
        "{got:?}"
    );
}
