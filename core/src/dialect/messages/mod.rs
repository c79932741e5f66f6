//! The Anthropic Messages API (`POST /v1/messages`, what Claude Code
//! speaks), translated onto the one chat exchange.
//!
//! | file | job |
//! |---|---|
//! | `request.rs` | a Messages request as one chat-completions request ([`request::translate`]), and the Messages name of a chat parameter |
//! | `events.rs` | the chat stream as the Messages event stream ([`events::MessageStream`]), a chat completion as a message object ([`events::body`]) |
//! | `errors.rs` | the gateway's errors in the Anthropic shape and status ([`errors::body`]), and a stream's `error` event |

pub mod errors;
pub mod events;
pub mod request;

#[cfg(test)]
pub(crate) mod tests;

use crate::error::ApiError;
use crate::http::RequestHead;
use crate::usage::Usage;

use super::Translator;
use super::seam::{Dialect, Opening, Translating};
use events::MessageStream;
use request::Asked;

/// The `ping` event a silent Messages stream gets.
const PING_EVENT: &[u8] = b"event: ping\ndata: {\"type\":\"ping\"}\n\n";

/// A request on the Messages API (or its token count): what it asked
/// (once translated), then its answer's event stream.
#[derive(Debug, Default)]
pub struct Messages {
    /// `POST /v1/messages/count_tokens`: a body without `max_tokens`.
    pub count: bool,
    /// What the request asked.
    pub asked: Asked,
    /// The answer's event stream, once it started.
    pub stream: Option<MessageStream>,
}

impl Dialect for Messages {
    fn api(&self) -> &'static str {
        "messages"
    }

    /// The Anthropic clients send their key as `x-api-key` (or as a
    /// bearer token).
    fn credential(&self, head: &RequestHead) -> Option<String> {
        let key = head
            .api_key
            .as_deref()
            .filter(|_| head.authorization.is_none())?;
        Some(format!("Bearer {key}"))
    }

    fn translate(&mut self, body: &[u8], cx: Translating<'_>) -> Result<Vec<u8>, ApiError> {
        let (chat, asked) = if self.count {
            request::translate_count(body)
        } else {
            request::translate(body, cx.replay)
        }?;
        self.asked = asked;
        Ok(chat)
    }

    fn param_name(&self, chat: &str) -> String {
        request::param_name(chat)
    }

    fn body(&self, o: &Opening<'_>, completion: &[u8], usage: Option<&Usage>) -> Vec<u8> {
        let (asked, carry) = (self.asked.clone(), o.carry.clone());
        events::body(asked, o.request_id, carry, completion, usage)
    }

    fn stream(&mut self, o: &Opening<'_>) -> &mut dyn Translator {
        self.stream.get_or_insert_with(|| {
            MessageStream::new(self.asked.clone(), o.request_id, o.carry.clone())
        })
    }

    fn started(&mut self) -> Option<&mut dyn Translator> {
        self.stream.as_mut().map(|s| s as _)
    }

    fn keep_alive(&self) -> &'static [u8] {
        PING_EVENT
    }

    fn ping(&self) -> Option<&'static [u8]> {
        Some(PING_EVENT)
    }

    fn error(&self, err: &ApiError, request_id: &str) -> (u16, Vec<u8>) {
        (
            errors::status_and_type(err).0,
            errors::body(err, request_id),
        )
    }
}
