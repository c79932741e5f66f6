//! The one seam between the chat exchange and a client API translated
//! onto it: every way a dialect differs from chat completions, named once
//! (as hyper's `Http1Transaction` names every way a client differs from a
//! server). The exchange holds the request's dialect as a
//! `Box<dyn Dialect>` and asks it; it never matches on which API it is.
//!
//! Which paths a dialect answers on is the route table's
//! (`crate::routes`); what the path and query say beyond the route (the
//! Gemini API's model and streaming choice) the dialect reads when it is
//! made for the request.

use std::fmt;

use crate::error::ApiError;
use crate::http::RequestHead;
use crate::reasoning::ReasoningSeal;
use crate::usage::Usage;

use super::responses::Responses;
use super::responses::stored::Stored;
use super::{Carry, Translator};

/// What a request translation may read besides the body.
#[derive(Default)]
pub struct Translating<'a> {
    /// Some model replays reasoning: the keys that open what this gateway
    /// signed or sealed in an earlier answer.
    pub replay: Option<&'a ReasoningSeal>,
    /// The Responses API's kept conversation the request continues.
    pub stored: Option<&'a Stored<'a>>,
}

/// What an answer's translation starts with: the request's id, the time,
/// and what it carries of the reasoning.
pub struct Opening<'a> {
    /// The gateway's `req_…` id.
    pub request_id: &'a str,
    /// The request's start, in Unix seconds.
    pub unix: u64,
    /// The keys that sign and seal the reasoning, and whether it is kept.
    pub carry: &'a Carry,
}

/// A client API translated onto the chat exchange.
pub trait Dialect: fmt::Debug + Send {
    /// The API's name, as the ledger's `api` and the span's `chatgate.api`
    /// say it.
    fn api(&self) -> &'static str;

    /// The credential the client sent in its API's own way, as the
    /// `Authorization` value it stands for (`None`: `Authorization` is
    /// read as for chat). Secret: never logged.
    fn credential(&self, _head: &RequestHead) -> Option<String> {
        None
    }

    /// The request body as the chat request it stands for; `Err` names the
    /// client's field.
    fn translate(&mut self, body: &[u8], cx: Translating<'_>) -> Result<Vec<u8>, ApiError>;

    /// The model and the streaming choice, when the API says them outside
    /// the body (the Gemini API, in its path): what the ledger names for a
    /// body refused before it was translated.
    fn asked_in_path(&self) -> Option<(String, bool)> {
        None
    }

    /// The client's name of a chat parameter the chat validator refused.
    fn param_name(&self, chat: &str) -> String;

    /// A whole chat completion as this API's answer body.
    fn body(&self, o: &Opening<'_>, completion: &[u8], usage: Option<&Usage>) -> Vec<u8>;

    /// The stream's translator, started with its first event.
    fn stream(&mut self, o: &Opening<'_>) -> &mut dyn Translator;

    /// The stream's translator, if it started.
    fn started(&mut self) -> Option<&mut dyn Translator>;

    /// What stands for a provider's keep-alive comment in this API's
    /// stream (nothing, when its clients' readers cannot skip one).
    fn keep_alive(&self) -> &'static [u8];

    /// The event the gateway writes itself when a committed stream's
    /// provider is silent for a while (`None`: nothing).
    fn ping(&self) -> Option<&'static [u8]> {
        None
    }

    /// The `Content-Type` of a streamed answer.
    fn stream_content_type(&self) -> &'static str {
        "text/event-stream"
    }

    /// An error as this API answers it: the status and the body.
    fn error(&self, err: &ApiError, _request_id: &str) -> (u16, Vec<u8>) {
        (err.status, err.body())
    }

    /// A token count's answer (`{"input_tokens": N}` unless the API says
    /// otherwise).
    fn count_body(&self, tokens: u64) -> Vec<u8> {
        let mut body = b"{\"input_tokens\":".to_vec();
        crate::http::write::push_decimal(&mut body, tokens);
        body.push(b'}');
        body
    }

    /// The Responses API's own state (kept responses, background runs);
    /// `None` for every other API.
    fn responses(&mut self) -> Option<&mut Responses> {
        None
    }
}
