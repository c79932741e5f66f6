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
    /// Per prefix of `messages` (the first 1, 2, … all of them): its
    /// fingerprint, what the server's prompt cache remembers.
    pub(crate) prefix_fingerprints: Vec<u64>,
    /// Per prefix likewise: its tokens, counted as `prompt_tokens` is
    /// (the base 3 included, template tokens not).
    pub(crate) prefix_tokens: Vec<u64>,
    pub(crate) seed: u64,
    pub(crate) params: HashMap<String, String>,
    /// The assistant messages that call tools, in order.
    pub(crate) tool_turns: Vec<ToolTurn>,
    /// Tool-call turns since the last user message.
    pub(crate) rounds: usize,
}

/// An assistant message of the request that calls tools.
pub(crate) struct ToolTurn {
    /// Its index in `messages`.
    pub(crate) index: usize,
    /// Its calls' ids.
    pub(crate) call_ids: Vec<String>,
    /// Its members that may carry reasoning, as sent.
    pub(crate) reasoning_content: Option<Value>,
    pub(crate) reasoning: Option<Value>,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

fn fnv1a_from(h: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_from(FNV_OFFSET, bytes)
}

/// A running FNV-1a over length-prefixed, tagged fields, so that no two
/// different sequences of fields hash the same bytes.
struct Fingerprint(u64);

impl Fingerprint {
    fn field(&mut self, tag: u8, bytes: &[u8]) {
        self.0 = fnv1a_from(self.0, &[tag]);
        self.0 = fnv1a_from(self.0, &(bytes.len() as u64).to_le_bytes());
        self.0 = fnv1a_from(self.0, bytes);
    }

    /// Adds what of message `m` a prompt cache tells apart: its role, its
    /// content (text parts as their text, images as their URL, other
    /// parts as their JSON), its tool calls and the call it answers.
    fn message(&mut self, m: &Value) {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        self.field(b'r', role.as_bytes());
        match m.get("content") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => self.field(b's', s.as_bytes()),
            Some(Value::Array(parts)) => {
                for p in parts {
                    if let Some(t) = p.get("text").and_then(Value::as_str) {
                        self.field(b't', t.as_bytes());
                    } else if let Some(url) = p
                        .get("image_url")
                        .and_then(|i| i.get("url").and_then(Value::as_str).or(i.as_str()))
                    {
                        self.field(b'i', url.as_bytes());
                    } else {
                        self.field(b'p', p.to_string().as_bytes());
                    }
                }
            }
            Some(other) => self.field(b'o', other.to_string().as_bytes()),
        }
        if let Some(calls) = m.get("tool_calls").filter(|c| !c.is_null()) {
            self.field(b'c', calls.to_string().as_bytes());
        }
        if let Some(id) = m.get("tool_call_id").and_then(Value::as_str) {
            self.field(b'd', id.as_bytes());
        }
        // The end of the message.
        self.field(b'm', &[]);
    }
}

fn text_of(content: &Value) -> String {
    text_where(content, |_| true)
}

/// What the user said in `content`: its text without the context an agent
/// adds in parts of their own (Claude Code's `<system-reminder>` parts,
/// Gemini CLI's `<session_context>` part).
fn said(content: &Value) -> String {
    text_where(content, |t| {
        let t = t.trim_start();
        !t.starts_with("<system-reminder>") && !t.starts_with("<session_context>")
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
    if let Some(start) = text.find("[[sim:")
        && let Some(len) = text[start + 6..].find("]]")
    {
        for kv in text[start + 6..start + 6 + len].split(',') {
            if let Some((k, v)) = kv.split_once('=') {
                into.insert(k.trim().to_owned(), v.trim().to_owned());
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
    let mut fingerprint = Fingerprint(FNV_OFFSET);
    let mut prefix_fingerprints = Vec::with_capacity(messages.len());
    let mut prefix_tokens = Vec::with_capacity(messages.len());
    for m in messages {
        let t = text_of(m.get("content").unwrap_or(&Value::Null));
        let images = m.get("content").and_then(Value::as_array).map_or(0, |p| {
            p.iter()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some("image_url"))
                .count()
        });
        prompt_tokens += 4 + (t.chars().count() as u64).div_ceil(4) + 85 * images as u64;
        fingerprint.message(m);
        prefix_fingerprints.push(fingerprint.0);
        prefix_tokens.push(prompt_tokens);
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
    let mut tool_turns = Vec::new();
    let mut rounds = 0;
    for (index, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str);
        if role == Some("user") {
            rounds = 0;
        }
        let calls = m.get("tool_calls").and_then(Value::as_array);
        let Some(calls) = calls.filter(|c| role == Some("assistant") && !c.is_empty()) else {
            continue;
        };
        rounds += 1;
        tool_turns.push(ToolTurn {
            index,
            call_ids: calls
                .iter()
                .filter_map(|c| c.get("id").and_then(Value::as_str).map(str::to_owned))
                .collect(),
            reasoning_content: m.get("reasoning_content").cloned(),
            reasoning: m.get("reasoning").cloned(),
        });
    }
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
        prefix_fingerprints,
        prefix_tokens,
        seed: fnv1a(all_text.as_bytes()),
        params,
        tool_turns,
        rounds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefixes(messages: &str) -> (Vec<u64>, Vec<u64>, u64) {
        let body = format!(r#"{{"model":"m","messages":{messages}}}"#);
        let a = parse_ask(body.as_bytes()).unwrap();
        (a.prefix_fingerprints, a.prefix_tokens, a.prompt_tokens)
    }

    #[test]
    fn prefixes_share_fingerprints_and_count_tokens_as_the_prompt() {
        let (one, one_tokens, p1) = prefixes(r#"[{"role":"user","content":"hello there"}]"#);
        let (two, two_tokens, p2) = prefixes(
            r#"[{"role":"user","content":"hello there"},{"role":"assistant","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:x"}}]}]"#,
        );
        assert_eq!((one.len(), two.len()), (1, 2));
        assert_eq!(one[0], two[0]);
        assert_ne!(two[0], two[1]);
        assert_eq!(one_tokens, vec![p1]);
        assert_eq!(two_tokens, vec![p1, p2]);
        assert_eq!(p2 - p1, 4 + 1 + 85);
    }

    #[test]
    fn a_message_is_told_apart_by_role_content_image_and_tool_fields() {
        let base = r#"{"role":"user","content":"x"}"#;
        let variants = [
            r#"{"role":"user","content":"x"}"#,
            r#"{"role":"assistant","content":"x"}"#,
            r#"{"role":"user","content":"y"}"#,
            r#"{"role":"user","content":[{"type":"text","text":"x"}]}"#,
            r#"{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"a"}}]}"#,
            r#"{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"b"}}]}"#,
            r#"{"role":"user","content":"x","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}"#,
            r#"{"role":"tool","content":"x","tool_call_id":"c"}"#,
            r#"{"role":"tool","content":"x","tool_call_id":"d"}"#,
        ];
        let fps: Vec<u64> = variants
            .iter()
            .map(|m| prefixes(&format!("[{base},{m}]")).0[1])
            .collect();
        for (i, a) in fps.iter().enumerate() {
            for b in &fps[i + 1..] {
                assert_ne!(a, b, "{}", variants[i]);
            }
        }
        // Deterministic, and blind to what a cache does not read.
        let (again, _, _) = prefixes(&format!("[{base},{}]", variants[0]));
        assert_eq!(again[1], fps[0]);
        let (named, _, _) = prefixes(&format!(
            r#"[{base},{{"role":"user","content":"x","name":"n"}}]"#
        ));
        assert_eq!(named[1], fps[0]);
    }
}
