//! The client-facing APIs other than chat completions, translated onto the
//! one chat exchange: pure translators, fed bytes, that write bytes.
//!
//! | module | job |
//! |---|---|
//! | `responses/` | the OpenAI Responses API (`POST /v1/responses`): its request as a chat request (`request.rs`), a chat answer as its events or its response object (`events.rs`) |
//! | `messages/` | the Anthropic Messages API (`POST /v1/messages`): its request as a chat request (`request.rs`), a chat answer as its events or its message object (`events.rs`), the gateway's errors in its shape (`errors.rs`) |
//! | `raw.rs` | what every request translator reads with: a body's members as written, typed accessors naming the client's field |
//! | `chat.rs` | the chat messages a request translator builds, and their writer |
//! | `chunk.rs` | the one reading of a chat chunk the answer translators share |
//! | `text.rs` | what an answer's translation copies from the provider, made readable JSON |
//! | `tests.rs` | what the translators' tests share: chat chunks, random chat streams and what a chat client reassembles from them |

pub mod messages;
pub mod responses;

mod chat;
mod chunk;
mod raw;
mod text;

#[cfg(test)]
mod tests;

/// An answer stream translated as it arrives: each chat chunk's events,
/// then the last.
pub trait Translator {
    /// The events for one chat chunk (an SSE event's data), appended to
    /// `out`.
    fn chunk(&mut self, data: &[u8], out: &mut Vec<u8>);
    /// The stream's last events, with the provider's usage.
    fn end(&mut self, end: End<'_>, usage: Option<&crate::usage::Usage>, out: &mut Vec<u8>);
}

/// How a chat answer ended, for the other API's last event or status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End<'a> {
    /// `finish_reason` and `[DONE]` arrived (or the body was whole).
    Finished(Option<&'a str>),
    /// The provider's stream broke off: what happened.
    Failed(&'a str),
}
