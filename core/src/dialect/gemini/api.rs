//! The Gemini API as a dialect of the chat exchange: what its path and
//! query say, its credential, and which of `request.rs`, `events.rs` and
//! `errors.rs` answers each question the exchange asks.

use crate::error::ApiError;
use crate::http::RequestHead;
use crate::usage::Usage;

use super::events::{self, GeminiStream};
use super::request::{self, Asked};
use super::{errors, models};
use crate::dialect::Translator;
use crate::dialect::seam::{Dialect, Opening, Translating};

/// A request on the Gemini API: what its path and query named, what its
/// body asked (once translated), then its answer's stream.
#[derive(Debug, Default)]
pub struct Gemini {
    /// The model the path names (percent-decoded).
    pub model: String,
    /// `:streamGenerateContent`.
    pub stream: bool,
    /// `?alt=sse`: the stream as SSE events (else a JSON array).
    pub sse: bool,
    /// `:countTokens`.
    pub count: bool,
    /// What the request asked.
    pub asked: Asked,
    /// The answer's stream, once it started.
    pub answer: Option<GeminiStream>,
}

impl Gemini {
    /// The dialect of a request on a Gemini path (`None` for another
    /// path): the model and method from the path, `alt` from the query.
    pub fn open(path: &str, query: &str) -> Option<Gemini> {
        let (model, method) = crate::routes::gemini_path(path)?;
        let sse = crate::url::query_pairs(query).any(|(n, v)| n == "alt" && v == "sse");
        Some(Gemini {
            model,
            stream: method == Some("streamGenerateContent"),
            sse,
            count: method == Some("countTokens"),
            ..Gemini::default()
        })
    }

    /// `GET /v1beta/models`: these models, in the Gemini API's shape.
    pub fn list_body<'a>(ids: impl Iterator<Item = &'a str>) -> Vec<u8> {
        models::list_body(ids)
    }

    /// `GET /v1beta/models/{model}`: one model.
    pub fn model_body(id: &str) -> Vec<u8> {
        models::model_body(id)
    }
}

impl Dialect for Gemini {
    fn api(&self) -> &'static str {
        "gemini"
    }

    /// The Google clients send their key as `x-goog-api-key`, or in the
    /// query as `?key=` (or as a bearer token).
    fn credential(&self, head: &RequestHead) -> Option<String> {
        if head.authorization.is_some() {
            return None;
        }
        let key = head.goog_api_key.clone().or_else(|| {
            crate::url::query_pairs(&head.query)
                .find(|(n, _)| n == "key")
                .map(|(_, v)| v)
        })?;
        Some(format!("Bearer {key}"))
    }

    fn translate(&mut self, body: &[u8], cx: Translating<'_>) -> Result<Vec<u8>, ApiError> {
        let (chat, asked) = if self.count {
            request::translate_count(body, &self.model)
        } else {
            request::translate(body, &self.model, self.stream, self.sse, cx.replay)
        }?;
        self.asked = asked;
        Ok(chat)
    }

    fn asked_in_path(&self) -> Option<(String, bool)> {
        Some((self.model.clone(), self.stream))
    }

    fn param_name(&self, chat: &str) -> String {
        request::param_name(chat)
    }

    fn body(&self, o: &Opening<'_>, completion: &[u8], usage: Option<&Usage>) -> Vec<u8> {
        let (asked, carry) = (self.asked.clone(), o.carry.clone());
        events::body(asked, o.request_id, carry, completion, usage)
    }

    fn stream(&mut self, o: &Opening<'_>) -> &mut dyn Translator {
        self.answer.get_or_insert_with(|| {
            GeminiStream::new(self.asked.clone(), o.request_id, o.carry.clone())
        })
    }

    fn started(&mut self) -> Option<&mut dyn Translator> {
        self.answer.as_mut().map(|s| s as _)
    }

    /// Nothing: the Google clients' stream readers take every event for a
    /// `data:` line and stop at a comment (docs/decisions.md).
    fn keep_alive(&self) -> &'static [u8] {
        b""
    }

    fn stream_content_type(&self) -> &'static str {
        if self.sse {
            "text/event-stream"
        } else {
            "application/json"
        }
    }

    fn error(&self, err: &ApiError, _request_id: &str) -> (u16, Vec<u8>) {
        (errors::status_and_code(err).0, errors::body(err))
    }

    /// `{"totalTokens": N}`.
    fn count_body(&self, tokens: u64) -> Vec<u8> {
        let mut body = b"{\"totalTokens\":".to_vec();
        crate::http::write::push_decimal(&mut body, tokens);
        body.push(b'}');
        body
    }
}
