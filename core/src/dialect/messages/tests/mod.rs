//! The Messages translators' unit tests: Claude Code's own requests, every
//! refusal naming its field, chat streams translated and reassembled, and
//! the error shape.

//!
//! | file | subject |
//! |---|---|
//! | `requests.rs` | the request's translation: Claude Code's captured requests, blocks, choices, refusals |
//! | `events.rs` | the answer's translation: streams, the event grammar, the same-shape shortcut, whole completions, properties |
//! | `errors.rs` | errors in the Anthropic shape and status; a context overflow's wording |

mod errors;
pub(crate) mod events;
mod requests;
