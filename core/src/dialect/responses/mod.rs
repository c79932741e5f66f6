//! The OpenAI Responses API (`POST /v1/responses`, what Codex CLI speaks),
//! translated onto the one chat exchange.
//!
//! | file | job |
//! |---|---|
//! | `request.rs` | a Responses request as one chat-completions request ([`request::translate`]), and the Responses name of a chat parameter |
//! | `text.rs` | a freeform call's input, read from its chat arguments |
//! | `stored.rs` | the state: what a request needs from the store, its input as kept, a kept response and its encoding, the conversation a chain holds, the bodies of `GET`, `DELETE` and `input_items` |
//! | `events.rs` | the chat stream as the Responses event stream ([`events::ResponseStream`]), a chat completion as a response object ([`events::body`]) |
//!
//! Errors keep the OpenAI error shape the chat API answers with: the
//! Responses API has the same.

pub mod events;
pub mod request;
pub mod stored;
mod text;

#[cfg(test)]
mod tests;
