//! A chat stream cut mid-answer, finished by another request
//! (`--stream-resume`): what the client has of the answer, the request
//! that asks an endpoint for the rest, and the rest's chunks rewritten so
//! that the client's stream stays one stream.
//!
//! | file | job |
//! |---|---|
//! | `mod.rs` | how an endpoint continues ([`Continuation`]), what the client has ([`Transcript`]) and what to ask for ([`Plan`]) |
//! | `body.rs` | the continuation's request: the conversation, then the part the client has as a final assistant message, in the endpoint's dialect of prefill |
//! | `rewrite.rs` | the continuation's (or restart's) chunks as chunks of the stream the client has: its id, one role, index 0, calls numbered after the ones sent, a restart's text after what was sent, usage summed |
//! | `tests.rs` | the three, and a cut stream spliced to equal an uncut one |
//!
//! Pure: the exchange (`exchange/resume.rs`) decides when, and where.

mod body;
mod rewrite;
#[cfg(test)]
mod tests;

pub use body::continuation_body;
pub use rewrite::{Rewriter, Rewritten};

use std::ops::Range;

use super::chunk::{CallDelta, Found, Shape};
use crate::json::{Cursor, Keys};

/// How an endpoint continues a final assistant message (`continuation`
/// on `[[upstream]]`); every value but `none` is a way a server documents.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Continuation {
    /// It does not (OpenAI, Anthropic's newer models, unknown servers):
    /// a cut stream is never sent there to be finished.
    #[default]
    None,
    /// A last assistant message with `"prefix": true` (DeepSeek's beta
    /// base URL, Mistral); its `reasoning_content` is the start of the
    /// model's thinking.
    Prefix,
    /// A last assistant message with `"partial": true` (Moonshot's Kimi).
    Partial,
    /// The last assistant message, with `"continue_final_message": true`
    /// and `"add_generation_prompt": false` (vLLM, SGLang; llama.cpp's
    /// server takes it too but sends the part back first: give it
    /// `FinalAssistant`, whose echo is taken off).
    ContinueFinalMessage,
    /// Any last assistant message, as it is (llama.cpp's server by
    /// default, Ollama, lmdeploy).
    FinalAssistant,
}

impl Continuation {
    /// The values, as a refusal lists them.
    pub const NAMES: &'static str =
        "none, prefix, partial, continue_final_message or final_assistant";

    /// The value a setting names.
    pub fn parse(s: &str) -> Option<Continuation> {
        Some(match s {
            "none" => Continuation::None,
            "prefix" => Continuation::Prefix,
            "partial" => Continuation::Partial,
            "continue_final_message" => Continuation::ContinueFinalMessage,
            "final_assistant" => Continuation::FinalAssistant,
            _ => return None,
        })
    }

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Continuation::None => "none",
            Continuation::Prefix => "prefix",
            Continuation::Partial => "partial",
            Continuation::ContinueFinalMessage => "continue_final_message",
            Continuation::FinalAssistant => "final_assistant",
        }
    }

    /// Whether the endpoint continues at all.
    pub fn continues(self) -> bool {
        self != Continuation::None
    }

    /// Whether it takes a part that is reasoning only as the start of the
    /// model's thinking, and thinks on: DeepSeek's prefix takes the
    /// part's `reasoning_content` so, and vLLM's template renders it open.
    /// The others read only the text (llama.cpp drops the reasoning,
    /// Ollama closes it): a cut in the reasoning is answered anew there.
    pub fn continues_reasoning(self) -> bool {
        matches!(
            self,
            Continuation::Prefix | Continuation::ContinueFinalMessage
        )
    }
}

/// What the client has of a chat answer, read from each chunk it was
/// sent: the stream's envelope (its first chunk's `id`, `created` and
/// `model`), the reasoning and text (each the inside of one JSON string,
/// as the chunks' strings wrote them: the insides of several JSON strings
/// are the inside of one), and how many tool calls it opened.
#[derive(Debug, Default)]
pub struct Transcript {
    pub(super) id: Option<Vec<u8>>,
    pub(super) created: Option<Vec<u8>>,
    pub(super) model: Option<Vec<u8>>,
    pub(super) reasoning: Vec<u8>,
    /// The reasoning came as `reasoning` (vLLM, OpenRouter) rather than
    /// `reasoning_content`.
    pub(super) reasoning_named_reasoning: bool,
    pub(super) content: Vec<u8>,
    /// Tool calls opened (the highest index seen, plus one).
    pub(super) calls: u64,
    /// The envelope was read.
    enveloped: bool,
    /// The last one-text-delta chunk's shape (reasoning or not): most
    /// chunks are read without walking them.
    shape: Option<Shape<bool>>,
}

