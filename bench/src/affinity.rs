//! Prompt-cache affinity: three endpoints (three simulators, each with its
//! own prompt cache), 50 conversations of 6 turns sent by 8 clients at
//! once, with a conversation key (`prompt_cache_key`) and without. A later
//! turn hits when the endpoint it reached had answered the conversation's
//! previous turn (its cached tokens cover that turn's whole prompt): what
//! affinity is for. Without it, a turn lands on the previous turn's
//! endpoint about one time in three.

use std::fmt::Write as _;
use std::io::Write;
use std::net::TcpStream;
use std::path::Path;

use serde_json::{Value, json};

use crate::procs::Child;
use crate::{Setup, args};

const ENDPOINTS: usize = 3;
const CONVERSATIONS: usize = 50;
const TURNS: usize = 6;
const CLIENTS: usize = 8;

/// What one run measured.
#[derive(Default)]
struct Hits {
    /// Later turns, and those whose endpoint had answered the previous one.
    later: u64,
    hits: u64,
    /// Prompt tokens of later turns, and how many of them were cached.
    prompt: u64,
    cached: u64,
}

/// Appends the affinity table to `report`.
pub(crate) fn report(report: &mut String, s: &Setup<'_>) {
    let _ = writeln!(
        report,
        "\n### Prompt-cache affinity: {ENDPOINTS} endpoints, {CONVERSATIONS} conversations of {TURNS} turns, {CLIENTS} clients at once\n"
    );
    let _ = writeln!(
        report,
        "| binary | conversation key | later turns on the previous turn's endpoint | prompt tokens of later turns cached |"
    );
    let _ = writeln!(report, "|---|---|---|---|");
    for (name, bin) in [
        ("chatgate-smol", &s.tools.smol),
        ("chatgate-tokio", &s.tools.tokio),
    ] {
        for keyed in [true, false] {
            let h = run(s, bin, name, keyed);
            let _ = writeln!(
                report,
                "| {name} | {} | {:.1} % ({} of {}) | {:.1} % |",
                if keyed { "`prompt_cache_key`" } else { "none" },
                100.0 * h.hits as f64 / h.later.max(1) as f64,
                h.hits,
                h.later,
                100.0 * h.cached as f64 / h.prompt.max(1) as f64,
            );
        }
    }
}

/// One run: fresh simulators (empty caches) behind a fresh gateway.
fn run(s: &Setup<'_>, bin: &Path, name: &str, keyed: bool) -> Hits {
    let tag = format!("affinity-{name}-{}", if keyed { "keyed" } else { "plain" });
    let mut sims: Vec<Child> = (0..ENDPOINTS)
        .map(|i| {
            Child::spawn(
                &s.tools.smol,
                &args(&["sim", "--listen", "127.0.0.1:0"]),
                &[],
                &s.dir.join(format!("{tag}-sim{i}.log")),
            )
        })
        .collect();
    let mut config = String::new();
    for (i, sim) in sims.iter_mut().enumerate() {
        let _ = writeln!(
            config,
            "[[upstream]]\nname = \"e{i}\"\nurl = \"http://{}/v1\"",
            sim.listening_address()
        );
    }
    let path = s.dir.join(format!("{tag}.toml"));
    std::fs::write(&path, config).expect("pool config");
    let mut gw = crate::gateway_with(bin, s.dir, &["--config", &path.to_string_lossy()], &tag);
    let addr = gw.listening_address();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let key = s.key.to_owned();
            std::thread::spawn(move || {
                let mut h = Hits::default();
                let mut conn = TcpStream::connect(addr).expect("connect");
                for conv in (c..CONVERSATIONS).step_by(CLIENTS) {
                    converse(&mut conn, &key, conv, keyed, &mut h);
                }
                h
            })
        })
        .collect();
    let mut all = Hits::default();
    for c in clients {
        let h = c.join().expect("a client");
        all.later += h.later;
        all.hits += h.hits;
        all.prompt += h.prompt;
        all.cached += h.cached;
    }
    drop(gw);
    all
}

/// The turns of conversation `n` on `conn`.
fn converse(conn: &mut TcpStream, key: &str, n: usize, keyed: bool, h: &mut Hits) {
    let mut messages = vec![json!({
        "role": "user",
        "content": format!("Conversation {n}: tell me about the number {n}."),
    })];
    let mut previous_prompt = 0;
    for turn in 0..TURNS {
        let mut body = json!({"model": "reasoning-model-k3", "messages": messages});
        if keyed {
            body["prompt_cache_key"] = json!(format!("conversation-{n}"));
        }
        let answer = exchange(conn, key, &body.to_string());
        let usage = &answer["usage"];
        let prompt = usage["prompt_tokens"].as_u64().unwrap_or(0);
        let cached = usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0);
        if turn > 0 {
            h.later += 1;
            h.hits += u64::from(cached >= previous_prompt);
            h.prompt += prompt;
            h.cached += cached;
        }
        previous_prompt = prompt;
        messages.push(answer["choices"][0]["message"].clone());
        messages.push(json!({"role": "user", "content": format!("And turn {turn}?")}));
    }
}

/// One non-streamed request on the keep-alive connection: its answer.
fn exchange(conn: &mut TcpStream, key: &str, body: &str) -> Value {
    conn.write_all(&crate::client::chat_request(key, body))
        .expect("send");
    serde_json::from_slice(&crate::client::read_answer(conn)).expect("JSON")
}
