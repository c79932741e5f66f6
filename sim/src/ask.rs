//! What the simulator reads of a request: the model, streaming, limits,
//! tools, the last message, and the `x_sim` options or `[[sim:…]]` marker.

use std::collections::HashMap;

use serde_json::Value;

/// What the simulator understood of a request.
pub(crate) struct Ask {
    pub(crate) model: String,
    pub(crate) stream: bool,
    pub(crate) include_usage: bool,
    pub(crate) max_tokens: Option<u64>,
    pub(crate) tools: Vec<(String, Option<String>)>,
    pub(crate) tool_choice: Option<Value>,
    pub(crate) last_role: String,
    pub(crate) last_text: String,
    pub(crate) prompt_tokens: u64,
    pub(crate) seed: u64,
    pub(crate) params: HashMap<String, String>,
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn text_of(content: &Value) -> String {
    text_where(content, |_| true)
}

/// What the user said in `content`: its text without the context an agent
/// adds in parts of their own (Claude Code's `<system-reminder>` parts).
fn said(content: &Value) -> String {
    text_where(content, |t| {
        !t.trim_start().starts_with("<system-reminder>")
    })
}

/// The text of `content`: a string, or its parts' texts that `keep`
/// keeps, joined by spaces.
fn text_where(content: &Value, keep: impl Fn(&str) -> bool) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .filter(|t| keep(t))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// Reads `[[sim:k=v,k=v]]` from a text.
fn marker_params(text: &str, into: &mut HashMap<String, String>) {
    if let Some(start) = text.find("[[sim:") {
        if let Some(len) = text[start + 6..].find("]]") {
            for kv in text[start + 6..start + 6 + len].split(',') {
                if let Some((k, v)) = kv.split_once('=') {
                    into.insert(k.trim().to_owned(), v.trim().to_owned());
                }
            }
        }
    }
}

pub(crate) fn parse_ask(body: &[u8]) -> Result<Ask, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("invalid JSON: {e}"))?;
    let model = v
        .get("model")
        .and_then(Value::as_str)
        .ok_or("'model' is required")?
        .to_owned();
    let messages = v
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("'messages' is required")?;
    // The message answered: the last one that is not a system message (an
    // agent may end the list with one, as Claude Code does).
    let last = messages
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) != Some("system"))
        .or(messages.last())
        .ok_or("'messages' is empty")?;
    let mut params = HashMap::new();
    let last_user_text = messages
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .map(|m| text_of(m.get("content").unwrap_or(&Value::Null)))
        .unwrap_or_default();
    marker_params(&last_user_text, &mut params);
    if let Some(Value::Object(o)) = v.get("x_sim") {
        for (k, val) in o {
            let s = match val {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            params.insert(k.clone(), s);
        }
    }
    let mut prompt_tokens = 3u64;
    let mut all_text = String::new();
    for m in messages {
        let t = text_of(m.get("content").unwrap_or(&Value::Null));
        let images = m.get("content").and_then(Value::as_array).map_or(0, |p| {
            p.iter()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some("image_url"))
                .count()
        });
        prompt_tokens += 4 + (t.chars().count() as u64).div_ceil(4) + 85 * images as u64;
        all_text.push_str(&t);
        all_text.push('\n');
    }
    let tools = v
        .get("tools")
        .and_then(Value::as_array)
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| {
                    let f = t.get("function")?;
                    let name = f.get("name")?.as_str()?.to_owned();
                    let first_prop = f
                        .get("parameters")
                        .and_then(|p| p.get("properties"))
                        .and_then(Value::as_object)
                        .and_then(|p| p.keys().next().cloned());
                    Some((name, first_prop))
                })
                .collect()
        })
        .unwrap_or_default();
    let stream = v.get("stream").and_then(Value::as_bool).unwrap_or(false);
    Ok(Ask {
        model,
        stream,
        include_usage: v
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            .unwrap_or(false),
        max_tokens: v
            .get("max_tokens")
            .or_else(|| v.get("max_completion_tokens"))
            .and_then(Value::as_u64),
        tools,
        tool_choice: v.get("tool_choice").cloned(),
        last_role: last
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        last_text: said(last.get("content").unwrap_or(&Value::Null)),
        prompt_tokens,
        seed: fnv1a(all_text.as_bytes()),
        params,
    })
}
