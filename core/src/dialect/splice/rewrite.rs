//! The chunks of a continuation (or of a restarted answer) as chunks of
//! the stream the client already has. What the OpenAI SDKs' stream
//! readers need of one stream: one `id`, `created` and `model` (the Node
//! SDK takes a new id silently, so the answer would carry the second);
//! one `delta.role` (the Python SDK concatenates strings: a second role
//! reads `assistantassistant`); `index` 0; tool calls numbered after the
//! ones the client has (both SDKs merge calls by index); one usage, the
//! sum of what the providers reported. A restart's reasoning and text are
//! sent only where they go beyond what the client has, and only if they
//! repeat it byte for byte up to there.

use serde_json::{Map, Value};

use super::Transcript;
use crate::usage::Usage;

/// A restart's check against what the client has.
#[derive(Debug)]
struct Expected {
    /// The reasoning the client has, still to be repeated; once the
    /// restart's reasoning differs (or the client has text already: its
    /// reasoning was whole), none of it is sent.
    reasoning: String,
    reasoning_dropped: bool,
    /// The text the client has, still to be repeated: a restart that
    /// says anything else is not spliced.
    content: String,
    /// The text is an echo a continuation sends first, not a repeat a
    /// restart owes: llama.cpp's server streams the final assistant
    /// message it continues back, in one delta, before the rest (whatever
    /// `echo` says). A first text delta that begins with all of it loses
    /// it; any other first text delta is the continuation's own. Only for
    /// the servers that do it: another's continuation may begin with the
    /// same text by chance.
    echo: bool,
}

/// Rewrites one continuation's chunks.
#[derive(Debug)]
pub struct Rewriter {
    expected: Option<Expected>,
    /// The tool calls the client has: the continuation's are numbered
    /// after them.
    calls: u64,
}

/// One rewritten chunk.
#[derive(Debug, PartialEq, Eq)]
pub enum Rewritten {
    /// Nothing for the client (a role chunk, text it has).
    Drop,
    /// This chunk's data.
    Chunk(Vec<u8>),
    /// A restart that differs from what the client has: not spliced.
    Diverged,
}

impl Rewriter {
    /// For a continuation of what `part` holds, from a server that
    /// `echoes` the part before the rest (`final_assistant`: llama.cpp's).
    pub fn continuation(part: &Transcript, echoes: bool) -> Rewriter {
        Rewriter {
            // Nothing to repeat; but after text, the reasoning was whole
            // (a model that thinks again before going on is not shown
            // thinking after its text).
            expected: Some(Expected {
                reasoning: String::new(),
                reasoning_dropped: !part.content.is_empty(),
                content: if echoes { part.text() } else { String::new() },
                echo: echoes,
            }),
            calls: part.calls,
        }
    }

    /// For the answer restarted from its start, checked against `part`.
    pub fn restart(part: &Transcript) -> Rewriter {
        let content = part.text();
        Rewriter {
            expected: Some(Expected {
                reasoning_dropped: !content.is_empty(),
                reasoning: part.reasoning_text(),
                content,
                echo: false,
            }),
            calls: part.calls,
        }
    }

    /// Whether a restart still has text to repeat before it may end.
    pub fn owes(&self) -> bool {
        self.expected
            .as_ref()
            .is_some_and(|e| !e.echo && !e.content.is_empty())
    }

    /// The chunk `data` of the continuation, for the stream `part` began;
    /// `earlier` is what the earlier attempts reported, added to its
    /// usage. A chunk that is not a JSON object goes as it is.
    pub fn rewrite(
        &mut self,
        part: &Transcript,
        data: &[u8],
        earlier: Option<&Usage>,
    ) -> Rewritten {
        let Ok(Value::Object(mut chunk)) = serde_json::from_slice::<Value>(data) else {
            return Rewritten::Chunk(data.to_vec());
        };
        for (name, value) in [
            ("id", &part.id),
            ("created", &part.created),
            ("model", &part.model),
        ] {
            if let Some(v) = value
                .as_deref()
                .and_then(|v| serde_json::from_slice(v).ok())
            {
                chunk.insert(name.to_owned(), v);
            }
        }
        let mut keep = false;
        if let Some(Value::Array(choices)) = chunk.get_mut("choices") {
            // One choice (a resumed request asked for one).
            choices.truncate(1);
            if let Some(Value::Object(choice)) = choices.first_mut() {
                choice.insert("index".to_owned(), Value::from(0));
                if let Some(Value::Object(delta)) = choice.get_mut("delta") {
                    match self.delta(delta) {
                        Some(k) => keep |= k,
                        None => return Rewritten::Diverged,
                    }
                }
                if choice.get("finish_reason").is_some_and(|f| !f.is_null()) {
                    if self.owes() {
                        return Rewritten::Diverged;
                    }
                    keep = true;
                }
            }
        }
        if let Some(usage) = chunk.get_mut("usage").filter(|u| u.is_object()) {
            if let Some(e) = earlier {
                add_usage(usage, e);
            }
            keep = true;
        }
        if !keep {
            return Rewritten::Drop;
        }
        Rewritten::Chunk(write_chunk(chunk))
    }

