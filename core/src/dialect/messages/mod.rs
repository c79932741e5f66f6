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
