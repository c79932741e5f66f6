//! What the Gemini API costs: CPU per streamed request (100 events)
//! through `POST /v1beta/models/{model}:streamGenerateContent?alt=sse`
//! against the same stream through `POST /v1/chat/completions`, on the same
//! gateway (`--apis gemini`), the two interleaved in two rounds; aimed at
//! within 1.2× the chat figure. The prompt and the simulator's lengths are
//! the stream workload's (in a `[[sim:…]]` marker: the translator does not
//! forward `x_sim`); the key goes as `x-goog-api-key`, and the request
//! asks for the thoughts, as Gemini CLI does.

use std::path::{Path, PathBuf};

use crate::apis::{Api, against_chat, stream_prompt};
use crate::{Setup, write_body};

/// Appends the table to `report`.
pub(crate) fn report(report: &mut String, s: &Setup<'_>) {
    let dir = s.dir;
    let (chat, content) = stream_prompt(s);
    let gemini = serde_json::json!({
        "systemInstruction": {"role": "user", "parts": [{"text": chat["messages"][0]["content"]}]},
        "contents": [{"role": "user", "parts": [{"text": content}]}],
        "generationConfig": {"thinkingConfig": {"includeThoughts": true}},
    });
    // The chat request the translator sends for it.
    let chat_marked = serde_json::json!({
        "model": chat["model"],
        "stream": true,
        "messages": [
            {"role": "system", "content": chat["messages"][0]["content"]},
            {"role": "user", "content": content},
        ],
    });
    let chat_body = write_body(dir, "gemini-chat.json", &chat_marked.to_string());
    let gemini_body = write_body(dir, "gemini.json", &gemini.to_string());
    let lua = write_gemini_lua(dir);
    let path = format!(
        "/v1beta/models/{}:streamGenerateContent?alt=sse",
        chat["model"].as_str().unwrap_or("reasoning-model-k3")
    );
    let api = Api {
        name: "gemini",
        title: "Gemini API",
        path: &path,
        lua: &lua,
        body: &gemini_body,
    };
    against_chat(report, s, &api, &chat_body);
}

/// wrk's script for the Gemini API: the key as `x-goog-api-key`.
fn write_gemini_lua(dir: &Path) -> PathBuf {
    let p = dir.join("gemini.lua");
    std::fs::write(
        &p,
        "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\n\
         wrk.headers[\"x-goog-api-key\"] = os.getenv(\"KEY\")\n\
         local f = io.open(os.getenv(\"BODY\"), \"r\"); wrk.body = f:read(\"*a\"); f:close()\n",
    )
    .expect("lua script");
    p
}
