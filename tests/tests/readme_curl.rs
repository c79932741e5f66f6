//! Every `curl` example of the README runs, as written, against a real
//! gateway: only the address is rewritten (`http://127.0.0.1:8080` → the
//! test gateway) and `OPENAI_API_KEY` is set in the environment, as the
//! README tells its reader to.

use std::process::Command;

use chatgate_tests::*;
use serde_json::{Value, json};

cases!(every_readme_curl_example_runs);

/// The address the README's examples use.
const README_BASE: &str = "http://127.0.0.1:8080";

fn readme() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    std::fs::read_to_string(path).expect("README.md")
}

/// The bodies of the fenced ```sh blocks.
fn sh_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match &mut current {
            None if line.trim_end() == "```sh" => current = Some(String::new()),
            None => {}
            Some(_) if line.trim_end() == "```" => blocks.extend(current.take()),
            Some(b) => {
                b.push_str(line);
                b.push('\n');
            }
        }
    }
    assert!(current.is_none(), "README has an unclosed ```sh block");
    blocks
}

/// The commands of a block: backslash-continued lines joined, comments and
/// blank lines dropped.
fn commands(block: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in block.lines() {
        if pending.is_empty() && (line.trim().is_empty() || line.trim_start().starts_with('#')) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => {
                pending.push_str(head);
                pending.push(' ');
            }
            None => {
                pending.push_str(line);
                out.push(std::mem::take(&mut pending));
            }
        }
    }
    if !pending.is_empty() {
        out.push(pending);
    }
    out
}

/// Every curl command of the README.
fn curl_commands() -> Vec<String> {
    sh_blocks(&readme())
        .iter()
        .filter(|b| b.contains("curl"))
        .flat_map(|b| commands(b))
        .filter(|c| c.trim_start().starts_with("curl "))
        .collect()
}

fn require_curl() {
    let ok = Command::new("bash")
        .args(["-c", "command -v curl"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "curl is needed for the README examples and is not installed"
    );
}

/// Runs `command` with `bash -c`, the README's address replaced by the
/// gateway's and `OPENAI_API_KEY` set. Returns stdout.
fn run_example(command: &str, gw: &Gw) -> String {
    assert!(
        command.contains(README_BASE),
        "the example does not use {README_BASE}: {command}"
    );
    let rewritten = command.replace(README_BASE, &format!("http://{}", gw.addr));
    let out = Command::new("bash")
        .args(["-c", &format!("set -o pipefail; {rewritten}")])
        .env("OPENAI_API_KEY", &gw.key)
        .env_remove("OPENAI_BASE_URL")
        .env_remove("CURL_HOME")
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{command}\nexit {:?}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Streamed output: `data:` lines of chunks, then `data: [DONE]`.
fn check_stream(command: &str, out: &str) {
    let data: Vec<&str> = out
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            l.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not an SSE data line: {l:?}\n{command}"))
        })
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{out}");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect();
    let (mut reasoning, mut content) = (String::new(), String::new());
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk", "{c}");
        let delta = &c["choices"][0]["delta"];
        reasoning.push_str(delta["reasoning_content"].as_str().unwrap_or(""));
        content.push_str(delta["content"].as_str().unwrap_or(""));
    }
    assert!(!reasoning.is_empty(), "{out}");
    assert!(content.starts_with("You said: "), "{content}");
    // The last chunk before [DONE] carries the usage.
    let last = chunks.last().expect("chunks");
    assert_eq!(last["choices"], json!([]), "{last}");
    assert!(
        last["usage"]["total_tokens"].as_u64().unwrap() > 0,
        "{last}"
    );
}

fn every_readme_curl_example_runs(bin: &str) {
    require_curl();
    let commands = curl_commands();
    assert!(!commands.is_empty(), "no curl example found in README.md");
    let sim = Sim::start(bin, &[], &[]);
    let gw = Gw::start(bin, &sim.url(), GwOptions::default());
    let (mut streamed, mut models) = (0, 0);
    for command in &commands {
        let out = run_example(command, &gw);
        if command.contains("/v1/chat/completions") && command.contains(r#""stream":true"#) {
            assert!(
                command.contains("curl -N "),
                "a streamed example needs -N: {command}"
            );
            check_stream(command, &out);
            streamed += 1;
        } else if command.contains("/v1/models") {
            let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
            assert_eq!(
                v,
                json!({"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "chatgate"}]})
            );
            models += 1;
        } else {
            // Any other example: a JSON answer or a stream, never an error.
            match serde_json::from_str::<Value>(&out) {
                Ok(v) => assert!(v.get("error").is_none(), "{command}\n{out}"),
                Err(_) => check_stream(command, &out),
            }
        }
    }
    assert!(
        streamed >= 1 && models >= 1,
        "README should show a streamed chat and the model list with curl: {commands:?}"
    );
    // Each chat example reached the provider once.
    let chats = commands
        .iter()
        .filter(|c| c.contains("/v1/chat/completions"))
        .count();
    assert_eq!(sim.journal().len(), chats);
}

#[test]
fn examples_are_extracted() {
    let md = "text\n```sh\ncurl -N http://127.0.0.1:8080/v1/x \\\n  -H 'A: b' \\\n  -d '{}'\n# note\ncurl http://127.0.0.1:8080/v1/models\n```\n```toml\ncurl = 1\n```\n";
    let blocks = sh_blocks(md);
    assert_eq!(blocks.len(), 1);
    assert_eq!(
        commands(&blocks[0]),
        [
            "curl -N http://127.0.0.1:8080/v1/x    -H 'A: b'    -d '{}'",
            "curl http://127.0.0.1:8080/v1/models"
        ]
    );
    assert!(curl_commands().len() >= 2, "{:?}", curl_commands());
}
