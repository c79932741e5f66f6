//! Chat request validation and the rewrite for the provider.
//!
//! One pass over the body's bytes, with the crate's JSON cursor, decides
//! every request: it checks the JSON as serde_json would read the body into
//! an object of raw members (and words a syntax error as serde_json does,
//! at the same line and column), checks `messages` while it goes, and notes
//! where the other parameters the specification names are; those are then
//! checked on their text, in the order the errors name them. Nothing is
//! parsed into a tree, no member list is built, no string is unescaped or
//! copied unless it has escapes, and UTF-8 is checked only inside strings
//! that are not ASCII.
//!
//! Everything else is carried through as the exact text the client sent, in
//! the client's order. The body is rebuilt only when something must change —
//! `stream_options.include_usage` forced on for streams, `reasoning_content`
//! removed from assistant turns, a model id mapped to the provider's — and
//! then by splicing raw member text, never by re-serializing values.
//! Otherwise the original bytes go upstream.
//!
//! Nesting deeper than [`MAX_DEPTH`](crate::json::MAX_DEPTH) is refused (a provider's parser would
//! refuse it less gracefully), and so is a `\u` escape of a lone surrogate;
//! duplicate keys are refused where the parameters are read (a provider
//! that read the other copy would see a different request than the one
//! checked).
//!
//! The serde_json implementation this replaced is kept, in tests only, as
//! the oracle (`reference`): the tests (`agree`, `tests`) hold the two to
//! the same answers, error messages and rewritten bodies included.
//!
//! | file | job |
//! |---|---|
//! | `body.rs` | the one pass over the body and the [`ChatRequest`] it yields |
//! | `messages.rs` | `messages` and their content parts, with the prompt estimate |
//! | `params.rs` | the other parameters, checked on their text |
//! | `checked.rs` | what the pass found, for the rewrite |
//! | `rewrite.rs` | the body for the provider, by splicing raw member text |

use std::fmt;

use crate::catalog::KeyView;
use crate::error::ApiError;
use crate::reasoning::ReplayMode;

#[cfg(test)]
mod agree;
mod body;
mod checked;
mod messages;
mod params;
#[cfg(test)]
mod reference;
mod rewrite;

pub(crate) use rewrite::with_model;
#[cfg(test)]
mod tests;

/// The roles a message may have.
pub(crate) const ROLES: [&str; 4] = ["system", "user", "assistant", "tool"];
/// Most stop sequences.
pub(crate) const MAX_STOP: usize = 4;
/// Tokens assumed for one image part when estimating a prompt.
pub(crate) const IMAGE_TOKEN_ESTIMATE: u64 = 765;

/// A validated chat completion request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatRequest {
    /// The model's id (the request may have named it by an alias).
    pub model: String,
    /// `stream: true`.
    pub stream: bool,
    /// `max_tokens` (or `max_completion_tokens`) when given.
    pub max_tokens: Option<u64>,
    /// A prompt-size estimate (about four bytes of text per token, plus
    /// per-message and per-image allowances), used to reserve rate-limit
    /// tokens until the provider reports the real count.
    pub estimated_prompt_tokens: u64,
    /// The body for the provider when it differs from the client's (its
    /// `model` is the model's provider id).
    pub rewritten: Option<Vec<u8>>,
    /// Its `prompt_cache_key`'s hash, when it is a string: the
    /// conversation it belongs to, for affinity.
    pub cache_key: Option<u64>,
    /// Its `user`'s hash, when it is a string.
    pub user: Option<u64>,
}

impl ChatRequest {
    /// The prompt estimate plus `max_tokens`: the reservation before what
    /// the providers add is known (admission adds the endpoints' learned
    /// prompt allowance, `endpoints/prompt.rs`).
    pub fn reservation(&self) -> u64 {
        self.estimated_prompt_tokens
            .saturating_add(self.max_tokens.unwrap_or(0))
            .max(1)
    }

    /// The body to send upstream.
    pub fn upstream_body<'a>(&'a self, original: &'a [u8]) -> &'a [u8] {
        self.rewritten.as_deref().unwrap_or(original)
    }
}

/// Validates a chat completion body and prepares the provider's body.
///
/// `models` is the catalogue as the request's key sees it (a `&Catalog`
/// for every model): a model it may not call is refused as unknown.
/// Assistant turns lose their `reasoning_content` (the specification's
/// rule: every model strips reasoning).
pub fn validate_chat_request<'a>(
    body: &[u8],
    models: impl Into<KeyView<'a>>,
) -> Result<ChatRequest, ApiError> {
    body::validate(body, models.into(), ReplayMode::Strip)
}

/// [`validate_chat_request`] where models that set no replay of their
/// own replay reasoning as `default` says: the body keeps its turns'
/// reasoning unless the model asked for strips it (the exchange then
/// writes each attempt's reasoning, `crate::reasoning`).
pub fn validate_chat_request_replaying<'a>(
    body: &[u8],
    models: impl Into<KeyView<'a>>,
    default: ReplayMode,
) -> Result<ChatRequest, ApiError> {
    body::validate(body, models.into(), default)
}

/// For metering a request that failed validation: its `model` and `stream`
/// as far as they can be read (an empty model and `false` otherwise): the
/// body must be a JSON object without repeated keys (its values are only
/// skipped), `model` a string (at most 128 characters of it are kept) and
/// `stream` exactly `true`.
pub(crate) fn peek_model_and_stream(body: &[u8]) -> (String, bool) {
    body::peek(body).unwrap_or_default()
}

/// A parameter's path, e.g. `messages[0].content[1].type`, rendered only
/// when an error names it (the success path builds no strings).
#[derive(Clone, Copy)]
struct Param<'a> {
    parent: Option<&'a Param<'a>>,
    seg: Seg<'a>,
}

#[derive(Clone, Copy)]
enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

impl<'a> Param<'a> {
    const fn root(key: &'a str) -> Param<'a> {
        Param {
            parent: None,
            seg: Seg::Key(key),
        }
    }

    fn key(&'a self, key: &'a str) -> Param<'a> {
        Param {
            parent: Some(self),
            seg: Seg::Key(key),
        }
    }

    fn index(&'a self, i: usize) -> Param<'a> {
        Param {
            parent: Some(self),
            seg: Seg::Index(i),
        }
    }
}

impl fmt::Display for Param<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(parent) = self.parent {
            parent.fmt(f)?;
        }
        match self.seg {
            Seg::Key(k) if self.parent.is_some() => write!(f, ".{k}"),
            Seg::Key(k) => f.write_str(k),
            Seg::Index(i) => write!(f, "[{i}]"),
        }
    }
}
