//! What the Messages API costs: CPU per streamed request (100 events)
//! through `POST /v1/messages` against the same stream through
//! `POST /v1/chat/completions`, on the same gateway (`--apis messages`),
//! the two interleaved in two rounds; aimed at within 1.3× the chat
//! figure. The prompt and the simulator's lengths are the stream
//! workload's (in a `[[sim:…]]` marker: the translator does not forward
//! `x_sim`); the key goes as `x-api-key`, as Anthropic clients send it.

use std::path::{Path, PathBuf};

use crate::apis::{Api, against_chat, stream_prompt, stream_tokens};
use crate::{Setup, write_body};

/// `max_tokens` of both requests (the Messages API requires it): more
/// than the simulator's tokens, so nothing is cut.
fn max_tokens(s: &Setup<'_>) -> u64 {
    let (reasoning, answer) = stream_tokens(s);
    (reasoning + answer + 64).max(1024)
}

/// Appends the table to `report`.
pub(crate) fn report(report: &mut String, s: &Setup<'_>) {
    let dir = s.dir;
    let (chat, content) = stream_prompt(s);
    // As Claude Code asks: a system prompt, thinking (so the reasoning is
    // written, as chat forwards it).
    let messages = serde_json::json!({
        "model": chat["model"],
        "max_tokens": max_tokens(s),
        "stream": true,
        "system": chat["messages"][0]["content"],
        "thinking": {"type": "adaptive"},
        "messages": [{"role": "user", "content": content}],
    });
    // The chat request the translator sends for it.
    let chat_marked = serde_json::json!({
        "model": chat["model"],
        "max_tokens": max_tokens(s),
        "stream": true,
        "messages": [
            {"role": "system", "content": chat["messages"][0]["content"]},
            {"role": "user", "content": content},
        ],
    });
    let chat_body = write_body(dir, "messages-chat.json", &chat_marked.to_string());
    let messages_body = write_body(dir, "messages.json", &messages.to_string());
    let messages_lua = write_messages_lua(dir);
    let api = Api {
        name: "messages",
        title: "Messages API",
        path: "/v1/messages",
        lua: &messages_lua,
        body: &messages_body,
    };
    against_chat(report, s, &api, &chat_body);
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