    /// One delta rewritten: whether it still says something; `None` when a
    /// restart diverged.
    fn delta(&mut self, delta: &mut Map<String, Value>) -> Option<bool> {
        delta.remove("role");
        let mut says = false;
        for name in ["reasoning_content", "reasoning"] {
            let Some(Value::String(text)) = delta.get(name) else {
                continue;
            };
            match self.expected.as_mut() {
                Some(e) if e.reasoning_dropped => {
                    delta.remove(name);
                }
                Some(e) => match after(text, &mut e.reasoning) {
                    Some(rest) if rest.is_empty() => {
                        delta.remove(name);
                    }
                    Some(rest) => {
                        says = true;
                        delta.insert(name.to_owned(), Value::String(rest));
                    }
                    None => {
                        // Another chain of thought: none of it is sent.
                        e.reasoning_dropped = true;
                        delta.remove(name);
                    }
                },
                None => says |= !text.is_empty(),
            }
        }
        if let Some(Value::String(text)) = delta.get("content") {
            match self.expected.as_mut() {
                Some(e) if e.echo => {
                    // The continuation's first text: without the echo of
                    // the part, if it begins with it.
                    e.reasoning_dropped |= !text.is_empty();
                    if !text.is_empty() {
                        let echo = std::mem::take(&mut e.content);
                        let rest = match text.strip_prefix(echo.as_str()) {
                            Some(rest) if !echo.is_empty() => rest.to_owned(),
                            _ => text.clone(),
                        };
                        says |= !rest.is_empty();
                        if rest.is_empty() {
                            delta.remove("content");
                        } else {
                            delta.insert("content".to_owned(), Value::String(rest));
                        }
                        // Only the first text delta.
                        e.echo = false;
                    }
                }
                Some(e) => {
                    // Text: the reasoning before it is over.
                    e.reasoning_dropped |= !text.is_empty();
                    match after(text, &mut e.content)? {
                        rest if rest.is_empty() => {
                            delta.remove("content");
                        }
                        rest => {
                            says = true;
                            delta.insert("content".to_owned(), Value::String(rest));
                        }
                    }
                }
                None => says |= !text.is_empty(),
            }
        }
        if let Some(Value::Array(calls)) = delta.get_mut("tool_calls") {
            if self.owes() {
                return None;
            }
            for (position, call) in calls.iter_mut().enumerate() {
                if let Value::Object(call) = call {
                    let index = call
                        .get("index")
                        .and_then(Value::as_u64)
                        .unwrap_or(position as u64);
                    call.insert("index".to_owned(), Value::from(index + self.calls));
                }
            }
            says |= !calls.is_empty();
        }
        if delta.get("refusal").is_some_and(Value::is_string) {
            says = true;
        }
        Some(says)
    }
}

/// What of `text` goes beyond `expected` (which it must repeat, as far as
/// it goes), `expected` shortened by what it repeated; `None` when it
/// says something else.
fn after(text: &str, expected: &mut String) -> Option<String> {
    if expected.is_empty() {
        return Some(text.to_owned());
    }
    if text.len() <= expected.len() {
        if !expected.starts_with(text) {
            return None;
        }
        expected.drain(..text.len());
        return Some(String::new());
    }
    let rest = text.strip_prefix(expected.as_str())?.to_owned();
    expected.clear();
    Some(rest)
}

/// `usage` with `earlier`'s counts added (what the client is charged for
/// is both attempts').
fn add_usage(usage: &mut Value, earlier: &Usage) {
    let add = |v: &mut Value, path: &[&str], n: u64| {
        if n == 0 {
            return;
        }
        let mut at = v;
        for (i, name) in path.iter().enumerate() {
            let Value::Object(o) = at else { return };
            let last = i + 1 == path.len();
            let next = o.entry((*name).to_owned()).or_insert_with(|| {
                if last {
                    Value::from(0)
                } else {
                    Value::Object(Map::new())
                }
            });
            at = next;
        }
        let sum = at.as_u64().unwrap_or(0).saturating_add(n);
        *at = Value::from(sum);
    };
    add(usage, &["prompt_tokens"], earlier.prompt_tokens);
    add(usage, &["completion_tokens"], earlier.completion_tokens);
    add(usage, &["total_tokens"], earlier.total_tokens);
    add(
        usage,
        &["completion_tokens_details", "reasoning_tokens"],
        earlier.reasoning_tokens,
    );
    add(
        usage,
        &["prompt_tokens_details", "cached_tokens"],
        earlier.cached_tokens,
    );
}

/// A chunk written with its envelope first, as providers write it.
fn write_chunk(mut chunk: Map<String, Value>) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.push(b'{');
    let mut first = true;
    let mut member = |out: &mut Vec<u8>, name: &str, value: &Value| {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        // Writing a `Value` to a `Vec` does not fail.
        let _ = serde_json::to_writer(&mut *out, name);
        out.push(b':');
        let _ = serde_json::to_writer(&mut *out, value);
    };
    for name in ["id", "object", "created", "model"] {
        if let Some(v) = chunk.remove(name) {
            member(&mut out, name, &v);
        }
    }
    for (name, value) in &chunk {
        member(&mut out, name, value);
    }
    out.push(b'}');
    out
}