/// What a cut stream can be finished with.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// A continuation of the part the client has (the endpoint continues
    /// it).
    Continue,
    /// The answer asked for again from its start, spliced only where it
    /// repeats what the client has (the endpoint cannot continue this
    /// part: reasoning only, where it reads text only).
    Restart,
    /// Nothing: why.
    No(&'static str),
}

impl Transcript {
    /// Reads one chunk the client was sent (an SSE event's data).
    pub fn record(&mut self, data: &[u8]) {
        if !self.enveloped {
            self.envelope(data);
        }
        if let Some(shape) = &self.shape
            && let Some(text) = shape.delta(data)
        {
            let inside = &text[1..text.len() - 1];
            if shape.kind {
                self.reasoning.extend_from_slice(inside);
            } else {
                self.content.extend_from_slice(inside);
            }
            return;
        }
        self.shape = None;
        let data = &*super::text::valid_text(data);
        let Some(found) = Found::read(data) else {
            return;
        };
        let inside = |r: &Range<usize>| {
            let s = &data[r.clone()];
            (s.len() >= 2 && s[0] == b'"').then(|| &s[1..s.len() - 1])
        };
        if let Some(text) = found.reasoning.as_ref().and_then(inside) {
            self.reasoning.extend_from_slice(text);
            self.reasoning_named_reasoning = !found.named_content();
        }
        if let Some(text) = found.content.as_ref().and_then(inside) {
            self.content.extend_from_slice(text);
        }
        CallDelta::each(data, found.calls.as_ref(), |d| {
            self.calls = self.calls.max(d.index.saturating_add(1));
        });
        if let Some((reasoning, string)) = found.lone_text(data) {
            self.shape = Some(Shape::new(&found, data, string, reasoning));
        }
    }

    /// The first chunk's `id`, `created` and `model`, as written (a chunk
    /// without an `id`, a provider's comment-like chunk, is passed over).
    fn envelope(&mut self, data: &[u8]) {
        let (mut id, mut created, mut model) = (None, None, None);
        let read = Cursor::new(data).members(Keys::Skipped, |c, key| {
            let name = c.name(key);
            let start = c.at();
            c.skip()?;
            let value = Some(data[start..c.at()].to_vec());
            match &*name {
                b"id" => id = value,
                b"created" => created = value,
                b"model" => model = value,
                _ => {}
            }
            Ok(())
        });
        if read.is_ok() && id.is_some() {
            (self.id, self.created, self.model) = (id, created, model);
            self.enveloped = true;
        }
    }

    /// What the cut stream can be finished with on an endpoint that
    /// continues as `mode`.
    pub fn plan(&self, mode: Continuation) -> Plan {
        if !mode.continues() {
            return Plan::No("the endpoint does not continue");
        }
        if self.calls > 0 {
            // No server continues a call's arguments exactly.
            return Plan::No("the stream was cut in a tool call");
        }
        if self.content.is_empty() && !mode.continues_reasoning() {
            return Plan::Restart;
        }
        Plan::Continue
    }

    /// Whether the client has a tool call: its arguments may be cut, and
    /// no server continues them exactly.
    pub fn has_calls(&self) -> bool {
        self.calls > 0
    }

    /// The text the client has, as it reads it.
    pub fn text(&self) -> String {
        unescape(&self.content)
    }

    /// The reasoning the client has, as it reads it.
    pub fn reasoning_text(&self) -> String {
        unescape(&self.reasoning)
    }

    /// The member its reasoning is written back in.
    pub(super) fn reasoning_name(&self) -> &'static str {
        if self.reasoning_named_reasoning {
            "reasoning"
        } else {
            "reasoning_content"
        }
    }
}

/// The inside of a JSON string, read (what was recorded was made
/// readable, so this never fails but on a bug: then nothing).
fn unescape(inside: &[u8]) -> String {
    let mut quoted = Vec::with_capacity(inside.len() + 2);
    quoted.push(b'"');
    quoted.extend_from_slice(inside);
    quoted.push(b'"');
    serde_json::from_slice(&quoted).unwrap_or_default()
}
