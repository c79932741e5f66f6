//! What the Messages API costs: CPU per streamed request (100 events)
//! through `POST /v1/messages` against the same stream through
//! `POST /v1/chat/completions`, on the same gateway (`--apis messages`),
//! the two interleaved in two rounds; aimed at within 1.3× the chat
//! figure. The prompt and the simulator's lengths are the stream
//! workload's (in a `[[sim:…]]` marker: the translator does not forward
//! `x_sim`); the key goes as `x-api-key`, as Anthropic clients send it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::procs::{cpu_ticks, ticks_per_second};
use crate::{STREAM, Setup, gateway_with, write_body, wrk_path};

/// `max_tokens` of both requests (the Messages API requires it): more
/// than the simulator's 97 tokens, so nothing is cut.
const MAX_TOKENS: u64 = 1024;

/// Appends the table to `report`.
pub(crate) fn report(report: &mut String, s: &Setup<'_>) {
    let Setup {
        tools,
        dir,
        upstream,
        key,
        lua,
        secs,
        ..
    } = *s;
    let chat: serde_json::Value = serde_json::from_str(STREAM).expect("the stream body");
    let sim: Vec<String> = chat["x_sim"]
        .as_object()
        .map(|o| o.iter().map(|(k, v)| format!("{k}={v}")).collect())
        .unwrap_or_default();
    let marker = format!(" [[sim:{}]]", sim.join(","));
    let content = format!(
        "{}{marker}",
        chat["messages"][1]["content"].as_str().unwrap_or("")
    );
    // As Claude Code asks: a system prompt, thinking (so the reasoning is
    // written, as chat forwards it).
    let messages = serde_json::json!({
        "model": chat["model"],
        "max_tokens": MAX_TOKENS,
        "stream": true,
        "system": chat["messages"][0]["content"],
        "thinking": {"type": "adaptive"},
        "messages": [{"role": "user", "content": content}],
    });
    // The chat request the translator sends for it.
    let chat_marked = serde_json::json!({
        "model": chat["model"],
        "max_tokens": MAX_TOKENS,
        "stream": true,
        "messages": [
            {"role": "system", "content": chat["messages"][0]["content"]},
            {"role": "user", "content": content},
        ],
    });
    let chat_body = write_body(dir, "messages-chat.json", &chat_marked.to_string());
    let messages_body = write_body(dir, "messages.json", &messages.to_string());
    let messages_lua = write_messages_lua(dir);
    let _ = writeln!(
        report,
        "\n### The Messages API: streamed (100 events), 8 connections, {secs} s each (two rounds, interleaved)\n"
    );
    let _ = writeln!(
        report,
        "| binary | CPU per request, chat completions | through /v1/messages | ratio |"
    );
    let _ = writeln!(report, "|---|---|---|---|");
    for (name, bin) in [
        ("chatgate-smol", &tools.smol),
        ("chatgate-tokio", &tools.tokio),
    ] {
        let mut gw = gateway_with(
            bin,
            dir,
            &["--upstream", upstream, "--apis", "messages"],
            &format!("{name}-messages"),
        );
        let (addr, pid) = (gw.listening_address(), gw.pid());
        let runs = [
            ("/v1/chat/completions", lua, &chat_body),
            ("/v1/messages", messages_lua.as_path(), &messages_body),
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

/// wrk's script for `/v1/messages`: the key as `x-api-key`, with the
/// `anthropic-version` header Anthropic clients send.
fn write_messages_lua(dir: &Path) -> PathBuf {
    let p = dir.join("messages.lua");
    std::fs::write(
        &p,
        "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\n\
         wrk.headers[\"x-api-key\"] = os.getenv(\"KEY\")\n\
         wrk.headers[\"anthropic-version\"] = \"2023-06-01\"\n\
         local f = io.open(os.getenv(\"BODY\"), \"r\"); wrk.body = f:read(\"*a\"); f:close()\n",
    )
    .expect("lua script");
    p
}
