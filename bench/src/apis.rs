//! A client API's stream against the same stream through chat completions,
//! on one gateway serving both: the two paths warmed, then interleaved in
//! two rounds, the gateway's CPU per request each, and their ratio. The
//! table the Responses and Messages workloads print.

use std::fmt::Write as _;
use std::path::Path;

use crate::procs::{cpu_ticks, ticks_per_second};
use crate::{STREAM, Setup, gateway_with, wrk_path};

/// The stream workload's chat body, and its user prompt with the
/// simulator's lengths in a `[[sim:…]]` marker (the translators do not
/// forward `x_sim`); with `--api-tokens R,A`, those lengths instead (a
/// reasoning model's long answer).
pub(crate) fn stream_prompt(s: &Setup<'_>) -> (serde_json::Value, String) {
    let mut chat: serde_json::Value = serde_json::from_str(STREAM).expect("the stream body");
    let (reasoning, answer) = stream_tokens(s);
    chat["x_sim"]["reasoning_tokens"] = reasoning.into();
    chat["x_sim"]["answer_tokens"] = answer.into();
    let sim: Vec<String> = chat["x_sim"]
        .as_object()
        .map(|o| o.iter().map(|(k, v)| format!("{k}={v}")).collect())
        .unwrap_or_default();
    let prompt = format!(
        "{} [[sim:{}]]",
        chat["messages"][1]["content"].as_str().unwrap_or(""),
        sim.join(",")
    );
    (chat, prompt)
}

/// The stream's reasoning and answer tokens: `--api-tokens`, else the
/// stream workload's.
pub(crate) fn stream_tokens(s: &Setup<'_>) -> (u64, u64) {
    s.api_tokens.unwrap_or_else(|| {
        let chat: serde_json::Value = serde_json::from_str(STREAM).expect("the stream body");
        let n = |k: &str| chat["x_sim"][k].as_u64().expect("the stream's lengths");
        (n("reasoning_tokens"), n("answer_tokens"))
    })
}

/// The other API's side: its name (`--apis` and the title), its path, the
/// wrk script that sends it, its body.
pub(crate) struct Api<'a> {
    pub(crate) name: &'a str,
    pub(crate) title: &'a str,
    pub(crate) path: &'a str,
    pub(crate) lua: &'a Path,
    pub(crate) body: &'a Path,
}

/// Appends the table comparing `api` with `chat_body` through chat
/// completions to `report`.
pub(crate) fn against_chat(report: &mut String, s: &Setup<'_>, api: &Api<'_>, chat_body: &Path) {
    let Setup {
        tools,
        dir,
        upstream,
        key,
        lua,
        secs,
        ..
    } = *s;
    // A delta an event, and the role, finish and usage events.
    let (reasoning, answer) = stream_tokens(s);
    let events = reasoning + answer + 3;
    let _ = writeln!(
        report,
        "\n### The {}: streamed ({events} events), 8 connections, {secs} s each (two rounds, interleaved)\n",
        api.title
    );
    let _ = writeln!(
        report,
        "| binary | CPU per request, chat completions | through {} | ratio |",
        api.path
    );
    let _ = writeln!(report, "|---|---|---|---|");
    for (name, bin) in [
        ("chatgate-smol", &tools.smol),
        ("chatgate-tokio", &tools.tokio),
    ] {
        let mut gw = gateway_with(
            bin,
            dir,
            &["--upstream", upstream, "--apis", api.name],
            &format!("{name}-{}", api.name),
        );
        let (addr, pid) = (gw.listening_address(), gw.pid());
        let runs = [
            ("/v1/chat/completions", lua, chat_body),
            (api.path, api.lua, api.body),
        ];
        for (path, script, body) in runs {
            wrk_path(&tools.wrk, addr, path, script, body, key, 8, 1, 2);
        }
        let mut cpu = [0.0f64; 2];
        for _ in 0..2 {
            for (i, (path, script, body)) in runs.iter().enumerate() {
                let before = cpu_ticks(&[pid]);
                let r = wrk_path(&tools.wrk, addr, path, script, body, key, 8, secs, 2);
                let ticks = cpu_ticks(&[pid]) - before;
                cpu[i] +=
                    ticks as f64 / ticks_per_second() as f64 * 1e6 / r.requests.max(1) as f64 / 2.0;
            }
        }
        let _ = writeln!(
            report,
            "| {name} | {:.1} µs | {:.1} µs | {:.2} |",
            cpu[0],
            cpu[1],
            cpu[1] / cpu[0]
        );
    }
}
