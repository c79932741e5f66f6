//! The Gemini translators' unit tests.
//!
//! | file | subject |
//! |---|---|
//! | `requests.rs` | the request's translation: a turn shaped as Gemini CLI sends one, parts, calls paired with responses, configuration, refusals |
//! | `events.rs` | the answer's translation: streams as SSE events and JSON arrays, reassembled as the clients read them; whole answers; the reasoning carried back |
//! | `properties.rs` | random chat streams translated: what a Gemini client reassembles is what a chat client does, and what the whole answer says |
//! | `errors.rs` | errors in Google's shape and status; the model list |

mod errors;
pub(crate) mod events;
mod properties;
mod requests;
