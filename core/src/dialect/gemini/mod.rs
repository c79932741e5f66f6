//! Google's Gemini API (`POST /v1beta/models/{model}:generateContent`,
//! `:streamGenerateContent`, `:countTokens`; what Gemini CLI and the
//! google-genai SDKs speak), translated onto the one chat exchange.
//!
//! | file | job |
//! |---|---|
//! | `api.rs` | the dialect: what the path and query name, the credential, and which file answers what the exchange asks ([`Gemini`]) |
//! | `request.rs` | a GenerateContentRequest as one chat-completions request ([`request::translate`]), and the Gemini name of a chat parameter |
//! | `contents.rs` | `systemInstruction` and `contents` as chat messages: parts, function calls paired with their responses, reasoning carried back |
//! | `schema.rs` | Google's Schema (upper-case types) as the JSON Schema providers take |
//! | `events.rs` | the chat stream as GenerateContentResponse objects, SSE events or one JSON array ([`events::GeminiStream`]); a chat completion as one object ([`events::body`]) |
//! | `signature.rs` | the `thoughtSignature` that carries the answer's reasoning: given out, taken back |
//! | `errors.rs` | the gateway's errors in Google's shape and status ([`errors::body`]), and a stream's error |
//! | `models.rs` | the model list and one model, as `GET /v1beta/models` answers |

mod api;
mod contents;
pub mod errors;
pub mod events;
pub mod models;
pub mod request;
mod schema;
mod signature;

pub use api::Gemini;

#[cfg(test)]
pub(crate) mod tests;
