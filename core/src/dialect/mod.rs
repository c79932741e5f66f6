//! The client-facing APIs other than chat completions, translated onto the
//! one chat exchange: pure translators, fed bytes, that write bytes.
//!
//! | module | job |
//! |---|---|
//! | `responses/` | the OpenAI Responses API (`POST /v1/responses`): its request as a chat request (`request/`), a chat answer as its events or its response object (`events/`) |
//! | `gemini/` | Google's Gemini API (`generateContent`, `streamGenerateContent`, `countTokens`): its request as a chat request (`request.rs`), a chat answer as its response stream or object (`events.rs`), the gateway's errors in its shape (`errors.rs`), its model list (`models.rs`) |
//! | `messages/` | the Anthropic Messages API (`POST /v1/messages`): its request as a chat request (`request.rs`), a chat answer as its events or its message object (`events.rs`), the gateway's errors in its shape (`errors.rs`) |
//! | `splice/` | a chat stream cut mid-answer finished by another request: what the client has, the continuation's request in each server's dialect of prefill, its chunks rewritten into the client's stream |
//! | `seam.rs` | the one trait a client API implements to be translated onto the exchange ([`Dialect`]): its credential, request translation, field names, answer, stream, keep-alive, error shape and token count |
//! | `raw.rs` | what every request translator reads with: a body's members as written, typed accessors naming the client's field |
//! | `tape.rs` | a long body's index, made once a translation starts: where each of its values ends, so that each level's read jumps over the levels below |
//! | `chat.rs` | the chat messages a request translator builds, and their writer |
//! | `chunk.rs` | the one reading of a chat chunk the answer translators share (and the chat path's reading of an answer's reasoning, for the memory) |
//! | `budget.rs` | what one translated answer may make a translator hold, the same for every dialect |
//! | `text.rs` | what an answer's translation copies from the provider, made readable JSON |
//! | `tests.rs` | what the translators' tests share: chat chunks, random chat streams and what a chat client reassembles from them |

pub mod gemini;
pub mod messages;
pub mod responses;

mod seam;
pub mod splice;

mod budget;
mod chat;
mod chunk;
mod raw;
mod tape;
mod text;

#[cfg(test)]
mod replay_tests;
#[cfg(test)]
mod tests;

pub use budget::{Budget, MAX_ITEMS, MAX_KEPT, OverBudget};
pub(crate) use chunk::{AnswerRecorder, record_chunk};
pub use seam::{Dialect, Opening, Translating};

use std::sync::Arc;

use crate::reasoning::{AnswerReasoning, ReasoningSeal};

/// An answer stream translated as it arrives: each chat chunk's events,
/// then the last.
pub trait Translator {
    /// The events for one chat chunk (an SSE event's data), appended to
    /// `out`; `Err` when the answer holds more than a translation keeps
    /// (the stream is then over: end it as failed).
    fn chunk(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), OverBudget>;
    /// The stream's last events, with the provider's usage.
    fn end(&mut self, end: End<'_>, usage: Option<&crate::usage::Usage>, out: &mut Vec<u8>);
    /// The answer's reasoning and tool calls, when the translator was
    /// asked to keep them ([`Carry::remember`]).
    fn take_reasoning(&mut self) -> Option<AnswerReasoning>;
}

/// What a translated answer does with the model's reasoning besides
/// showing it: the keys that sign and seal it, and whether the answer's
/// reasoning and calls are kept for the memory.
#[derive(Debug, Clone)]
pub struct Carry {
    /// The deployment's keys.
    pub seal: Arc<ReasoningSeal>,
    /// Keep the answer's reasoning and tool calls for the memory.
    pub remember: bool,
}

impl Carry {
    /// Signing and sealing with `seal`, nothing remembered.
    pub fn new(seal: Arc<ReasoningSeal>) -> Carry {
        Carry {
            seal,
            remember: false,
        }
    }
}

/// How a chat answer ended, for the other API's last event or status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End<'a> {
    /// `finish_reason` and `[DONE]` arrived (or the body was whole).
    Finished(Option<&'a str>),
    /// The provider's stream broke off: what happened.
    Failed(&'a str),
}
