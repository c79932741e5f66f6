//! The OpenAI Responses API (`POST /v1/responses`, what Codex CLI speaks),
//! translated onto the one chat exchange.
//!
//! | file | job |
//! |---|---|
//! | `request/` | a Responses request as one chat-completions request ([`request::translate`]), and the Responses name of a chat parameter |
//! | `text.rs` | a freeform call's input, read from its chat arguments |
//! | `stored.rs` | the state: what a request needs from the store, its input as kept, a kept response and its encoding, the conversation a chain holds, the bodies of `GET`, `DELETE` and `input_items` |
//! | `events/` | the chat stream as the Responses event stream ([`events::ResponseStream`]), a chat completion as a response object ([`events::body`]) |
//!
//! Errors keep the OpenAI error shape the chat API answers with: the
//! Responses API has the same.

pub mod events;
pub mod request;
pub mod stored;
mod text;

#[cfg(test)]
mod tests;

use crate::error::ApiError;
use crate::usage::Usage;

use super::Translator;
use super::seam::{Dialect, Opening, Translating};
use events::ResponseStream;
use request::Asked;

/// A request on the Responses API: what it asked (once translated), then
/// its answer's event stream.
#[derive(Debug, Default)]
pub struct Responses {
    /// What the request asked.
    pub asked: Asked,
    /// The answer's event stream, once it started.
    pub stream: Option<ResponseStream>,
}

impl Responses {
    /// A cancelled background run's response object: what its stream had
    /// (or an empty response when it had not started).
    pub fn cancelled(&mut self, o: &Opening<'_>, usage: Option<&Usage>) -> Vec<u8> {
        match &mut self.stream {
            Some(s) => s.cancelled(usage),
            None => {
                let carry = o.carry.clone();
                ResponseStream::new(self.asked.clone(), o.request_id, o.unix, carry).cancelled(None)
            }
        }
    }

    /// The last event's response object, when the response is kept.
    pub fn take_object(&mut self) -> Option<Vec<u8>> {
        self.stream.as_mut().and_then(ResponseStream::take_object)
    }
}

impl Dialect for Responses {
    fn api(&self) -> &'static str {
        "responses"
    }

    fn translate(&mut self, body: &[u8], cx: Translating<'_>) -> Result<Vec<u8>, ApiError> {
        let (chat, asked) = request::translate(body, cx.replay, cx.stored)?;
        self.asked = asked;
        Ok(chat)
    }

    fn param_name(&self, chat: &str) -> String {
        request::param_name(chat)
    }

    fn body(&self, o: &Opening<'_>, completion: &[u8], usage: Option<&Usage>) -> Vec<u8> {
        let (asked, carry) = (self.asked.clone(), o.carry.clone());
        events::body(asked, o.request_id, o.unix, carry, completion, usage)
    }

    fn stream(&mut self, o: &Opening<'_>) -> &mut dyn Translator {
        self.stream.get_or_insert_with(|| {
            ResponseStream::new(self.asked.clone(), o.request_id, o.unix, o.carry.clone())
        })
    }

    fn started(&mut self) -> Option<&mut dyn Translator> {
        self.stream.as_mut().map(|s| s as _)
    }

    fn keep_alive(&self) -> &'static [u8] {
        b": keep-alive\n\n"
    }

    fn responses(&mut self) -> Option<&mut Responses> {
        Some(self)
    }
}
