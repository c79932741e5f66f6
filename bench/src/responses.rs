//! What the Responses API costs: CPU per streamed request (100 events)
//! through `POST /v1/responses` against the same stream through
//! `POST /v1/chat/completions`, on the same gateway (`--apis
//! chat,responses`), the two interleaved in two rounds. The prompt and the
//! simulator's lengths are the stream workload's (in a `[[sim:…]]` marker:
//! the translator does not forward `x_sim`).

use crate::apis::{Api, against_chat};
use crate::{STREAM, Setup, write_body};

/// Appends the table to `report`.
pub(crate) fn report(report: &mut String, s: &Setup<'_>) {
    let dir = s.dir;
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
    let api = Api {
        name: "responses",
        title: "Responses API",
        path: "/v1/responses",
        lua: s.lua,
        body: &responses_body,
    };
    against_chat(report, s, &api, &chat_body);
}
