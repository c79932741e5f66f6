//! What the Responses API costs: CPU per streamed request (100 events)
//! through `POST /v1/responses` against the same stream through
//! `POST /v1/chat/completions`, on the same gateway (`--apis
//! chat,responses`), the two interleaved in two rounds. The prompt and the
//! simulator's lengths are the stream workload's (in a `[[sim:…]]` marker:
//! the translator does not forward `x_sim`).

use std::fmt::Write as _;

use crate::procs::{cpu_ticks, ticks_per_second};
use crate::{STREAM, Setup, gateway_with, write_body, wrk_path};

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
    let responses = serde_json::json!({
        "model": chat["model"],
        "stream": true,
        "instructions": chat["messages"][0]["content"],
        "input": format!("{}{marker}", chat["messages"][1]["content"].as_str().unwrap_or("")),
    });
    let mut chat_marked = chat.clone();
    if let Some(o) = chat_marked.as_object_mut() {
        o.remove("x_sim");
    }
    chat_marked["messages"][1]["content"] = responses["input"].clone();
    let chat_body = write_body(dir, "responses-chat.json", &chat_marked.to_string());
    let responses_body = write_body(dir, "responses.json", &responses.to_string());
    let _ = writeln!(
        report,
        "\n### The Responses API: streamed (100 events), 8 connections, {secs} s each (two rounds, interleaved)\n"
    );
    let _ = writeln!(
        report,
        "| binary | CPU per request, chat completions | through /v1/responses | ratio |"
    );
    let _ = writeln!(report, "|---|---|---|---|");
    for (name, bin) in [
        ("chatgate-smol", &tools.smol),
        ("chatgate-tokio", &tools.tokio),
    ] {
        let mut gw = gateway_with(
            bin,
            dir,
            &["--upstream", upstream, "--apis", "chat,responses"],
            &format!("{name}-responses"),
        );
        let (addr, pid) = (gw.listening_address(), gw.pid());
        let runs = [
            ("/v1/chat/completions", &chat_body),
            ("/v1/responses", &responses_body),
        ];
        for (path, body) in runs {
            wrk_path(&tools.wrk, addr, path, lua, body, key, 8, 1, 2);
        }
        let mut cpu = [0.0f64; 2];
        for _ in 0..2 {
            for (i, (path, body)) in runs.iter().enumerate() {
                let before = cpu_ticks(&[pid]);
                let r = wrk_path(&tools.wrk, addr, path, lua, body, key, 8, secs, 2);
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
