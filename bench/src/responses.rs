//! What the Responses API costs: CPU per streamed request (100 events)
//! through `POST /v1/responses` against the same stream through
//! `POST /v1/chat/completions`, on the same gateway (`--apis
//! chat,responses`), the two interleaved in two rounds. The prompt and the
//! simulator's lengths are the stream workload's (in a `[[sim:…]]` marker:
//! the translator does not forward `x_sim`).

use crate::apis::{Api, against_chat, stream_prompt};
use crate::{Setup, write_body};

/// Appends the table to `report`.
pub(crate) fn report(report: &mut String, s: &Setup<'_>) {
    let dir = s.dir;
    let (chat, prompt) = stream_prompt(s);
    let responses = serde_json::json!({
        "model": chat["model"],
        "stream": true,
        "instructions": chat["messages"][0]["content"],
        "input": prompt,
        // What Codex sends: the translation alone is measured here; what
        // keeping responses costs is `chain.rs`'s.
        "store": false,
    });
    let mut chat_marked = chat.clone();
    if let Some(o) = chat_marked.as_object_mut() {
        o.remove("x_sim");
    }
    chat_marked["messages"][1]["content"] = responses["input"].clone();
    let chat_body = write_body(dir, "responses-chat.json", &chat_marked.to_string());
    let responses_body = write_body(dir, "responses.json", &responses.to_string());
    let api = Api {
        name: "responses",
        title: "Responses API",
        path: "/v1/responses",
        lua: s.lua,
        body: &responses_body,
    };
    against_chat(report, s, &api, &chat_body);
}
